import { classAttr, outerDecls, type Decls } from '../css.js';
import { overrideClasses, rules, type RenderContext } from '../context.js';
import { startSide } from '../direction.js';
import { pixelLength, pixels } from '../style-values.js';
import type { Align, NodeStyles } from '../types.js';

export const defaultMargin = 16;

/** Where the node sits in its list: the last one drops its default bottom spacing. */
export interface Placement {
  last: boolean;
}

/**
 * Every node is one row of the content table: `padding-bottom` carries `marginBottom` (margins on
 * tables and divs are unreliable in Outlook), the cell's `align` carries `align`.
 */
export function nodeRow(ctx: RenderContext, styles: NodeStyles | undefined, inner: string, place: Placement, fallbackMargin = defaultMargin): string {
  const margin = pixels(styles?.marginBottom) ?? (place.last ? 0 : fallbackMargin);
  const align = alignOf(styles, startSide(ctx.direction));
  const cls = overrideClasses(ctx, styles, (s) => rules(outerDecls(s)));
  return `<tr><td${classAttr(cls)} align="${align}" style="padding:0 0 ${margin}px;text-align:${align}">${inner}</td></tr>`;
}

export function alignOf(styles: NodeStyles | undefined, fallback: Align = 'left'): Align {
  const a = styles?.align;
  return a === 'left' || a === 'center' || a === 'right' ? a : fallback;
}

/** Block-level elements are positioned by margins (the row's text-align does not move a table). */
export function alignMargin(align: Align): string {
  return align === 'center' ? 'margin:0 auto' : align === 'right' ? 'margin:0 0 0 auto' : 'margin:0';
}

/** Later declarations replace earlier ones of the same property, keeping the attribute short. */
export function mergeDecls(...lists: Decls[]): Decls {
  const nonEmpty = lists.filter((l) => l.length > 0);
  if (nonEmpty.length <= 1) return nonEmpty[0] ? [...nonEmpty[0]] : [];
  const byProp = new Map<string, string>();
  for (const list of lists) {
    for (const decl of list) {
      const prop = decl.slice(0, decl.indexOf(':'));
      byProp.delete(prop);
      byProp.set(prop, decl);
    }
  }
  return [...byProp.values()];
}

export function hasProp(decls: Decls, prop: string): boolean {
  return decls.some((d) => d.startsWith(`${prop}:`));
}

export const table = (attrs = '', style = '') =>
  `<table role="presentation"${attrs} cellpadding="0" cellspacing="0" border="0"${style ? ` style="${style}"` : ''}>`;

export interface ResolvedWidth {
  /** Pixels the element will take in the 600 px layout. */
  px: number;
  /** `width` attribute (Outlook reads attributes, not max-width). */
  attr: string;
  /** Inline declarations: fixed widths become `width:100%;max-width:Npx` so they shrink on phones. */
  decls: Decls;
}

/** `styles.width` as a number of pixels, `"120px"` or `"50%"`, relative to the available width. */
export function resolveWidth(value: unknown, available: number): ResolvedWidth | undefined {
  if (typeof value === 'number' && Number.isFinite(value) && value > 0) {
    const px = Math.min(Math.round(value), available);
    return { px, attr: String(px), decls: ['width:100%', `max-width:${px}px`] };
  }
  if (typeof value !== 'string') return undefined;
  const v = value.trim();
  const pct = /^(\d{1,3}(?:\.\d{1,2})?)%$/.exec(v);
  if (pct) {
    const p = Math.min(100, Number(pct[1]));
    return { px: Math.round((available * p) / 100), attr: `${p}%`, decls: [`width:${p}%`] };
  }
  const px = pixelLength(v);
  return px !== undefined ? resolveWidth(px, available) : undefined;
}

/**
 * An image with no width of its own, as Outlook for Windows and the rest see it. Outlook reads a `width`
 * attribute or CSS width but not `max-width` on an image (caniemail css-max-width), so a 1200 px hero
 * (or any 2x image) was drawn at its file's width and pushed the layout past 600 px; it gets its own copy
 * at `width` pixels (the width available there), the others the fluid one, drawn at most as wide as that.
 * The price: in Outlook, a small image with no width is drawn that wide too; a width of its own avoids it.
 */
export function outlookSizedImage(fluidImg: string, outlookImg: string): string {
  return `<!--[if mso]>${outlookImg}<![endif]--><!--[if !mso]><!-->${fluidImg}<!--<![endif]-->`;
}
