import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import type { Sqlite } from '../db/client.js';
import { cachedStatement } from '../db/statement-cache.js';
import type { WriteQueue } from '../db/write-queue.js';

/**
 * emails_fts is filled here, not by an insert trigger: indexing cost ~55 µs per email inside the
 * accept transaction. Rows past the watermark (emails_fts_watermark.last_rowid) are not indexed yet;
 * search.ts reads them directly, so results are exact whether or not this has run.
 */
const batchSize = 1000;

/** Last indexed emails rowid: every row at or below it is in emails_fts, none above it. */
export function readFtsWatermark(sqlite: Sqlite): number {
  const row = cachedStatement(sqlite, 'select last_rowid as w from emails_fts_watermark where id = 1').get() as { w: number } | undefined;
  return row?.w ?? 0;
}

/**
 * Indexes up to `limit` rows past the watermark and advances it. Must run inside a write transaction
 * so the rows and the watermark move together. Returns the number of rows indexed.
 */
export function indexPendingEmails(sqlite: Sqlite, limit = batchSize): number {
  const from = readFtsWatermark(sqlite);
  const { upTo, n } = sqlite
    .prepare('select max(rowid) as upTo, count(*) as n from (select rowid from emails where rowid > ? order by rowid limit ?)')
    .get(from, limit) as { upTo: number | null; n: number };
  if (upTo === null) return 0;
  sqlite
    .prepare(
      'insert into emails_fts(rowid, to_address, from_address, from_name, subject) select rowid, to_address, from_address, from_name, subject from emails where rowid > ? and rowid <= ?',
    )
    .run(from, upTo);
  sqlite.prepare('update emails_fts_watermark set last_rowid = ? where id = 1').run(upTo);
  return n;
}

/** The write procedure (write-procedures.ts): trigram indexing is CPU work best done off the event loop. */
export function createIndexFtsProcedure(sqlite: Sqlite): (args: { limit: number }) => number {
  return ({ limit }) => indexPendingEmails(sqlite, limit);
}

/**
 * Scheduler job: catches up in batches, each its own write so sends interleave instead of waiting
 * behind one long transaction.
 */
export async function catchUpEmailIndex(writes: WriteQueue): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await writes.call('emails.index-fts', { limit: batchSize });
    total += n;
    if (n < batchSize) return total;
  }
}

/**
 * The scheduler's pacing of catchUpEmailIndex: a backlog of a full batch is indexed at once, a trickle once
 * every `maxDelayMs`. Each index write costs something on top of its emails (a commit, FTS5's segment
 * flush and merge step): on a million emails a write of 10 takes ~0.8 ms and one of 1,000 ~12 ms (median;
 * merge settings of migration 0019). Every run ends with a partial write, so skipping the runs that would
 * be only that means fewer, fuller writes:
 * 5 % more accepted html sends than a run every second (docs/benchmarks.md). Searches are exact either
 * way: rows past the watermark are read directly.
 */
export function createPacedEmailIndexer(sqlite: Sqlite, writes: WriteQueue, maxDelayMs = 10_000): (nowMs: number) => Promise<number> {
  const newestRowid = sqlite.prepare('select max(rowid) from emails').pluck();
  let lastRunMs = -Infinity;
  return async (nowMs) => {
    const pending = ((newestRowid.get() as number | null) ?? 0) - readFtsWatermark(sqlite);
    if (pending <= 0) return 0;
    if (pending < batchSize && nowMs - lastRunMs < maxDelayMs) return 0;
    lastRunMs = nowMs;
    return catchUpEmailIndex(writes);
  };
}

/**
 * FTS5 runs its own statements on emails_fts's shadow tables, written for their primary keys. Statistics
 * from an ANALYZE taken while the index was small (an operator's `sqlite3 … ANALYZE`, a database browser
 * running PRAGMA optimize) make the planner scan those tables instead: on a million emails every segment
 * merge then read the whole index once per merged segment, seconds per write (docs/benchmarks.md). The
 * appliance never runs ANALYZE; this drops such statistics before the appliance opens the file.
 * It has to run on a connection of its own: one that has loaded the schema keeps the old estimates
 * after the rows are gone (ANALYZE sqlite_schema reloads only tables that still have statistics).
 * Returns the number of statistics rows removed.
 */
export function dropFtsShadowStatistics(path: string): number {
  if (!existsSync(path)) return 0;
  const sqlite = new Database(path);
  try {
    sqlite.pragma('busy_timeout = 5000');
    let removed = 0;
    for (const table of ['sqlite_stat1', 'sqlite_stat4']) {
      const exists = sqlite.prepare("select 1 from sqlite_schema where type = 'table' and name = ?").get(table);
      if (!exists) continue;
      const ofIndex = `from ${table} where tbl like 'emails\\_fts\\_%' escape '\\'`;
      // Read first: a start without such rows takes no write lock.
      if (sqlite.prepare(`select 1 ${ofIndex} limit 1`).get()) removed += sqlite.prepare(`delete ${ofIndex}`).run().changes;
    }
    return removed;
  } finally {
    sqlite.close();
  }
}
