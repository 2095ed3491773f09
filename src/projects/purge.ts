import type { Sqlite } from '../db/client.js';
import { emailStoredBytesSql } from '../emails/stored-bytes.js';
import { receivedStoredBytesSql } from '../inbound/retention.js';
import { leadingWithinBytes } from '../lib/batches.js';

/**
 * The tables whose rows of a deleted project can be many, after its emails, largest first. Deleting an
 * email cascades to its events, job, attachments and captured message, and updates the text index; a
 * webhook event, to its deliveries and attempts. Each table has an index that starts with `project_id`.
 */
const purgedTables = ['webhook_events', 'idempotency_keys', 'suppressions', 'contacts', 'contact_properties', 'inbound_routes', 'messenger_drafts'] as const;

/**
 * Write procedure (write-procedures.ts): deletes up to `limit` rows of a project from the first of those
 * tables that still has some, and answers how many went (0: nothing left). Called until 0 before the
 * project row itself goes, so no single transaction cascades over a whole project: one that did held the
 * event loop 3.8 s for a project with 100,000 emails. Emails go first, at most `maxBytes` of them, then
 * received emails the same way.
 */
export function createPurgeProjectRowsProcedure(sqlite: Sqlite): (args: { projectId: string; limit: number; maxBytes: number }) => number {
  const purgeEmails = createPurgeByBytesStep(sqlite, 'emails', emailStoredBytesSql('t'));
  const purgeReceived = createPurgeByBytesStep(sqlite, 'received_emails', receivedStoredBytesSql('t'));
  const deletes = purgedTables.map((table) =>
    sqlite.prepare(`delete from ${table} where rowid in (select rowid from ${table} where project_id = ? limit ?)`),
  );
  return ({ projectId, limit, maxBytes }) => {
    const emails = purgeEmails(projectId, limit, maxBytes);
    if (emails > 0) return emails;
    const received = purgeReceived(projectId, limit, maxBytes);
    if (received > 0) return received;
    for (const batch of deletes) {
      const deleted = batch.run(projectId, limit).changes;
      if (deleted > 0) return deleted;
    }
    return 0;
  };
}

/**
 * Deletes up to `limit` rows of the project's `table` whose stored bytes (`bytesOf` its row `t`) add up
 * to at most `maxBytes`, but one in any case. SQLite reads every overflow page of a deleted value to free
 * it: 400 emails with a 2.5 MB attachment each were one write of 623 ms, which every send of every other
 * project waited out. Emails (bodies, attachments, captured message) and received emails (whole raw
 * messages) are purged this way.
 */
function createPurgeByBytesStep(sqlite: Sqlite, table: string, bytesOf: string): (projectId: string, limit: number, maxBytes: number) => number {
  const next = sqlite.prepare(`select t.rowid as id, ${bytesOf} as bytes from ${table} t where t.project_id = ? limit ?`);
  const deleteRowids = sqlite.prepare(`delete from ${table} where rowid in (select value from json_each(?))`);
  return (projectId, limit, maxBytes) => {
    const rowids = leadingWithinBytes(next.all(projectId, limit) as { id: number; bytes: number }[], maxBytes);
    return rowids.length === 0 ? 0 : deleteRowids.run(JSON.stringify(rowids)).changes;
  };
}
