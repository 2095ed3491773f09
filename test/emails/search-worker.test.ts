import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { createSearchRunner, type SearchRunner } from '../../src/emails/search-runner.js';
import type { SearchEmailsInput } from '../../src/emails/schemas.js';
import { silentLogger } from '../../src/lib/logger.js';
import { spawnWorker } from '../../src/lib/worker-threads.js';
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
  // A first scan starts the scan thread, so the one measured below only scans.
  assert.equal((await app.api('POST', '/v1/email/search', { query: { search: 'qz' } })).status, 200);
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

test('a scanning search does not hold up other searches: they go to the other search thread', async () => {
  const { runner, sentTo } = runnerRecordingThreads();
  const projectId = app.appliance.defaultProjectId;
  const search = (query: SearchEmailsInput['query']) => runner.search(projectId, searchInput(query)).then((page) => page.data.map((row) => row.to_address));
  try {
    // Both threads up first: the second starts when a search arrives while the first is busy.
    assert.deepEqual(await Promise.all([search({ search: 'zq' }), search({ toAddress: 'user5@example.com' })]), [[], ['user5@example.com']]);
    sentTo.length = 0;
    // Threads are chosen when a search is sent, so which thread each went to is known at once; two
    // lookups while a scan runs go to the other thread, the second behind the first, not behind the scan.
    const searches = [search({ search: 'zq' }), search({ toAddress: 'USER7@example.com' }), search({ toAddress: 'user9@EXAMPLE.com' })];
    const [scanThread, ...lookupThreads] = sentTo;
    assert.deepEqual(lookupThreads, [1 - scanThread, 1 - scanThread], 'a lookup was sent behind the scan');
    assert.deepEqual(await Promise.all(searches), [[], ['user7@example.com'], ['user9@example.com']]);
  } finally {
    await runner.close();
  }
});

test('search errors from the worker keep their code', async () => {
  const res = await app.api('POST', '/v1/email/search', { paginationCursorNext: 'not-an-id' });
  assert.equal(res.status, 400);
  assert.equal(res.body.errorCode, 'parameters-invalid');
});

test('two scans at once wait on one thread: a lookup sent after them goes to the other', async () => {
  const { runner, sentTo } = runnerRecordingThreads();
  const projectId = app.appliance.defaultProjectId;
  const search = (query: SearchEmailsInput['query']) => runner.search(projectId, searchInput(query)).then((page) => page.data.map((row) => row.to_address));
  try {
    const searches = [search({ search: 'zq' }), search({ search: 'zx' }), search({ toAddress: 'user11@example.com' })];
    assert.deepEqual(sentTo, [0, 0, 1], 'the lookup was sent behind a scan, or the scans to both threads');
    assert.deepEqual(await Promise.all(searches), [[], [], ['user11@example.com']]);
  } finally {
    await runner.close();
  }
});

test('a contact query goes to the scan thread, as it may read every contact: a scan queues behind it, and a lookup sent meanwhile goes to the other', async () => {
  for (const emailAddress of ['ann@contacts.test', 'bob@contacts.test']) assert.equal((await app.api('POST', '/v1/contacts', { emailAddress })).status, 200);
  const { runner, sentTo } = runnerRecordingThreads();
  const projectId = app.appliance.defaultProjectId;
  try {
    const input = { match: 'all', offset: 0, limit: 20, filter: { match: 'all', rules: [{ field: 'emailAddress', operator: 'includes', value: 'contacts.test' }] } } as const;
    const queries = [
      runner.queryContacts(projectId, input as any, Date.now()),
      runner.search(projectId, searchInput({ search: 'zq' })),
      runner.search(projectId, searchInput({ toAddress: 'user12@example.com' })),
    ];
    // Threads are numbered as they start: the contact query starts the scan lane's, which the scan shares.
    assert.deepEqual(sentTo, [0, 0, 1]);
    const [contacts, , emails] = await Promise.all(queries);
    assert.deepEqual([(contacts as any).totalCount, (contacts as any).rows.map((row: any) => row.emailAddress).sort()], [2, ['ann@contacts.test', 'bob@contacts.test']]);
    assert.equal((emails as any).data[0].to_address, 'user12@example.com');
  } finally {
    await runner.close();
  }
});

