import type { Sqlite } from '../db/client.js';
import { AppError, deletedMeanwhile } from '../lib/errors.js';
import { domainOf } from './address.js';
import { createEmailsRepo, type NewAttachment, type NewEmail } from './repo.js';

/**
 * The one transaction of an accepted email (or batch): row, attachments, event, delivery job, and the
 * idempotency answer. A write procedure (write-procedures.ts): plain data in and out, because it usually
 * runs on the writer thread, where the SQLite work of accepting mail does not cost the event loop.
 */
export interface AcceptArgs {
  projectId: string;
  emails: AcceptedEmail[];
  nowMs: number;
  /** Stored with the emails so a retried request gets the same answer; an expired row is replaced. */
  idempotency?: { key: string; requestHash: string; expiredBeforeMs: number };
  /** A batch stores the array of answers under its key; a single send its one answer. */
  batch: boolean;
  /** The bulk delivery lane even for one email: a broadcast's last batch may hold a single recipient. */
  bulk?: boolean;
}

/** Everything one accepted email writes, computed before the transaction so the transaction stays short. */
export interface AcceptedEmail {
  email: NewEmail;
  attachments: NewAttachment[];
  eventId: string;
  /** The first event's details (JSON), for an email stored as `error`: why it could not be rendered. */
  eventData?: string;
  /**
   * Set when senders must be verified: the sender's domain and its parents. One of them must still be a
   * verified domain of the project when the email commits. Checked only before, a domain deleted in
   * between (while a batch rendered, or its write waited) was answered deleted, and then its mail was
   * accepted and sent, unsigned; a scheduled email was left for a domain that is gone.
   */
  senderDomains?: string[];
  /**
   * A broadcast's email: its sender was verified when the broadcast was queued, and its domain need only
   * still be the project's (any status), as accepted mail still goes from a domain that failed a re-check.
   */
  senderCheckedAtQueue?: boolean;
}

export interface SendResult {
  id: string;
  status: string;
}

export function createAcceptProcedure(sqlite: Sqlite): (args: AcceptArgs) => SendResult[] {
  const repo = createEmailsRepo(sqlite);
  return ({ projectId, emails, nowMs, idempotency, batch, bulk: bulkLane }) => {
    refuseIfProjectDeleting(repo, projectId);
    if (idempotency) repo.deleteExpiredIdempotencyKey(projectId, idempotency.key, idempotency.expiredBeforeMs);
    // A batch has one sender nearly always: its domains are looked up once.
    const verified = new Map<string, boolean>();
    const senderVerified = (domains: string[], checkedAtQueue: boolean) => {
      const key = `${checkedAtQueue} ${domains.join(' ')}`;
      let found = verified.get(key);
      if (found === undefined) verified.set(key, (found = checkedAtQueue ? repo.hasDomain(projectId, domains) : repo.hasVerifiedDomain(projectId, domains)));
      return found;
    };
    // A request of several emails is a newsletter (or a message to several recipients): it goes in its
    // project's bulk lane, so a single send queued after it is not held up behind it (delivery/repo.ts).
    const bulk = emails.length > 1 || bulkLane === true;
    const results = emails.map(({ email, attachments, eventId, eventData, senderDomains, senderCheckedAtQueue }, index) => {
      if (senderDomains && !senderVerified(senderDomains, senderCheckedAtQueue === true)) {
        // COMPAT.md "Email": a batch fails as a whole, and its error names the item, as the checks before the commit do.
        const item = batch ? `batch item ${index}: ` : '';
        throw new AppError('from-address-unverified', `${item}fromAddress ${email.fromAddress} is not on a verified sending domain of this project.`);
      }
      // Checked inside the transaction: an address suppressed a moment ago is not queued.
      const suppression = email.status === 'queued' ? repo.findSuppression(projectId, email.toAddress) : undefined;
      const status = suppression ? 'suppressed' : email.status;
      repo.insertEmail({ ...email, status });
      for (const attachment of attachments) repo.insertAttachment({ ...attachment, content: asBuffer(attachment.content) });
      // The record says why it was not sent (a bounce, a complaint, by hand): the suppression may be
      // deleted later, and "suppressed" alone sent the user looking for it.
      repo.insertEvent(eventId, email.id, status, nowMs, null, null, suppression ? JSON.stringify({ reason: suppression.reason, detail: suppression.detail }) : (eventData ?? null));
      if (status === 'queued') repo.insertJob(email.id, projectId, domainOf(email.toAddress), nowMs, bulk);
      return { id: email.id, status };
    });
    if (idempotency) repo.insertIdempotencyKey(projectId, idempotency.key, idempotency.requestHash, batch ? results : results[0], nowMs);
    return results;
  };
}

/**
 * A send authenticated just before its project's deletion began commits while the purge runs (seconds
 * for a large project): it was answered `queued`, and its emails were then purged unsent. Refused as it
 * is once the project row is gone (http/errors.ts, a foreign key): the client hears nothing was stored.
 * One primary-key read per request, in the transaction the deletion's mark is serialised with.
 */
function refuseIfProjectDeleting(repo: ReturnType<typeof createEmailsRepo>, projectId: string): void {
  if (repo.isProjectDeleting(projectId)) throw deletedMeanwhile();
}

/** A Buffer sent to a worker thread arrives as a plain Uint8Array (structured clone). */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
