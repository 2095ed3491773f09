import type { Worker } from 'node:worker_threads';
import type { Logger } from '../lib/logger.js';
import { findWorkerScript, spawnWorker } from '../lib/worker-threads.js';
import { logCommitFailure, type Outcome } from './batch-transaction.js';
import { walSizeLimitBytes, writerThreadLockWaitMs, type Sqlite } from './client.js';
import { needsWalSync } from './wal-sync.js';
import { fromWire, fromWireError, type ProcedureCall, type WriterMessage, type WriterRequest } from './writer-protocol.js';

/**
 * A second connection to the database file, on a worker thread, that runs batches of write procedures
 * (write-procedures.ts) for the group commit (write-queue.ts). Accepting an email is mostly SQLite work
 * (a dozen B-tree inserts): done here it costs the event loop one message per batch instead.
 *
 * The write queue never commits on the main connection while a batch is out here, so the two connections
 * never wait on each other's write lock. Started on the first procedure call; until its connection is
 * open, and for good if the thread fails once up, procedures run on the main connection instead. A
 * thread that could not start is started again by a later call (restartDelayMs on).
 */
export interface WriterThread {
  /** True while batches can be sent: the thread is up and has not failed or been closed. */
  readonly ready: boolean;
  /** Starts the thread unless it is started (idempotent, returns at once). */
  start(): void;
  /**
   * Runs the calls in one transaction on the thread's connection, each in its own savepoint; resolves
   * when the transaction is over (the write lock is free again). Durable at once unless the thread
   * commits without the fsync (`needsWalSync` of the main connection): then the caller syncs the WAL first.
   */
  commit(calls: ProcedureCall[]): Promise<Outcome[]>;
  /** Closes the thread's connection; call before the main connection closes. */
  close(): Promise<void>;
}

/**
 * The thread's garbage is short-lived (one batch's arguments); V8's default young generation grows to
 * tens of MB under load and stays resident: capped, the appliance with 100,000 emails queued keeps
 * ~20 MB less RSS (docs/benchmarks.md).
 */
const writerYoungGenerationMb = 4;

/** How long a stop waits for the thread to close its connection before it is terminated. */
const writerCloseWaitMs = 2_000;

/**
 * After a thread that could not start, the wait before a call starts another (one attempt per write
 * otherwise), doubled at each failed start up to the maximum: a cause that does not pass (a broken
 * install) costs a thread's start and a log line every few minutes, not every second.
 */
const restartDelayMs = 1_000;
const maxRestartDelayMs = 300_000;

/** Undefined for a memory database (another connection would see another database) or without the script. */
export function createWriterThread(sqlite: Sqlite, log: Logger): WriterThread | undefined {
  if (sqlite.memory || sqlite.name === '' || sqlite.name === ':memory:') return undefined;
  const script = findWorkerScript(import.meta.url, 'writer-worker.js', 'writer-worker.ts');
  if (!script) {
    log.warn('writer thread script not found; accepting mail on the main connection');
    return undefined;
  }
  const workerData = {
    path: sqlite.name,
    // Where the main connection syncs the WAL after its commits (wal-sync.ts), the write queue does so
    // for this thread's commits too, before anyone hears of them: the thread commits with NORMAL (no
    // fsync in COMMIT), one fdatasync covers both connections' frames, and the thread is free for the
    // next batch as soon as its transaction is over.
    synchronous: needsWalSync(sqlite) || Number(sqlite.pragma('synchronous', { simple: true })) < 2 ? 'NORMAL' : 'FULL',
    walSizeLimit: walSizeLimitBytes,
    lockWaitMs: writerThreadLockWaitMs,
  };
  const pending = new Map<number, { resolve: (outcomes: Outcome[]) => void; reject: (error: Error) => void }>();
  let worker: Worker | undefined;
  let ready = false;
  let stopped = false;
  let nextId = 0;
  let closing: Promise<void> | undefined;

  /** A failed start is not tried again until this is over. */
  let restartHeld = false;
  let failedStarts = 0;

  /**
   * A thread that never came up failed to start: its first write after boot came at an open-file limit
   * (EMFILE under a burst of connections) or short of memory, a moment that passes. Given up for good,
   * every write ran on the event loop's connection until a restart; the delivery threads are replaced
   * the same way (delivery/message-builder.ts). It held no batch: nothing is lost.
   */
  const failedToStart = (failed: Worker, error: Error): boolean => {
    if (ready || stopped || worker !== failed) return false;
    worker = undefined;
    restartHeld = true;
    setTimeout(() => (restartHeld = false), Math.min(maxRestartDelayMs, restartDelayMs * 2 ** failedStarts++)).unref();
    log.warn('writer thread could not start; writing on the main connection, starting it again at a later write', { error });
    return true;
  };

  const fail = (error: Error) => {
    if (stopped) return;
    stopped = true;
    ready = false;
    // The batch in flight may or may not have committed: its callers get an error (a 500), as after a crash.
    log.error('writer thread failed; writing on the main connection from now on', { error, inFlight: pending.size });
    for (const waiter of pending.values()) waiter.reject(error);
    pending.clear();
  };

  const onMessage = (message: WriterMessage) => {
    if (message === 'ready') ready = !stopped;
    if (typeof message !== 'object') return;
    const waiter = pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id);
    if (message.commitError) logCommitFailure(log, fromWireError(message.commitError), { size: message.outcomes.length, where: 'writer thread' });
    waiter.resolve(message.outcomes.map(fromWire));
  };

  return {
    get ready() {
      return ready;
    },
    start() {
      if (worker || stopped || restartHeld) return;
      const started = spawnWorker(script, { workerData, resourceLimits: { maxYoungGenerationSizeMb: writerYoungGenerationMb } });
      worker = started;
      started.unref();
      started.on('message', onMessage);
      // 'error' and 'exit' both report one failed start; the second finds the thread forgotten already.
      const lost = (error: Error) => {
        if (worker === started && !failedToStart(started, error)) fail(error);
      };
      started.on('error', lost);
      started.on('exit', (code) => lost(new Error(`writer thread exited (code ${code})`)));
    },
    commit(calls) {
      if (!ready || !worker) return Promise.reject(new Error('the writer thread is not running'));
      const id = nextId++;
      const sent = worker;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        try {
          sent.postMessage({ id, calls } satisfies WriterRequest);
        } catch (error) {
          // Arguments that cannot be cloned: this batch fails, the thread carries on.
          pending.delete(id);
          reject(error);
        }
      });
    },
    close() {
      closing ??= (async () => {
        const running = worker;
        if (!running || stopped) {
          stopped = true;
          await running?.terminate();
          return;
        }
        stopped = true;
        ready = false;
        // Held by the stop: with every listener closed, the unref'd thread let the process end mid-wait
        // (a stop after the database file was removed). Bounded: its close of a vanished file may not answer.
        running.ref();
        await new Promise<void>((resolve) => {
          const bound = setTimeout(resolve, writerCloseWaitMs);
          const done = () => {
            clearTimeout(bound);
            resolve();
          };
          running.on('message', (message: WriterMessage) => message === 'closed' && done());
          running.once('exit', done);
          running.postMessage('close');
        });
        await running.terminate();
      })();
      return closing;
    },
  };
}
