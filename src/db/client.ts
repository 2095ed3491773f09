import Database from 'better-sqlite3';
import { drizzle, type BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import { accessSync, chmodSync, constants, existsSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import { isStorageBusy, isStorageFull } from '../lib/errors.js';
import { makeDirectory } from '../lib/make-directory.js';
import { readCachesStale } from './read-cache.js';
import * as schema from './schema/index.js';

export type Db = BetterSQLite3Database<typeof schema>;
export type Sqlite = Database.Database;

export interface OpenDatabaseOptions {
  path: string;
  synchronous: 'FULL' | 'NORMAL';
  /**
   * Another process beside the appliance (the operator CLI): no checkpointer thread, and no TRUNCATE
   * checkpoint at close, which holds the write lock while it waits (busy_timeout, 5 s) for every reader
   * (a backup, a long search) and so stalled every send for as long. SQLite's own close still
   * checkpoints when it is the last connection.
   */
  guest?: boolean;
  /**
   * Tests only: the checkpointer's passes fail with this SQLite error code, as on a disk that fails (which
   * cannot be made here); `exit`: its thread ends, as one that could not start would.
   */
  checkpointFaultForTests?: string;
  /** The checkpointer thread ended by itself: commits on this connection checkpoint from then on. */
  onCheckpointerLost?: (error: Error) => void;
}

export interface DatabaseHandle {
  sqlite: Sqlite;
  db: Db;
  close(): void;
}

/**
 * The database holds DKIM private keys, webhook secrets and the URL-signing secret: readable by its owner
 * only, whatever the umask. SQLite gives the -wal and -shm files the database file's mode.
 */
function restrictToOwner(path: string): void {
  // Bits are only taken away: a file the operator made read-only must not become writable.
  for (const file of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(file)) chmodSync(file, statSync(file).mode & 0o600);
}

/**
 * Throws an EACCES error (after `cleanup`) when this user may not write `path`. SQLite falls back to a
 * read-only connection on such a file, and better-sqlite3's `readonly` only tells what was asked for.
 */
export function assertWritable(path: string, cleanup: () => void): void {
  try {
    accessSync(path, constants.W_OK);
  } catch (error) {
    cleanup();
    const code = (error as NodeJS.ErrnoException).code ?? 'EACCES';
    // Root included: a file system mounted (or remounted after errors) read-only is no matter of users.
    const why = code === 'EROFS' ? 'is on a read-only file system' : 'is not writable by this user';
    throw Object.assign(new Error(`${path} ${why}`), { code });
  }
}

/**
 * Opens the one SQLite file with the pragmas the appliance relies on (DESIGN convention 6):
 * WAL so readers never block the writer, synchronous=FULL so an answered `queued` survives a power loss,
 * busy_timeout so a second process (the operator CLI) waits instead of failing, and foreign keys on.
 */
export function openDatabase(options: OpenDatabaseOptions): DatabaseHandle {
  if (options.path !== ':memory:') makeDirectory(dirname(options.path));
  const sqlite = new Database(options.path);
  // SQLite opens a file it may not write read-only without a word; the first write would fail instead.
  if (options.path !== ':memory:') assertWritable(options.path, () => sqlite.close());
  sqlite.pragma('journal_mode = WAL');
  if (options.path !== ':memory:') restrictToOwner(options.path);
  sqlite.pragma(`synchronous = ${options.synchronous}`);
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('foreign_keys = ON');
  // Each write of a batch runs in a savepoint, and pages an earlier write of the batch changed go to the
  // statement journal, a temp file once past 64 KiB (as on the writer thread, writer-worker.ts). At the
  // open-file limit (EMFILE under a burst of connections) that file could not be opened: the batch
  // failed, a delivered email's outcome with it, and the email was sent again when its lease ran out.
  // The CLI's connection (a guest) commits no batches and keeps SQLite's default for its one-off work.
  if (!options.guest) sqlite.pragma('temp_store = MEMORY');
  // An automatic checkpoint runs inside the COMMIT that crosses the threshold, on the event loop:
  // copying thousands of pages and two fsyncs stall every request for tens of ms (the send p99). A
  // worker thread checkpoints from its own connection instead; the memory database has no WAL.
  // Should the thread end (it could not start: EMFILE, out of memory), nothing would checkpoint and the
  // WAL would grow until a restart: SQLite's own checkpoints inside this connection's commits take over.
  const checkpointerLost = (error: Error) => {
    if (sqlite.open) sqlite.pragma('wal_autocheckpoint = 4000');
    options.onCheckpointerLost?.(error);
  };
  const checkpointer =
    options.path === ':memory:' || options.guest
      ? undefined
      : startCheckpointer(options.path, { failed: (error) => recordStorageFailure(sqlite, error), lost: checkpointerLost }, options.checkpointFaultForTests);
  if (checkpointer) checkpointGates.set(sqlite, checkpointer.gate);
  sqlite.pragma(`wal_autocheckpoint = ${checkpointer ? 0 : 4000}`);
  // The writer restarts the WAL; this caps the file it leaves behind after a burst.
  sqlite.pragma(`journal_size_limit = ${walSizeLimitBytes}`);
  const db = drizzle(sqlite, { schema });
  return {
    sqlite,
    db,
    close: () => {
      if (!sqlite.open) return;
      checkpointer?.stop();
      // After a failed sync the WAL is the only copy of what the database file may have lost: no
      // checkpoint, and no close (SQLite checkpoints and deletes the WAL when its last connection
      // closes); the next start recovers from the WAL as after a crash.
      if (storageFailures.has(sqlite)) return;
      try {
        if (!options.guest) truncateWalIfUnread(sqlite);
      } catch (error) {
        // Only a tidy-up: a WAL left behind (a full disk cannot truncate it) is checkpointed by the next
        // start. Thrown, it turned an ordinary stop into exit 1 and "shutdown failed".
        if (!isStorageFull(error) && !isStorageBusy(error)) throw error;
      } finally {
        sqlite.close();
      }
    },
  };
}

/**
 * Empties the WAL at close, unless a reader of another connection (a backup, an operator's sqlite3 in a
 * transaction) still needs it: a TRUNCATE checkpoint waits for such readers busy_timeout (5 s), and that
 * wait came on top of the rest of the stop, past the 10 s it has (README; docker stop kills at 10 s).
 * Everything is committed and synced by now: a WAL left behind is checkpointed by the next start, or by
 * the last connection to close.
 */
function truncateWalIfUnread(sqlite: Sqlite): void {
  sqlite.pragma('busy_timeout = 0');
  sqlite.pragma('wal_checkpoint(TRUNCATE)');
}

const checkpointIdleMs = 100;
const checkpointBusyMs = 5;
/** 4,096 frames: ~16 MB of WAL before the write queue is asked for a pause (a few ms). */
const checkpointPauseFrames = 4096;
const checkpointPauseWaitMs = 50;
const checkpointGates = new WeakMap<Sqlite, Int32Array>();
const storageFailures = new WeakMap<Sqlite, Error>();

/**
 * A failed sync of the file behind this connection (the WAL's, by the write queue, or the database
 * file's, by the checkpointer), the first one; undefined while there was none. Linux reports a failed
 * writeback once and marks the pages clean, so nothing written since can be trusted to be on the disk.
 */
export function storageFailureOf(sqlite: Sqlite): Error | undefined {
  return storageFailures.get(sqlite);
}

export function recordStorageFailure(sqlite: Sqlite, error: Error): void {
  if (!storageFailures.has(sqlite)) storageFailures.set(sqlite, error);
}

/**
 * The checkpointer's request for a pause in commits: 0 open, 1 asked, 2 the writer holds its commits
 * until it is 0 again. Undefined without a checkpointer (memory database).
 */
export function checkpointGateOf(sqlite: Sqlite): Int32Array | undefined {
  return checkpointGates.get(sqlite);
}

/** After the WAL restarts from its beginning, the file is cut back to this size (SQLite journal_size_limit). */
export const walSizeLimitBytes = 64 * 1024 * 1024;

// Plain CommonJS evaluated in the worker (no separate file to bundle); better-sqlite3 by absolute path.
// On 'stop' it closes its connection and flips `closed` so the main thread, waiting on it, closes last.
// The WAL restarts from its beginning only when a writer starts while every frame is checkpointed. Under
// a steady stream of commits a checkpoint running beside the writer never finds it so (commits land
// while it copies), and the file grew by all that was written (~50 MB/s at 6,000 sends/s). So: while
// the WAL grows, checkpoint every few ms (each pass copies a few ms of frames); once it holds
// `pauseFrames`, ask the write queue (write-queue.ts) to hold its next commit for the moment it takes
// to copy the rest: the commit after that restarts the log. Every 100 ms when nothing is written.
const checkpointerSource = `
const { workerData, parentPort } = require('node:worker_threads');
const Database = require(workerData.driver);
const closed = new Int32Array(workerData.closed);
const db = new Database(workerData.path, { fileMustExist: true });
db.pragma('busy_timeout = 5000');
db.pragma('wal_autocheckpoint = 0');
db.pragma('journal_size_limit = ' + workerData.walSizeLimit);
const gate = new Int32Array(workerData.gate);
const checkpoint = () => {
  if (workerData.faultForTests) throw Object.assign(new Error('disk I/O error'), { code: workerData.faultForTests });
  const [result] = db.pragma('wal_checkpoint(PASSIVE)');
  return result;
};
let timer;
let lastLog = 0;
const pass = () => {
  if (workerData.faultForTests === 'exit') process.exit(3);
  let writing = false;
  try {
    // log and checkpointed describe the WAL as this pass found it: commits made meanwhile are not in them.
    const result = checkpoint();
    writing = result.log !== lastLog;
    lastLog = result.log;
    if (result.log >= workerData.pauseFrames) {
      // Ask the write queue for a moment without commits (1 → it answers 2), copy the rest, reopen.
      Atomics.store(gate, 0, 1);
      Atomics.wait(gate, 0, 1, workerData.pauseWaitMs);
      try {
        checkpoint();
      } finally {
        Atomics.store(gate, 0, 0);
        Atomics.notify(gate, 0);
      }
    }
  } catch (error) {
    // Busy or closing: the next pass retries. An I/O error is final: a partial pass moves the WAL's
    // checkpointed mark without syncing the database file, so a failed fsync may have lost pages copied
    // by earlier passes, and the next pass, whose fsync succeeds, would let the WAL restart over them.
    if (/^SQLITE_(IOERR|CORRUPT)/.test(String(error && error.code))) {
      parentPort.postMessage({ failed: String(error && error.code) + ': ' + String(error && error.message) });
      return;
    }
  }
  timer = setTimeout(pass, writing ? workerData.busyMs : workerData.idleMs);
};
timer = setTimeout(pass, workerData.idleMs);
parentPort.on('message', () => {
  clearTimeout(timer);
  try { db.close(); } finally { Atomics.store(closed, 0, 1); Atomics.notify(closed, 0); }
  process.exit(0);
});
`;

/**
 * PASSIVE checkpoints never wait for readers or writers, so the writer on the main thread is never
 * held up; the WAL restarts from its beginning once a checkpoint has copied everything.
 */
function startCheckpointer(
  path: string,
  on: { failed: (error: Error) => void; lost: (error: Error) => void },
  faultForTests?: string,
): { gate: Int32Array; stop(): void } {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const closed = new SharedArrayBuffer(4);
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(checkpointerSource, {
    eval: true,
    workerData: {
      path,
      driver,
      idleMs: checkpointIdleMs,
      busyMs: checkpointBusyMs,
      pauseFrames: checkpointPauseFrames,
      pauseWaitMs: checkpointPauseWaitMs,
      walSizeLimit: walSizeLimitBytes,
      closed,
      gate: gate.buffer,
      faultForTests,
    },
  });
  worker.on('message', (message: { failed?: string }) => {
    if (message.failed) on.failed(new Error(`the checkpoint of the database file failed (${message.failed})`));
  });
  // After the listener, which refs the worker's port: the checkpointer must never keep a process alive.
  worker.unref();
  let alive = true;
  let stopping = false;
  const ended = (error: Error) => {
    if (!alive) return;
    alive = false;
    if (!stopping) on.lost(error);
  };
  worker.on('error', ended);
  worker.on('exit', (code) => ended(new Error(`the checkpointer thread exited (code ${code})`)));
  return {
    gate,
    /**
     * Synchronous on purpose (close() is): waits, bounded, until the worker's connection is closed, so
     * the main connection closes last and removes the -wal/-shm files before close() returns.
     */
    stop() {
      stopping = true;
      if (!alive) return;
      worker.postMessage('stop');
      Atomics.wait(new Int32Array(closed), 0, 0, 5000);
    },
  };
}

/**
 * How long the appliance's own connections wait for a write lock another process holds (an operator's
 * `sqlite3 data/postino.sqlite` session left inside BEGIN IMMEDIATE, a CLI command's write). SQLite's
 * busy handler sleeps in the calling thread: on the main connection that is the event loop, so each
 * attempt at 5 s stalled every request, /healthz included (a send answered 500 after 19 s). The writes
 * then fail with SQLITE_BUSY, answered 503 storage-busy (http/errors.ts), and /healthz reports
 * `"storage": "busy"` (storage-health.ts). The writer thread waits longer: its wait blocks only itself,
 * and rides out a CLI command's short writes without a refusal.
 */
export const mainConnectionLockWaitMs = 100;
export const writerThreadLockWaitMs = 1_000;

/**
 * Called once boot (migrations, the default project) is over: from then on a write lock held elsewhere
 * costs the event loop at most `mainConnectionLockWaitMs` per attempt. Boot itself keeps the long wait,
 * so a start beside a CLI command's write waits for it instead of failing.
 */
export function limitLockWaitOnEventLoop(sqlite: Sqlite): void {
  sqlite.pragma(`busy_timeout = ${mainConnectionLockWaitMs}`);
}

/**
 * Runs `work` in a write transaction that takes the write lock up front (BEGIN IMMEDIATE), so two
 * writers never deadlock upgrading a read lock. Nested calls become savepoints. `work` must be
 * synchronous: an `await` inside would commit early. The connection's read caches read again after it.
 */
export function writeTransaction<T>(sqlite: Sqlite, work: () => T): T {
  if (sqlite.inTransaction) return sqlite.transaction(work)();
  try {
    return sqlite.transaction(work).immediate();
  } finally {
    readCachesStale(sqlite);
  }
}
