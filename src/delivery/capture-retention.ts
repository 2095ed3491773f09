import type { Sqlite } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import type { Logger } from '../lib/logger.js';

const batchSize = 500;

/**
 * Capture mode keeps every message it would have sent (a few kB to a few MB each): a sandbox left running
 * would grow its database without end. Messages older than `delivery.capture_retention` are deleted in
 * small batches through the write queue (sends are never held up for long); the email records, their
 * events and statuses stay. Runs hourly from the scheduler.
 */
export async function pruneCapturedMessages(sqlite: Sqlite, writes: WriteQueue, log: Logger, now: Date, retentionMs: number): Promise<number> {
  if (retentionMs <= 0) return 0;
  const before = now.getTime() - retentionMs;
  const deleteBatch = sqlite.prepare(
    `delete from captured_messages where email_id in (select email_id from captured_messages where captured_at < ? order by captured_at limit ?)`,
  );
  let pruned = 0;
  for (;;) {
    const count = await writes.run(() => deleteBatch.run(before, batchSize).changes);
    pruned += count;
    if (count < batchSize) break;
  }
  if (pruned > 0) log.info('captured messages pruned', { count: pruned, olderThan: new Date(before).toISOString() });
  return pruned;
}
