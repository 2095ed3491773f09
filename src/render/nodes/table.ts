import { startSide } from '../direction.js';
import { boxDecls, classAttr, linkDecls, textDecls } from '../css.js';
import { darkTextLiftClass, fixedBackgroundClass, overrideClasses, type RenderContext } from '../context.js';
import { markdownCell, type MarkdownStyle } from '../markdown.js';
import { iterationScopes } from '../iteration.js';
import type { Align, TableCell, TableColumn, TableNode } from '../types.js';
import { hasProp, mergeDecls, nodeRow, type Placement } from './common.js';
import { textOverrides } from './text.js';

/**
 * Tables (spec §2.2): headings from `columns`, then `rows` of `{text}` cells with markdown and variables.
 * With `iterationKey` and `iterationTarget: "children"` only the first row repeats, once per item (a
 * receipt's line items), and the other rows (totals) render once with the global props.
 */
export function renderTable(ctx: RenderContext, node: TableNode, place: Placement): string {
  const styles = node.styles;
  const columns = Array.isArray(node.columns) ? node.columns : [];
  const rows = Array.isArray(node.rows) ? node.rows.filter(Array.isArray) : [];
  const count = Math.max(columns.length, ...rows.map((r) => r.length), 0);
  if (count === 0) return '';
  const own = textDecls(styles);
  const ownLink = linkDecls(styles);
  const md: MarkdownStyle = {
    link: mergeDecls([`color:${ctx.theme.light.link}`, 'text-decoration:underline'], ownLink).join(';'),
    linkClass: hasProp(ownLink, 'color') ? '' : 'lk',
  };
  const aligns = Array.from({ length: count }, (_, i) => columnAlign(columns[i], startSide(ctx.direction)));
  const head = columns.some((c) => (c?.label ?? '') !== '') ? headRow(ctx, columns, aligns, md) : '';
  const body = bodyRows(ctx, node, rows, aligns, md);
  const outer = mergeDecls(['font-size:15px', 'line-height:1.5', `color:${ctx.theme.light.text}`, 'border-collapse:collapse'], own, boxDecls(styles, ctx.theme.light.border));
  const classes = classAttr(hasProp(own, 'color') ? darkTextLiftClass(ctx, styles) : 't', fixedBackgroundClass(ctx, styles), overrideClasses(ctx, styles, textOverrides));
  // A data table, unlike the layout tables of common.ts: no role="presentation", so screen readers
  // announce rows, cells and the column each value belongs to.
  return nodeRow(ctx, styles, `<table width="100%" cellpadding="0" cellspacing="0" border="0"${classes} style="${outer.join(';')}">${head}${body}</table>`, place);
}

function columnAlign(column: TableColumn | undefined, start: Align): Align {
  const a = column?.align;
  return a === 'left' || a === 'center' || a === 'right' ? a : start;
}

function headRow(ctx: RenderContext, columns: TableColumn[], aligns: Align[], md: MarkdownStyle): string {
  const t = ctx.theme.light;
  const cells = aligns.map((align, i) => {
    const label = markdownCell(ctx, columns[i]?.label ?? '', md);
    const pad = i === aligns.length - 1 ? '0' : '12px';
    return `<th scope="col" class="bd tm" align="${align}" style="${label.wrapping};padding:0 ${pad} 10px 0;border-bottom:1px solid ${t.border};font-size:12px;line-height:1.4;font-weight:600;letter-spacing:0.05em;text-transform:uppercase;color:${t.muted};text-align:${align}">${label.html}</th>`;
  });
  return `<tr>${cells.join('')}</tr>`;
}

function bodyRows(ctx: RenderContext, node: TableNode, rows: TableCell[][], aligns: Align[], md: MarkdownStyle): string {
  if (node.iterationKey && node.iterationTarget === 'children') {
    const [first, ...rest] = rows;
    if (!first) return '';
    const scopes = iterationScopes(ctx, node.iterationKey);
    const repeated = scopes.map((scope, i) => bodyRow(scope, first, aligns, md, rest.length === 0 && i === scopes.length - 1));
    return repeated.join('') + rest.map((row, i) => bodyRow(ctx, row, aligns, md, i === rest.length - 1)).join('');
  }
  return rows.map((row, i) => bodyRow(ctx, row, aligns, md, i === rows.length - 1)).join('');
}

function bodyRow(ctx: RenderContext, row: TableCell[], aligns: Align[], md: MarkdownStyle, last: boolean): string {
  const border = last ? '' : `border-bottom:1px solid ${ctx.theme.light.border};`;
  const cells = aligns.map((align, i) => {
    const cell = row[i];
    const content = markdownCell(ctx, typeof cell?.text === 'string' ? cell.text : '', md);
    const pad = i === aligns.length - 1 ? '0' : '12px';
    return `<td class="bd" align="${align}" valign="top" style="padding:12px ${pad} 12px 0;${border}vertical-align:top;text-align:${align};${content.wrapping}">${content.html}</td>`;
  });
  return `<tr>${cells.join('')}</tr>`;
}
