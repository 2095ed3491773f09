import { and, asc, desc, eq, getTableColumns, gt, inArray, lt, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { cutToLength } from '../lib/text.js';
import { inboundRoutes, receivedEmails, receivedMessages } from '../db/schema/index.js';

export type RouteRow = typeof inboundRoutes.$inferSelect;
export type NewReceivedEmailRow = typeof receivedEmails.$inferInsert;
export type NewReceivedMessageRow = typeof receivedMessages.$inferInsert;

/** The list's columns: everything but the bodies, headers and raw message. */
const summaryColumns = {
  id: receivedEmails.id,
  destination: receivedEmails.destination,
  subject: receivedEmails.subject,
  addresses: receivedEmails.addresses,
  spam: receivedEmails.spam,
  inboundRouteId: receivedEmails.inboundRouteId,
  receivedAt: receivedEmails.receivedAt,
};
export type ReceivedSummaryRow = Pick<typeof receivedEmails.$inferSelect, keyof typeof summaryColumns>;

/** Characters of its text a received email's record carries at most; its raw message has all of it. */
export const recordTextMax = 1024 * 1024;

/** Bytes of UTF-8 that hold `recordTextMax` UTF-16 units and one more, whatever the characters (3 bytes a unit at most). */
const recordTextBytes = 3 * (recordTextMax + 1) + 4;

/**
 * A record's columns: the email's, the first bytes of its text, and whether it has html ('' when it does:
 * its preview link serves it). Not the raw message, up to smtp.max_message_bytes, which only its signed
 * link serves; nor the whole text: a 24 MB text read and answered whole took ~80 MB of heap per request,
 * and 20 requests at once past the heap's limit. Bytes, as a blob: SQLite's text functions stop at a
 * U+0000, which a message may hold.
 */
const { messageId: _messageId, ...emailColumns } = getTableColumns(receivedEmails);
const recordColumns = {
  ...emailColumns,
  // The message's, stored once (migration 0035); a message stored before has its emails' own.
  headers: sql<string>`coalesce(${receivedMessages.headers}, ${receivedEmails.headers})`,
  attachments: sql<string>`coalesce(${receivedMessages.attachments}, ${receivedEmails.attachments})`,
  textStart: sql<Buffer | null>`substr(cast(${receivedMessages.text} as blob), 1, ${recordTextBytes})`,
  textBytes: sql<number>`octet_length(${receivedMessages.text})`,
  html: sql<string | null>`case when ${receivedMessages.html} is null then null else '' end`,
};

/** The record's text: all of it, or its first `recordTextMax` units (never half a character) and that it was cut. */
function recordText({ textStart, textBytes }: { textStart: Buffer | null; textBytes: number }): { text: string; textTruncated: boolean } {
  // SQLite's substr of an empty blob is NULL.
  const text = textStart?.toString('utf8') ?? '';
  const readBytes = textStart?.length ?? 0;
  // Read whole and within the limit; else cut (a text not read whole has more units than the limit).
  if (textBytes <= readBytes && text.length <= recordTextMax) return { text, textTruncated: false };
  return { text: cutToLength(text, recordTextMax), textTruncated: true };
}
/** A received email's raw message and what its trace headers say (trace-headers.ts). */
export type ReceivedRawRow = Pick<typeof receivedEmails.$inferSelect, 'destination' | 'envelope' | 'auth' | 'receivedAt'> & { raw: Buffer };
export type ReceivedRecordRow = Omit<typeof receivedEmails.$inferSelect, 'messageId'> & { text: string; html: string | null };

/** Synchronous drizzle queries for inbound routes and received emails (DESIGN convention 6). */
export function createInboundRepo(db: Db) {
  const routesAt = db
    .select()
    .from(inboundRoutes)
    .where(and(eq(inboundRoutes.domain, sql.placeholder('domain')), inArray(inboundRoutes.localPart, [sql.placeholder('localPart'), sql.placeholder('baseLocalPart'), '*'])))
    .prepare();
  /** The message received email `emailId` names. */
  const messageOf = (emailId: string) => sql`${receivedMessages.id} = (select ${receivedEmails.messageId} from ${receivedEmails} where ${receivedEmails.id} = ${emailId})`;
  return {
    listRoutes: (projectId: string): RouteRow[] => db.select().from(inboundRoutes).where(eq(inboundRoutes.projectId, projectId)).orderBy(asc(inboundRoutes.id)).all(),
    findRoute: (projectId: string, id: string): RouteRow | undefined =>
      db
        .select()
        .from(inboundRoutes)
        .where(and(eq(inboundRoutes.projectId, projectId), eq(inboundRoutes.id, id)))
        .get(),
    findRouteAt: (domain: string, localPart: string): RouteRow | undefined =>
      db
        .select()
        .from(inboundRoutes)
        .where(and(eq(inboundRoutes.domain, domain), eq(inboundRoutes.localPart, localPart)))
        .get(),
    /** The routes that may take `localPart@domain`: exact, `base` (before a `+` tag) and catch-all. */
    routesFor: (domain: string, localPart: string, baseLocalPart: string): RouteRow[] => routesAt.all({ domain, localPart, baseLocalPart }),
    insertRoute: (row: RouteRow) => db.insert(inboundRoutes).values(row).run(),
    updateRoute: (id: string, patch: Partial<Pick<RouteRow, 'responseMode' | 'isEnabled' | 'updatedAt'>>) => db.update(inboundRoutes).set(patch).where(eq(inboundRoutes.id, id)).run(),
    deleteRoute: (projectId: string, id: string): boolean =>
      db
        .delete(inboundRoutes)
        .where(and(eq(inboundRoutes.projectId, projectId), eq(inboundRoutes.id, id)))
        .run().changes > 0,

    insertMessage: (row: NewReceivedMessageRow) => db.insert(receivedMessages).values(row).run(),
    insertReceived: (row: NewReceivedEmailRow) => db.insert(receivedEmails).values(row).run(),
    findReceived(projectId: string, id: string): (ReceivedRecordRow & { textTruncated: boolean }) | undefined {
      const row = db
        .select(recordColumns)
        .from(receivedEmails)
        .innerJoin(receivedMessages, eq(receivedMessages.id, receivedEmails.messageId))
        .where(and(eq(receivedEmails.projectId, projectId), eq(receivedEmails.id, id)))
        .get();
      if (!row) return undefined;
      const { textStart, textBytes, headers, attachments, ...rest } = row;
      return { ...rest, headers: JSON.parse(headers), attachments: JSON.parse(attachments), ...recordText({ textStart, textBytes }) };
    },
    /** What a signed link serves, the raw message or the html; the token already names the email, of any project. */
    findReceivedRaw: (id: string): ReceivedRawRow | undefined =>
      db
        .select({ raw: receivedMessages.raw, destination: receivedEmails.destination, envelope: receivedEmails.envelope, auth: receivedEmails.auth, receivedAt: receivedEmails.receivedAt })
        .from(receivedEmails)
        .innerJoin(receivedMessages, eq(receivedMessages.id, receivedEmails.messageId))
        .where(eq(receivedEmails.id, id))
        .get(),
    findReceivedHtml: (id: string): string | null | undefined => db.select({ html: receivedMessages.html }).from(receivedMessages).where(messageOf(id)).get()?.html,
    /** Newest first, older than `before`; ids are time-ordered (index project_id, id). */
    receivedBefore: (projectId: string, before: string | undefined, limit: number): ReceivedSummaryRow[] =>
      db
        .select(summaryColumns)
        .from(receivedEmails)
        .where(and(eq(receivedEmails.projectId, projectId), before ? lt(receivedEmails.id, before) : undefined))
        .orderBy(desc(receivedEmails.id))
        .limit(limit)
        .all(),
    /** The `limit` emails just newer than `after`, oldest first (the previous page, read upwards). */
    receivedAfter: (projectId: string, after: string, limit: number): ReceivedSummaryRow[] =>
      db
        .select(summaryColumns)
        .from(receivedEmails)
        .where(and(eq(receivedEmails.projectId, projectId), gt(receivedEmails.id, after)))
        .orderBy(asc(receivedEmails.id))
        .limit(limit)
        .all(),
  };
}

export type InboundRepo = ReturnType<typeof createInboundRepo>;
