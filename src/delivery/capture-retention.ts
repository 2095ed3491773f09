import type { Sqlite } from '../db/client.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { leadingWithinBytes } from '../lib/batches.js';
import type { Logger } from '../lib/logger.js';

const batchSize = 500;
/**
 * Bytes of messages one write deletes at most (a larger message goes alone). SQLite reads every overflow
 * page of a deleted blob to free it (~1 ms per MB here): 400 messages of 5 MB held the writer thread,
 * and every send queued behind it, for 1.9 s; 8 MB is ~10 ms, what a webhook-retention write costs.
 */
const batchBytes = 8 * 1024 * 1024;

/**
 * Capture mode keeps every message it would have sent (a few kB to a few MB each): a sandbox left running
 * would grow its database without end. Messages older than `delivery.capture_retention` are deleted in
 * small batches on the writer thread (sends are never held up for long, the event loop not at all); the
 * email records, their events and statuses stay. Runs hourly from the scheduler.
 */
export function pruneCapturedMessages(writes: WritesWithProcedures, log: Logger, now: Date, retentionMs: number): Promise<number> {
  return pruneInBatches(writes, log, 'delivery.prune-captured', 'captured messages', now, retentionMs);
}

/**
 * Deletes, by a write procedure taking `{beforeMs, limit, maxBytes}`, what is older than `retentionMs`
 * (0: nothing), 500 rows and 8 MB a write, until a write finds nothing: one cut short by its bytes says
 * nothing about what is left. Captured messages and received emails (inbound/retention.ts) go this way.
 */
export async function pruneInBatches(writes: WritesWithProcedures, log: Logger, procedure: 'delivery.prune-captured' | 'inbound.prune-received', what: string, now: Date, retentionMs: number): Promise<number> {
  if (retentionMs <= 0) return 0;
  const beforeMs = now.getTime() - retentionMs;
  let pruned = 0;
  for (let count = -1; count !== 0; pruned += count) {
    count = await writes.call(procedure, { beforeMs, limit: batchSize, maxBytes: batchBytes });
  }
  if (pruned > 0) log.info(`${what} pruned`, { count: pruned, olderThan: new Date(beforeMs).toISOString() });
  return pruned;
}

/**
 * Write procedure (write-procedures.ts): deletes messages captured before `beforeMs`, oldest first, at
 * most `limit` of them and `maxBytes` of their size together, but always one when there is one.
 */
export function createPruneCapturedProcedure(sqlite: Sqlite): (args: { beforeMs: number; limit: number; maxBytes: number }) => number {
  // length() of a blob comes from its row header: the message itself is not read to be measured.
  const oldest = sqlite.prepare(`select email_id as id, length(raw) as bytes from captured_messages where captured_at < ? order by captured_at limit ?`);
  const deleteIds = sqlite.prepare(`delete from captured_messages where email_id in (select value from json_each(?))`);
  return ({ beforeMs, limit, maxBytes }) => {
    const ids = leadingWithinBytes(oldest.all(beforeMs, limit) as { id: string; bytes: number }[], maxBytes);
    return ids.length === 0 ? 0 : deleteIds.run(JSON.stringify(ids)).changes;
  };
}
