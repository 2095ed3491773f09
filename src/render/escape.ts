import { decodeHTMLStrict } from 'entities';

/**
 * Escaping per output context. Values from props never reach the HTML unescaped: text goes through
 * `escapeHtml`, attributes through `escapeAttr`, and URLs through `safeUrl` first (scheme allow-list)
 * and then `escapeAttr`.
 */

const htmlChars = /[&<>"']/g;
const htmlMap: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(value: string): string {
  // `replace` with a global regex always starts at index 0, so the shared regex's lastIndex is harmless.
  return value.replace(htmlChars, (c) => htmlMap[c]!);
}

export const escapeAttr = escapeHtml;

/**
 * Template-authored text keeps entity references (`&copy;`, `&nbsp;`) working, as markdown does, but any
 * other `&` and every `<`, `>`, `"` is escaped. Entity references cannot create markup, so this is safe.
 */
export function escapeAuthored(value: string): string {
  return value.replace(/&(?!(?:[a-zA-Z][a-zA-Z0-9]{1,31}|#\d{1,7}|#x[0-9a-fA-F]{1,6});)|[<>"]/g, (c) => htmlMap[c]!);
}

/** Plain-text choices that differ from the HTML character: a plain space, and nothing for the joiners. */
const plainTextEntities: Record<string, string> = { nbsp: ' ', zwnj: '', zwj: '' };

/**
 * For the plain-text part: turn the entity references authors may write back into characters. Every
 * HTML5 named reference (`&rsquo;`, `&eacute;`, …), as the HTML part shows them: a short list of its own
 * left the others as raw `&rsquo;` in the text part and in markdown button labels.
 */
export function decodeEntities(value: string): string {
  if (!value.includes('&')) return value;
  return value.replace(/&(?:#(\d{1,7})|#x([0-9a-fA-F]{1,6})|([a-zA-Z][a-zA-Z0-9]{1,31}));/g, (all, dec, hex, name) => {
    if (name) return plainTextEntities[name] ?? decodeHTMLStrict(all);
    const code = dec ? Number(dec) : parseInt(hex, 16);
    return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : all;
  });
}

export type UrlKind = 'link' | 'image';

const linkSchemes = new Set(['http', 'https', 'mailto', 'tel', 'sms']);
const imageSchemes = new Set(['http', 'https', 'cid']);
const dataImage = /^data:image\/(?:png|jpe?g|gif|webp);base64,[a-z0-9+/=\s]+$/i;

/**
 * Returns a URL that is safe to put in href/src, or undefined when it must not become a link or image.
 * Browsers ignore tabs/newlines inside URLs and leading control characters, and decode entities in
 * attributes, so the scheme is checked on the URL with all of those removed (`java\tscript:`,
 * `&#106;avascript:`). Scheme-less values that look like host names get `https://` so `example.com/x`
 * works as people expect.
 */
export function safeUrl(value: string, kind: UrlKind = 'link'): string | undefined {
  const url = value.trim();
  if (url === '') return undefined;
  const probe = decodeEntities(url).replace(/[\u0000-\u0020\u007f-\u009f]/g, '').toLowerCase();
  const scheme = /^([a-z][a-z0-9+.-]*):/.exec(probe)?.[1];
  if (scheme) {
    if (kind === 'image' && scheme === 'data') return dataImage.test(url) ? url.replace(/\s+/g, '') : undefined;
    const allowed = kind === 'image' ? imageSchemes : linkSchemes;
    return allowed.has(scheme) ? encodeLoose(url) : undefined;
  }
  if (url.startsWith('//')) return `https:${encodeLoose(url)}`;
  if (url.startsWith('/') || url.startsWith('#') || url.startsWith('?')) return encodeLoose(url);
  if (/^[a-z0-9-]+(?:\.[a-z0-9-]+)+(?::\d+)?(?:[/?#]|$)/i.test(url)) return `https://${encodeLoose(url)}`;
  return undefined;
}

/** Percent-encode characters that are never legal in a URL (spaces, quotes, angle brackets). */
function encodeLoose(url: string): string {
  return url.replace(/[\s"'<>\\^`{|}]/g, (c) => encodeURIComponent(c));
}
