import { createHash } from 'node:crypto';
import { startSide, type TextDirection } from './direction.js';
import type { CssRegistry } from './css.js';
import type { ImageSink, RenderContext } from './context.js';
import { isInertSvg } from './svg-logo.js';
import { escapeAttr, escapeHtml, safeUrl } from './escape.js';
import { Lru } from './lru.js';
import { markdownBlockHtml, markdownBlockText } from './markdown.js';
import { bodyWidth, cardPadding, logoWidth, mobileBreakpoint, type Theme } from './theme.js';
import { generatedContentId, type InlineImage, type ProjectDesign } from './types.js';

/**
 * The default auto-generated layout (spec §2.1 `layoutId` null or unknown): page background, optional
 * logo, a 600 px card holding the content rows, footer and unsubscribe text. Table-based with inline
 * styles; the <style> block only carries what cannot be inline: the mobile media query, dark mode
 * (`prefers-color-scheme`, Outlook.com's `[data-ogsc]/[data-ogsb]`, the Gmail `u + .body` blend fix)
 * and client resets. A client that drops the <style> block still gets the full light, desktop design.
 */
export interface LayoutInput {
  ctx: RenderContext;
  design: ProjectDesign;
  /** RenderOptions.broadcast: the footer adds the design's unsubscribeText. */
  broadcast: boolean;
  subject: string;
  preheader: string;
  body: string;
}

export function renderLayout({ ctx, design, broadcast, subject, preheader, body }: LayoutInput): string {
  const t = ctx.theme;
  const scheme = t.darkEnabled ? 'light dark' : 'light';
  const font = t.webFont ? `<!--[if !mso]><!--><link href="${escapeAttr(t.webFont)}" rel="stylesheet" type="text/css"><!--<![endif]-->` : '';
  const head = [
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<meta http-equiv="X-UA-Compatible" content="IE=edge">',
    '<meta name="x-apple-disable-message-reformatting">',
    '<meta name="format-detection" content="telephone=no, date=no, address=no, email=no, url=no">',
    `<meta name="color-scheme" content="${scheme}">`,
    `<meta name="supported-color-schemes" content="${scheme}">`,
    `<title>${escapeHtml(subject)}</title>`,
    '<!--[if mso]><noscript><xml><o:OfficeDocumentSettings><o:PixelsPerInch>96</o:PixelsPerInch></o:OfficeDocumentSettings></xml></noscript>',
    // Outlook for Windows falls back to Times New Roman for a web font it lacks; code keeps a monospace
    // font there, its highlighted tokens (spans) included.
    `<style>td,th,div,p,a,h1,h2,h3,h4,span{font-family:${outlookFont(t.font)}}pre,pre span,code,code span{font-family:${outlookFont('monospace')}}</style><![endif]-->`,
    font,
    `<style>${stylesheet(t, ctx.css)}</style>`,
  ].join('');
  const footer = footerHtml(ctx, design, broadcast);
  const language = `${languageAttr(design, ctx.direction)}dir="${ctx.direction === 'rtl' ? 'rtl' : 'ltr'}"`;
  const html = [
    '<!DOCTYPE html>',
    `<html ${language} xmlns="http://www.w3.org/1999/xhtml" xmlns:v="urn:schemas-microsoft-com:vml" xmlns:o="urn:schemas-microsoft-com:office:office">`,
    `<head>${head}</head>`,
    `<body class="body pb" style="margin:0;padding:0;width:100%;background-color:${t.light.page};word-spacing:normal">`,
    preheaderHtml(preheader),
    // Said again inside the body: Gmail, Yahoo and Outlook.com keep only the body's content, and a
    // right-to-left email without its dir there was laid out left to right (columns swapped, phrases reordered).
    `<table role="presentation" class="pb" ${language} width="100%" cellpadding="0" cellspacing="0" border="0" style="background-color:${t.light.page}">`,
    '<tr><td class="wr" align="center" style="padding:32px 16px">',
    `<!--[if mso]><table role="presentation" width="${bodyWidth}" cellpadding="0" cellspacing="0" border="0"><tr><td><![endif]-->`,
    // Fixed layout: an unbreakable word or a wide table must not push the body past 600 px / the screen.
    `<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" style="width:100%;max-width:${bodyWidth}px;margin:0 auto;table-layout:fixed">`,
    logoHtml(design, ctx.images),
    `<tr><td class="cd ct" style="background-color:${t.light.card};border:1px solid ${t.light.border};border-radius:12px;padding:${cardPadding}px;font-family:${t.font};font-size:16px;line-height:1.6;color:${t.light.text};text-align:${startSide(ctx.direction)};word-break:break-word;overflow-wrap:anywhere">`,
    `<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" style="table-layout:fixed">${body}</table>`,
    '</td></tr>',
    footer,
    '</table>',
    '<!--[if mso]></td></tr></table><![endif]-->',
    '</td></tr></table>',
    '</body></html>',
  ];
  return html.join('\n');
}

