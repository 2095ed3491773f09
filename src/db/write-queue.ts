import { checkpointGateOf, type Sqlite } from './client.js';
import type { Logger } from '../lib/logger.js';
import { createWalSyncer, withoutCommitSync, type WalSyncer } from './wal-sync.js';

/**
 * Group commit. With synchronous=FULL every COMMIT is an fsync (~0.26 ms here), so one transaction per
 * request caps the API at a few thousand writes per second. Writes that arrive in the same event-loop
 * turn are run together in one BEGIN IMMEDIATE … COMMIT; each one in its own savepoint, so a failing
 * write rolls back alone. No promise resolves before the COMMIT that made its write durable.
 *
 * With synchronous=FULL on a WAL file the COMMIT itself skips the fsync and the WAL is fdatasync'ed from
 * the thread pool before the batch's promises resolve (see wal-sync.ts): same durability for every
 * acknowledged write, but the event loop is not blocked on the disk, and the next batch can build
 * while the previous one syncs.
 */
export interface WriteQueue {
  run<T>(work: () => T): Promise<T>;
  /** Resolves once every write submitted so far is committed. */
  drain(): Promise<void>;
  /** Drains, then releases the WAL descriptor; the queue takes no writes after this. */
  close(): Promise<void>;
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
  let syncing = 0;
  let closed = false;
  const syncer = createWalSyncer(sqlite);
  const checkpointGate = checkpointGateOf(sqlite);

  const wakeIdle = () => {
    if (pending.length > 0 || scheduled || syncing > 0) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const wake of waiters) wake();
  };

  const flush = () => {
    scheduled = false;
    if (holdForCheckpoint()) return;
    const batch = pending.splice(0, maxBatch);
    if (pending.length > 0) schedule();
    if (!sqlite.open) {
      // The database closed under this queue (e.g. a delivery that outlived the shutdown drain): refuse
      // the write; its job keeps its lease and runs again at the next start.
      settle(batch, batch.map(() => ({ ok: false as const, error: closedError() })));
      wakeIdle();
      return;
    }
    if (!syncer) {
      settle(batch, commitBatch(sqlite, batch, log));
    } else {
      const outcomes = withoutCommitSync(sqlite, () => commitBatch(sqlite, batch, log));
      syncing++;
      syncer.sync().then(
        () => settle(batch, outcomes),
        (error) => {
          log.error('write batch committed but the WAL sync failed', { error, size: batch.length });
          settle(batch, batch.map(() => ({ ok: false as const, error })));
        },
      ).finally(() => {
        syncing--;
        wakeIdle();
      });
    }
    wakeIdle();
  };

  /**
   * The checkpointer asks for a few ms without commits once the WAL is large (client.ts): acknowledge,
   * then flush when it reopens (or after a bound), without blocking the event loop meanwhile.
   */
  const holdForCheckpoint = (): boolean => {
    if (!checkpointGate || Atomics.compareExchange(checkpointGate, 0, 1, 2) !== 1) return false;
    Atomics.notify(checkpointGate, 0);
    scheduled = true;
    let resumed = false;
    const resume = () => {
      if (resumed) return;
      resumed = true;
      clearTimeout(bound);
      Atomics.compareExchange(checkpointGate, 0, 2, 0);
      flush();
    };
    // The bound also keeps the event loop alive: a pending waitAsync alone does not.
    const bound = setTimeout(resume, checkpointHoldMaxMs);
    const reopened = (Atomics as unknown as AtomicsWaitAsync).waitAsync(checkpointGate, 0, 2, checkpointHoldMaxMs);
    if (reopened.async) void reopened.value.then(resume);
    else resume();
    return true;
  };

  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(flush);
  };

  return {
    run<T>(work: () => T): Promise<T> {
      if (closed) return Promise.reject(closedError());
      return new Promise<T>((resolve, reject) => {
        pending.push({ work, resolve: resolve as (value: unknown) => void, reject });
        schedule();
      });
    },
    drain() {
      if (pending.length === 0 && !scheduled && syncing === 0) return Promise.resolve();
      return new Promise<void>((resolve) => idleWaiters.push(resolve));
    },
    async close() {
      await this.drain();
      closed = true;
      syncer?.close();
    },
  };
}

/** Atomics.waitAsync (Node ≥ 16) is in TypeScript's ES2024 lib; this project compiles against ES2023. */
interface AtomicsWaitAsync {
  waitAsync(array: Int32Array, index: number, value: number, timeoutMs: number): { async: false; value: string } | { async: true; value: Promise<string> };
}

/** A checkpointer that does not reopen within this long is not waited for any longer. */
const checkpointHoldMaxMs = 100;

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

const closedError = () => new Error('the database is closed (shutting down)');

/**
 * One transaction for the batch, each write in its own savepoint (a throw undoes only that write).
 * The savepoint statements are prepared once per connection: wrapping every write in a fresh
 * better-sqlite3 transaction function cost ~20 µs of the ~100 µs an accepted email takes.
 */
const savepointStatements = new WeakMap<Sqlite, { begin: Statement; savepoint: Statement; release: Statement; rollbackTo: Statement; commit: Statement; rollback: Statement }>();

/** The only use of these statements: run without parameters. */
type Statement = { run(): unknown };

function statementsFor(sqlite: Sqlite) {
  let statements = savepointStatements.get(sqlite);
  if (!statements) {
    statements = {
      begin: sqlite.prepare('BEGIN IMMEDIATE'),
      savepoint: sqlite.prepare('SAVEPOINT postino_write'),
      release: sqlite.prepare('RELEASE postino_write'),
      rollbackTo: sqlite.prepare('ROLLBACK TO postino_write'),
      commit: sqlite.prepare('COMMIT'),
      rollback: sqlite.prepare('ROLLBACK'),
    };
    savepointStatements.set(sqlite, statements);
  }
  return statements;
}

function commitBatch(sqlite: Sqlite, batch: Pending[], log: Logger): Outcome[] {
  const s = statementsFor(sqlite);
  const outcomes: Outcome[] = [];
  try {
    s.begin.run();
    for (const item of batch) outcomes.push(runInSavepoint(s, item.work));
    s.commit.run();
  } catch (error) {
    if (sqlite.inTransaction) s.rollback.run();
    log.error('write batch failed to commit', { error, size: batch.length });
    return batch.map(() => ({ ok: false, error }));
  }
  return outcomes;
}

function runInSavepoint(s: ReturnType<typeof statementsFor>, work: () => unknown): Outcome {
  s.savepoint.run();
  try {
    const value = work();
    if (value instanceof Promise) throw new TypeError('a queued write must be synchronous (it runs inside a transaction)');
    s.release.run();
    return { ok: true, value };
  } catch (error) {
    s.rollbackTo.run();
    s.release.run();
    return { ok: false, error };
  }
}

function settle(batch: Pending[], outcomes: Outcome[]): void {
  batch.forEach((item, i) => {
    const outcome = outcomes[i];
    if (outcome.ok) item.resolve(outcome.value);
    else item.reject(outcome.error);
  });
}
