import { RenderBudget } from './budget.js';
import { CssRegistry, type OverrideRule } from './css.js';
import type { Theme } from './theme.js';
import type { BaseStyles, InlineImage, NodeStyles, TemplateProps } from './types.js';

/** Inline images of one render: deduplicated by cid, or turned into data URIs for previews. */
export class ImageSink {
  private readonly byCid = new Map<string, InlineImage>();

  constructor(readonly mode: 'cid' | 'data-uri') {}

  /** Returns the `src` to use: `cid:...` (and records the attachment) or a data URI. */
  src(image: InlineImage, dataUri: () => string): string {
    if (this.mode === 'data-uri') return dataUri();
    if (!this.byCid.has(image.cid)) this.byCid.set(image.cid, image);
    return `cid:${image.cid}`;
  }

  list(): InlineImage[] {
    return [...this.byCid.values()];
  }
}

/** What a node renderer needs: theme, props in scope, available width and the per-render collectors. */
export interface RenderContext {
  theme: Theme;
  props: TemplateProps;
  /** Inside an iterated node: prop values may carry markdown (COMPAT.md "Iteration"). */
  iterated: boolean;
  /** Pixels available to the node (content width, or a box column's share of it). */
  width: number;
  depth: number;
  /** Single newlines in text become line breaks (editor text); off for markdown emails (CommonMark). */
  breaks: boolean;
  css: CssRegistry;
  images: ImageSink;
  /** Plain-text part, one entry per paragraph. */
  text: string[];
  /** Shared by every scope of one render (budget.ts). */
  budget: RenderBudget;
}

export function createContext(theme: Theme, props: TemplateProps, width: number, imageMode: 'cid' | 'data-uri'): RenderContext {
  return {
    theme,
    props,
    iterated: false,
    width,
    depth: 0,
    breaks: true,
    css: new CssRegistry(),
    images: new ImageSink(imageMode),
    text: [],
    budget: new RenderBudget(),
  };
}

/**
 * Classes for the dark and mobile overrides of one element. `pick` selects which style fields apply to
 * that element (the row gets spacing, the box its background, the text its typography). Dark overrides
 * only exist when the project enables dark mode (spec §2.2 `dark`).
 */
export function overrideClasses(
  ctx: RenderContext,
  styles: NodeStyles | undefined,
  pick: (s: BaseStyles) => OverrideRule[],
): string {
  if (!styles) return '';
  const classes: string[] = [];
  if (styles.dark && ctx.theme.darkEnabled) {
    const name = ctx.css.add('dark', pick(styles.dark));
    if (name) classes.push(name);
  }
  if (styles.mobile) {
    const name = ctx.css.add('mobile', pick(styles.mobile));
    if (name) classes.push(name);
  }
  return classes.join(' ');
}

export function rules(decls: string[], suffix = ''): OverrideRule[] {
  return [{ suffix, decls }];
}
