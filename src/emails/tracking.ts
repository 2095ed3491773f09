import { decodeHTML, decodeHTMLAttribute } from 'entities';
import type { UrlSigner } from '../lib/signing.js';

/** Public tracking routes; no API key, the signed token is the authorisation. */
export const openPath = '/t/o/';
export const clickPath = '/t/c/';

/** 1×1 transparent GIF served by the open pixel. */
export const pixelGif = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');

export interface TrackingOptions {
  signer: UrlSigner;
  /** The appliance's public base URL, read at delivery (no trailing slash). */
  publicUrl(): string;
  /** `sending.click_tracking`: rewrite links through the signed redirect. */
  clickTracking: boolean;
  /**
   * False when mail leaves this machine and publicUrl names it by 127.0.0.1 (http.public_url unset): a
   * pixel or redirect there reaches no recipient, and filters score links to an IP address (rspamd
   * HTTP_TO_IP). Nothing is tracked then; the boot's warning says so.
   */
  linksReachable: boolean;
}

/** Returns the html as it is sent: links rewritten (when enabled) and the open pixel (when tracked). */
export type HtmlTracker = (html: string, emailId: string, openTracked: boolean) => string;

/**
 * Tracking is applied when a message is composed for delivery, not when it is accepted: the stored html
 * stays what the sender gave (so opening the email record's htmlReferenceUrl records no open), and
 * accepting an email costs no signature. Emails accepted by older versions already carry their pixel
 * and rewritten links; those are recognised and left as they are.
 */
export function createHtmlTracker(options: TrackingOptions): HtmlTracker {
  return (html, emailId, openTracked) => {
    if (!options.linksReachable) return html;
    const base = options.publicUrl();
    let out = options.clickTracking ? rewriteLinks(html, emailId, options.signer, base) : html;
    if (openTracked) out = addOpenPixel(out, emailId, options.signer, base);
    return out;
  };
}

/** Tokens in sent emails never expire (a recipient may open the email months later). */
export function addOpenPixel(html: string, emailId: string, signer: UrlSigner, publicUrl: string): string {
  const token = signer.sign(`o:${emailId}`);
  if (html.includes(`${openPath}${token}`)) return html;
  const img = `<img src="${publicUrl}${openPath}${token}" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0" />`;
  // First in the body: Gmail shows ~102 KB of a message's html and cuts the rest until the reader asks
  // for it, and a pixel at the end of a long newsletter was cut with it (no open recorded). Html with
  // no body tag (a fragment) gets it at the end, where it cannot come before a doctype.
  const bodyTag = /<body\b[^>]*>/i.exec(html);
  if (!bodyTag) return html + img;
  const at = bodyTag.index + bodyTag[0].length;
  return html.slice(0, at) + img + html.slice(at);
}

/**
 * The tags whose href a reader clicks: `<a>`, image-map `<area>`, and VML shapes (`<v:roundrect href>`
 * in `<!--[if mso]>`: the half of a "bulletproof" button that Outlook for Windows shows instead of the
 * `<a>`). Conditional comments are not skipped: the clients that read them see those links.
 */
const linkTagStart = /<(?:a|area|v:[a-z]+)\b/gi;
/**
 * An href in each of the forms HTML allows (§13.1.2.3): double-quoted (which may hold `'`, as in
 * `/wiki/Ender's_Game`), single-quoted, or unquoted as minifiers write it. Whether the value is an
 * http(s) link is redirectTarget's question, asked of the value as a browser reads it.
 */
const hrefAttribute = /(\shref\s*=\s*)(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))/i;

/**
 * Rewrites http(s) links through the signed click redirect (opt-in: `sending.click_tracking`). Each
 * link tag is cut at its first `>` and its href rewritten there, in one pass over the html: one
 * pattern over the whole html (`<a\b[^>]*?\shref…`) scanned to the end of it from every `<a` that
 * never closed, and 300 kB of those held the event loop for seconds at every delivery attempt. (A link
 * whose URL holds a `>` stays as written, untracked.)
 */
