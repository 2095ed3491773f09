import { startSide } from '../direction.js';
import { classAttr } from '../css.js';
import { overrideClasses, type RenderContext } from '../context.js';
import { escapeAttr, escapeHtml, safeUrl } from '../escape.js';
import { cssColor, cssLength, pixelLength, pixels } from '../style-values.js';
import type { Align, BaseStyles, ImageNode } from '../types.js';
import { substituteVariables } from '../variables.js';
import { alignOf, nodeRow, outlookSizedImage, resolveWidth, type Placement, type ResolvedWidth } from './common.js';

/**
 * Images (spec §2.2): `src`, `alt`, `href` and `darkModeSrc` all take variables. With a dark source and
 * dark mode enabled, both images are in the markup and the media query (or Outlook's `[data-ogsc]`)
 * swaps them; the dark one is hidden with `mso-hide` and zero height so clients without the media query
 * show only the light image.
 */
export function renderImage(ctx: RenderContext, node: ImageNode, place: Placement): string {
  const styles = node.styles;
  const src = safeUrl(substituteVariables(node.src ?? '', ctx.props), 'image');
  const alt = substituteVariables(node.alt ?? '', ctx.props);
  if (!src) return alt ? nodeRow(ctx, styles, `<span class="tm" style="font-size:13px;color:${ctx.theme.light.muted}">${escapeHtml(alt)}</span>`, place) : '';
  const href = node.href ? safeUrl(substituteVariables(node.href, ctx.props)) : undefined;
  // The image is all a linked image's link holds: without alt text a screen reader announced a link with
  // no name, then read out its (tracked, 100-character) address. The destination's host names it instead.
  const name = alt || (href ? hostOf(href) : '');
  const width = resolveWidth(styles?.width, ctx.width);
  const align = alignOf(styles, startSide(ctx.direction));
  const darkSrc = ctx.theme.darkEnabled && node.darkModeSrc ? safeUrl(substituteVariables(node.darkModeSrc, ctx.props), 'image') : undefined;
  const overrides = overrideClasses(ctx, styles, (s: BaseStyles) => [{ suffix: '', decls: [...(resolveWidth(s.width, ctx.width)?.decls ?? []), ...imageBox(s)] }]);
  const classes = classAttr(darkSrc && 'il', overrides);
  let html = imgTag(src, name, width, align, styles, classes);
  // An image sized by its height alone keeps its proportions by it, in Outlook too.
  if (!width && !pixels(pixelLength(styles?.height), 4000)) {
    // Its border (imageBox) is drawn outside the width.
    const room = ctx.width - 2 * (pixels(styles?.borderWidth, 40) ?? 0);
    const outlookWidth = { px: room, attr: String(room), decls: [`width:${room}px`] };
    html = outlookSizedImage(html, imgTag(src, name, outlookWidth, align, styles, classes));
  }
  if (darkSrc) {
    html += `<!--[if !mso]><!--><div class="idk" style="display:none;max-height:0;overflow:hidden;mso-hide:all">${imgTag(darkSrc, name, width, align, styles, classAttr(overrides))}</div><!--<![endif]-->`;
  }
  if (href) html = `<a href="${escapeAttr(href)}" target="_blank" style="text-decoration:none;border:0">${html}</a>`;
  return nodeRow(ctx, styles, html, place);
}

function imgTag(src: string, alt: string, width: ResolvedWidth | undefined, align: Align, styles: BaseStyles | undefined, classes: string): string {
  const margin = align === 'center' ? 'margin:0 auto' : align === 'right' ? 'margin:0 0 0 auto' : 'margin:0';
  const height = pixels(pixelLength(styles?.height), 4000);
  const style = [
    'display:block',
    margin,
    ...(width?.decls ?? ['max-width:100%']),
    height ? `height:${height}px` : 'height:auto',
    'border:0',
    'outline:none',
    'text-decoration:none',
    ...imageBox(styles),
  ].join(';');
  const attrs = `${width ? ` width="${width.px}"` : ''}${height ? ` height="${height}"` : ''}`;
  return `<img src="${escapeAttr(src)}" alt="${escapeAttr(alt)}"${attrs}${classes} style="${style}">`;
}

function imageBox(s: BaseStyles | undefined): string[] {
  if (!s) return [];
  const out: string[] = [];
  const radius = cssLength(s.borderRadius);
  if (radius) out.push(`border-radius:${radius}`);
  const bw = pixels(s.borderWidth, 40);
  if (bw) out.push(`border:${bw}px solid ${cssColor(s.borderColor) ?? '#e5e7eb'}`);
  const bg = cssColor(s.backgroundColor);
  if (bg) out.push(`background-color:${bg}`);
  return out;
}

/** `https://shop.example.org/x` → `shop.example.org`; empty for a link that is no http(s) URL (mailto:). */
function hostOf(url: string): string {
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' ? parsed.hostname : '';
  } catch {
    return '';
  }
}
