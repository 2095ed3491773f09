import Database from 'better-sqlite3';
import { drizzle, type BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
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
  // Checkpoint in bigger steps than the default 1000 pages; fewer fsyncs of the main file under load.
  sqlite.pragma('wal_autocheckpoint = 4000');
  const db = drizzle(sqlite, { schema });
  return {
    sqlite,
    db,
    close: () => {
      if (!sqlite.open) return;
      try {
        sqlite.pragma('wal_checkpoint(TRUNCATE)');
      } finally {
        sqlite.close();
      }
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
