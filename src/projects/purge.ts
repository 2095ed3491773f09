import type { Sqlite } from '../db/client.js';

/**
 * The tables whose rows of a deleted project can be many, largest first. Deleting an email cascades to
 * its events, job, attachments and captured message, and updates the text index; a webhook event, to its
 * deliveries and attempts. Each table has an index that starts with `project_id`.
 */
const purgedTables = ['emails', 'webhook_events', 'idempotency_keys', 'suppressions'] as const;

/**
 * Write procedure (write-procedures.ts): deletes up to `limit` rows of a project from the first of those
 * tables that still has some, and answers how many went (0: nothing left). Called until 0 before the
 * project row itself goes, so no single transaction cascades over a whole project: one that did held the
 * event loop 3.8 s for a project with 100,000 emails.
 */
export function createPurgeProjectRowsProcedure(sqlite: Sqlite): (args: { projectId: string; limit: number }) => number {
  const deletes = purgedTables.map((table) =>
    sqlite.prepare(`delete from ${table} where rowid in (select rowid from ${table} where project_id = ? limit ?)`),
  );
  return ({ projectId, limit }) => {
    for (const batch of deletes) {
      const deleted = batch.run(projectId, limit).changes;
      if (deleted > 0) return deleted;
    }
    return 0;
  };
}
