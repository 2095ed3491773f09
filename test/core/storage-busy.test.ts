import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { commitBatch } from '../../src/db/batch-transaction.js';
import { limitLockWaitOnEventLoop, mainConnectionLockWaitMs, openDatabase } from '../../src/db/client.js';
import { isStorageBusy } from '../../src/lib/errors.js';
import { startAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';
import { routeToSink, send, startRig, waitForFinal } from '../delivery/harness.js';

// An operator's `sqlite3 data/postino.sqlite` session left inside BEGIN IMMEDIATE: another process holds
// the write lock for as long as it likes. Each write on the main connection used to wait 5 s for it on the
// event loop (busy_timeout), /healthz said nothing, and a send answered 500 after ~20 s.
for (const writerThread of ['true', 'false']) {
  test(`a write lock held by another process (writer thread ${writerThread}): sends answer 503 storage-busy, healthz says busy, mail accepted before is delivered once it is released`, async () => {
    const t = await startAppliance({
      env: { POSTINO_STORAGE_WRITER_THREAD: writerThread, POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture' },
    });
    const operator = new Database(t.appliance.context.database.sqlite.name);
    try {
      const email = (subject: string) => ({ toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject, text: 'hi' });
      const accepted = await t.api('POST', '/v1/email/send', email('accepted before'));
      assert.equal(accepted.status, 200);

      operator.prepare('BEGIN IMMEDIATE').run();
      const refused = await t.api('POST', '/v1/email/send', email('refused'));
      assert.equal(refused.status, 503);
      assert.equal(refused.body.errorCode, 'storage-busy');
      assert.match(refused.body.developerMessage, /write lock/);
      assert.equal(refused.body.moreInfo, 'docs/errors.md#storage-busy');
      assert.equal(refused.headers.get('retry-after'), String(refused.body.retryAfter));
      const blocked = await t.api('GET', '/healthz', undefined, { key: null });
      assert.equal(blocked.status, 503);
      assert.equal(blocked.body.components.storage, 'busy');
      assert.ok(t.logs.some((line) => line.includes('another process holds the database write lock')), 'the log says why');

      operator.prepare('COMMIT').run();
      const after = await t.api('POST', '/v1/email/send', email('after'));
      assert.equal(after.status, 200);
      const healthy = await t.api('GET', '/healthz', undefined, { key: null });
      assert.equal(healthy.body.components.storage, 'up');
      await waitUntil(async () => (await t.api('GET', `/v1/email/${accepted.body.id}`)).body.email?.status === 'delivered', 'the email accepted before the lock to be delivered');
      const stored = (t.appliance.context.database.sqlite.prepare("select count(*) as n from emails where subject = 'refused'").get() as { n: number }).n;
      assert.equal(stored, 0, 'the refused send stored nothing');
    } finally {
      if (operator.inTransaction) operator.prepare('ROLLBACK').run();
      operator.close();
      await t.stop();
    }
  });
}

test('a delivery whose outcome meets the write lock held by another process keeps it until the lock is released: delivered once, not sent again', async () => {
  let operator: Database.Database | undefined;
  const rig = await startRig({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_LOG_LEVEL: 'debug' },
    // The operator's session opens while the destination takes the message, before the outcome is written.
    sink: {
      beforeReply: async () => {
        operator = new Database(rig.app.appliance.context.database.sqlite.name);
        operator.prepare('BEGIN IMMEDIATE').run();
      },
    },
  });
  try {
    routeToSink(rig.dns, 'dest.test');
    const id = await send(rig, { toAddress: 'ann@dest.test', fromAddress: 'app@sender.test' });
    await waitUntil(() => rig.app.appliance.context.storage.state === 'busy' || rig.app.logs.some((line) => line.includes('delivery attempt crashed')), 'the outcome write to meet the lock', 20_000);
    operator!.prepare('COMMIT').run();
    assert.equal(await waitForFinal(rig, id), 'delivered');
    assert.equal(rig.sink.messages.length, 1, 'sent once');
    assert.ok(!rig.app.logs.some((line) => line.includes('delivery attempt crashed')), 'the outcome was kept, not dropped');
  } finally {
    if (operator?.inTransaction) operator.prepare('ROLLBACK').run();
    operator?.close();
    await rig.stop();
  }
});

test('only the first batch that meets a write lock held elsewhere waits for it; the next ones fail at once until one begins again', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-busy-'));
  const handle = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
  const operator = new Database(join(dir, 'postino.sqlite'));
  try {
    handle.sqlite.exec('create table t (x)');
    limitLockWaitOnEventLoop(handle.sqlite);
    const lockWait = () => handle.sqlite.pragma('busy_timeout', { simple: true });
    const insert = () => commitBatch(handle.sqlite, [() => handle.sqlite.prepare('insert into t values (1)').run()], () => {});
    operator.prepare('BEGIN IMMEDIATE').run();
    const [first] = insert();
    assert.equal(first.ok, false);
    assert.ok(isStorageBusy(!first.ok && first.error));
    assert.equal(lockWait(), 0, 'while the lock is known held, batches do not wait for it');
    const [second] = insert();
    assert.ok(isStorageBusy(!second.ok && second.error));
    operator.prepare('COMMIT').run();
    const [after] = insert();
    assert.equal(after.ok, true);
    assert.equal(lockWait(), mainConnectionLockWaitMs, 'the wait is back once a batch begins');
  } finally {
    if (operator.inTransaction) operator.prepare('ROLLBACK').run();
    operator.close();
    handle.close();
  }
});

test('a restart while another process holds the write lock stops the boot saying so, without a stack trace, and starts once it is released', async () => {
  // A restart after a crash with the operator's session still open: the boot's writes waited 5 s and the
  // start failed with "SqliteError: database is locked" and a stack trace.
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-busy-boot-'));
  const first = await startAppliance({ dataDir, keepDataDir: true });
  await first.stop();
  const operator = new Database(join(dataDir, 'postino.sqlite'));
  try {
    operator.prepare('BEGIN IMMEDIATE').run();
    await assert.rejects(startAppliance({ dataDir, keepDataDir: true }), (error: Error) => {
      assert.equal(error.name, 'StartupError', error.stack);
      assert.match(error.message, /another process holds the write lock of .*postino\.sqlite .*: commit or roll it back/);
      return true;
    });
    operator.prepare('ROLLBACK').run();
    const next = await startAppliance({ dataDir });
    assert.equal((await next.api('GET', '/v1/project')).status, 200);
    await next.stop();
  } finally {
    if (operator.inTransaction) operator.prepare('ROLLBACK').run();
    operator.close();
  }
});
