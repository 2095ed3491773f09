import type { Sqlite } from '../db/client.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { leadingWithinBytes } from '../lib/batches.js';
import { idLowerBound } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';

const batchSize = 500;
/** Bytes one write deletes at most, as for captured messages (delivery/capture-retention.ts): a received email holds its whole raw message. */
const batchBytes = 8 * 1024 * 1024;

/**
 * Received emails older than `smtp.received_retention` are deleted in small batches on the writer thread;
 * hourly from the scheduler. 0 (the default) keeps them: they are the project's mail.
 */
export async function pruneReceivedEmails(writes: WritesWithProcedures, log: Logger, now: Date, retentionMs: number): Promise<number> {
  if (retentionMs <= 0) return 0;
  const beforeMs = now.getTime() - retentionMs;
  let pruned = 0;
  for (let count = -1; count !== 0; pruned += count) {
    count = await writes.call('inbound.prune-received', { beforeMs, limit: batchSize, maxBytes: batchBytes });
  }
  if (pruned > 0) log.info('received emails pruned', { count: pruned, olderThan: new Date(beforeMs).toISOString() });
  return pruned;
}

/**
 * Write procedure (write-procedures.ts): deletes received emails from before `beforeMs`, oldest first (ids
 * are time-ordered: a range of the primary key), at most `limit` and `maxBytes` together, but one at least.
 */
export function createPruneReceivedProcedure(sqlite: Sqlite): (args: { beforeMs: number; limit: number; maxBytes: number }) => number {
  const oldest = sqlite.prepare(`select id, length(raw) + octet_length(text) + coalesce(octet_length(html), 0) as bytes from received_emails where id < ? order by id limit ?`);
  const deleteIds = sqlite.prepare(`delete from received_emails where id in (select value from json_each(?))`);
  return ({ beforeMs, limit, maxBytes }) => {
    const ids = leadingWithinBytes(oldest.all(idLowerBound(beforeMs), limit) as { id: string; bytes: number }[], maxBytes);
    return ids.length === 0 ? 0 : deleteIds.run(JSON.stringify(ids)).changes;
  };
}
