import { AppError, databaseClosedCode, StorageStopped } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { ProcedureArgs, ProcedureName, ProcedureResult, ProcedureRunner } from '../write-procedures.js';
import { commitBatch, logCommitFailure, type Outcome } from './batch-transaction.js';
import { checkpointGateOf, recordStorageFailure, storageFailureOf, type Sqlite } from './client.js';
import { readCachesStale } from './read-cache.js';
import { DatabaseDetached, type StorageHealth } from './storage-health.js';
import { createWalSyncer, withoutCommitSync } from './wal-sync.js';
import type { ProcedureCall } from './writer-protocol.js';
import type { WriterThread } from './writer-thread.js';

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
 *
 * Write procedures (write-procedures.ts: accepting email) go to the writer thread when there is one:
 * their batch commits on its connection while the event loop goes on. The queue commits on one
 * connection at a time, so neither ever waits for the other's write lock.
 */
export interface WriteQueue {
  run<T>(work: () => T): Promise<T>;
  /** A write procedure: on the writer thread once it is up, otherwise on this connection like run(). */
  call<N extends ProcedureName>(name: N, args: ProcedureArgs<N>): Promise<ProcedureResult<N>>;
  /** Resolves once every write submitted so far is committed. */
  drain(): Promise<void>;
  /**
   * Resolves once everything committed so far, on any connection to the file, is on stable storage. A
   * row read back may come from a commit whose WAL sync is still running (the writer thread's commits
   * are visible before they are synced): whoever answers from it waits for this first.
   */
  synced(): Promise<void>;
  /** Drains, then releases the WAL descriptor; the queue takes no writes after this. */
  close(): Promise<void>;
}

/**
 * What a service needs in order to write: its transaction joins the group commit. A synchronous
 * transaction of its own on the event loop would fsync there, and wait there (SQLite's busy handler
 * sleeps) while the writer thread holds the write lock during a burst of sends.
 */
export type Writes = Pick<WriteQueue, 'run'>;
/** The same, with write procedures (write-procedures.ts) for work worth moving to the writer thread. */
export type WritesWithProcedures = Pick<WriteQueue, 'run' | 'call'>;

interface Pending {
  work: () => unknown;
  /** Set for a write procedure, which may run on the writer thread instead of `work`. */
  call?: ProcedureCall;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

export interface WriteQueueOptions {
  /** Runs write procedures on this connection (write-procedures.ts bindProcedures). */
  procedures?: ProcedureRunner;
  writer?: WriterThread;
  maxBatch?: number;
  /** Shown every batch's outcomes: whether writes still find room (storage-health.ts). */
  storage?: StorageHealth;
}

export function createWriteQueue(sqlite: Sqlite, log: Logger, options: WriteQueueOptions = {}): WriteQueue {
  const { procedures, writer, maxBatch = 500, storage } = options;
  let pending: Pending[] = [];
  let scheduled = false;
  let idleWaiters: (() => void)[] = [];
  /** Batches committed (for the writer thread: sent) whose WAL sync is not over yet. */
  let syncing = 0;
  /**
   * Rows may be visible without being durable beyond what `syncing` counts, so synced() must sync: until
   * this process's first WAL sync (frames a killed process committed but never synced), and for good once
   * a writer-thread batch failed (it may have committed before the thread stopped). After a failed sync
   * it refuses instead (`storageHasFailed`).
   */
  let walSynced = false;
  let alwaysSync = false;
  /** The storage failure (below) was reported to /healthz and the log. */
  let failureReported = false;
  /** Batches sent to the writer thread whose transaction is not over: it holds the write lock meanwhile. */
  let uncommittedOnThread = 0;
  /** Pending writes that are not procedure calls: they can only run on this connection. */
  let pendingHere = 0;
  let closed = false;
  const syncer = createWalSyncer(sqlite);
  const checkpointGate = checkpointGateOf(sqlite);

  const settle = (batch: Pending[], outcomes: Outcome[]) => {
    storage?.observe(outcomes);
    settleEach(batch, outcomes);
  };

  const wakeIdle = () => {
    if (pending.length > 0 || scheduled || syncing > 0 || uncommittedOnThread > 0) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const wake of waiters) wake();
  };

