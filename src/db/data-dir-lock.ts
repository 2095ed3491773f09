import { existsSync, lstatSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { monotonicMs } from '../lib/clock.js';
import { isStorageFull, StartupError } from '../lib/errors.js';
import { makeDirectory } from '../lib/make-directory.js';
import { assertWritable } from './client.js';
import { statfsFreeBytes } from './storage-health.js';

/**
 * One appliance per data directory. Two on the same database would both work its delivery queue, and
 * each start releases every lease it finds ("after a restart nothing is in flight"), so the second
 * would send again what the first has on the wire, and both would run every scheduler job.
 *
 * The lock is an exclusive SQLite lock on `postino.lock` beside the database, held until `release()`.
 * The OS drops it when the process ends, even on kill -9, so a crash never leaves a stale lock (a pid
 * file would), and SQLite also sees it between two appliances in one process. The operator CLI does
 * not take it: it is meant to run beside the appliance.
 */
export interface DataDirLock {
  release(): void;
}

export function lockDataDir(dataDir: string, whenRunning = startAdvice): DataDirLock {
  const dirLock = lockFile(join(dataDir, 'postino.lock'), `the data directory ${dataDir}`, whenRunning, () => makeDirectory(dataDir, 0o700));
  // A database reached through a symlink (supported: wal-sync.ts) may be shared by two data directories,
  // one of which may hold the file itself: the file gets a lock of its own beside where it really is
  // (where SQLite writes its WAL too), whoever reaches it how. Taken before the file exists too: a link
  // to a file not created yet (a fresh install, a restore under way) is where SQLite will create it.
  const database = join(dataDir, 'postino.sqlite');
  let targetLock: DataDirLock | undefined;
  try {
    const target = whereLinksLead(database);
    const what = lstatSync(database, { throwIfNoEntry: false })?.isSymbolicLink() ? `the database ${target}, which ${database} links to` : `the database ${target}`;
    targetLock = lockFile(`${target}.postino-lock`, what, whenRunning, () => {
      if (!existsSync(dirname(target))) throw new StartupError(`storage.data_dir: ${database} links to ${target}, in a folder that does not exist`);
    });
  } catch (error) {
    dirLock.release();
    throw error;
  }
  return {
    release() {
      targetLock?.release();
      dirLock.release();
    },
  };
}

/**
 * The file `path` names once every symlink on the way is followed, whether or not it exists yet
 * (realpath refuses a link whose target is missing; SQLite opens through it and creates the target).
 */
export function whereLinksLead(path: string): string {
  let current = path;
  for (let hops = 0; hops < 40; hops++) {
    const stat = lstatSync(current, { throwIfNoEntry: false });
    if (!stat?.isSymbolicLink()) break;
    current = resolve(dirname(current), readlinkSync(current));
  }
  // The folders on the way may be links too. One that does not exist leaves the path as it is (refused
  // by the lock's check).
  try {
    return join(realpathSync(dirname(current)), basename(current));
  } catch {
    return current;
  }
}

/**
 * How long a start keeps trying for a lock that is busy, and the longest pause between two tries. A busy
 * lock is not always held: another appliance starting at the same moment holds a shared lock on the file
 * for the instant it reads it, on its way to the exclusive one. Refused at the first SQLITE_BUSY, both
 * appliances stopped, each naming the other, and none ran. An appliance that is running holds the lock
 * for good, so a start beside it is still refused, this much later.
 */
const busyLockPatienceMs = 500;
const busyLockMaxPauseMs = 20;

/** What a start beside a running appliance is told to do (a restore says its own: stop it first). */
const startAdvice = 'Stop it first, or give this one its own storage.data_dir.';

/** An exclusive SQLite lock on `path`; `what` names what it guards, and `whenRunning` what to do, in the refusal. */
function lockFile(path: string, what: string, whenRunning: string, prepare: () => void): DataDirLock {
  const giveUpAt = monotonicMs() + busyLockPatienceMs;
  for (;;) {
    try {
      return tryLockFile(path, what, whenRunning, prepare);
    } catch (error) {
      if (!(error instanceof LockBusy) || monotonicMs() >= giveUpAt) throw error instanceof LockBusy ? error.refusal : error;
      // A random pause, so two starts that collided do not collide again at every try.
      sleepSync(1 + Math.floor(Math.random() * busyLockMaxPauseMs));
    }
  }
}

/** The lock was busy: held by a running appliance, or for a moment by one starting. */
class LockBusy extends Error {
  constructor(readonly refusal: StartupError) {
    super(refusal.message);
  }
}

/** Blocks the thread: the lock is taken once, at boot, before anything else runs. */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function tryLockFile(path: string, what: string, whenRunning: string, prepare: () => void): DataDirLock {
  let lock: Database.Database;
  try {
    prepare();
    lock = new Database(path, { timeout: 0 });
  } catch (error) {
    throw unusableDataDir(error, path);
  }
  try {
    // Opened read-only (a lock file left by another user, root's first run), its EXCLUSIVE lock would
    // exclude nobody: a second appliance would start beside this one.
    assertWritable(path, () => lock.close());
  } catch (error) {
    throw unusableDataDir(error, path);
  }
  try {
    // Nothing is ever written; SQLite may still leave an empty `-journal` file beside it (harmless).
    lock.pragma('journal_mode = OFF');
    lock.pragma('locking_mode = EXCLUSIVE');
    lock.exec('BEGIN EXCLUSIVE');
  } catch (error) {
    lock.close();
    if ((error as { code?: string }).code === 'SQLITE_BUSY') {
      throw new LockBusy(new StartupError(`Another Postino is already running on ${what} (${path} is locked). ${whenRunning}`));
    }
    // A lock file an earlier run left in a directory no longer writable opens, then refuses the lock.
    throw unusableDataDir(error, path);
  }
  return {
    release() {
      if (lock.open) lock.close();
    },
  };
}

// ENOENT: a folder the kernel will not create though its parent exists (under /proc, /sys). ELOOP and
// ENAMETOOLONG: a path that cannot be followed (a symlink to itself, a name past NAME_MAX/PATH_MAX).
const dataDirErrors = new Set(['ENOENT', 'ELOOP', 'ENAMETOOLONG', 'ENOTDIR', 'EEXIST', 'EACCES', 'EPERM', 'EROFS', 'SQLITE_CANTOPEN', 'SQLITE_READONLY', 'SQLITE_PERM']);

/** better-sqlite3 reports SQLite's extended codes: SQLITE_READONLY_DIRECTORY is a SQLITE_READONLY. */
function isDataDirError(code: string): boolean {
  return dataDirErrors.has(code) || (code.startsWith('SQLITE_') && dataDirErrors.has(code.replace(/^(SQLITE_[A-Z]+)_.*$/, '$1')));
}

/**
 * A data directory this process cannot use (not creatable, not writable, a file in the way) or a
 * database file that is not one (corrupt, or another file at its name) as the thing to fix, instead of
 * an errno and a stack trace. Other errors pass through.
 */
export function unusableDataDir(error: unknown, path: string): Error {
  const full = noRoomLeft(error, dirname(path));
  if (full !== error) return full;
  const code = (error as { code?: string }).code;
  if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT') {
    return new StartupError(`${path} cannot be read as a database (SQLite: ${(error as Error).message}): restore it from a backup, or point storage.data_dir at another directory`);
  }
  if (!code || !isDataDirError(code)) return error as Error;
  return new StartupError(`storage.data_dir: cannot use ${path}: ${(error as Error).message} (the directory must exist or be creatable, and be writable by this user)`);
}