export function rewriteLinks(html: string, emailId: string, signer: UrlSigner, publicUrl: string): string {
  const ownRedirect = `${publicUrl}${clickPath}`;
  // The appliance's own links (a broadcast's unsubscribe link, /t/u/…) stay direct: a link scanner that
  // follows every link would count a click on it, and unsubscribing would take a second hop.
  const ownLinks = `${publicUrl}/t/`;
  const rewrite = (all: string, prefix: string, doubleQuoted?: string, singleQuoted?: string, unquoted?: string) => {
    // The value as a browser reads the attribute (HTML §13.2.5.73: `&nbsp;` is U+00A0, `&amp` without
    // its `;` decodes unless a letter, digit or `=` follows), so the redirect goes where the link went.
    const link = stripUrlSpaces(decodeHTMLAttribute(doubleQuoted ?? singleQuoted ?? unquoted ?? ''));
    if (link.startsWith(ownLinks)) return all;
    const target = redirectTarget(link);
    // A link that is not a valid http(s) URL (mailto:, a relative path, `{{unsubscribe}}`) stays as
    // written: the redirect could not send anyone to it.
    if (!target) return all;
    const token = signer.sign(`c:${emailId}\n${target}`);
    const quote = singleQuoted === undefined ? '"' : "'";
    return `${prefix}${quote}${ownRedirect}${token}${quote}`;
  };
  const parts: string[] = [];
  let copied = 0;
  linkTagStart.lastIndex = 0;
  for (let start = linkTagStart.exec(html); start; start = linkTagStart.exec(html)) {
    const end = html.indexOf('>', start.index);
    // No tag closes after this one, so none after it does either.
    if (end === -1) break;
    linkTagStart.lastIndex = end;
    const isAnchor = start[0].length === 2; // `<a`; an `<area>` or a VML shape has no text to show
    if (isAnchor && showsWebAddress(shownText(html, end + 1))) continue;
    const tag = html.slice(start.index, end);
    const rewritten = tag.replace(hrefAttribute, rewrite);
    if (rewritten !== tag) {
      parts.push(html.slice(copied, start.index), rewritten);
      copied = end;
    }
  }
  parts.push(html.slice(copied));
  return parts.join('');
}

/**
 * How far after an `<a …>` its text is looked for: link text that shows an address is a line at most, and
 * a bounded look keeps the pass linear over html of many links that never close.
 */
const shownTextWindow = 512;

/** The text a reader sees for the `<a>` whose tag ends before `from`: up to its `</a>`, tags dropped, entities decoded. */
function shownText(html: string, from: number): string {
  const window = html.slice(from, from + shownTextWindow);
  const close = window.search(/<\/a\s*>/i);
  if (close === -1) return '';
  return decodeHTML(window.slice(0, close).replace(/<[^>]*>/g, '')).trim();
}

/**
 * A link whose text is itself a web address (`https://shop.example.org/orders/1`, `www.example.org`) shows
 * where it leads: through the redirect its href would name the appliance's host while its text names
 * another, what receivers' filters score as phishing (rspamd's PHISHING, 3.9 points). Such a link is
 * left as written, untracked. Each dot-separated label excludes the dot, so the pattern cannot backtrack.
 */
const webAddress = /^(?:https?:\/\/)?(?:[\p{L}\p{N}-]+\.)+\p{L}{2,63}\.?(?::\d+)?(?:[/?#]\S*)?$/iu;
const showsWebAddress = (text: string) => text.length > 0 && webAddress.test(text);

/**
 * WHATWG URL parsing strips leading and trailing C0 controls and spaces, so ` https://…` is a link too;
 * only those: String.prototype.trim would also drop a U+00A0 that the browser keeps in the URL.
 */
function stripUrlSpaces(value: string): string {
  // Index loops, not `/[\0- ]+$/`: that pattern rescans a run of spaces from each of its characters.
  let start = 0;
  let end = value.length;
  while (start < end && value.charCodeAt(start) <= 0x20) start++;
  while (end > start && value.charCodeAt(end - 1) <= 0x20) end--;
  return value.slice(start, end);
}

/**
 * The Location a click redirects to: the link as a browser reads it (WHATWG URL parsing drops tabs and
 * line breaks and percent-encodes non-ASCII), so it is always a valid header value. Only http(s).
 */
export function redirectTarget(link: string): string | undefined {
  try {
    const url = new URL(link);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : undefined;
  } catch {
    return undefined;
  }
}

export function parseOpenToken(signer: UrlSigner, token: string): string | undefined {
  const payload = signer.verify(token.replace(/\.gif$/, ''), 0);
  return payload?.startsWith('o:') ? payload.slice(2) : undefined;
}

export function parseClickToken(signer: UrlSigner, token: string): { emailId: string; url: string } | undefined {
  const payload = signer.verify(token, 0);
  if (!payload?.startsWith('c:')) return undefined;
  const newline = payload.indexOf('\n');
  if (newline === -1) return undefined;
  return { emailId: payload.slice(2, newline), url: payload.slice(newline + 1) };
}
