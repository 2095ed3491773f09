import { escapeHtml } from '../render/escape.js';

/** Public path of a broadcast's unsubscribe link, beside the open and click links (emails/tracking.ts). */
export const unsubscribePath = '/t/u/';

/**
 * The page behind an unsubscribe link. GET only asks: mail gateways and link scanners fetch every link of
 * a message, and a GET that unsubscribed would unsubscribe recipients who never clicked. The button POSTs
 * to the same link, as a mailbox provider's one-click button does (RFC 8058 §3.2).
 */
export function unsubscribePage(state: { kind: 'ask'; emailAddress: string | null } | { kind: 'done' } | { kind: 'invalid' }): string {
  switch (state.kind) {
    case 'ask': {
      const who = state.emailAddress ? ` <strong>${escapeHtml(state.emailAddress)}</strong>` : '';
      return page('Unsubscribe', `<h1>Unsubscribe</h1><p>Stop these emails to${who}?</p><form method="post"><button type="submit" id="unsubscribe">Unsubscribe</button></form>`);
    }
    case 'done':
      return page('Unsubscribed', `<h1 id="done">You are unsubscribed</h1><p>You will not get these emails any more.</p>`);
    default:
      return page('Link not valid', `<h1>This link is not valid</h1><p>It may have been cut short by your email program: open it from the email again.</p>`);
  }
}

function page(title: string, body: string): string {
  return [
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${title}</title>`,
    '<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}button{font:inherit;padding:.5rem 1.25rem;cursor:pointer}</style>',
    `</head><body>${body}</body></html>`,
  ].join('');
}

/** No script, no remote anything; the form may post only back to this origin. */
export const unsubscribePagePolicy = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";
