import { chartImage } from '../chart/cache.js';
import type { ChartSpec } from '../chart/draw.js';
import { classAttr } from '../css.js';
import type { RenderContext } from '../context.js';
import { escapeAttr, escapeHtml } from '../escape.js';
import { cssColor, pixelLength, pixels } from '../style-values.js';
import { normaliseHex, rgb } from '../theme.js';
import type { ChartNode } from '../types.js';
import { lookupProp, substituteVariables } from '../variables.js';
import { nodeRow, table, type Placement } from './common.js';

/**
 * Charts are raster PNGs, not SVG: Gmail, Outlook and most webmail strip inline SVG and scripts, while
 * an image shows everywhere. The PNG is an inline (CID) attachment when sending rather than a URL served
 * by the appliance because (1) it shows even where remote images are blocked by default (Outlook, many
 * corporate clients) and without a public URL for the appliance, (2) nothing has to be stored or served
 * after sending, and (3) rendering stays a pure function. Previews use a data URI instead, since
 * browsers cannot resolve `cid:`. Axis labels are HTML text under the image, so they stay crisp, take
 * the email's font and are read by screen readers.
 */
const defaultHeight = 180;

export function renderChart(ctx: RenderContext, node: ChartNode, place: Placement): string {
  const styles = node.styles;
  const width = Math.max(40, Math.round(ctx.width));
  // A height given as text ("240") is capped like a number: 9999 drew a 20,000-pixel-high bitmap.
  const height = pixels(pixelLength(styles?.height), 600) || defaultHeight;
  const color = normaliseHex(cssColor(styles?.color)) ?? ctx.theme.highlight;
  const spec: ChartSpec = {
    data: chartData(lookupProp(ctx.props, node.dataKey ?? '')),
    chartType: node.chartType === 'bar' ? 'bar' : 'line',
    curve: node.curve === 'linear' ? 'linear' : 'monotone',
    fill: node.fill === true,
    maxValue: typeof node.maxValue === 'number' && node.maxValue > 0 ? node.maxValue : undefined,
    color: rgb(color),
    width,
    height,
    scale: 2,
  };
  const start = substituteVariables(node.xAxisStartLabel ?? '', ctx.props);
  const end = substituteVariables(node.xAxisEndLabel ?? '', ctx.props);
  const alt = `${spec.chartType === 'bar' ? 'Bar' : 'Line'} chart${start || end ? ` from ${start} to ${end}` : ''}${valuesInWords(spec.data)}`;
  const darkColor = ctx.theme.darkEnabled ? normaliseHex(cssColor(styles?.dark?.color)) ?? (cssColor(styles?.color) ? undefined : ctx.theme.dark.link) : undefined;
  const dark = darkColor && darkColor !== color ? chartImg(ctx, { ...spec, color: rgb(darkColor) }, alt, '') : '';
  // Dark mode gets its own bitmap in a lighter tint (a dark highlight colour is hard to see on the dark
  // card); it is swapped in by the same classes as an image's darkModeSrc.
  let html = chartImg(ctx, spec, alt, dark ? 'il' : '');
  if (dark) html += `<!--[if !mso]><!--><div class="idk" style="display:none;max-height:0;overflow:hidden;mso-hide:all">${dark}</div><!--<![endif]-->`;
  return nodeRow(ctx, styles, html + axisLabels(ctx, start, end), place, 20);
}

function chartImg(ctx: RenderContext, spec: ChartSpec, alt: string, cls: string): string {
  const image = chartImage(spec);
  const src = ctx.images.src({ cid: image.cid, filename: `${image.cid.split('@')[0]}.png`, contentType: 'image/png', content: image.png }, image.dataUri);
  return `<img src="${escapeAttr(src)}" alt="${escapeAttr(alt)}" width="${spec.width}" height="${spec.height}"${classAttr(cls)} style="display:block;width:100%;max-width:${spec.width}px;height:auto;border:0;outline:none">`;
}

/** Non-negative finite numbers only (spec §2.2); anything else in the array counts as zero. */
export function chartData(value: unknown): number[] {
  if (!Array.isArray(value)) return [];
  return value.slice(0, 500).map((v) => {
    const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
    return Number.isFinite(n) && n > 0 ? n : 0;
  });
}

/**
 * The numbers a chart draws, for its alt text: a screen reader said only that a chart was there. Up to 31
 * values (a month of days) listed; more are summed up as the lowest, highest and last.
 */
function valuesInWords(data: number[]): string {
  if (data.length === 0) return '';
  const format = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 2 });
  if (data.length <= 31) return `: ${data.map(format).join(', ')}`;
  return `: ${data.length} values, lowest ${format(Math.min(...data))}, highest ${format(Math.max(...data))}, last ${format(data[data.length - 1]!)}`;
}

function axisLabels(ctx: RenderContext, start: string, end: string): string {
  if (!start && !end) return '';
  const style = `padding:8px 0 0;font-size:12px;line-height:1.4;color:${ctx.theme.light.muted}`;
  return `${table(' width="100%"')}<tr><td${classAttr('tm')} align="left" style="${style};text-align:left">${escapeHtml(start)}</td><td${classAttr('tm')} align="right" style="${style};text-align:right">${escapeHtml(end)}</td></tr></table>`;
}
