import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { startAppliance } from '../helpers/appliance.js';

/**
 * A start while the disk is still full (test/helpers/full-disk.ts's cap, on the main connection): the
 * start releases the delivery leases a killed run left, which failed on SQLITE_FULL with SQLite's
 * stack, at every try until space was freed.
 */
const env = {
  POSTINO_STORAGE_WRITER_THREAD: 'false',
  POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
  // Nothing is delivered: lookups go to a closed port and defer.
  POSTINO_DNS_SERVERS: '127.0.0.1:9',
};

test('a start on a full disk goes on: the leases a killed run left wait for their expiry', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-full-restart-'));
  try {
    const first = await startAppliance({ dataDir, env });
    const { sqlite } = first.appliance.context.database;
    const projectId = first.appliance.defaultProjectId;
    const leaseUntil = Date.now() + 3_600_000;
    const insertEmail = sqlite.prepare(
      `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
       values (?, ?, 'queued', ?, 'app@sender.test', 'Hi', 'text', 0, 0, 0)`,
    );
    // Leased, as a run killed in the middle of delivering leaves its jobs.
    const insertJob = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, lease_until, queued_at) values (?, ?, ?, ?, 0, ?, 0)`);
    sqlite.transaction(() => {
      for (let i = 0; i < 5_000; i++) {
        const id = (0x62000000 + i).toString(16).padStart(8, '0') + 'ab'.repeat(5) + i.toString(16).padStart(6, '0');
        insertEmail.run(id, projectId, `user${i}@example.com`);
        insertJob.run(id, projectId, `example${i % 7}.com`, leaseUntil - i, leaseUntil);
      }
    })();
    await first.stop();

    let second;
    try {
      second = await startAppliance({
        dataDir,
        env,
        beforeStart: (appliance) => {
          const db = appliance.context.database.sqlite;
          db.pragma('wal_checkpoint(TRUNCATE)');
          db.pragma(`max_page_count = ${Number(db.pragma('page_count', { simple: true }))}`);
        },
      });
      assert.ok(second.logs.some((line) => line.includes('delivery leases of the previous run not released')), second.logs.filter((l) => l.includes('lease')).join('\n'));
      assert.equal((await second.api('GET', '/healthz', undefined, { key: null })).body.components.worker, 'up');
    } finally {
      await second?.stop();
    }
    assert.ok(second.logs.some((line) => line.includes('postino stopped')), 'a clean stop');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
