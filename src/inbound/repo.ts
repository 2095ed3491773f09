import { and, asc, desc, eq, getTableColumns, gt, inArray, lt, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { inboundRoutes, receivedEmails } from '../db/schema/index.js';

export type RouteRow = typeof inboundRoutes.$inferSelect;
export type ReceivedEmailRow = typeof receivedEmails.$inferSelect;
export type NewReceivedEmailRow = typeof receivedEmails.$inferInsert;

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
export type ReceivedSummaryRow = Pick<ReceivedEmailRow, keyof typeof summaryColumns>;

const { raw: _raw, ...recordColumns } = getTableColumns(receivedEmails);
export type ReceivedRecordRow = Omit<ReceivedEmailRow, 'raw'>;

/** Synchronous drizzle queries for inbound routes and received emails (DESIGN convention 6). */
export function createInboundRepo(db: Db) {
  const routesAt = db
    .select()
    .from(inboundRoutes)
    .where(and(eq(inboundRoutes.domain, sql.placeholder('domain')), inArray(inboundRoutes.localPart, [sql.placeholder('localPart'), sql.placeholder('baseLocalPart'), '*'])))
    .prepare();
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

    insertReceived: (row: NewReceivedEmailRow) => db.insert(receivedEmails).values(row).run(),
    /** The record without its raw message (up to smtp.max_message_bytes), which only its signed link serves. */
    findReceived: (projectId: string, id: string): ReceivedRecordRow | undefined =>
      db
        .select(recordColumns)
        .from(receivedEmails)
        .where(and(eq(receivedEmails.projectId, projectId), eq(receivedEmails.id, id)))
        .get(),
    /** What a signed link serves, the raw message or the html; the token already names the email, of any project. */
    findReceivedRaw: (id: string): Buffer | undefined => db.select({ raw: receivedEmails.raw }).from(receivedEmails).where(eq(receivedEmails.id, id)).get()?.raw,
    findReceivedHtml: (id: string): string | null | undefined => db.select({ html: receivedEmails.html }).from(receivedEmails).where(eq(receivedEmails.id, id)).get()?.html,
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
