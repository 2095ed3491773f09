import { closeSync, existsSync, fsyncSync, openSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { StartupError } from '../lib/errors.js';
import type { Sqlite } from './client.js';
import { whereLinksLead } from './data-dir-lock.js';
import { assertSchemaNotNewer } from './migrate.js';

/**
 * Writes a consistent copy of the database behind `sqlite` to `target`, also while the appliance runs
 * and commits. VACUUM INTO reads the whole file in one read transaction: the copy is the database as of
 * its start, whatever is committed meanwhile. SQLite's backup API (sqlite3's `.backup`, better-sqlite3's
 * `backup()`) copies 100 pages per step and starts over whenever another connection has committed
 * between two steps: beside 2 sends/s, the `.backup` of a 700 MB database was still starting over after
 * two minutes (3 s when nothing is sent).
 *
 * The copy is written under another name, synced (SQLite does not sync what VACUUM INTO writes), then
 * renamed to `target`: an interrupted backup, or one on a disk that filled, never leaves a file that looks
 * like a whole backup. It is its owner's only, as the database is (client.ts): it holds the DKIM private
 * keys, webhook secrets and the URL-signing secret.
 */
export function backupDatabase(sqlite: Sqlite, target: string): { bytes: number } {
  // An existing file may be the operator's only good backup: never replaced.
  if (existsSync(target)) throw new Error(`${target} already exists: give the backup a new name, or remove that file first`);
  // Said of the folder: the write's own error named the internal `.partial` file.
  if (!existsSync(dirname(target))) throw new StartupError(`${dirname(target)}: no such folder for the backup; nothing was written`);
  const partial = `${target}.partial`;
  rmSync(partial, { force: true }); // an earlier backup's, interrupted
  try {
    vacuumIntoPrivateFile(sqlite, partial);
    syncFile(partial);
    renameSync(partial, target);
  } catch (error) {
    rmSync(partial, { force: true });
    throw error;
  }
  syncFile(dirname(target)); // the rename is on the disk only once its directory is
  return { bytes: statSync(target).size };
}

/** The files SQLite keeps beside a database: its log and the log's index. */
const companions = ['-wal', '-shm', '-journal'];

/**
 * Puts the backup `source` in place of the database at `databasePath`, which no appliance may have open
 * (the caller holds the data directory's lock). Copying a backup over `postino.sqlite` by hand is not
 * enough: a WAL left beside it (a crash, a kill -9, a stop past its 10 s) belongs to the database it
 * replaces, and SQLite replays it over the restored file at the next open: "database disk image is
 * malformed", and the appliance does not start. So the database goes aside with its WAL, as a pair
 * (`postino.sqlite.replaced`, `postino.sqlite.replaced-wal`: sqlite3 still opens it, nothing is lost to a
 * restore made by mistake), and the backup, checked and synced, comes in under the name, alone. A WAL
 * left beside no database (its database moved away after a crash) goes aside the same way.
 *
 * The source is read through SQLite, not copied as a file: a database with a WAL beside it (the
 * `.replaced` of an earlier restore, to undo it; the `postino.sqlite` of a machine that crashed) has
 * commits only there, which a copy of the file alone left out, and the undo then deleted.
 */
export function restoreDatabase(source: string, databasePath: string): { replaced?: string; logAside?: string } {
  // Said plainly: copied first, the error named the internal `.restoring` file, as if the data directory were at fault.
  if (!existsSync(source)) throw new StartupError(`${source}: no such file; nothing was changed`);
  if (!statSync(source).isFile()) throw new StartupError(`${source} is not a file (a backup is one file, made by backup); nothing was changed`);
  // Where a symlink leads: SQLite keeps the WAL beside the file itself, and the link must stay one.
  const target = whereLinksLead(databasePath);
  const incoming = `${target}.restoring`;
  removeWithCompanions(incoming);
  try {
    copyThroughSqlite(source, incoming);
    assertRestorable(incoming, source);
    syncFile(incoming);
  } catch (error) {
    removeWithCompanions(incoming);
    throw error;
  }
  const inPlace = ['', ...companions].filter((suffix) => existsSync(target + suffix));
  const replaced = inPlace.length > 0 ? unusedDatabaseName(`${target}.replaced`) : undefined;
  if (replaced) {
    // The log first: were the database's rename to come first and the process to stop between the two,
    // the WAL would be left beside the restored file.
    for (const suffix of [...companions, '']) if (existsSync(target + suffix)) renameSync(target + suffix, replaced + suffix);
  }
  renameSync(incoming, target);
  syncFile(dirname(target));
  if (!replaced) return {};
  return inPlace.includes('') ? { replaced } : { logAside: `${replaced}-wal` };
}

/**
 * `path`, or `path.2`, `path.3`...: the first name where no database is, nor its -wal, -shm or -journal.
 * The database a restore replaces goes to `.replaced` so, never over an earlier one: an operator who
 * restored the wrong backup and then the right one would have lost the only copy of what was accepted
 * since either (the first restore's `.replaced`).
 */
export function unusedDatabaseName(path: string): string {
  const taken = (name: string) => ['', ...companions].some((suffix) => existsSync(name + suffix));
  let name = path;
  for (let generation = 2; taken(name); generation++) name = `${path}.${generation}`;
  return name;
}

/**
 * The database `source` (with what its WAL holds) written to `copy`, read-only: the source is never
 * changed, also on read-only media. Made 0600 first, as backups are: it holds the DKIM private keys.
 */
function copyThroughSqlite(source: string, copy: string): void {
  let sqlite: Sqlite | undefined;
  try {
    sqlite = new Database(source, { readonly: true, fileMustExist: true });
    vacuumIntoPrivateFile(sqlite, copy);
  } catch (error) {
    throw unreadable(error, source);
  } finally {
    sqlite?.close();
  }
}

/**
 * A consistent copy of the database (with what its WAL holds) into `file`, which must not exist. VACUUM
 * INTO writes into an empty file it finds, keeping its mode: so the file is made 0600 first.
 */
function vacuumIntoPrivateFile(sqlite: Sqlite, file: string): void {
  closeSync(openSync(file, 'wx', 0o600));
  sqlite.prepare('VACUUM INTO ?').run(file);
}

/** SQLite's "not a database" and "corrupt", said of the operator's file; anything else as it is. */
function unreadable(error: unknown, source: string): unknown {
  const code = (error as { code?: string }).code;
  if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT') return new StartupError(`${source} cannot be read as a database (SQLite: ${(error as Error).message}); nothing was changed`);
  return error;
}

/** A whole Postino database this build can run (an older one is migrated at the next start). */
function assertRestorable(copy: string, source: string): void {
  let sqlite: Sqlite | undefined;
  try {
    sqlite = new Database(copy, { fileMustExist: true });
    const check = sqlite.pragma('quick_check', { simple: true });
    if (check !== 'ok') throw new StartupError(`${source} is damaged (SQLite quick_check: ${String(check)}); nothing was changed`);
    const isPostino = sqlite.prepare("select count(*) from sqlite_master where type = 'table' and name in ('__drizzle_migrations', 'projects')").pluck().get() === 2;
    if (!isPostino) throw new StartupError(`${source} is not a Postino database; nothing was changed`);
    assertSchemaNotNewer(drizzle(sqlite));
  } catch (error) {
    throw unreadable(error, source);
  } finally {
    sqlite?.close();
  }
}

function removeWithCompanions(path: string): void {
  for (const suffix of ['', ...companions]) rmSync(path + suffix, { force: true });
}

function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
