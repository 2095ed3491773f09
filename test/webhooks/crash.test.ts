import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { apiCall } from '../helpers/appliance.js';
import { startChildAppliance } from '../helpers/child.js';
import { waitUntil } from '../helpers/wait-until.js';
import { startReceiver } from './receiver.js';

const key = 'pst_webhook_crash_key_0123456789abcdefghijklmn';

/**
 * kill -9 while a webhook POST is out (the receiver has it, its answer not yet recorded): the restart
 * sends it again at once, with the same webhook-id, instead of after its lease (here 2 × 30 s + 5 s).
 */
test('kill -9 with a webhook POST in flight: the restart posts it again at once (same webhook-id), not after its lease', { timeout: 60_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-webhook-crash-'));
  const receiver = await startReceiver();
  // The first POST is answered only after the kill; any later one at once.
  receiver.on('/hook', () => (receiver.to('/hook').length === 1 ? { status: 200, delayMs: 3_000 } : { status: 200 }));
  const env = {
    POSTINO_STORAGE_DATA_DIR: dataDir,
    POSTINO_AUTH_API_KEY: key,
    POSTINO_DELIVERY_MODE: 'capture',
    POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
    POSTINO_SCHEDULER_ENABLED: 'false',
    POSTINO_WEBHOOKS_URL: receiver.url('/hook'),
    POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
    POSTINO_WEBHOOKS_TIMEOUT: '30s',
  };
  let child = await startChildAppliance(env);
  try {
    const sent = await apiCall(`http://127.0.0.1:${child.httpPort}`, 'POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@sender.test', subject: 'Hi', text: 'hello' }, key);
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    await waitUntil(() => receiver.to('/hook').length === 1, 'the email.delivered POST reached the receiver', 10_000);
    child.child.kill('SIGKILL');
    await child.exited;

    const restarted = performance.now();
    child = await startChildAppliance(env);
    await waitUntil(() => receiver.to('/hook').length === 2, 'the POST sent again after the restart', 10_000);
    const afterMs = performance.now() - restarted;
    const [first, again] = receiver.to('/hook');
    assert.equal(again.headers['webhook-id'], first.headers['webhook-id'], 'the same event: receivers deduplicate on webhook-id');
    assert.equal(JSON.parse(again.body).type, 'email.delivered');
    assert.match(child.output(), /"msg":"released webhook leases of a previous run","component":"webhooks","count":1/);

    const db = new Database(join(dataDir, 'postino.sqlite'), { readonly: true, fileMustExist: true });
    try {
      await waitUntil(() => db.prepare(`select status from webhook_deliveries`).pluck().get() === 'delivered', 'the delivery recorded as delivered', 5_000);
      assert.equal(db.prepare(`select count(*) from webhook_attempts`).pluck().get(), 1, 'one attempt recorded: the killed one never was');
    } finally {
      db.close();
    }
    assert.equal(receiver.to('/hook').length, 2, 'one extra copy, no more');
    t.diagnostic(`sent again ${Math.round(afterMs)} ms after the restart began`);
  } finally {
    child.child.kill('SIGKILL');
    await child.exited;
    await receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
