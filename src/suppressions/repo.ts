import { and, desc, eq, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { suppressions } from '../db/schema/emails.js';
import { withAsciiDomain } from '../emails/address.js';
import { cutToLength } from '../lib/text.js';

/** Synchronous queries over `suppressions`; addresses are stored lowercased so lookups are exact. */
export type SuppressionRow = typeof suppressions.$inferSelect;

/**
 * The one key an address has on the list: trimmed, lowercased, its domain in A-labels (RFC 5891).
 * SMTP submission sends to, and a bounce suppresses, `anna@xn--bcher-kva.example` for a client's
 * RCPT TO:<anna@bücher.example>; a lookup or removal by the form the client wrote must find that entry.
 */
export function normalizeAddress(address: string): string {
  return withAsciiDomain(address.trim()).toLowerCase();
}

/** The detail a complaint's suppression records: the report's feedback type and who sent it, when known. */
export function complaintDetail(feedbackType: string | null | undefined, userAgent: string | null | undefined): string {
  return cutToLength(`${feedbackType ?? 'abuse'} report${userAgent ? ` from ${userAgent}` : ''}`, 1000);
}

/** Idempotent: an address already suppressed keeps its first reason and time. */
export function addSuppression(db: Db, row: { projectId: string; emailAddress: string; reason: string; detail?: string | null; createdAt: number }): void {
  db.insert(suppressions)
    .values({ ...row, emailAddress: normalizeAddress(row.emailAddress), detail: row.detail ?? null })
    .onConflictDoNothing()
    .run();
}

export function removeSuppression(db: Db, projectId: string, address: string): boolean {
  const result = db
    .delete(suppressions)
    .where(and(eq(suppressions.projectId, projectId), eq(suppressions.emailAddress, normalizeAddress(address))))
    .run();
  return result.changes > 0;
}

export function findSuppression(db: Db, projectId: string, address: string): SuppressionRow | undefined {
  return db
    .select()
    .from(suppressions)
    .where(and(eq(suppressions.projectId, projectId), eq(suppressions.emailAddress, normalizeAddress(address))))
    .get();
}

/** Newest first, keyset-paged: `before` is the last row of the previous page. */
export function listSuppressions(db: Db, projectId: string, limit: number, before?: { createdAt: number; emailAddress: string }): SuppressionRow[] {
  return listSuppressionsQuery(db, projectId, limit, before).all();
}

/**
 * The page's query. The position is one row-value comparison, which SQLite serves as a range of the
 * (project_id, created_at, email_address) index: written as `created_at < ? or (created_at = ? and …)`
 * it read the project's rows from the newest down to the page, ~12 ms per page 100,000 rows deep.
 */
export function listSuppressionsQuery(db: Db, projectId: string, limit: number, before?: { createdAt: number; emailAddress: string }) {
  const after = before ? sql`(${suppressions.createdAt}, ${suppressions.emailAddress}) < (${before.createdAt}, ${before.emailAddress})` : undefined;
  return db
    .select()
    .from(suppressions)
    .where(and(eq(suppressions.projectId, projectId), after))
    .orderBy(desc(suppressions.createdAt), desc(suppressions.emailAddress))
    .limit(limit);
}