  const flush = () => {
    scheduled = false;
    if (storageHasFailed()) {
      const refused = takeBatch();
      settle(refused, refused.map(() => ({ ok: false as const, error: storageStopped() })));
      if (pending.length > 0) schedule();
      wakeIdle();
      return;
    }
    if (uncommittedOnThread > 0) {
      flushBehindThread();
      return;
    }
    if (holdForCheckpoint()) return;
    const batch = takeBatch();
    if (pending.length > 0) schedule();
    if (!sqlite.open) {
      // The database closed under this queue (e.g. a delivery that outlived the shutdown drain): refuse
      // the write; its job keeps its lease and runs again at the next start.
      settle(batch, batch.map(() => ({ ok: false as const, error: closedError() })));
      wakeIdle();
      return;
    }
    const forThread = writer?.ready ? batch.filter((item) => item.call) : [];
    const here = forThread.length > 0 ? batch.filter((item) => !item.call) : batch;
    if (here.length > 0) commitHere(here);
    if (forThread.length > 0) commitOnThread(forThread);
    wakeIdle();
  };

  /**
   * The thread's transaction holds the write lock, so a commit here would wait for it on the event loop.
   * More procedure calls can follow it (the thread takes batches in order); but when writes for this
   * connection wait, or the checkpointer asks for a pause, send nothing more: the thread finishes, then
   * they go first, so a stream of sends never starves them. The thread's commit reschedules.
   */
  const flushBehindThread = () => {
    const checkpointAsked = checkpointGate !== undefined && Atomics.load(checkpointGate, 0) === 1;
    if (pendingHere > 0 || checkpointAsked || !writer?.ready) return;
    commitOnThread(takeBatch());
    if (pending.length > 0) schedule();
  };

  const takeBatch = () => {
    const batch = pending.splice(0, maxBatch);
    for (const item of batch) if (!item.call) pendingHere--;
    return batch;
  };

  const commitHere = (batch: Pending[]) => {
    const commit = () => {
      const outcomes = commitBatch(sqlite, batch.map((item) => item.work), (error) => logCommitFailure(log, error, { size: batch.length }));
      readCachesStale(sqlite);
      return outcomes;
    };
    if (!syncer) {
      settle(batch, commit());
      return;
    }
    const outcomes = withoutCommitSync(sqlite, commit);
    syncing++;
    syncer.sync().then(
      () => {
        if (storageHasFailed()) return settle(batch, batch.map(() => ({ ok: false as const, error: storageStopped() })));
        walSynced = true;
        settle(batch, outcomes);
      },
      (error) => {
        const refusal = walSyncFailed(error as Error);
        settle(batch, batch.map(() => ({ ok: false as const, error: refusal })));
      },
    ).finally(() => {
      syncing--;
      wakeIdle();
    });
  };

  const commitOnThread = (batch: Pending[]) => {
    uncommittedOnThread++;
    syncing++;
    let freed = false;
    const lockFree = () => {
      if (freed) return;
      freed = true;
      uncommittedOnThread--;
      if (pending.length > 0) schedule();
    };
    writer!.commit(batch.map((item) => item.call!)).then(
      (outcomes) => {
        // The thread's transaction is over; its commit skipped the fsync where this connection's do
        // (writer-thread.ts): the next batch can go while this one syncs.
        lockFree();
        if (!syncer) return outcomes;
        return syncer.sync().then(
          () => {
            if (storageHasFailed()) throw storageStopped();
            walSynced = true;
            return outcomes;
          },
          (error: unknown) => {
            throw walSyncFailed(error as Error);
          },
        );
      },
    ).then(
      (outcomes) => settle(batch, outcomes),
      (error) => {
        // Its sync failed, or the thread stopped with the batch in flight: committed or not, unsynced.
        alwaysSync = true;
        settle(batch, batch.map(() => ({ ok: false as const, error })));
      },
    ).finally(() => {
      lockFree(); // also when the batch never reached the thread
      syncing--;
      wakeIdle();
    });
  };

