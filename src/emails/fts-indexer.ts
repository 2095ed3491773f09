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
