import { isPostmaster, maxEmailsPerReport, type BouncesService, type RecipientVerdict } from '../bounces/service.js';
import type { RouteResponseMode } from '../db/schema/inbound.js';
import { withAsciiDomain } from '../emails/address.js';
import type { InboundEnvelope } from '../smtp/inbound.js';
import { canonicalMailbox, type InboundReceiver } from './receive.js';

/**
 * Who takes a recipient of the inbound listener: the bounce handling for the signed VERP addresses and
 * postmaster (bounces/service.ts), an inbound route for the rest (spec §4.9), or nobody (550 5.1.1).
 */
export interface InboundRecipients {
  checkRecipient(address: string, accepted: string[]): Promise<RecipientVerdict>;
  receive(raw: Buffer, envelope: InboundEnvelope): Promise<void>;
}

/** spec §4.9 responseMode: reject-temp is a 4xx the sender retries, reject-perm a 5xx it does not. */
const verdicts: Record<RouteResponseMode, RecipientVerdict> = {
  accept: { accept: true },
  'reject-temp': { accept: false, code: 450, message: '4.2.1 Mailbox temporarily unavailable, try again later' },
  'reject-perm': { accept: false, code: 550, message: '5.7.1 Delivery to this address is refused' },
};

const tooManyReports: RecipientVerdict = { accept: false, code: 452, message: '4.5.3 Too many recipients, send the rest in another transaction' };

/** RFC 5321 §4.5.3.1.8: a server takes at least 100 recipients per transaction; routes may have them all. */
export const maxRecipientsPerTransaction = 100;

/**
 * `ownsSendingDomain`: whether a project has the domain of an address among its sending domains. A
 * postmaster's mail (complaint reports name recipients) is kept only by a route of the project whose
 * domain it is: without the verified-domain rule, another project's catch-all may sit on that domain.
 */
export function createInboundRecipients(bounces: BouncesService, receiver: InboundReceiver, ownsSendingDomain: (projectId: string, address: string) => boolean): InboundRecipients {
  return {
    async checkRecipient(address, accepted) {
      const report = await bounces.checkRecipient(address);
      if (report.accept) {
        // One report concerns one email: past a few, the rest go in another transaction (RFC 5321
        // §4.5.3.1.10). Counted by their form (a signed VERP address, postmaster), without a lookup each.
        const reports = accepted.filter((earlier) => isPostmaster(earlier) || bounces.verp.parse(earlier) !== undefined).length;
        return reports < maxEmailsPerReport ? report : tooManyReports;
      }
      const route = receiver.routeFor(address);
      return route ? verdicts[route.responseMode] : report;
    },

    async receive(raw, envelope) {
      const reports: string[] = [];
      const routed: Parameters<InboundReceiver['receive']>[2] = [];
      const keptPostmaster: string[] = [];
      for (const address of envelope.rcptTo) {
        if ((await bounces.checkRecipient(address)).accept) {
          reports.push(address);
          // A route the project made for its postmaster (it has no other mailbox) keeps that mail too,
          // after the bounce handling has read any complaint report in it: it was acknowledged and dropped.
          const route = isPostmaster(address) ? receiver.routeFor(address) : undefined;
          if (route?.responseMode === 'accept' && ownsSendingDomain(route.projectId, address)) {
            routed.push({ address: withAsciiDomain(canonicalMailbox(address)), route });
            keptPostmaster.push(address);
          }
          continue;
        }
        const route = receiver.routeFor(address);
        // Accepted at RCPT, its route deleted, disabled or set to reject since: the sender tries again
        // later and hears the route's answer then, rather than the message being dropped.
        if (route?.responseMode !== 'accept') throw Object.assign(new Error('4.3.0 The route of a recipient changed during the transaction, try again'), { responseCode: 451 });
        // One spelling per mailbox, the route's: A-labels (`anna@bücher.example` and
        // `anna@xn--bcher-kva.example` are one address).
        routed.push({ address: withAsciiDomain(canonicalMailbox(address)), route });
      }
      if (routed.length > 0) await receiver.receive(raw, envelope, routed);
      if (reports.length > 0) await bounces.receive(raw, { ...envelope, rcptTo: reports, keptAsReceived: keptPostmaster });
    },
  };
}
