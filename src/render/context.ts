import { RenderBudget, renderLimits } from './budget.js';
import { CssRegistry, type OverrideRule } from './css.js';
import { cssColor } from './style-values.js';
import { liftedFor, measurableHex, type Theme } from './theme.js';
import type { TextDirection } from './direction.js';
import type { BaseStyles, InlineImage, NodeStyles, RenderOptions, TemplateProps } from './types.js';

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
  /**
   * Inside a node painted in a colour of its own that dark mode leaves as it is (`fixedBackgroundClass`):
   * what is rendered here keeps its light-mode colours.
   */
  onFixedBackground?: boolean;
  /** Which way the email's text runs (direction.ts); left-to-right unless its text starts right-to-left. */
  direction?: TextDirection;
}

export function createContext(theme: Theme, props: TemplateProps, width: number, options: RenderOptions): RenderContext {
  return {
    theme,
    props,
    iterated: false,
    width,
    depth: 0,
    breaks: true,
    css: new CssRegistry(),
    images: new ImageSink(options.imageMode === 'data-uri' ? 'data-uri' : 'cid'),
    text: [],
    budget: new RenderBudget({ ...renderLimits, ms: options.timeLimitMs ?? renderLimits.ms }),
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

/**
 * Dark mode recolours the card and the theme's text classes, not a background a node paints itself: a
 * node with its own `backgroundColor` and no `dark.backgroundColor` stays that colour, so what is on it
 * keeps its light-mode colours (the `fx` rules of layout.ts), or light text would sit on a light panel
 * (1.3:1). The class goes on the element that carries the background.
 */
export function fixedBackgroundClass(ctx: RenderContext, styles: NodeStyles | undefined): 'fx' | undefined {
  if (!ctx.theme.darkEnabled || !cssColor(styles?.backgroundColor) || cssColor(styles?.dark?.backgroundColor)) return undefined;
  return 'fx';
}

/**
 * The other side: text in a colour of its own (no `dark.color`) on the card, which dark mode darkens,
 * keeps its hue but is lifted towards white until it reads there (a #222222 paragraph was 1.05:1 on the
 * dark card). Nothing on a fixed background or one of the node's own, and nothing for a colour given by
 * name or function, which cannot be measured.
 */
export function darkTextLiftClass(ctx: RenderContext, styles: NodeStyles | undefined): string | undefined {
  if (!ctx.theme.darkEnabled || ctx.onFixedBackground || cssColor(styles?.backgroundColor) || cssColor(styles?.dark?.color)) return undefined;
  const own = measurableHex(cssColor(styles?.color));
  if (!own) return undefined;
  const lifted = liftedFor(own, ctx.theme.dark.card);
  return lifted === own ? undefined : ctx.css.add('dark', [{ suffix: '', decls: [`color:${lifted}`] }]);
}

export function rules(decls: string[], suffix = ''): OverrideRule[] {
  return [{ suffix, decls }];
}
