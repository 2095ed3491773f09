import { startSide } from '../direction.js';
import { borderDecls, classAttr, paddingDecls, styleAttr, textDecls, type Decls } from '../css.js';
import { overrideClasses, type RenderContext } from '../context.js';
import { escapeAttr, escapeHtml, safeUrl } from '../escape.js';
import { cssColor, cssLength } from '../style-values.js';
import { readableOnHex, type Theme } from '../theme.js';
import type { BaseStyles, ButtonNode } from '../types.js';
import { substituteVariables } from '../variables.js';
import { alignMargin, alignOf, hasProp, mergeDecls, nodeRow, resolveWidth, table, type Placement } from './common.js';

/**
 * A "bulletproof" button: the colour sits on a table cell (Outlook paints cell backgrounds but not link
 * padding) and the link fills the cell with padding so the whole shape is clickable elsewhere.
 */
interface ButtonPreset {
  cell: (t: Theme) => Decls;
  link: (t: Theme) => Decls;
  /** The label is white-on-colour: Gmail's forced dark mode needs the blend hook to keep it white. */
  lightLabel: (t: Theme) => boolean;
  darkClass?: string;
}

const basePadding = ['padding:14px 28px', 'font-size:16px', 'line-height:1.2', 'font-weight:600', 'text-decoration:none'];

const presets: Record<string, ButtonPreset> = {
  default: {
    cell: (t) => [`background-color:${t.highlight}`, 'border-radius:8px'],
    link: (t) => [...basePadding, `color:${t.onHighlight}`],
    lightLabel: (t) => t.onHighlight === '#ffffff',
  },
  // Large call to action.
  title: {
    cell: (t) => [`background-color:${t.highlight}`, 'border-radius:10px'],
    link: (t) => [...basePadding, 'padding:17px 36px', 'font-size:18px', `color:${t.onHighlight}`],
    lightLabel: (t) => t.onHighlight === '#ffffff',
  },
  // Secondary action: quiet grey surface.
  muted: {
    cell: (t) => [`background-color:${t.light.subtle}`, `border:1px solid ${t.light.border}`, 'border-radius:8px'],
    link: (t) => [...basePadding, `color:${t.light.title}`],
    lightLabel: () => false,
    darkClass: 'btm',
  },
  outline: {
    cell: (t) => [`border:2px solid ${t.highlight}`, 'border-radius:8px'],
    // The label in the brand colour shaded to read on the card, as links are (theme.ts).
    link: (t) => [...basePadding, 'padding:12px 26px', `color:${t.light.link}`],
    lightLabel: () => false,
    darkClass: 'bto',
  },
};

export function renderButton(ctx: RenderContext, node: ButtonNode, place: Placement): string {
  const styles = node.styles;
  const preset = (node.preset && Object.prototype.hasOwnProperty.call(presets, node.preset) ? presets[node.preset] : undefined) ?? presets.default!;
  const label = substituteVariables(node.label ?? '', ctx.props);
  const href = safeUrl(substituteVariables(node.url ?? '', ctx.props));
  ctx.text.push(href ? `${label}: ${href}` : label);

  const align = alignOf(styles, startSide(ctx.direction));
  const width = resolveWidth(styles?.width, ctx.width);
  const cell = mergeDecls(preset.cell(ctx.theme), cellDecls(styles));
  // The preset's label colour is picked for the theme's colours; a button painted in a colour of its own
  // (and no label colour) gets one picked for that: white on a yellow or white button was unreadable.
  const ownText = textDecls(styles);
  const ownColor = hasProp(ownText, 'color');
  const labelOnOwnBackground = ownColor ? undefined : readableOnHex(cssColor(styles?.backgroundColor));
  const labelDecls = labelOnOwnBackground ? [`color:${labelOnOwnBackground}`] : [];
  const link = mergeDecls(preset.link(ctx.theme), labelDecls, ownText, paddingDecls(styles ?? {}), width ? ['display:block', 'text-align:center'] : ['display:inline-block']);
  const radius = cell.find((d) => d.startsWith('border-radius:'));
  if (radius) link.push(radius);
  const overrides = overrideClasses(ctx, styles, (s) => [
    { suffix: '', decls: cellDecls(s) },
    { suffix: ' a', decls: [...textDecls(s), ...paddingDecls(s)] },
  ]);
  const widthClass = overrideClasses(ctx, styles, (s) => [{ suffix: '', decls: resolveWidth(s.width, ctx.width)?.decls ?? [] }]);
  // The bgcolor attribute reads hex or a name only: a translucent colour (rgba) is left to the CSS.
  const bg = cssColor(cell.find((d) => d.startsWith('background-color:'))?.slice(17));
  const bgAttribute = bg && !bg.startsWith('rgba(') ? bg : undefined;
  const lightLabel = labelOnOwnBackground ? labelOnOwnBackground === '#ffffff' : preset.lightLabel(ctx.theme);
  const content = ctx.theme.darkEnabled && lightLabel && !ownColor
    ? `<span class="gbs"><span class="gbd">${escapeHtml(label)}</span></span>`
    : escapeHtml(label);
  // Without a safe URL the button still shows, but is not a link (e.g. a `javascript:` prop).
  const anchor = href
    ? `<a href="${escapeAttr(href)}"${styleAttr(link)} target="_blank">${content}</a>`
    : `<span${styleAttr(link)}>${content}</span>`;
  const tableStyle = mergeDecls(['border-collapse:separate', alignMargin(align)], width?.decls ?? []).join(';');
  const html = `${table(`${classAttr(widthClass)}${width ? ` width="${width.attr}"` : ''}`, tableStyle)}<tr><td${classAttr(preset.darkClass, overrides)} align="center"${bgAttribute ? ` bgcolor="${bgAttribute}"` : ''}${styleAttr(cell)}>${anchor}</td></tr></table>`;
  return nodeRow(ctx, styles, html, place, 20);
}

function cellDecls(s: BaseStyles | undefined): Decls {
  if (!s) return [];
  const out: Decls = [];
  const bg = cssColor(s.backgroundColor);
  if (bg) out.push(`background-color:${bg}`);
  out.push(...borderDecls(s, '#e5e7eb'));
  const radius = cssLength(s.borderRadius);
  if (radius) out.push(`border-radius:${radius}`);
  return out;
}
