import { startSide } from '../direction.js';
import { classAttr } from '../css.js';
import { overrideClasses, type RenderContext } from '../context.js';
import { cssColor, cssLength, pixels } from '../style-values.js';
import type { BaseStyles, DividerNode } from '../types.js';
import { alignMargin, alignOf, nodeRow, resolveWidth, table, type Placement } from './common.js';

/**
 * A divider is a cell painted with the border colour, `borderWidth` tall (spec §2.2: styled with
 * borderWidth, borderColor, borderRadius). A painted cell rather than a border so that a rounded, thick
 * divider looks like a bar; `font-size/line-height:0` keeps Outlook from growing it to a text line.
 */
export function renderDivider(ctx: RenderContext, node: DividerNode, place: Placement): string {
  const styles = node.styles;
  const thickness = pixels(styles?.borderWidth, 40) || 1;
  const color = cssColor(styles?.borderColor);
  const radius = cssLength(styles?.borderRadius);
  const width = resolveWidth(styles?.width, ctx.width);
  const top = pixels(styles?.paddingTop, 400) ?? 8;
  const bottom = pixels(styles?.paddingBottom, 400) ?? 0;
  const overrides = overrideClasses(ctx, styles, (s: BaseStyles) => {
    const c = cssColor(s.borderColor);
    const h = pixels(s.borderWidth, 40);
    return [{ suffix: '', decls: [...(c ? [`background-color:${c}`] : []), ...(h ? [`height:${h}px`] : [])] }];
  });
  const cell = [
    `height:${thickness}px`,
    `background-color:${color ?? ctx.theme.light.border}`,
    ...(radius ? [`border-radius:${radius}`] : []),
    // 1px text, not 0: filters count zero-size text as hidden content (rspamd ZERO_FONT, MANY_INVISIBLE_PARTS).
    // A 1px line too, so the cell is as high as `height` says, also where a mobile or dark override thins it.
    'font-size:1px',
    'line-height:1px',
    'mso-line-height-rule:exactly',
  ].join(';');
  const tableStyle = [...(width?.decls ?? ['width:100%']), alignMargin(alignOf(styles, startSide(ctx.direction)))].join(';');
  const html = `<div style="padding:${top}px 0 ${bottom}px">${table(` width="${width?.attr ?? '100%'}"`, tableStyle)}<tr><td${classAttr(color ? undefined : 'dv', overrides)} height="${thickness}" style="${cell}">&nbsp;</td></tr></table></div>`;
  return nodeRow(ctx, styles, html, place, 24);
}
