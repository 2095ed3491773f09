import Database from 'better-sqlite3';
import { drizzle, type BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import * as schema from './schema/index.js';

export type Db = BetterSQLite3Database<typeof schema>;
export type Sqlite = Database.Database;

export interface OpenDatabaseOptions {
  path: string;
  synchronous: 'FULL' | 'NORMAL';
}

export interface DatabaseHandle {
  sqlite: Sqlite;
  db: Db;
  close(): void;
}

/**
 * Opens the one SQLite file with the pragmas the appliance relies on (DESIGN convention 6):
 * WAL so readers never block the writer, synchronous=FULL so an answered `queued` survives a power loss,
 * busy_timeout so a second process (the operator CLI) waits instead of failing, and foreign keys on.
 */
export function openDatabase(options: OpenDatabaseOptions): DatabaseHandle {
  if (options.path !== ':memory:') mkdirSync(dirname(options.path), { recursive: true });
  const sqlite = new Database(options.path);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma(`synchronous = ${options.synchronous}`);
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('foreign_keys = ON');
  // An automatic checkpoint runs inside the COMMIT that crosses the threshold, on the event loop:
  // copying thousands of pages and two fsyncs stall every request for tens of ms (the send p99). A
  // worker thread checkpoints from its own connection instead; the memory database has no WAL.
  const checkpointer = options.path === ':memory:' ? undefined : startCheckpointer(options.path);
  sqlite.pragma(`wal_autocheckpoint = ${checkpointer ? 0 : 4000}`);
  const db = drizzle(sqlite, { schema });
  return {
    sqlite,
    db,
    close: () => {
      if (!sqlite.open) return;
      checkpointer?.stop();
      try {
        sqlite.pragma('wal_checkpoint(TRUNCATE)');
      } finally {
        sqlite.close();
      }
    },
  };
}

const checkpointIntervalMs = 1000;

// Plain CommonJS evaluated in the worker (no separate file to bundle); better-sqlite3 by absolute path.
// On 'stop' it closes its connection and flips `closed` so the main thread, waiting on it, closes last.
const checkpointerSource = `
const { workerData, parentPort } = require('node:worker_threads');
const Database = require(workerData.driver);
const closed = new Int32Array(workerData.closed);
const db = new Database(workerData.path);
db.pragma('busy_timeout = 5000');
db.pragma('wal_autocheckpoint = 0');
const timer = setInterval(() => {
  try { db.pragma('wal_checkpoint(PASSIVE)'); } catch { /* busy or closing: next tick retries */ }
}, workerData.intervalMs);
parentPort.on('message', () => {
  clearInterval(timer);
  try { db.close(); } finally { Atomics.store(closed, 0, 1); Atomics.notify(closed, 0); }
  process.exit(0);
});
`;

/**
 * PASSIVE checkpoints never wait for readers or writers, so the writer on the main thread is never
 * held up; the WAL restarts from its beginning once a checkpoint has copied everything.
 */
function startCheckpointer(path: string): { stop(): void } {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const closed = new SharedArrayBuffer(4);
  const worker = new Worker(checkpointerSource, { eval: true, workerData: { path, driver, intervalMs: checkpointIntervalMs, closed } });
  worker.unref();
  let alive = true;
  worker.on('error', () => {
    // A failed checkpointer only lets the WAL grow; close() still checkpoints with TRUNCATE.
    alive = false;
  });
  worker.on('exit', () => (alive = false));
  return {
    /**
     * Synchronous on purpose (close() is): waits, bounded, until the worker's connection is closed, so
     * the main connection closes last and removes the -wal/-shm files before close() returns.
     */
    stop() {
      if (!alive) return;
      worker.postMessage('stop');
      Atomics.wait(new Int32Array(closed), 0, 0, 5000);
    },
  };
}

/**
 * Runs `work` in a write transaction that takes the write lock up front (BEGIN IMMEDIATE), so two
 * writers never deadlock upgrading a read lock. Nested calls become savepoints. `work` must be
 * synchronous: an `await` inside would commit early.
 */
export function writeTransaction<T>(sqlite: Sqlite, work: () => T): T {
  if (sqlite.inTransaction) return sqlite.transaction(work)();
  return sqlite.transaction(work).immediate();
}
