import { boxDecls, classAttr, styleAttr, textDecls } from '../css.js';
import { fixedBackgroundClass, overrideClasses, type RenderContext } from '../context.js';
import { pixels } from '../style-values.js';
import type { BoxColumn, BoxNode } from '../types.js';
import { mergeDecls, nodeRow, table, type Placement } from './common.js';
import { textOverrides } from './text.js';

/** Boxes nest; past this depth the inner content is dropped instead of recursing without bound. */
export const maxBoxDepth = 6;

type RenderNodes = (ctx: RenderContext, nodes: unknown) => string;

/**
 * Columns side by side (spec §2.2 box): widths in pixels or percent, unspecified columns share the rest,
 * `gap` pixels between them, `verticalAlign` for all cells. Widths are emitted as percentages so the row
 * shrinks with the screen; with `mobile.stackColumns` the cells become full-width blocks below the
 * breakpoint and the gap moves below each stacked column.
 */
export function renderBox(ctx: RenderContext, node: BoxNode, place: Placement, renderNodes: RenderNodes): string {
  if (ctx.depth >= maxBoxDepth) return '';
  const styles = node.styles;
  const columns = Array.isArray(node.columns) ? node.columns.filter((c) => c && typeof c === 'object') : [];
  if (columns.length === 0) return '';
  const box = boxDecls(styles, ctx.theme.light.border);
  const inner = ctx.width - (pixels(styles?.paddingLeft) ?? 0) - (pixels(styles?.paddingRight) ?? 0) - 2 * (pixels(styles?.borderWidth, 50) ?? 0);
  const gap = columns.length > 1 ? pixels(styles?.gap, 200) ?? 16 : 0;
  const widths = columnWidths(columns, Math.max(40, inner - gap * (columns.length - 1)));
  const total = widths.reduce((a, b) => a + b, 0) + gap * (columns.length - 1) || 1;
  const stack = styles?.mobile?.stackColumns === true;
  const valign = styles?.verticalAlign === 'middle' || styles?.verticalAlign === 'bottom' ? styles.verticalAlign : 'top';
  const stackGap = stack && gap > 0 ? ctx.css.add('mobile', [{ suffix: '', decls: [`padding-bottom:${gap}px`] }]) : undefined;
  const fixed = fixedBackgroundClass(ctx, styles);

  const cells = columns.map((column, i) => {
    const pct = round((widths[i]! / total) * 100);
    const child: RenderContext = { ...ctx, width: widths[i]!, depth: ctx.depth + 1, onFixedBackground: ctx.onFixedBackground || fixed !== undefined };
    const body = `${table(' width="100%"')}${renderNodes(child, column.elements)}</table>`;
    const isLast = i === columns.length - 1;
    const cls = classAttr(stack && 'stk', stack && !isLast && stackGap);
    const cell = `<td${cls} width="${pct}%" valign="${valign}" style="width:${pct}%;vertical-align:${valign}">${body}</td>`;
    const spacer = isLast || gap === 0 ? '' : `<td${classAttr(stack && 'gs')} width="${gap}" style="width:${gap}px;font-size:1px;line-height:1px">&nbsp;</td>`; // not font-size:0: rspamd ZERO_FONT
    return cell + spacer;
  });
  const own = textDecls(styles);
  const classes = classAttr(fixed, overrideClasses(ctx, styles, textOverrides));
  const row = `${table(' width="100%"', 'border-collapse:separate;table-layout:fixed')}<tr>${cells.join('')}</tr></table>`;
  // Background, border and padding sit on a wrapping cell: Outlook ignores padding on <table>.
  const html = `${table(' width="100%"', 'border-collapse:separate')}<tr><td${classes}${styleAttr(mergeDecls(own, box))}>${row}</td></tr></table>`;
  return nodeRow(ctx, styles, html, place);
}

/** Pixel width per column: explicit px, percentages of the inner width, the rest shared equally. */
export function columnWidths(columns: BoxColumn[], inner: number): number[] {
  const fixed = columns.map((c) => parseWidth(c.width, inner));
  const used = fixed.reduce<number>((sum, w) => sum + (w ?? 0), 0);
  const free = fixed.filter((w) => w === undefined).length;
  const share = free > 0 ? Math.max(20, (inner - used) / free) : 0;
  return fixed.map((w) => Math.max(20, Math.round(w ?? share)));
}

function parseWidth(value: unknown, inner: number): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value) && value > 0) return Math.min(value, inner);
  if (typeof value !== 'string') return undefined;
  const pct = /^\s*(\d{1,3}(?:\.\d+)?)\s*%\s*$/.exec(value);
  if (pct) return (inner * Math.min(100, Number(pct[1]))) / 100;
  const px = /^\s*(\d{1,4})\s*(?:px)?\s*$/.exec(value);
  return px ? Math.min(Number(px[1]), inner) : undefined;
}

function round(n: number): number {
  return Math.round(n * 100) / 100;
}

