import { statSync, statfsSync } from 'node:fs';
import { AppError, isStorageBusy, isStorageFull } from '../lib/errors.js';
import { monotonicMs, type Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { Outcome } from './batch-transaction.js';

/**
 * Whether there is room to write. Two signals:
 *
 * - Writes refused for lack of space (SQLITE_FULL, ENOSPC): the write queue shows this every batch's
 *   outcomes. `full` lasts a minute past the last refusal: on a full disk small writes that fit in
 *   existing pages still succeed, and "full until the next success" would flap.
 * - The reserve (`storage.min_free_mb`, like Postfix's queue_minfree): while the data directory's file
 *   system has less free space than that, new mail is refused (`assertRoomForNewMail`), so deliveries,
 *   bounces and SQLite's own checkpoints keep the room they need to drain the queue.
 *
 * `/healthz` reports the state as its `storage` component (503 while `full`), so a monitor learns of a
 * full disk from the appliance before the users do.
 */
export interface StorageHealth {
  /**
   * `failed`: a WAL sync failed; the write queue stores nothing more until a restart (write-queue.ts).
   * `busy`: writes are refused because another process holds the write lock (db/client.ts), until a
   * write commits again (or `storageBusyHoldMs` after the last refusal, should nothing write meanwhile).
   */
  readonly state: 'up' | 'full' | 'busy' | 'failed';
  observe(outcomes: Outcome[]): void;
  /** Called by the write queue once a WAL sync failed: for good, until the appliance restarts. */
  markFailed(): void;
  /** Reads the free space of the data directory's file system (the appliance calls it every few seconds). */
  checkFreeSpace(): void;
  /**
   * Throws storage-full while the file system is below the reserve, read again when the last reading is
   * `freshReadingMs` old: between the appliance's readings every few seconds, a burst of large sends
   * (~900 kB each, 16 connections) took a disk from 300 MB free to none, past a 64 MB reserve.
   */
  assertRoomForNewMail(): void;
  /** Free bytes of the data directory's file system at the last reading (every few seconds); undefined before one, or when none succeeded. */
  readonly freeBytes: number | undefined;
}

export interface StorageHealthOptions {
  log: Logger;
  clock: Clock;
  dataDir: string;
  /** storage.min_free_mb in bytes; 0 disables the reserve. */
  minFreeBytes: number;
  /** Free bytes for unprivileged users on `dataDir`'s file system; statfs by default. */
  freeBytes?: (dataDir: string) => number;
  /** Milliseconds that only go forward, for the age of a reading (`monotonicMs` by default; tests give their own). */
  monotonicNowMs?: () => number;
  /**
   * The open database's file: checked with each reading to still be the file at this path. Removed (a
   * wrong `rm -rf data/`, a tmp cleaner) or replaced, the open connection writes on into a file no path
   * leads to, and a restart finds a new, empty database: every send answered meanwhile is lost.
   */
  database?: { path: string; detached: (error: Error) => void };
}

export const storageFullHoldMs = 60_000;
export const storageBusyHoldMs = 10_000;
/** How old a reading of the free space may be when new mail asks for room (a statfs: a few µs). */
export const freshReadingMs = 50;
/**
 * `full` ends before storageFullHoldMs once a reading shows this much room (or the reserve, if more), with
 * no write refused for `roomAgainQuietMs`: a freed disk kept /healthz at 503 for a minute, and a load
 * balancer kept the instance out of rotation as long. Quiet first: under a quota (EDQUOT), which statfs
 * does not show, writes keep being refused and `full` stays.
 */
const roomAgainBytes = 4 * 1_048_576;
const roomAgainQuietMs = 5_000;
/**
 * Room past the reserve before new mail is accepted again: free space hovering at the reserve, read as
 * mail arrives (every 50 ms), turned the refusal on and off, logging each turn.
 */
const reserveHysteresisBytes = (minFreeBytes: number) => Math.max(1_048_576, minFreeBytes / 16);

export function createStorageHealth(options: StorageHealthOptions): StorageHealth {
  const { log, clock, dataDir, minFreeBytes } = options;
  const freeBytes = options.freeBytes ?? statfsFreeBytes;
  const monotonicNowMs = options.monotonicNowMs ?? monotonicMs;
  /** A failing statfs is said once, until a reading succeeds again: read as mail arrives, it said so 20 times a second. */
  let readFailing = false;
  let lastRefusedAt: number | undefined;
  let belowReserve = false;
  let lastFreeBytes: number | undefined;
  let lastReadAt = -Infinity;
  let failed = false;
  /** The last write refused because another process held the write lock; cleared when a write commits. */
  let lastBusyAt: number | undefined;
  const refusedRecently = () => lastRefusedAt !== undefined && clock.nowMs() - lastRefusedAt < storageFullHoldMs;
  const busyRecently = () => lastBusyAt !== undefined && clock.nowMs() - lastBusyAt < storageBusyHoldMs;
  /** Said once per episode: every write is refused while the lock is held, and each would say it again. */
  const observeBusy = (outcomes: Outcome[]) => {
    if (outcomes.some((outcome) => !outcome.ok && isStorageBusy(outcome.error))) {
      if (!busyRecently()) log.error('storage busy: another process holds the database write lock (an open sqlite3 session in a transaction?); writes are refused until it is released');
      lastBusyAt = clock.nowMs();
    } else if (lastBusyAt !== undefined && outcomes.some((outcome) => outcome.ok)) {
      log.info('storage: the write lock is free again; writes commit');
      lastBusyAt = undefined;
    }
  };
  const checkDatabaseFile = watchDatabaseFile(options.database);
  const checkFreeSpace = () => {
    lastReadAt = monotonicNowMs();
    checkDatabaseFile();
    let free: number;
    try {
      free = freeBytes(dataDir);
    } catch (error) {
      if (!readFailing) log.warn('storage: cannot read the free space of the data directory', { error: (error as Error).message });
      readFailing = true;
      return;
    }
    readFailing = false;
    lastFreeBytes = free;
    if (lastRefusedAt !== undefined && free >= Math.max(minFreeBytes, roomAgainBytes) && clock.nowMs() - lastRefusedAt >= roomAgainQuietMs) {
      log.info('storage: writes commit again: the data directory has room', { freeMb: mb(free) });
      lastRefusedAt = undefined;
    }
    if (minFreeBytes <= 0) return;
    const below = belowReserve ? free < minFreeBytes + reserveHysteresisBytes(minFreeBytes) : free < minFreeBytes;
    if (below && !belowReserve) log.error('storage low: new mail is refused while the data directory has less free space than storage.min_free_mb', { freeMb: mb(free), minFreeMb: mb(minFreeBytes) });
    if (!below && belowReserve) log.info('storage: free space is above storage.min_free_mb again; new mail is accepted', { freeMb: mb(free) });
    belowReserve = below;
  };
  return {
    get state() {
      if (failed) return 'failed';
      if (belowReserve || refusedRecently()) return 'full';
      return busyRecently() ? 'busy' : 'up';
    },
    markFailed() {
      failed = true;
    },
    observe(outcomes) {
      observeBusy(outcomes);
      if (outcomes.some((outcome) => !outcome.ok && isStorageFull(outcome.error))) {
        if (!refusedRecently()) log.error('storage full: writes are refused until there is room on the data directory');
        lastRefusedAt = clock.nowMs();
      } else if (lastRefusedAt !== undefined && !refusedRecently() && outcomes.some((outcome) => outcome.ok)) {
        log.info('storage: writes commit again');
        lastRefusedAt = undefined;
      }
    },
    get freeBytes() {
      return lastFreeBytes;
    },
    checkFreeSpace,
    assertRoomForNewMail() {
      if (monotonicNowMs() - lastReadAt >= freshReadingMs) checkFreeSpace();
      if (!belowReserve) return;
      throw new AppError(
        'storage-full',
        `The appliance is low on storage space (less than storage.min_free_mb = ${mb(minFreeBytes)} MB free on its data directory), so new mail is not accepted. It accepts again as soon as there is room (free disk space there, or lower storage.min_free_mb).`,
      );
    },
  };
}

/** The error a database file removed or replaced while open is recorded as (write-queue.ts stores nothing more). */
export class DatabaseDetached extends Error {
  readonly code = 'POSTINO_DATABASE_DETACHED';
}

/**
 * A check that the file at the database's path is still the one opened (same device and inode): reports
 * it once through `database.detached` otherwise. No check for a database without a file (`:memory:`).
 */
function watchDatabaseFile(database: StorageHealthOptions['database']): () => void {
  const identity = database && fileIdentity(database.path);
  if (!database || typeof identity !== 'string') return () => {};
  let reported = false;
  return () => {
    if (reported) return;
    const now = fileIdentity(database.path);
    // A stat that fails otherwise (permissions changed, an NFS hiccup) says nothing of the file: read again next time.
    if (now === identity || now === unreadable) return;
    reported = true;
    const how = now === gone ? 'removed' : 'replaced by another file';
    database.detached(new DatabaseDetached(`the database file ${database.path} was ${how} while the appliance ran`));
  };
}

const gone = Symbol('gone');
const unreadable = Symbol('unreadable');

/** `device:inode` of the file at `path`; `gone` when no file is there (ENOENT, ENOTDIR), `unreadable` when the stat fails otherwise. */
function fileIdentity(path: string): string | typeof gone | typeof unreadable {
  try {
    const stats = statSync(path);
    return `${stats.dev}:${stats.ino}`;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? gone : unreadable;
  }
}

/** Free bytes for unprivileged users on the file system of `dataDir`. */
export function statfsFreeBytes(dataDir: string): number {
  const stats = statfsSync(dataDir);
  return stats.bavail * stats.bsize;
}

const mb = (bytes: number) => Math.round(bytes / 1_048_576);