/** A BCP 47 language tag's shape ("de", "pt-BR", "zh-Hant-TW"): the design's `language`. */
export const languageTag = /^[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*$/;

/**
 * The html's `lang`: the design's language when it says one. Otherwise "en" for left-to-right text, as
 * always said; nothing for right-to-left text, which is no English, so a screen reader keeps its own voice.
 */
function languageAttr(design: ProjectDesign, direction: TextDirection | undefined): string {
  // Checked here too: a design stored by hand (or by an older build) reaches the attribute unescaped.
  if (typeof design.language === 'string' && languageTag.test(design.language)) return `lang="${design.language}" `;
  return direction === 'rtl' ? '' : 'lang="en" ';
}

/** Plain-text lines of the footer, in the order they appear in the HTML. */
export function footerText(ctx: RenderContext, design: ProjectDesign, broadcast: boolean): string[] {
  return footerParts(design, broadcast).map((s) => markdownBlockText(ctx, s));
}

/** The footer's texts: the design's footer, and for a broadcast its unsubscribe text (RenderOptions.broadcast). */
function footerParts(design: ProjectDesign, broadcast: boolean): string[] {
  return [design.footerTextTransactional, broadcast ? design.unsubscribeText : undefined].filter((s): s is string => typeof s === 'string' && s.trim() !== '');
}

function footerHtml(ctx: RenderContext, design: ProjectDesign, broadcast: boolean): string {
  const parts = footerParts(design, broadcast);
  if (parts.length === 0) return '';
  const t = ctx.theme;
  const style = { link: `color:${t.light.muted};text-decoration:underline`, linkClass: 'ft' };
  const inner = parts.map((p) => `<div style="margin:0 0 6px">${markdownBlockHtml(ctx, p, style)}</div>`).join('');
  return `<tr><td class="ft" align="center" style="padding:24px 24px 0;font-family:${t.font};font-size:12px;line-height:1.6;color:${t.light.muted};text-align:center">${inner}</td></tr>`;
}

/**
 * Hidden preview text. The filler of zero-width joiners stops clients from pulling the first lines of
 * the body into the inbox preview after a short preheader.
 */
function preheaderHtml(preheader: string): string {
  if (!preheader) return '';
  const filler = '&#847;&zwnj;&nbsp;'.repeat(40);
  return `<div style="display:none;font-size:1px;line-height:1px;max-height:0;max-width:0;opacity:0;overflow:hidden;mso-hide:all">${escapeHtml(preheader)}${filler}</div>`;
}

// ---------------------------------------------------------------- logo

interface DecodedImage {
  content: Buffer;
  contentType: string;
  dataUri: string;
  cid: string;
}

const logoCache = new Lru<string, DecodedImage | null>(32);

function logoHtml(design: ProjectDesign, images: ImageSink): string {
  const logo = design.logo;
  if (!logo) return '';
  const src = logoSrc(logo, images);
  if (!src) return '';
  const width = logoWidth(design);
  const img = `<img src="${escapeAttr(src)}" alt="Logo" width="${width}" style="display:block;margin:0 auto;width:${width}px;max-width:100%;height:auto;border:0;outline:none">`;
  const href = logo.href ? safeUrl(logo.href) : undefined;
  const linked = href ? `<a href="${escapeAttr(href)}" target="_blank" style="text-decoration:none">${img}</a>` : img;
  return `<tr><td align="center" style="padding:0 0 24px">${linked}</td></tr>`;
}

function logoSrc(logo: NonNullable<ProjectDesign['logo']>, images: ImageSink): string | undefined {
  if (logo.file) {
    const decoded = logoCache.getOrCreate(logo.file, () => decodeImage(logo.file!));
    if (decoded) {
      const inline: InlineImage = { cid: decoded.cid, filename: `logo.${imageExtension(decoded.contentType)}`, contentType: decoded.contentType, content: decoded.content };
      return images.src(inline, () => decoded.dataUri);
    }
  }
  return logo.url ? safeUrl(logo.url, 'image') : undefined;
}

/** Base64 (optionally a data URI) → image bytes; the type comes from the magic bytes, not the claim. */
export function decodeImage(file: string): DecodedImage | null {
  const base64 = file.replace(/^data:[^,]*,/, '').replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(base64)) return null;
  const content = Buffer.from(base64, 'base64');
  const contentType = sniffImage(content);
  if (!contentType) return null;
  const hash = createHash('sha256').update(content).digest('hex').slice(0, 20);
  return { content, contentType, dataUri: `data:${contentType};base64,${content.toString('base64')}`, cid: generatedContentId('logo', hash) };
}

