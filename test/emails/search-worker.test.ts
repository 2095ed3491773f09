import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';

/**
 * Searches run on worker threads with their own read connections (src/emails/search-runner.ts). A text
 * term under 3 characters cannot use the trigram index and scans every email; while it does, the event
 * loop must keep answering other requests, and other searches must not wait behind it.
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

test('a scanning search does not hold up other searches: they go to a second search thread', async () => {
  // Both threads up first: the second starts when a search arrives while the first is busy.
  const warmUp = [app.api('POST', '/v1/email/search', { query: { search: 'zq' } }), app.api('POST', '/v1/email/search', { query: { toAddress: 'user5@example.com' } })];
  assert.deepEqual((await Promise.all(warmUp)).map((res) => res.status), [200, 200]);
  const finished: string[] = [];
  const started = performance.now();
  const scan = app.api('POST', '/v1/email/search', { query: { search: 'zq' } }).then((res) => (finished.push('scan'), res));
  await new Promise((resolve) => setTimeout(resolve, 10));
  const lookup = await app.api('POST', '/v1/email/search', { query: { toAddress: 'USER7@example.com' } }).then((res) => (finished.push('lookup'), res));
  const scanned = await scan;
  assert.deepEqual(lookup.body.data.map((e: { toAddress: string }) => e.toAddress), ['user7@example.com']);
  assert.deepEqual(scanned.body.data, []);
  assert.deepEqual(finished, ['lookup', 'scan'], `the lookup waited for the scan (${(performance.now() - started).toFixed(0)} ms)`);

  // Two lookups at once while the scan runs: the second goes behind the first, not behind the scan.
  const order: string[] = [];
  const scanAgain = app.api('POST', '/v1/email/search', { query: { search: 'zq' } }).then(() => order.push('scan'));
  await new Promise((resolve) => setTimeout(resolve, 10));
  const lookups = ['USER8@example.com', 'user9@EXAMPLE.com'].map((toAddress) =>
    app.api('POST', '/v1/email/search', { query: { toAddress } }).then((res) => (order.push('lookup'), res.body.data.length)),
  );
  assert.deepEqual(await Promise.all(lookups), [1, 1]);
  await scanAgain;
  assert.deepEqual(order, ['lookup', 'lookup', 'scan']);
});

test('search errors from the worker keep their code', async () => {
  const res = await app.api('POST', '/v1/email/search', { paginationCursorNext: 'not-an-id' });
  assert.equal(res.status, 400);
  assert.equal(res.body.errorCode, 'parameters-invalid');
});
