import { migrate } from 'drizzle-orm/better-sqlite3/migrator';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { StartupError } from '../lib/errors.js';
import type { Db, Sqlite } from './client.js';

/**
 * Where the committed drizzle-kit migrations are: beside this file in development (src/db/migrations)
 * and beside the bundle in production (dist/migrations, copied by build.mjs).
 */
export function defaultMigrationsFolder(): string {
  const candidates = [new URL('./migrations', import.meta.url), new URL('./db/migrations', import.meta.url)];
  for (const candidate of candidates) {
    const path = fileURLToPath(candidate);
    if (existsSync(path)) return path;
  }
  throw new Error('migrations folder not found beside the application (expected ./migrations)');
}

/**
 * Applies every migration not yet recorded in the database; a no-op on an up-to-date file. A database
 * written by a newer build is refused: drizzle only applies what is newer than the file's last
 * migration, so an older build would otherwise run its SQL against tables it does not know.
 */
export function migrateDatabase(db: Db, migrationsFolder = defaultMigrationsFolder()): void {
  const { unknown } = schemaState(db, migrationsFolder);
  if (unknown > 0) throw newerDatabase(unknown);
  migrate(db, { migrationsFolder });
}

/**
 * For a process beside the appliance (the operator CLI), which must not migrate a file the appliance
 * has open: refused unless the database is at exactly this build's migrations.
 */
export function assertSchemaCurrent(db: Db, migrationsFolder = defaultMigrationsFolder()): void {
  const { pending, unknown } = schemaState(db, migrationsFolder);
  if (unknown > 0) throw newerDatabase(unknown);
  if (pending > 0) throw new StartupError(`the database is older than this build (${pending} migration(s) to apply): start the appliance of this build once (it migrates the file), then run this again.`);
}

/** For a database about to replace the appliance's (a restore): an older one is migrated at the next start, a newer one never. */
export function assertSchemaNotNewer(db: Db, migrationsFolder = defaultMigrationsFolder()): void {
  const { unknown } = schemaState(db, migrationsFolder);
  if (unknown > 0) throw newerDatabase(unknown);
}

/** Migrations of this build the file lacks, and migrations in the file this build does not know. */
function schemaState(db: Db, migrationsFolder: string): { pending: number; unknown: number } {
  const known = readMigrationFiles({ migrationsFolder });
  const sqlite = (db as Db & { $client: Sqlite }).$client;
  const hasTable = sqlite.prepare("select 1 from sqlite_master where type = 'table' and name = '__drizzle_migrations'").get() !== undefined;
  const applied = hasTable ? (sqlite.prepare('select hash, created_at as createdAt from __drizzle_migrations').all() as { hash: string; createdAt: number }[]) : [];
  const knownHashes = new Set(known.map((migration) => migration.hash));
  const appliedHashes = new Set(applied.map((row) => row.hash));
  return {
    pending: known.filter((migration) => !appliedHashes.has(migration.hash)).length,
    unknown: applied.filter((row) => !knownHashes.has(row.hash)).length,
  };
}

const newerDatabase = (unknown: number) =>
  new StartupError(
    `the database was written by a newer Postino (${unknown} migration(s) this build does not know): run that version, or restore a backup made for this one. Nothing was changed.`,
  );

/** Migrations recorded in the file (drizzle's journal table); 0 for a new file. */
export function appliedMigrations(sqlite: Sqlite): number {
  const journal = sqlite.prepare(`select 1 from sqlite_master where type = 'table' and name = '__drizzle_migrations'`).get();
  return journal ? (sqlite.prepare('select count(*) from __drizzle_migrations').pluck().get() as number) : 0;
}
