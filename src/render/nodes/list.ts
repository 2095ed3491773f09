import { boxDecls, classAttr, linkDecls, textDecls, type Decls } from '../css.js';
import { darkTextLiftClass, fixedBackgroundClass, overrideClasses, type RenderContext } from '../context.js';
import { escapeHtml } from '../escape.js';
import { markdownInlineHtml, markdownInlineText } from '../markdown.js';
import type { Theme } from '../theme.js';
import type { ListNode } from '../types.js';
import { hasProp, mergeDecls, nodeRow, table, type Placement } from './common.js';
import { textOverrides } from './text.js';

/**
 * Lists are tables (marker cell + text cell) rather than <ul>/<ol>: Outlook's Word engine and Gmail
 * apply their own list indents and marker fonts, a table looks the same everywhere and lets the marker
 * take the highlight colour. Symbol rules (spec §2.2): `number` numbers the items, an empty string hides
 * markers, any other string is the marker; absent means a bullet.
 */
const presets: Record<string, { decls: (t: Theme) => Decls; colorClass: string }> = {
  default: { decls: (t) => ['font-size:16px', 'line-height:1.6', `color:${t.light.text}`], colorClass: 't' },
  muted: { decls: (t) => ['font-size:14px', 'line-height:1.6', `color:${t.light.muted}`], colorClass: 'tm' },
  title: { decls: (t) => ['font-size:18px', 'line-height:1.5', 'font-weight:600', `color:${t.light.title}`], colorClass: 'tt' },
};

export function renderList(ctx: RenderContext, node: ListNode, place: Placement): string {
  const styles = node.styles;
  const preset = (node.preset && Object.prototype.hasOwnProperty.call(presets, node.preset) ? presets[node.preset] : undefined) ?? presets.default!;
  const own = textDecls(styles);
  const text = mergeDecls(preset.decls(ctx.theme), own, boxDecls(styles, ctx.theme.light.border));
  const ownLink = linkDecls(styles);
  const md = {
    link: mergeDecls([`color:${ctx.theme.light.link}`, 'text-decoration:underline'], ownLink).join(';'),
    linkClass: hasProp(ownLink, 'color') ? '' : 'lk',
  };
  const items = Array.isArray(node.items) ? node.items.filter((i): i is string => typeof i === 'string') : [];
  const markerColor = hasProp(own, 'color') ? '' : `color:${ctx.theme.light.link};`;
  const rows = items.map((item, i) => {
    const marker = markerFor(node.symbol, i);
    const pad = i === items.length - 1 ? 0 : 8;
    const markerCell = marker === ''
      ? ''
      : `<td${classAttr(markerColor !== '' && 'hl')} width="28" valign="top" style="width:28px;padding:0 0 ${pad}px;${markerColor}font-weight:600;vertical-align:top">${escapeHtml(marker)}</td>`;
    return `<tr>${markerCell}<td valign="top" style="padding:0 0 ${pad}px;vertical-align:top">${markdownInlineHtml(ctx, item, md)}</td></tr>`;
  });
  ctx.text.push(items.map((item, i) => `${plainMarker(node.symbol, i)}${markdownInlineText(ctx, item)}`).join('\n'));
  const classes = classAttr(hasProp(own, 'color') ? darkTextLiftClass(ctx, styles) : preset.colorClass, fixedBackgroundClass(ctx, styles), overrideClasses(ctx, styles, textOverrides));
  const html = `${table(` width="100%"${classes}`, text.join(';'))}${rows.join('')}</table>`;
  return nodeRow(ctx, styles, html, place);
}

function markerFor(symbol: string | undefined, index: number): string {
  if (symbol === undefined || symbol === null) return '•';
  if (symbol === 'number') return `${index + 1}.`;
  return symbol;
}

function plainMarker(symbol: string | undefined, index: number): string {
  const marker = symbol === undefined || symbol === null ? '-' : markerFor(symbol, index);
  return marker === '' ? '' : `${marker} `;
}
