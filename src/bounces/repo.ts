import { and, eq, sql } from 'drizzle-orm';
import type { Db, Sqlite } from '../db/client.js';
import { setPlaceholder } from '../db/set-placeholder.js';
import { emailEvents, emails, type EmailStatus } from '../db/schema/emails.js';
import type { Clock } from '../lib/clock.js';
import { newId } from '../lib/ids.js';

/** Synchronous queries of the bounces feature (DESIGN convention 6); writers run inside one transaction. */
export type BouncedEmail = NonNullable<ReturnType<ReturnType<typeof createBouncesRepo>['findEmail']>>;

export function createBouncesRepo(db: Db, clock: Clock) {
  let statements: ReturnType<typeof prepareStatements> | undefined;
  const prepared = () => (statements ??= prepareStatements(db));
  return {
    findEmail(emailId: string) {
      return prepared().findEmail.get({ emailId });
    },

    /**
     * Stores the event unless the email holds `maxPerType` of its type already.
     * The VERP Return-Path is in every copy the recipient got: whoever replays reports to it (or a remote
     * system that loops) would otherwise grow the record, which GET /v1/email/{id} returns whole, without
     * bound; the tracking pixel's events have the same cap for the same reason (emails/record-tracking.ts).
     */
    appendEvent(emailId: string, type: string, data: Record<string, unknown>, maxPerType: number): void {
      const stored = prepared().countEventsOfType.get({ emailId, type })?.count ?? 0;
      if (stored >= maxPerType) return;
      prepared().appendEvent.run({ id: newId(clock), emailId, type, time: clock.nowMs(), data });
    },

    /** Compare-and-set, so a concurrent change (an open, the worker) is never overwritten blindly. */
    setStatusFrom(emailId: string, from: EmailStatus, to: EmailStatus): boolean {
      return prepared().setStatusFrom.run({ emailId, from, to, updatedAt: clock.nowMs() }).changes > 0;
    },
  };
}

/**
 * Whether a project sends from the name, or has it as its MAIL FROM domain: one lookup in each of the
 * expression indexes of migration 0028. Without them every postmaster RCPT, which anyone may send to the
 * public inbound listener, read every domain row, DKIM keys and all (1,000 domains: ~9 ms of the event loop).
 */
export const servedDomainQuery = 'select 1 from domains where lower(domain) = ? or lower(mail_from_domain) = ? limit 1';

/** `servedDomainQuery` prepared once; takes a lower-cased domain. */
export function createServedDomainLookup(sqlite: Sqlite): (domain: string) => boolean {
  const statement = sqlite.prepare(servedDomainQuery);
  return (domain) => statement.get(domain, domain) !== undefined;
}

/** Prepared once per repo: building a drizzle query costs ~200 µs per call, and every report takes three. */
function prepareStatements(db: Db) {
    return {
    findEmail: db
      .select({
        id: emails.id,
        projectId: emails.projectId,
        status: emails.status,
        toAddress: emails.toAddress,
        fromAddress: emails.fromAddress,
        subject: emails.subject,
        messageId: emails.messageId,
        templateId: emails.templateId,
        templateName: emails.templateName,
      })
      .from(emails)
      .where(eq(emails.id, sql.placeholder('emailId')))
      .prepare(),
    // Walks the email's own events (its primary key prefix): a few hundred at most, the caps see to that.
    countEventsOfType: db
      .select({ count: sql<number>`count(*)` })
      .from(emailEvents)
      .where(and(eq(emailEvents.emailId, sql.placeholder('emailId')), eq(emailEvents.type, sql.placeholder('type'))))
      .prepare(),
    appendEvent: db
      .insert(emailEvents)
      .values({ id: sql.placeholder('id'), emailId: sql.placeholder('emailId'), type: sql.placeholder('type'), time: sql.placeholder('time'), data: sql.placeholder('data') })
      .prepare(),
    setStatusFrom: db
      .update(emails)
      .set({ status: setPlaceholder('to'), updatedAt: setPlaceholder('updatedAt') })
      .where(and(eq(emails.id, sql.placeholder('emailId')), eq(emails.status, sql.placeholder('from'))))
      .prepare(),
  };
}
