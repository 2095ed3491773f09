import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';

/**
 * Searches run on a worker thread with their own read connection (src/emails/search-runner.ts). A text
 * term under 3 characters cannot use the trigram index and scans every email; while it does, the event
 * loop must keep answering other requests.
 */
let app: TestAppliance;
const rows = 100_000;

before(async () => {
  // No scheduler: the FTS indexer would otherwise start indexing the rows inserted below.
  app = await startAppliance({ env: { POSTINO_SCHEDULER_ENABLED: 'false', POSTINO_LOG_LEVEL: 'warn' } });
  const sqlite = app.appliance.context.database.sqlite;
  const insert = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
     values (?, ?, 'delivered', ?, 'app@sender.test', ?, 'text', 0, ?, ?)`,
  );
  sqlite.transaction(() => {
    for (let i = 0; i < rows; i++) {
      const id = (0x60000000 + i).toString(16).padStart(8, '0') + 'ab'.repeat(5) + i.toString(16).padStart(6, '0');
      insert.run(id, app.appliance.defaultProjectId, `user${i}@example.com`, `Order ${i} shipped`, i, i);
    }
  })();
});
after(() => app?.stop());

test('a scanning search does not hold up other requests; results are exact', async () => {
  // A first search starts the worker thread, so the one measured below only scans.
  assert.equal((await app.api('POST', '/v1/email/search', { query: { search: 'user1@' } })).status, 200);
  const finished: string[] = [];
  const scan = app.api('POST', '/v1/email/search', { query: { search: 'zq' } }).then((res) => (finished.push('search'), res));
  // Let the search reach the worker, then ask for something cheap.
  await new Promise((resolve) => setTimeout(resolve, 10));
  const health = await app.api('GET', '/v1/project').then((res) => (finished.push('project'), res));
  const result = await scan;
  assert.equal(health.status, 200);
  assert.equal(result.status, 200, JSON.stringify(result.body));
  assert.deepEqual(result.body.data, []);
  assert.deepEqual(finished, ['project', 'search'], 'the cheap request was answered while the scan ran');

  const found = await app.api('POST', '/v1/email/search', { query: { search: 'user99998@' } });
  assert.deepEqual(found.body.data.map((e: { toAddress: string }) => e.toAddress), ['user99998@example.com']);
});

test('search errors from the worker keep their code', async () => {
  const res = await app.api('POST', '/v1/email/search', { paginationCursorNext: 'not-an-id' });
  assert.equal(res.status, 400);
  assert.equal(res.body.errorCode, 'parameters-invalid');
});
