import { invalidLinkPage, recipientPage } from '../http/recipient-page.js';
import { escapeHtml } from '../render/escape.js';

/** Public path of a broadcast's unsubscribe link, beside the open and click links (emails/tracking.ts). */
export const unsubscribePath = '/t/u/';

/**
 * The page behind an unsubscribe link. GET only asks: mail gateways and link scanners fetch every link of
 * a message, and a GET that unsubscribed would unsubscribe recipients who never clicked. The button POSTs
 * to the same link, as a mailbox provider's one-click button does (RFC 8058 §3.2).
 */
export function unsubscribePage(state: { kind: 'ask'; emailAddress: string | null } | { kind: 'done' } | { kind: 'gone' } | { kind: 'invalid' }): string {
  switch (state.kind) {
    case 'ask': {
      const who = state.emailAddress ? ` <strong>${escapeHtml(state.emailAddress)}</strong>` : '';
      return recipientPage('Unsubscribe', `<h1>Unsubscribe</h1><p>Stop these emails to${who}?</p><form method="post"><button type="submit" id="unsubscribe">Unsubscribe</button></form>`);
    }
    case 'done':
      return recipientPage('Unsubscribed', `<h1 id="done">You are unsubscribed</h1><p>You will not get these emails any more.</p>`);
    // No contact at the address the email went to (deleted, or moved to another address): nothing was
    // unsubscribed, and "you are unsubscribed" would claim it was.
    case 'gone':
      return recipientPage('Not on the list', `<h1 id="gone">Not on the list</h1><p>This address is not on the list any more: no more of these emails go to it.</p>`);
    default:
      return invalidLinkPage;
  }
}