/**
 * A boot step that failed for want of disk space (SQLite's SQLITE_FULL, the file system's ENOSPC or
 * EDQUOT; drizzle's migrator wraps the first in an error of its own, as its cause) as the thing to fix:
 * it came out as a stack trace, or as the "disk I/O error" of the close after it. Other errors pass through.
 *
 * SQLite says "disk I/O error" (SQLITE_IOERR_SHMSIZE) when it cannot grow the -shm file a WAL database
 * opens with, as on a file system with a few kB left: read as a failing disk in the middle of an incident,
 * and a start, `keys list` and `backup` all said it. An I/O error with less than `nearlyFullBytes` free is
 * named as the full disk it most likely is, the error's own words beside.
 */
export function noRoomLeft(error: unknown, dataDir: string, freeBytes: (dir: string) => number | undefined = freeBytesOf): Error {
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  const full = isStorageFull(error) ? error : isStorageFull(cause) ? cause : undefined;
  if (full) return fileSystemFull(dataDir, (full as Error).message);
  const free = isIoError(error) ? freeBytes(dataDir) : undefined;
  if (free === undefined || free >= nearlyFullBytes) return error as Error;
  return fileSystemFull(dataDir, `${Math.floor(free / 1024)} kB free; SQLite: ${(error as Error).message}`);
}

/** Free space below which a boot step's I/O error is put down to the full file system (noRoomLeft, migrationFailure). */
export const nearlyFullBytes = 1_048_576;

function isIoError(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_IOERR');
}

/** statfsFreeBytes, or undefined when the file system cannot be read. */
function freeBytesOf(dir: string): number | undefined {
  try {
    return statfsFreeBytes(dir);
  } catch {
    return undefined;
  }
}

export function fileSystemFull(dataDir: string, why: string): StartupError {
  return new StartupError(`storage.data_dir: the file system of ${dataDir} is full (${why}): free some space on it, or point storage.data_dir at another file system`);
}