  /**
   * Whether a sync of the file failed: this queue's WAL sync, or the checkpointer's of the database file
   * (client.ts). Linux marks the pages whose writeback failed clean, so a later fdatasync that succeeds
   * does not cover them, and SQLite's recovery stops reading the WAL at the first bad frame: nothing
   * committed after it would survive a power loss either. So from then on the queue acknowledges nothing
   * (as PostgreSQL stops after a failed fsync) until the appliance is restarted.
   */
  const storageHasFailed = (): boolean => {
    const failure = storageFailureOf(sqlite);
    if (failure && !failureReported) {
      failureReported = true;
      storage?.markFailed();
      if (failure instanceof DatabaseDetached) log.error(`${failure.message}: nothing more is acknowledged until the appliance is restarted`);
      else log.error('a sync of the database failed: nothing more is acknowledged until the appliance is restarted; check the disk', { error: failure });
    }
    return failure !== undefined;
  };

  /** What a write refused after a failure is answered: said for the failure recorded. */
  const storageStopped = () => storageFailed(storageFailureOf(sqlite));

  /** Records a failed WAL sync; returns what the writes it covered are answered. */
  const walSyncFailed = (error: Error): AppError => {
    recordStorageFailure(sqlite, error);
    storageHasFailed();
    return syncFailed(error);
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

  const enqueue = (work: () => unknown, call?: ProcedureCall) => {
    if (closed) return Promise.reject(closedError());
    return new Promise<unknown>((resolve, reject) => {
      pending.push({ work, call, resolve, reject });
      if (!call) pendingHere++;
      schedule();
    });
  };

  return {
    run<T>(work: () => T): Promise<T> {
      return enqueue(work) as Promise<T>;
    },
    call(name, args) {
      if (!procedures) return Promise.reject(new Error('this write queue has no write procedures'));
      writer?.start();
      const call = { name, args };
      return enqueue(() => procedures(name, args), call) as Promise<ProcedureResult<typeof name>>;
    },
    synced() {
      if (storageHasFailed()) return Promise.reject(storageStopped());
      if (!syncer || !sqlite.open) return Promise.resolve();
      // Every batch counts in `syncing` from its commit until its sync is over (a writer-thread batch from
      // being sent, before its rows can be seen), and other commits on the file sync inside COMMIT: with
      // none in flight, everything committed is already on stable storage and there is nothing to wait for.
      if (syncing === 0 && walSynced && !alwaysSync) return Promise.resolve();
      // A sync started here may be the one a writer-thread batch's frames depend on (its own sync then
      // follows it): its failure stops the queue like any other.
      return syncer.sync().then(
        () => {
          walSynced = true;
        },
        (error: unknown) => {
          throw walSyncFailed(error as Error);
        },
      );
    },
    drain() {
      if (pending.length === 0 && !scheduled && syncing === 0 && uncommittedOnThread === 0) return Promise.resolve();
      return new Promise<void>((resolve) => idleWaiters.push(resolve));
    },
    async close() {
      await this.drain();
      closed = true;
      syncer?.close();
      await writer?.close();
    },
  };
}

/** Atomics.waitAsync (Node ≥ 16) is in TypeScript's ES2024 lib; this project compiles against ES2023. */
interface AtomicsWaitAsync {
  waitAsync(array: Int32Array, index: number, value: number, timeoutMs: number): { async: false; value: string } | { async: true; value: Promise<string> };
}

/** A checkpointer that does not reopen within this long is not waited for any longer. */
const checkpointHoldMaxMs = 100;

const closedError = () => Object.assign(new Error('the database is closed (shutting down)'), { code: databaseClosedCode });

/**
 * The writes a failed sync covered: committed, but perhaps not on the disk. Not storage-full (507 says
 * "retry once there is room"), whatever the errno: the queue has stopped until a restart.
 */
const syncFailed = (cause: Error) =>
  new AppError(
    'internal-error',
    `The disk failed to sync the database log (${(cause as NodeJS.ErrnoException).code ?? cause.message}), so this write may not have been stored, and the appliance stores nothing more until it is restarted. Check the disk, then restart it.`,
  );

const storageFailed = (failure: Error | undefined) =>
  new StorageStopped(
    failure instanceof DatabaseDetached
      ? `The appliance's database file was removed or replaced while it ran, so it stores nothing more until it is restarted: nothing was stored. Its log names a copy of what the database held.`
      : 'The disk failed to sync the database log, so the appliance stores nothing more until it is restarted: nothing was stored. Check the disk, then restart it.',
  );

function settleEach(batch: Pending[], outcomes: Outcome[]): void {
  batch.forEach((item, i) => {
    const outcome = outcomes[i];
    if (outcome.ok) item.resolve(outcome.value);
    else item.reject(outcome.error);
  });
}
