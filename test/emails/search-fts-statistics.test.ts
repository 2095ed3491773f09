import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startAppliance } from '../helpers/appliance.js';

// Statistics taken while the text index was small make the planner scan FTS5's shadow tables in its
// own segment deletes (seconds per merge on a million emails). The appliance drops them at start.
// FTS5 deletes a merged segment by its rowid range (segment 1: 1 << 37 up to 2 << 37 - 1); shadow
// tables are read-only to SQL here, so the plan is checked on the SELECT of the same range.
const segmentDelete = 'SELECT block FROM emails_fts_data WHERE id >= 137438953472 AND id <= 274877906943';
const planOf = (sqlite: Database.Database, sql: string) =>
  (sqlite.prepare(`explain query plan ${sql}`).all() as { detail: string }[]).map((row) => row.detail).join('; ');

test('planner statistics of the text index, taken while it was small, are dropped at start', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-fts-stats-'));
  try {
    const env = { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9', POSTINO_LOG_LEVEL: 'warn' };
    await (await startAppliance({ dataDir, env })).stop();

    // What an operator's `sqlite3 postino.sqlite ANALYZE` on a young database leaves behind.
    const path = join(dataDir, 'postino.sqlite');
    const operator = new Database(path);
    operator.exec('analyze');
    assert.ok((operator.prepare("select count(*) from sqlite_stat1 where tbl like 'emails_fts%'").pluck().get() as number) > 0);
    assert.match(planOf(operator, segmentDelete), /^SCAN emails_fts_data/, 'with those statistics FTS5 deletes segments by scanning');
    operator.close();

    const app = await startAppliance({ dataDir, env });
    try {
      const sqlite = app.appliance.context.database.sqlite;
      assert.equal(sqlite.prepare("select count(*) from sqlite_stat1 where tbl like 'emails_fts%'").pluck().get(), 0);
      assert.ok((sqlite.prepare("select count(*) from sqlite_stat1 where tbl = 'emails'").pluck().get() as number) > 0, 'other statistics are kept');
      assert.match(planOf(sqlite, segmentDelete), /USING INTEGER PRIMARY KEY/);
    } finally {
      await app.stop();
    }
    const reopened = new Database(path, { readonly: true });
    assert.match(planOf(reopened, segmentDelete), /USING INTEGER PRIMARY KEY/, 'for every later connection too');
    reopened.close();
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
