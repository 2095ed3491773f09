import type { Sqlite } from '../db/client.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { writeInBatches } from '../lib/batches.js';
import type { Logger } from '../lib/logger.js';

const batchSize = 500;

/**
 * Capture mode keeps every message it would have sent (a few kB to a few MB each): a sandbox left running
 * would grow its database without end. Messages older than `delivery.capture_retention` are deleted in
 * small batches on the writer thread (sends are never held up for long, the event loop not at all); the
 * email records, their events and statuses stay. Runs hourly from the scheduler.
 */
export async function pruneCapturedMessages(writes: WritesWithProcedures, log: Logger, now: Date, retentionMs: number): Promise<number> {
  if (retentionMs <= 0) return 0;
  const beforeMs = now.getTime() - retentionMs;
  const pruned = await writeInBatches(batchSize, () => writes.call('delivery.prune-captured', { beforeMs, limit: batchSize }));
  if (pruned > 0) log.info('captured messages pruned', { count: pruned, olderThan: new Date(beforeMs).toISOString() });
  return pruned;
}

/** Write procedure (write-procedures.ts): deletes up to `limit` messages captured before `beforeMs`, oldest first. */
export function createPruneCapturedProcedure(sqlite: Sqlite): (args: { beforeMs: number; limit: number }) => number {
  const deleteBatch = sqlite.prepare(
    `delete from captured_messages where email_id in (select email_id from captured_messages where captured_at < ? order by captured_at limit ?)`,
  );
  return ({ beforeMs, limit }) => deleteBatch.run(beforeMs, limit).changes;
}
