import { closeSync, fdatasync, openSync } from 'node:fs';
import type { Sqlite } from './client.js';
import { cachedStatement } from './statement-cache.js';

/**
 * Makes committed WAL frames durable from the libuv thread pool instead of inside COMMIT on the event
 * loop. In WAL mode the only difference between synchronous=FULL and NORMAL is the fsync of the WAL
 * file at each commit; the group commit commits with NORMAL and then awaits this sync before any of
 * its promises resolve, so an acknowledged write is exactly as durable as under FULL, while the event
 * loop keeps parsing requests during the ~0.3–2 ms the disk takes. Concurrent requests share one
 * fdatasync (a sync started after a commit covers it; one in flight may not).
 */
export interface WalSyncer {
  /** Resolves once every frame committed before this call is on stable storage. */
  sync(): Promise<void>;
  /** Closes the WAL descriptor; call after the last sync, before the database closes. */
  close(): void;
}

/** Whether commits on this connection skip the fsync and sync the WAL after (synchronous=FULL on a WAL file). */
export function needsWalSync(sqlite: Sqlite): boolean {
  if (sqlite.memory || sqlite.name === '') return false;
  if (Number(sqlite.pragma('synchronous', { simple: true })) < 2) return false;
  return String(sqlite.pragma('journal_mode', { simple: true })).toLowerCase() === 'wal';
}

/**
 * The WAL file SQLite writes: beside the database file as SQLite resolved it. For a database opened
 * through a symlink that is beside the link's target, not beside the link: a syncer that opened
 * `<name>-wal` there found no file, took it for "no WAL", and acknowledged every write unsynced.
 */
export function walPathOf(sqlite: Sqlite): string {
  const main = (sqlite.pragma('database_list') as { name: string; file: string }[]).find((database) => database.name === 'main');
  return `${main?.file || sqlite.name}-wal`;
}

/** Undefined when the connection needs no extra sync (memory database, synchronous below FULL, no WAL). */
export function createWalSyncer(sqlite: Sqlite): WalSyncer | undefined {
  if (!needsWalSync(sqlite)) return undefined;
  const walPath = walPathOf(sqlite);
  let inFlight: Promise<void> | undefined;
  let next: Promise<void> | undefined;
  /**
   * The first failed fdatasync, answered to every sync after it. Linux reports a writeback error once
   * per descriptor and marks the pages clean, so the next fdatasync succeeds without covering them:
   * whoever syncs next (a follow-up queued behind the failed one) must not hear "durable".
   */
  let failure: Error | undefined;

  // One descriptor for the life of the connection: opening and closing the WAL for every batch cost
  // more main-thread time than the commit. The file is never replaced while this connection is open
  // (SQLite truncates or rewrites it in place; it is deleted only when the last connection closes).
  let fd: number | undefined = openIfPresent(walPath);
  const syncOnce = () =>
    new Promise<void>((resolve, reject) => {
      if (failure) return reject(failure);
      if (fd === undefined) {
        try {
          fd = openSync(walPath, 'r');
        } catch (error) {
          // No WAL file: the last connection closed, which checkpoints (with syncs) and deletes it.
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') return resolve();
          return reject(error);
        }
      }
      fdatasync(fd, (error) => {
        if (!error) return resolve();
        failure ??= error;
        reject(failure);
      });
    });

  return {
    sync() {
      if (!inFlight) {
        inFlight = syncOnce().finally(() => (inFlight = undefined));
        return inFlight;
      }
      // A sync already running may have started before our commit: queue exactly one follow-up for
      // everyone who arrives meanwhile.
      next ??= inFlight.then(
        () => undefined,
        () => undefined,
      ).then(() => {
        next = undefined;
        inFlight = syncOnce().finally(() => (inFlight = undefined));
        return inFlight;
      });
      return next;
    },
    close() {
      if (fd === undefined) return;
      closeSync(fd);
      fd = undefined;
    },
  };
}

/**
 * The WAL's descriptor, opened with the syncer (at boot, after the migrations wrote the file): opened at
 * the first write instead, a process at its open-file limit by then (EMFILE under a burst of
 * connections) failed that sync, which counts as a failed disk, and the appliance stored nothing more
 * until a restart. Undefined when it cannot be opened now; the first sync tries again.
 */
function openIfPresent(walPath: string): number | undefined {
  try {
    return openSync(walPath, 'r');
  } catch {
    return undefined;
  }
}

/**
 * Runs `work` (which commits) with synchronous=NORMAL, restoring the connection's setting after. The
 * pragmas come from the statement cache: `sqlite.pragma()` would prepare them twice per batch.
 */
export function withoutCommitSync<T>(sqlite: Sqlite, work: () => T): T {
  cachedStatement(sqlite, 'PRAGMA synchronous = NORMAL').run();
  try {
    return work();
  } finally {
    cachedStatement(sqlite, 'PRAGMA synchronous = FULL').run();
  }
}
