import type Database from 'better-sqlite3';
import type { Clock } from '../../src/lib/clock.js';
import { newId } from '../../src/lib/ids.js';

/**
 * A full disk, for real as far as SQLite is concerned: `PRAGMA max_page_count` at the database's current
 * size makes the next write that needs a page fail with SQLITE_FULL ("database or disk is full"), as a
 * full file system does. The cap holds for the connection that sets it only: tests that use it run their
 * writes on the main connection (`POSTINO_STORAGE_WRITER_THREAD=false`).
 *
 * After the cap, filler events for `emailId` fill the room left in the page where that email's next event
 * goes (it must be the newest email: events sort by email, then time, then id, both from `clock`), as a
 * disk that fills up does; small writes elsewhere may still fit, as on a real full disk.
 */
export function fillDisk(sqlite: Database.Database, emailId: string, clock: Clock): void {
  sqlite.pragma('wal_checkpoint(TRUNCATE)');
  const pages = Number(sqlite.pragma('page_count', { simple: true }));
  sqlite.pragma(`max_page_count = ${pages}`);
  const filler = sqlite.prepare(`insert into email_events (id, email_id, type, time) values (?, ?, 'filler', ?)`);
  for (;;) {
    try {
      filler.run(newId(clock), emailId, clock.nowMs());
    } catch (error) {
      if ((error as { code?: string }).code === 'SQLITE_FULL') return;
      throw error;
    }
  }
}

export function freeDisk(sqlite: Database.Database): void {
  sqlite.pragma('max_page_count = 4294967294');
}
