import type { UrlSigner } from '../lib/signing.js';

/** Public tracking routes; no API key, the signed token is the authorisation. */
export const openPath = '/t/o/';
export const clickPath = '/t/c/';

/** 1×1 transparent GIF served by the open pixel. */
export const pixelGif = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');

/**
 * Adds the open pixel to the stored html at accept time so delivery needs no tracking logic. Tokens in
 * sent emails never expire (a recipient may open the email months later).
 */
export function addOpenPixel(html: string, emailId: string, signer: UrlSigner, publicUrl: string): string {
  const url = `${publicUrl}${openPath}${signer.sign(`o:${emailId}`)}`;
  const img = `<img src="${url}" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0" />`;
  const close = html.lastIndexOf('</body>');
  return close === -1 ? html + img : html.slice(0, close) + img + html.slice(close);
}

const hrefPattern = /(<a\b[^>]*?\shref\s*=\s*)(["'])(https?:\/\/[^"']+)\2/gi;

/** Rewrites http(s) links through the signed click redirect (opt-in: `sending.click_tracking`). */
export function rewriteLinks(html: string, emailId: string, signer: UrlSigner, publicUrl: string): string {
  return html.replace(hrefPattern, (_all, prefix: string, quote: string, url: string) => {
    const target = decodeHtmlAttr(url);
    const token = signer.sign(`c:${emailId}\n${target}`);
    return `${prefix}${quote}${publicUrl}${clickPath}${token}${quote}`;
  });
}

function decodeHtmlAttr(value: string): string {
  return value.replace(/&amp;/g, '&').replace(/&quot;/g, '"').replace(/&#39;/g, "'");
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
