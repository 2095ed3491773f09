import type { WriteQueue } from '../db/write-queue.js';

/**
 * Outcome writes are held for a few milliseconds and handed to the group-commit queue in one event-loop
 * turn, so they share one transaction (one fsync) instead of one each. Each still runs in its own
 * savepoint. Durability is unchanged: a crash before the commit means the message is sent once more,
 * the same "at most one extra copy per message in flight" as a crash during the SMTP transaction.
 */
export function createOutcomeBatcher(writes: WriteQueue, holdMs = 4) {
  let pending: { work: () => void; resolve: () => void; reject: (error: unknown) => void }[] = [];
  let timer: NodeJS.Timeout | undefined;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    const batch = pending;
    pending = [];
    for (const item of batch) writes.run(item.work).then(item.resolve, item.reject);
  };
  const record = (work: () => void): Promise<void> =>
    new Promise((resolve, reject) => {
      pending.push({ work, resolve, reject });
      if (pending.length >= 200) flush();
      else timer ??= setTimeout(flush, holdMs);
    });
  return { record, flush };
}
