import type { Sqlite } from '../db/client.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { leadingWithinBytes } from '../lib/batches.js';
import { idLowerBound } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import { pruneInBatches } from '../delivery/capture-retention.js';

/**
 * What deleting received email `e` may free, for the byte budget of a write: its message's bytes and
 * bodies (freed with the last email that names it; counted for each, a budget errs on the safe side).
 */
export function receivedStoredBytesSql(e: string): string {
  return `(select length(m.raw) + octet_length(m.text) + coalesce(octet_length(m.html), 0) from received_messages m where m.id = ${e}.message_id)`;
}

/**
 * Received emails older than `smtp.received_retention` are deleted in small batches on the writer thread
 * (a received email holds its whole raw message); hourly from the scheduler. 0 (the default) keeps them:
 * they are the project's mail.
 */
export function pruneReceivedEmails(writes: WritesWithProcedures, log: Logger, now: Date, retentionMs: number): Promise<number> {
  return pruneInBatches(writes, log, 'inbound.prune-received', 'received emails', now, retentionMs);
}

/**
 * Write procedure (write-procedures.ts): deletes received emails from before `beforeMs`, oldest first (ids
 * are time-ordered: a range of the primary key), at most `limit` and `maxBytes` together, but one at least.
 */
export function createPruneReceivedProcedure(sqlite: Sqlite): (args: { beforeMs: number; limit: number; maxBytes: number }) => number {
  const oldest = sqlite.prepare(`select e.id, ${receivedStoredBytesSql('e')} as bytes from received_emails e where e.id < ? order by e.id limit ?`);
  const deleteIds = sqlite.prepare(`delete from received_emails where id in (select value from json_each(?))`);
  return ({ beforeMs, limit, maxBytes }) => {
    const ids = leadingWithinBytes(oldest.all(idLowerBound(beforeMs), limit) as { id: string; bytes: number }[], maxBytes);
    return ids.length === 0 ? 0 : deleteIds.run(JSON.stringify(ids)).changes;
  };
}
