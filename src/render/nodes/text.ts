import { startSide } from '../direction.js';
import { boxDecls, classAttr, linkDecls, styleAttr, textDecls, type Decls } from '../css.js';
import { darkTextLiftClass, fixedBackgroundClass, overrideClasses, type RenderContext } from '../context.js';
import { markdownBlockHtml, markdownBlockText } from '../markdown.js';
import type { Theme } from '../theme.js';
import type { NodeStyles, TextNode } from '../types.js';
import { pixels } from '../style-values.js';
import { alignMargin, alignOf, hasProp, mergeDecls, nodeRow, resolveWidth, table, type Placement } from './common.js';

/**
 * Text presets (spec §2.2 names `default`, `title`, `muted`; `subtitle` and `small` are extras that
 * unknown-preset tolerant clients can use). Each carries the class that recolours it in dark mode.
 */
interface Preset {
  decls: (t: Theme) => Decls;
  colorClass: string;
  mobileClass?: string;
  /**
   * A heading's level: a title looked like one and was a paragraph to screen readers, whose users skim
   * an email by its headings. ARIA rather than `<h1>`: clients restyle `h1` with margins of their own.
   */
  headingLevel?: 1 | 2;
}

const presets: Record<string, Preset> = {
  default: { decls: (t) => ['font-size:16px', 'line-height:1.6', `color:${t.light.text}`], colorClass: 't' },
  title: {
    decls: (t) => ['font-size:26px', 'line-height:1.3', 'font-weight:700', 'letter-spacing:-0.3px', `color:${t.light.title}`],
    colorClass: 'tt',
    mobileClass: 'ttl',
    headingLevel: 1,
  },
  subtitle: { decls: (t) => ['font-size:19px', 'line-height:1.4', 'font-weight:600', `color:${t.light.title}`], colorClass: 'tt', headingLevel: 2 },
  muted: { decls: (t) => ['font-size:14px', 'line-height:1.6', `color:${t.light.muted}`], colorClass: 'tm' },
  small: { decls: (t) => ['font-size:12px', 'line-height:1.5', `color:${t.light.muted}`], colorClass: 'tm' },
};

export function textPreset(name: string | undefined): Preset {
  return (name && Object.prototype.hasOwnProperty.call(presets, name) ? presets[name] : undefined) ?? presets.default!;
}

export function renderText(ctx: RenderContext, node: TextNode, place: Placement): string {
  const styles = node.styles;
  const preset = textPreset(node.preset);
  const own = textDecls(styles);
  const text = mergeDecls(preset.decls(ctx.theme), own);
  const box = boxDecls(styles, ctx.theme.light.border);
  const ownLink = linkDecls(styles);
  const linkStyle = mergeDecls([`color:${ctx.theme.light.link}`, 'text-decoration:underline'], ownLink).join(';');
  const width = resolveWidth(styles?.width, ctx.width);
  const html = markdownBlockHtml(ctx, node.text ?? '', {
    link: linkStyle,
    linkClass: hasProp(ownLink, 'color') ? '' : 'lk',
    headingColor: hasProp(own, 'color') || preset.colorClass !== 't' ? undefined : ctx.theme.light.title,
    pictureWidth: (width?.px ?? ctx.width) - horizontalInset(styles),
  });
  ctx.text.push(markdownBlockText(ctx, node.text ?? ''));
  const classes = classAttr(
    hasProp(own, 'color') ? darkTextLiftClass(ctx, styles) : preset.colorClass,
    !hasProp(own, 'font-size') && preset.mobileClass,
    hasProp(box, 'border') && 'bd',
    fixedBackgroundClass(ctx, styles),
    overrideClasses(ctx, styles, textOverrides),
  );
  const heading = preset.headingLevel ? ` role="heading" aria-level="${preset.headingLevel}"` : '';
  const inner = box.length > 0 || width
    ? `${table(` width="${width?.attr ?? '100%'}"`, mergeDecls(['border-collapse:separate'], width?.decls ?? [], width ? [alignMargin(alignOf(styles, startSide(ctx.direction)))] : []).join(';'))}<tr><td${classes}${styleAttr(mergeDecls(text, box))}>${heading ? `<div${heading}>${html}</div>` : html}</td></tr></table>`
    : `<div${classes}${heading}${styleAttr(text)}>${html}</div>`;
  return nodeRow(ctx, styles, inner, place);
}

/** Dark/mobile overrides of a text-like element: its typography, box and link colours. */
export function textOverrides(s: NodeStyles) {
  return [
    { suffix: '', decls: [...textDecls(s), ...boxDecls(s)] },
    { suffix: ' a', decls: linkDecls(s) },
  ];
}

/** Pixels the text's box takes from its width: its side paddings and borders (boxDecls). */
function horizontalInset(styles: NodeStyles | undefined): number {
  return (pixels(styles?.paddingLeft) ?? 0) + (pixels(styles?.paddingRight) ?? 0) + 2 * (pixels(styles?.borderWidth, 50) ?? 0);
}