function sniffImage(b: Buffer): string | undefined {
  if (b.length > 8 && b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) return 'image/png';
  if (b.length > 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'image/jpeg';
  if (b.length > 6 && b.subarray(0, 3).toString('ascii') === 'GIF') return 'image/gif';
  if (b.length > 12 && b.subarray(0, 4).toString('ascii') === 'RIFF' && b.subarray(8, 12).toString('ascii') === 'WEBP') return 'image/webp';
  if (isScriptFreeSvg(b)) return 'image/svg+xml';
  return undefined;
}

/** `image/svg+xml` → `svg`; the other types are their own extension. */
function imageExtension(contentType: string): string {
  return contentType === 'image/svg+xml' ? 'svg' : contentType.split('/')[1]!;
}

/**
 * An SVG document that runs and loads nothing (svg-logo.ts): the logo of the official SDKs' own
 * `project.update` example (COMPAT.md "Project design") is one, and was refused with 400. The logo is
 * only ever an <img> here (a cid: part, or a data URI in previews), where an SVG runs no script, but a
 * mail client may offer the inline part to be opened on its own, as a document.
 */
function isScriptFreeSvg(b: Buffer): boolean {
  return isInertSvg(b.toString('utf8'));
}

// ---------------------------------------------------------------- stylesheet

const fixedCss = new Lru<Theme, { base: string; mobile: string; dark: string; outlook: string }>(100);

/** The rules every email carries depend on the theme only; computed once per theme. */
function fixedRules(t: Theme) {
  return fixedCss.getOrCreate(t, () => {
    const dark = t.darkEnabled ? darkRules(t) : [];
    return {
      base: baseRules(t).join(''),
      mobile: mobileRules.join(''),
      dark: dark.join(''),
      outlook: dark.map(outlookRule).join(''),
    };
  });
}

const mobileRules = [
  '.wr{padding:16px 8px!important}',
  '.ct{padding:28px 20px!important}',
  '.ttl{font-size:23px!important}',
  '.stk{display:block!important;width:100%!important;max-width:100%!important;box-sizing:border-box}',
  '.gs{display:none!important}',
  '.cb{padding:14px!important}.cb pre{font-size:12px!important}',
];

function stylesheet(t: Theme, css: CssRegistry): string {
  const fixed = fixedRules(t);
  let out = `${fixed.base}@media only screen and (max-width:${mobileBreakpoint}px){${fixed.mobile}${css.mobile.join('')}}`;
  if (!t.darkEnabled) return out;
  out += `@media (prefers-color-scheme:dark){${fixed.dark}${css.dark.join('')}}`;
  // Outlook.com marks what it recolours with data-ogsc (text) and data-ogsb (backgrounds).
  out += fixed.outlook + css.dark.map(outlookRule).join('');
  // Gmail's forced dark mode inverts white button labels; screen + difference blending restores them.
  return `${out}u+.body .gbs{background:#000;mix-blend-mode:screen}u+.body .gbd{background:#000;mix-blend-mode:difference}`;
}

function baseRules(t: Theme): string[] {
  return [
    `:root{color-scheme:${t.darkEnabled ? 'light dark' : 'light'};supported-color-schemes:${t.darkEnabled ? 'light dark' : 'light'}}`,
    'body{margin:0;padding:0;-webkit-text-size-adjust:100%;-ms-text-size-adjust:100%}',
    'table,td{mso-table-lspace:0pt;mso-table-rspace:0pt}',
    'img{-ms-interpolation-mode:bicubic}',
    'a[x-apple-data-detectors]{color:inherit!important;text-decoration:none!important;font-size:inherit!important;font-family:inherit!important;font-weight:inherit!important;line-height:inherit!important}',
    '#MessageViewBody a{color:inherit;text-decoration:none}',
    'p,h1,h2,h3,h4,h5,h6,ul,ol,blockquote{margin-top:0}',
  ];
}

function darkRules(t: Theme): string[] {
  const d = t.dark;
  return [
    `.pb{background-color:${d.page}!important}`,
    // The text colour too: a broadcast's own html (with-layout) inherits it, and kept the light one on the dark card.
    `.cd{background-color:${d.card}!important;border-color:${d.border}!important;color:${d.text}!important}`,
    `.t{color:${d.text}!important}`,
    `.tt{color:${d.title}!important}`,
    `.tm,.ft,.ft a{color:${d.muted}!important}`,
    `.lk,.hl{color:${d.link}!important}`,
    `.bd{border-color:${d.border}!important}`,
    `.dv{background-color:${d.border}!important}`,
    `.ic{background-color:${d.subtle}!important}`,
    `.btm{background-color:${d.subtle}!important;border-color:${d.border}!important}`,
    `.btm a{color:${d.title}!important}`,
    `.bto{border-color:${d.link}!important}`,
    `.bto a{color:${d.link}!important}`,
    '.il{display:none!important}',
    '.idk{display:block!important;max-height:none!important;overflow:visible!important}',
    // On a background a node paints itself (context.ts fixedBackgroundClass), which these rules leave as it
    // is, the theme's classes keep their light colours: more specific than the rules above, so they win.
    ...fixedBackgroundRules(t),
  ];
}

function fixedBackgroundRules(t: Theme): string[] {
  const l = t.light;
  return [
    `.fx.t,.fx .t{color:${l.text}!important}`,
    `.fx.tt,.fx .tt{color:${l.title}!important}`,
    `.fx.tm,.fx .tm{color:${l.muted}!important}`,
    `.fx .lk{color:${l.link}!important}`,
    `.fx .hl{color:${l.link}!important}`,
    `.fx .btm{background-color:${l.subtle}!important;border-color:${l.border}!important}`,
    `.fx .btm a{color:${l.title}!important}`,
    `.fx .bto{border-color:${t.highlight}!important}`,
    `.fx .bto a{color:${l.link}!important}`,
    `.fx.bd,.fx .bd{border-color:${l.border}!important}`,
    `.fx .ic{background-color:${l.subtle}!important}`,
  ];
}

function outlookRule(rule: string): string {
  const brace = rule.indexOf('{');
  const selectors = rule.slice(0, brace).split(',');
  const prefixed = selectors.flatMap((s) => [`[data-ogsc] ${s}`, `[data-ogsb] ${s}`]);
  return `${prefixed.join(',')}${rule.slice(brace)}`;
}

/** Outlook for Windows falls back to Times New Roman when the first family is not installed. */
function outlookFont(stack: string): string {
  const lower = stack.toLowerCase();
  if (lower.endsWith('monospace')) return "'Courier New', Courier, monospace";
  if (lower.endsWith(' serif')) return "Georgia, 'Times New Roman', serif";
  return "'Segoe UI', Arial, sans-serif";
}
