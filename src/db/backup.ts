import { closeSync, existsSync, fsyncSync, openSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Sqlite } from './client.js';

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
  const partial = `${target}.partial`;
  rmSync(partial, { force: true }); // an earlier backup's, interrupted
  // VACUUM INTO writes into an empty file it finds, keeping its mode: so the file is made 0600 first.
  closeSync(openSync(partial, 'wx', 0o600));
  try {
    sqlite.prepare('VACUUM INTO ?').run(partial);
    syncFile(partial);
    renameSync(partial, target);
  } catch (error) {
    rmSync(partial, { force: true });
    throw error;
  }
  syncFile(dirname(target)); // the rename is on the disk only once its directory is
  return { bytes: statSync(target).size };
}

function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
