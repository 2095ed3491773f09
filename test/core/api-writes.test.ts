import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { systemClock } from '../../src/lib/clock.js';
import { acceptArgs } from '../helpers/accept-args.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';

// The API's own writes (templates, suppressions, webhooks, the project) join the group commit. While
// the writer thread holds the write lock, they wait in the queue, not in SQLite's busy handler on the
// event loop, which would stall every other request (and, past busy_timeout, fail with SQLITE_BUSY).

const dataVersion = (app: TestAppliance) => app.appliance.context.database.sqlite.prepare('PRAGMA data_version').pluck().get() as number;

/** Accepts emails until one is committed by another connection than the main one: the writer thread is up. */
async function waitForWriterThread(app: TestAppliance): Promise<void> {
  const { writes } = app.appliance.context;
  for (let tries = 0; ; tries++) {
    assert.ok(tries < 400, 'the writer thread did not come up');
    const before = dataVersion(app);
    await writes.call('emails.accept', acceptArgs(systemClock, app.appliance.defaultProjectId, `warm-up-${tries}@example.com`));
    if (dataVersion(app) !== before) return;
    await sleep(50);
  }
}

/** Another connection (the operator CLI, say) takes the write lock and keeps it until released. */
function holdWriteLock(path: string): { release(): void } {
  const other = new Database(path);
  other.pragma('busy_timeout = 5000');
  other.exec('BEGIN IMMEDIATE');
  return {
    release() {
      other.exec('ROLLBACK');
      other.close();
    },
  };
}

test('API writes made while the writer thread waits for the write lock queue behind it; the event loop keeps serving', async () => {
  const app = await startAppliance({ env: { POSTINO_STORAGE_SYNCHRONOUS: 'FULL', POSTINO_STORAGE_WRITER_THREAD: 'true' } });
  try {
    await waitForWriterThread(app);
    const lock = holdWriteLock(join(app.dataDir, 'postino.sqlite'));
    let released = false;
    try {
      // Handed to the writer thread on the queue's next turn; the thread then waits for the lock.
      const accepted = app.appliance.context.writes.call('emails.accept', acceptArgs(systemClock, app.appliance.defaultProjectId, 'held@example.com'));
      await new Promise((resolve) => setImmediate(resolve));

      const settled: string[] = [];
      const writes = [
        app.api('POST', '/v1/templates', { name: 'Queued', subject: 'Hi', content: [{ type: 'text', text: 'x' }] }),
        app.api('POST', '/v1/suppressions', { emailAddress: 'queued@example.com' }),
        app.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/postino' }),
        app.api('PATCH', '/v1/project', { name: 'Renamed while locked' }),
        // Its lookup runs inside the write: the answer for a missing domain too comes after the lock.
        app.api('DELETE', '/v1/domains/0123456789abcdef01234567'),
      ].map((request, i) => request.finally(() => settled.push(String(i))));

      // Served while the lock is still held: nothing blocks the event loop.
      const health = await app.api('GET', '/healthz', undefined, { key: null });
      assert.equal(health.status, 200);
      const read = await app.api('GET', '/v1/templates');
      assert.equal(read.status, 200);
      assert.deepEqual(settled, [], 'no write could have committed yet');

      lock.release();
      released = true;
      assert.deepEqual((await accepted).map((r) => r.status), ['queued']);
      const [template, suppression, webhook, project, domain] = await Promise.all(writes);
      assert.equal(template.status, 200, JSON.stringify(template.body));
      assert.equal(suppression.status, 201, JSON.stringify(suppression.body));
      assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
      assert.equal(project.status, 200, JSON.stringify(project.body));
      assert.deepEqual(domain.body, { deleted: false });
      assert.equal((await app.api('GET', `/v1/templates/${template.body.data.id}`)).body.data.name, 'Queued');
      assert.equal((await app.api('GET', '/v1/project')).body.name, 'Renamed while locked');
    } finally {
      if (!released) lock.release();
    }
  } finally {
    await app.stop();
  }
});
