import { RawResponse } from './router.js';

/**
 * A page for the person who followed a link in an email (an unsubscribe link, a tracked link that was
 * cut or altered): a title, a language and a sentence, not the API's JSON error, which a browser shows
 * as braces and quotes written for a developer.
 */
export function recipientPage(title: string, body: string): string {
  return [
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${title}</title>`,
    '<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}button{font:inherit;padding:.5rem 1.25rem;cursor:pointer}</style>',
    `</head><body>${body}</body></html>`,
  ].join('');
}

/** What a cut or altered link shows (404): mail programs break long links at line ends. */
export const invalidLinkPage = recipientPage('Link not valid', '<h1>This link is not valid</h1><p>It may have been cut short by your email program: open it from the email again.</p>');

/** No script, no remote anything; a form may post only back to this origin. */
export const recipientPagePolicy = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

export function recipientPageResponse(html: string, status = 200): RawResponse {
  return new RawResponse(html, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'content-security-policy': recipientPagePolicy, 'x-content-type-options': 'nosniff' }, status);
}
