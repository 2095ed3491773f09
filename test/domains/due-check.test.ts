import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { openDatabase } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import * as schema from '../../src/db/schema/index.js';
import { createDomainsRepo } from '../../src/domains/repo.js';

test('the re-check job reads only the due domains, each status a range of an index, not every domain row', () => {
  // Asked every minute: with `last_checked_at is null` unindexable, SQLite read every domain row (DKIM key
  // pair, verification results: a page or more each) to compare its last check.
  const path = join(mkdtempSync(join(tmpdir(), 'postino-due-check-')), 'postino.sqlite');
  const handle = openDatabase({ path, synchronous: 'NORMAL' });
  const statements: string[] = [];
  // A second connection that reports every statement it runs, its parameters in place.
  const traced = new Database(path, { verbose: (sql) => statements.push(String(sql)) });
  try {
    migrateDatabase(handle.db);
    const { sqlite } = handle;
    const now = 1_800_000_000_000;
    const minute = 60_000;
    const privateKey = 'k'.repeat(1700);
    const verification = JSON.stringify({ records: Array.from({ length: 6 }, (_, i) => ({ purpose: `r${i}`, expected: 'v'.repeat(300), status: 'pass' })) });
    sqlite.prepare(`insert into projects (id, name, is_default, created_at, updated_at) values ('p', 'P', 1, 0, 0)`).run();
    const insert = sqlite.prepare(
      `insert into domains (id, project_id, domain, status, dkim_selector, dkim_private_key, dkim_public_key, dkim_verified, mail_from_domain, mail_from_status, verification, last_checked_at, created_at)
       values (?, 'p', ?, ?, 's1', ?, 'pub', 1, ?, 'success', ?, ?, 0)`,
    );
    let n = 0;
    const add = (status: string, lastCheckedAt: number | null) => {
      const name = `d${n++}.test`;
      insert.run(name, name, status, privateKey, `bounce.${name}`, verification, lastCheckedAt);
      return name;
    };
    const due: string[] = [];
    sqlite.transaction(() => {
      for (let i = 0; i < 950; i++) add('success', now - 2 * 60 * minute - i); // verified, checked today: not due
      for (let i = 0; i < 10; i++) add('failed', now - 5 * minute); // unverified, checked 5 minutes ago: not due
      for (let i = 0; i < 10; i++) due.push(add(['pending', 'success', 'failed'][i % 3], null)); // never checked
      for (let i = 0; i < 20; i++) due.push(add('pending', now - 20 * minute - i));
      for (let i = 0; i < 10; i++) due.push(add('success', now - 2 * 1440 * minute - i));
    })();

    const rows = createDomainsRepo(drizzle(traced, { schema })).listDueForCheck(now - 10 * minute, now - 1440 * minute, 200);
    assert.deepEqual(new Set(rows.map((row) => row.domain)), new Set(due), 'exactly the due domains');
    const checkedAt = rows.map((row) => row.lastCheckedAt ?? -Infinity);
    assert.deepEqual(checkedAt, [...checkedAt].sort((a, b) => a - b), 'never checked first, then the oldest check');
    assert.equal(createDomainsRepo(drizzle(traced, { schema })).listDueForCheck(now - 10 * minute, now - 1440 * minute, 5).length, 5, 'no more than asked');

    const query = statements.find((sql) => sql.includes('from "domains"'));
    assert.ok(query, statements.join('\n'));
    const plan = (sqlite.prepare(`explain query plan ${query}`).all() as { detail: string }[]).map((row) => row.detail);
    assert.ok(!plan.some((detail) => /^SCAN domains/.test(detail)), `no scan of the domains: ${plan.join(' | ')}`);
    assert.ok(plan.filter((detail) => detail.includes('USING INDEX domains_status_checked_idx')).length >= 3, `a range per status: ${plan.join(' | ')}`);
  } finally {
    traced.close();
    handle.close();
  }
});
