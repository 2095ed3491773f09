import type { Sqlite } from './client.js';
import type { Logger } from '../lib/logger.js';

/**
 * Group commit. With synchronous=FULL every COMMIT is an fsync (~0.26 ms here), so one transaction per
 * request caps the API at a few thousand writes per second. Writes that arrive in the same event-loop
 * turn are run together in one BEGIN IMMEDIATE … COMMIT; each one in its own savepoint, so a failing
 * write rolls back alone. No promise resolves before the COMMIT that made its write durable.
 */
export interface WriteQueue {
  run<T>(work: () => T): Promise<T>;
  /** Resolves once every write submitted so far is committed. */
  drain(): Promise<void>;
}

interface Pending {
  work: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

export function createWriteQueue(sqlite: Sqlite, log: Logger, maxBatch = 500): WriteQueue {
  let pending: Pending[] = [];
  let scheduled = false;
  let idleWaiters: (() => void)[] = [];

  const flush = () => {
    scheduled = false;
    const batch = pending.splice(0, maxBatch);
    if (pending.length > 0) schedule();
    commitBatch(sqlite, batch, log);
    if (pending.length === 0 && !scheduled) {
      const waiters = idleWaiters;
      idleWaiters = [];
      for (const wake of waiters) wake();
    }
  };

  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(flush);
  };

  return {
    run<T>(work: () => T): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        pending.push({ work, resolve: resolve as (value: unknown) => void, reject });
        schedule();
      });
    },
    drain() {
      if (pending.length === 0 && !scheduled) return Promise.resolve();
      return new Promise<void>((resolve) => idleWaiters.push(resolve));
    },
  };
}

const wqStats: number[][] = [];
if (process.env.WQ_STATS) process.on('exit', () => {
  const t = wqStats.map((x) => x[1]).sort((a, b) => a - b);
  const sizes = wqStats.map((x) => x[0]);
  const q = (p: number) => t[Math.floor(p * (t.length - 1))];
  console.error('batches', t.length, 'avg size', sizes.reduce((a, b) => a + b, 0) / sizes.length, 'ms p50', q(0.5), 'p90', q(0.9), 'p99', q(0.99), 'max', t[t.length - 1], 'total ms', t.reduce((a, b) => a + b, 0));
  const slow = wqStats.filter((x) => x[1] > 10); console.error('slow>10ms', slow.length, JSON.stringify(slow.slice(0, 20)));
});
function commitBatch(sqlite: Sqlite, batch: Pending[], log: Logger): void {
  const t0 = performance.now();
  try { commitBatch0(sqlite, batch, log); } finally { if (process.env.WQ_STATS) wqStats.push([batch.length, performance.now() - t0]); }
}
function commitBatch0(sqlite: Sqlite, batch: Pending[], log: Logger): void {
  const outcomes: ({ ok: true; value: unknown } | { ok: false; error: unknown })[] = [];
  try {
    sqlite
      .transaction(() => {
        for (const item of batch) {
          (globalThis as any).__wqBodyStart ??= 0;
          try {
            // A nested better-sqlite3 transaction is a savepoint: a throw undoes only this write.
            outcomes.push({ ok: true, value: sqlite.transaction(item.work)() });
          } catch (error) {
            outcomes.push({ ok: false, error });
          }
        }
      })
      .immediate();
  } catch (error) {
    log.error('write batch failed to commit', { error, size: batch.length });
    for (const item of batch) item.reject(error);
    return;
  }
  batch.forEach((item, i) => {
    const outcome = outcomes[i];
    if (outcome.ok) item.resolve(outcome.value);
    else item.reject(outcome.error);
  });
}