/** A runner of its own over the appliance's file, with the threads it starts kept for the test. */
function runnerKeepingThreads(spawn: (script: URL) => Worker, restartDelayMs: number): { runner: SearchRunner; threads: Worker[] } {
  const threads: Worker[] = [];
  const runner = createSearchRunner(app.appliance.context.database.sqlite, silentLogger, {
    spawn: (script) => {
      const worker = spawn(script);
      threads.push(worker);
      return worker;
    },
    restartDelayMs,
  });
  return { runner, threads };
}

/** A runner of its own whose threads record, in order, which thread (by start order) each search was sent to. */
function runnerRecordingThreads(): { runner: SearchRunner; sentTo: number[] } {
  const path = app.appliance.context.database.sqlite.name;
  const sentTo: number[] = [];
  let started = 0;
  const { runner } = runnerKeepingThreads((script) => {
    const worker = spawnWorker(script, { workerData: { path } });
    const thread = started++;
    const post = worker.postMessage.bind(worker);
    worker.postMessage = (message: unknown) => {
      if (message !== 'close') sentTo.push(thread);
      post(message);
    };
    return worker;
  }, 1000);
  return { runner, sentTo };
}

const searchInput = (query: SearchEmailsInput['query']) => ({ query, limit: 20 }) as SearchEmailsInput;

async function stopThread(worker: Worker): Promise<void> {
  await Promise.all([once(worker, 'exit'), worker.terminate()]);
  await new Promise((resolve) => setImmediate(resolve));
}

test('a search thread that stops is replaced after a delay; searches are answered meanwhile', async () => {
  const path = app.appliance.context.database.sqlite.name;
  const { runner, threads } = runnerKeepingThreads((script) => spawnWorker(script, { workerData: { path } }), 1000);
  const projectId = app.appliance.defaultProjectId;
  const lookup = async (toAddress: string) => (await runner.search(projectId, searchInput({ toAddress }))).data.map((row) => row.to_address);
  try {
    // Both threads up: a scan and a lookup at once.
    const [scanned, found] = await Promise.all([runner.search(projectId, searchInput({ search: 'zq' })), lookup('user3@example.com')]);
    assert.deepEqual([scanned.data.length, found], [0, ['user3@example.com']]);
    assert.equal(threads.length, 2);
    await stopThread(threads[0]);
    // The other thread takes the lookups.
    assert.deepEqual(await lookup('user4@example.com'), ['user4@example.com']);
    await stopThread(threads[1]);
    // Both stopped a moment ago: answered on the main thread, no thread started.
    assert.deepEqual(await lookup('user5@example.com'), ['user5@example.com']);
    assert.equal(threads.length, 2);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    assert.deepEqual(await lookup('user6@example.com'), ['user6@example.com']);
    assert.equal(threads.length, 3, 'a thread started in place of the one that stopped');
  } finally {
    await runner.close();
  }
});

test('a search thread that stops before answering is retried less and less often', async () => {
  const { runner, threads } = runnerKeepingThreads(() => new Worker('process.exit(1)', { eval: true }), 500);
  const scan = () => runner.search(app.appliance.defaultProjectId, searchInput({ search: 'zq' })).then((page) => page.data.length);
  try {
    await assert.rejects(scan(), /search worker exited/);
    assert.equal(await scan(), 0, 'answered on the main thread while no thread may start');
    assert.equal(threads.length, 1);
    await new Promise((resolve) => setTimeout(resolve, 600));
    await assert.rejects(scan(), /search worker exited/);
    assert.equal(threads.length, 2);
    // The second stop in a row doubles the delay: 600 ms later no thread starts yet.
    await new Promise((resolve) => setTimeout(resolve, 600));
    assert.equal(await scan(), 0);
    assert.equal(threads.length, 2);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await assert.rejects(scan(), /search worker exited/);
    assert.equal(threads.length, 3);
  } finally {
    await runner.close();
  }
});
