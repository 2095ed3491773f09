import type { RenderContext } from './context.js';
import { lookupProp } from './variables.js';

/**
 * `iterationKey` (spec §2.2): one scope per object of the named array, item props winning over global
 * props of the same name (COMPAT.md). A missing or non-array key repeats zero times; items that are not
 * objects are skipped because they carry no props to render.
 */
export function iterationScopes(ctx: RenderContext, key: string): RenderContext[] {
  const items = lookupProp(ctx.props, key);
  if (!Array.isArray(items)) return [];
  // Before building anything: nested iterations multiply, and this is where they do.
  ctx.budget.spend(items.length);
  const scopes: RenderContext[] = [];
  for (const item of items) {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) continue;
    // The item's props sit in front of the enclosing scope (prototype chain) instead of copying every
    // global prop per item; `lookupProp` walks the chain, so item props win.
    const props = Object.create(ctx.props) as Record<string, unknown>;
    for (const [key, value] of Object.entries(item)) {
      // An own "__proto__" key from JSON would re-parent the scope through the setter; skip it.
      if (key !== '__proto__') props[key] = value;
    }
    scopes.push({ ...ctx, props, iterated: true });
  }
  return scopes;
}
