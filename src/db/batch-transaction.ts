import { isStorageBusy, isStorageFull } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { Sqlite } from './client.js';
import { cachedStatement } from './statement-cache.js';

/**
 * One transaction for a batch of writes, each in its own savepoint, so a write that throws is undone
 * alone and the others commit. Used by the group commit on the main connection (write-queue.ts) and by
 * the writer thread (writer-worker.ts).
 */
export type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/** Prepared once per connection: a fresh better-sqlite3 transaction wrapper per write cost ~20 µs of the ~100 µs an accepted email takes. */
function statementsFor(sqlite: Sqlite) {
  const run = (sql: string) => () => cachedStatement(sqlite, sql).run();
  return {
    inTransaction: () => sqlite.inTransaction,
    begin: run('BEGIN IMMEDIATE'),
    savepoint: run('SAVEPOINT postino_write'),
    release: run('RELEASE postino_write'),
    rollbackTo: run('ROLLBACK TO postino_write'),
    commit: run('COMMIT'),
    rollback: run('ROLLBACK'),
  };
}

/**
 * Connections whose last BEGIN met a write lock held by another process (an operator's sqlite3 session
 * in a transaction), with the busy_timeout to restore. Only the first batch that meets the lock waits
 * for it: while it is known held, each batch waiting busy_timeout in turn answered a queue of sends one
 * wait after another (20 sends: 15 s), and on the main connection kept the event loop blocked half the
 * time. They fail at once instead (storage-busy), until one begins again.
 */
const lockKnownHeld = new WeakMap<Sqlite, number>();

/** BEGIN IMMEDIATE, without waiting for a lock known to be held elsewhere (above). One map lookup per batch. */
function beginWrite(sqlite: Sqlite, s: ReturnType<typeof statementsFor>): void {
  try {
    s.begin();
  } catch (error) {
    if (isStorageBusy(error) && !lockKnownHeld.has(sqlite)) {
      lockKnownHeld.set(sqlite, Number(sqlite.pragma('busy_timeout', { simple: true })));
      sqlite.pragma('busy_timeout = 0');
    }
    throw error;
  }
  const lockWaitMs = lockKnownHeld.get(sqlite);
  if (lockWaitMs === undefined) return;
  lockKnownHeld.delete(sqlite);
  sqlite.pragma(`busy_timeout = ${lockWaitMs}`);
}

/**
 * BEGIN IMMEDIATE, every write in a savepoint, COMMIT. When the transaction itself fails (BEGIN or
 * COMMIT: disk full, I/O error), or SQLite rolls it back under a write, every write fails with that
 * error and `onCommitFailure` hears it.
 */
export function commitBatch(sqlite: Sqlite, writes: (() => unknown)[], onCommitFailure: (error: unknown) => void): Outcome[] {
  const s = statementsFor(sqlite);
  const outcomes: Outcome[] = [];
  try {
    beginWrite(sqlite, s);
    for (const work of writes) outcomes.push(runInSavepoint(s, work));
    s.commit();
  } catch (error) {
    if (sqlite.inTransaction) s.rollback();
    onCommitFailure(error);
    return writes.map(() => ({ ok: false, error }));
  }
  return outcomes;
}

/**
 * commitBatch for writes that may run twice (write procedures: functions of their connection and their
 * arguments only, write-procedures.ts). The batch runs first without savepoints: a savepoint per write
 * costs each write two statements and a copy of every page it touches that the batch already changed.
 * Writes rarely fail, and when one does, the transaction is rolled back and the batch runs again through
 * commitBatch, where the failing write is undone alone.
 */
export function commitReplayableBatch(sqlite: Sqlite, writes: (() => unknown)[], onCommitFailure: (error: unknown) => void): Outcome[] {
  const s = statementsFor(sqlite);
  const values: unknown[] = [];
  try {
    beginWrite(sqlite, s);
  } catch (error) {
    onCommitFailure(error);
    return writes.map(() => ({ ok: false, error }));
  }
  try {
    for (const work of writes) values.push(runSynchronously(work));
  } catch {
    if (sqlite.inTransaction) s.rollback();
    return commitBatch(sqlite, writes, onCommitFailure);
  }
  try {
    s.commit();
  } catch (error) {
    if (sqlite.inTransaction) s.rollback();
    onCommitFailure(error);
    return writes.map(() => ({ ok: false, error }));
  }
  return values.map((value) => ({ ok: true, value }));
}

function runSynchronously(work: () => unknown): unknown {
  const value = work();
  if (value instanceof Promise) throw new TypeError('a queued write must be synchronous (it runs inside a transaction)');
  return value;
}

function runInSavepoint(s: ReturnType<typeof statementsFor>, work: () => unknown): Outcome {
  s.savepoint();
  try {
    const value = runSynchronously(work);
    s.release();
    return { ok: true, value };
  } catch (error) {
    // SQLITE_FULL, SQLITE_IOERR and a few others roll the whole transaction back by themselves: the
    // writes before this one are gone too, so the batch fails with this error (not with the "no such
    // savepoint" a ROLLBACK TO would raise now).
    if (!s.inTransaction()) throw error;
    s.rollbackTo();
    s.release();
    return { ok: false, error };
  }
}

/**
 * A batch that did not commit. Out of space, and a write lock held by another process, are reported
 * once per episode by storage-health.ts, and every write of the batch answers storage-full (storage-busy)
 * to its caller; a stack trace per refused batch would flood the log while the disk stays full.
 */
export function logCommitFailure(log: Logger, error: unknown, details: { size: number; where?: string }): void {
  if (isStorageFull(error)) log.debug('write batch refused: storage full', details);
  else if (isStorageBusy(error)) log.debug('write batch refused: another process holds the write lock', details);
  else log.error('write batch failed to commit', { error, ...details });
}
