import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { test } from 'node:test';
import { writeTransaction } from '../../src/db/client.js';
import { recordWebhookEvent } from '../../src/webhooks/outbox.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAppliance, testApiKey, type TestAppliance } from '../helpers/appliance.js';
import { startChildAppliance } from '../helpers/child.js';
import { startReceiver } from './receiver.js';

test('config endpoint: listed read-only; the running dispatcher delivers right after the commit', async () => {
  const receiver = await startReceiver();
  const t = await startAppliance({
    env: {
      POSTINO_WEBHOOKS_URL: receiver.url('/from-config'),
      POSTINO_WEBHOOKS_SECRET: 'config-secret-123',
      POSTINO_WEBHOOKS_EVENTS: 'email.delivered,email.bounce',
      POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
      // A long poll proves the wake-on-commit path, not the poll, delivered the event.
      POSTINO_WEBHOOKS_POLL_INTERVAL: '1h',
    },
  });
  try {
    const list = await t.api('GET', '/v1/webhooks');
    assert.equal(list.body.data.length, 1);
    const endpoint = list.body.data[0];
    assert.equal(endpoint.source, 'config');
    assert.equal(endpoint.secret, 'config-secret-123');
    assert.deepEqual(endpoint.events, ['email.delivered', 'email.bounce']);
    const patch = await t.api('PATCH', `/v1/webhooks/${endpoint.id}`, { enabled: false });
    assert.equal(patch.status, 409);
    const removal = await t.api('DELETE', `/v1/webhooks/${endpoint.id}`);
    assert.equal(removal.status, 409);
    // Set by the environment, not a file: the message sends the operator to the variable.
    for (const refused of [patch, removal]) {
      assert.equal(refused.body.errorCode, 'conflict');
      assert.match(refused.body.developerMessage, /environment variable POSTINO_WEBHOOKS_URL/);
      assert.doesNotMatch(refused.body.developerMessage, /configuration file/);
    }

    const ctx = t.appliance.context;
    writeTransaction(ctx.database.sqlite, () =>
      recordWebhookEvent(ctx.database.db, ctx.clock, { projectId: t.appliance.defaultProjectId, type: 'email.bounce', data: { id: 'b1', bounceType: 'hard' } }),
    );
    const deadline = Date.now() + 5000;
    while (receiver.to('/from-config').length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const [request] = receiver.to('/from-config');
    assert.ok(request, 'delivered without waiting for the poll interval');
    assert.equal(request.headers['sidemail-secret'], 'config-secret-123');
    assert.deepEqual(JSON.parse(request.body), { type: 'email.bounce', data: { id: 'b1', bounceType: 'hard' } });
  } finally {
    await t.stop();
    await receiver.stop();
  }
});

test('without webhooks.allow_private, a URL naming a private address is refused when it is set; host names are checked at delivery', async () => {
  const t = await startAppliance();
  try {
    for (const url of ['http://127.0.0.1:9/x', 'http://2130706433/x', 'http://10.1.2.3/x', 'http://[::1]/x', 'http://[fd00::1]/x', 'http://169.254.169.254/latest', 'http://localhost:8080/x', 'http://app.localhost/x', 'http://localhost.:8080/x', 'http://App.LocalHost./x']) {
      const refused = await t.api('POST', '/v1/webhooks', { url });
      assert.equal(refused.status, 400, url);
      assert.equal(refused.body.errorCode, 'parameters-invalid');
      assert.match(refused.body.developerMessage, /^url: .+ is a private address; webhooks are not sent there unless webhooks\.allow_private is set\.$/);
    }
    const created = await t.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/x' });
    assert.equal(created.status, 201);
    assert.equal((await t.api('POST', '/v1/webhooks', { url: 'http://93.184.216.34/x' })).status, 201, 'a public address');
    const moved = await t.api('PATCH', `/v1/webhooks/${created.body.id}`, { url: 'http://192.168.1.10/x' });
    assert.equal(moved.status, 400);
    assert.match(moved.body.developerMessage, /192\.168\.1\.10 is a private address/);
  } finally {
    await t.stop();
  }
});

test('an event recorded in a transaction that rolls back is never delivered', async () => {
  const t = await startAppliance({ env: { POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true' } });
  try {
    const created = await t.api('POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/never' });
    const ctx = t.appliance.context;
    assert.throws(() =>
      writeTransaction(ctx.database.sqlite, () => {
        recordWebhookEvent(ctx.database.db, ctx.clock, { projectId: t.appliance.defaultProjectId, type: 'email.open', data: {} });
        throw new Error('state change failed');
      }),
    );
    assert.equal((await t.api('GET', `/v1/webhooks/${created.body.id}/deliveries`)).body.data.length, 0);
  } finally {
    await t.stop();
  }
});

test('the running dispatcher keeps its slots busy: a slow receiver holds one slot, not a round', async () => {
  const receiver = await startReceiver();
  // One event's POST is answered after 3 s; with 2 slots the other six must go through the free slot
  // meanwhile (a dispatcher working in rounds would hold them back until the slow one is answered).
  const slowMs = 3000;
  receiver.on('/mixed', (request) => ({ status: 200, delayMs: JSON.parse(request.body).data.slow ? slowMs : 0 }));
  const t = await startAppliance({
    env: { POSTINO_WEBHOOKS_URL: receiver.url('/mixed'), POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true', POSTINO_WEBHOOKS_CONCURRENCY: '2', POSTINO_WEBHOOKS_POLL_INTERVAL: '1h' },
  });
  try {
    const ctx = t.appliance.context;
    const record = (data: Record<string, unknown>) =>
      writeTransaction(ctx.database.sqlite, () => recordWebhookEvent(ctx.database.db, ctx.clock, { projectId: t.appliance.defaultProjectId, type: 'email.delivered', data }));
    record({ id: 'slow', slow: true });
    const deadline = Date.now() + 10_000;
    while (receiver.to('/mixed').length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    const slowAnsweredAt = Date.now() + slowMs;
    for (let i = 0; i < 6; i++) record({ id: `fast${i}` });
    while (receiver.to('/mixed').length < 7 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(receiver.to('/mixed').length, 7, 'all seven received');
    assert.ok(Date.now() < slowAnsweredAt, 'the six others went through while the slow POST was in flight');
    const ids = receiver.to('/mixed').map((request) => JSON.parse(request.body).data.id);
    assert.deepEqual(new Set(ids), new Set(['slow', 'fast0', 'fast1', 'fast2', 'fast3', 'fast4', 'fast5']));
  } finally {
    await t.stop();
    await receiver.stop();
  }
});

test('a hanging receiver with a backlog keeps the slots it has; the next free ones go to other endpoints', async () => {
  const receiver = await startReceiver();
  const hangMs = 4000;
  receiver.on('/hang', () => ({ status: 200, delayMs: hangMs }));
  receiver.on('/ok', () => ({ status: 200 }));
  const t = await startAppliance({ env: { POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true', POSTINO_WEBHOOKS_CONCURRENCY: '4', POSTINO_WEBHOOKS_POLL_INTERVAL: '1h' } });
  try {
    const hang = await t.api('POST', '/v1/webhooks', { url: receiver.url('/hang') });
    const ok = await t.api('POST', '/v1/webhooks', { url: receiver.url('/ok') });
    assert.equal(hang.status, 201);
    assert.equal(ok.status, 201);
    const ctx = t.appliance.context;
    const started = Date.now();
    // 20 events: each goes to both endpoints, the hanging one's deliveries first in line.
    writeTransaction(ctx.database.sqlite, () => {
      for (let i = 0; i < 20; i++) recordWebhookEvent(ctx.database.db, ctx.clock, { projectId: t.appliance.defaultProjectId, type: 'email.delivered', data: { id: `e${i}` } });
    });
    const deadline = Date.now() + 15_000;
    while (receiver.to('/ok').length < 20 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(receiver.to('/ok').length, 20, 'every event reached the healthy endpoint');
    assert.ok(Date.now() - started < hangMs, 'while the hanging receiver still held its first POSTs');
  } finally {
    await t.stop();
    await receiver.stop();
  }
});

test('webhooks.secret removed from the config: the config endpoint gets a generated secret, kept from then on, not the removed one', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-webhook-secret-'));
  const url = 'https://hooks.example.com/config';
  let t: TestAppliance | undefined;
  /** The config endpoint's secret after a start with `env` (the appliance is stopped again). */
  const secretAfterStart = async (env: Record<string, string>) => {
    t = await startAppliance({ dataDir, env: { POSTINO_WEBHOOKS_URL: url, ...env } });
    const secret = (await t.api('GET', '/v1/webhooks')).body.data[0].secret as string;
    const logs = t.logs;
    await t.stop();
    t = undefined;
    return { secret, logs };
  };
  try {
    assert.equal((await secretAfterStart({ POSTINO_WEBHOOKS_SECRET: 'leaked-secret-123' })).secret, 'leaked-secret-123');

    const removed = await secretAfterStart({});
    assert.notEqual(removed.secret, 'leaked-secret-123', 'the removed secret is no longer sent in sidemail-secret nor signs');
    assert.match(removed.secret, /^whsec_/);
    assert.ok(removed.logs.some((line) => line.includes('"level":"warn"') && line.includes('webhooks.secret')), 'the operator is told receivers need the new secret');

    assert.equal((await secretAfterStart({})).secret, removed.secret, 'generated once and kept');

    const standard = `whsec_${Buffer.alloc(24, 7).toString('base64')}`;
    assert.equal((await secretAfterStart({ POSTINO_WEBHOOKS_SECRET: standard })).secret, standard);
    assert.notEqual((await secretAfterStart({})).secret, standard, 'a configured secret of the whsec_ form is replaced too once removed');
  } finally {
    await t?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a start that stops between forgetting a removed webhooks.secret and replacing it (a kill -9 at boot) does not keep that secret', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-webhook-secret-crash-'));
  const env = { POSTINO_WEBHOOKS_URL: 'https://hooks.example.com/config' };
  const standard = `whsec_${Buffer.alloc(24, 9).toString('base64')}`;
  try {
    await (await startAppliance({ dataDir, keepDataDir: true, env: { ...env, POSTINO_WEBHOOKS_SECRET: standard } })).stop();
    // The start with the secret removed fails at the endpoint's update, ending as a kill there would. The
    // setting that said the stored secret was configured was its own commit: gone, the next start took
    // the operator's removed whsec_ secret for a generated one and kept it.
    const file = new Database(join(dataDir, 'postino.sqlite'));
    file.exec(`create trigger crash_here before update on webhook_endpoints begin select raise(abort, 'killed here'); end`);
    file.close();
    await assert.rejects(startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: testApiKey, ...env }), /killed here/);
    const fixed = new Database(join(dataDir, 'postino.sqlite'));
    fixed.exec('drop trigger crash_here');
    fixed.close();
    const next = await startAppliance({ dataDir, env });
    const secret = (await next.api('GET', '/v1/webhooks')).body.data[0].secret as string;
    await next.stop();
    assert.notEqual(secret, standard, 'the removed secret no longer signs');
    assert.match(secret, /^whsec_/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a config endpoint set in the configuration file: changing it through the API is refused naming the file and the key, not a variable', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-webhook-file-'));
  // startAppliance reads config.toml from the data directory, as the appliance does from its working directory.
  writeFileSync(join(dataDir, 'config.toml'), '[webhooks]\nurl = "https://hooks.example.com/from-file"\n');
  const t = await startAppliance({ dataDir });
  try {
    const [endpoint] = (await t.api('GET', '/v1/webhooks')).body.data;
    assert.equal(endpoint.source, 'config');
    for (const refused of [await t.api('PATCH', `/v1/webhooks/${endpoint.id}`, { enabled: false }), await t.api('DELETE', `/v1/webhooks/${endpoint.id}`)]) {
      assert.equal(refused.status, 409);
      assert.match(refused.body.developerMessage, /configuration file \(url under \[webhooks\]\)/);
      assert.doesNotMatch(refused.body.developerMessage, /POSTINO_/);
    }
  } finally {
    await t.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a config endpoint whose webhooks.url was since removed: the refusal says it is no longer set, not where to change it', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-webhook-removed-'));
  let t = await startAppliance({ dataDir, env: { POSTINO_WEBHOOKS_URL: 'https://hooks.example.com/gone' } });
  try {
    await t.stop();
    t = await startAppliance({ dataDir });
    const [endpoint] = (await t.api('GET', '/v1/webhooks')).body.data;
    assert.equal(endpoint.enabled, false, 'disabled, its history kept');
    const refused = await t.api('DELETE', `/v1/webhooks/${endpoint.id}`);
    assert.equal(refused.status, 409);
    assert.match(refused.body.developerMessage, /webhooks\.url, which is no longer set/);
  } finally {
    await t.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
