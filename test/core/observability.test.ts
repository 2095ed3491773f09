import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';
import { startReceiver } from '../webhooks/receiver.js';

/**
 * What an operator sees at the default log level (info) and in /metrics: webhook attempts name their email
 * (DESIGN convention 10), and a receiver that keeps failing shows in the webhook metrics.
 */
let app: TestAppliance;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
before(async () => {
  receiver = await startReceiver();
  app = await startAppliance({
    env: {
      POSTINO_LOG_LEVEL: 'info',
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      POSTINO_DELIVERY_MODE: 'capture',
      POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
      POSTINO_WEBHOOKS_RETRY_BASE: '200ms',
      POSTINO_WEBHOOKS_RETRY_MAX: '1s',
    },
  });
});
after(async () => {
  await app?.stop();
  await receiver?.stop();
});

const email = { fromAddress: 'app@sender.test', subject: 'Hello', text: 'Hi there' };

/** The log lines that name `id`, parsed. */
function linesOf(id: string): Record<string, unknown>[] {
  return app.logs.filter((line) => line.includes(id)).map((line) => JSON.parse(line) as Record<string, unknown>);
}

test('the webhook attempts of an email event name the email: grepping its id shows them', async () => {
  assert.equal((await app.api('POST', '/v1/webhooks', { url: receiver.url('/hooks') })).status, 201);
  receiver.on('/hooks', (request) => ({ status: request.body.includes('dee@example.com') ? 503 : 200 }));
  const sent = await app.api('POST', '/v1/email/send', { ...email, toAddress: 'dee@example.com' });
  const id = sent.body.id as string;
  await waitUntil(() => linesOf(id).some((l) => l.msg === 'webhook attempt'), `a webhook attempt line naming ${id}`, 5_000);
  const attempt = linesOf(id).find((l) => l.msg === 'webhook attempt')!;
  assert.equal(attempt.emailId, id);
  assert.equal(attempt.type, 'email.delivered');
  assert.equal(attempt.statusCode, 503);
});

/** The value of one series in /metrics, or undefined when it is not there. */
async function metric(series: string): Promise<number | undefined> {
  const text = await (await fetch(`${app.baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

test('/metrics shows webhook deliveries waiting for a receiver that fails, and their attempts by outcome; the gauge is back at 0 once they are delivered', async () => {
  const pendingRows = () => (app.appliance.context.database.sqlite.prepare("select count(*) from webhook_deliveries where status = 'pending'").pluck().get() as number);
  let receiverUp = true;
  receiver.on('/hooks', () => ({ status: receiverUp ? 200 : 500 }));
  await waitUntil(() => pendingRows() === 0, 'earlier tests\' webhooks delivered');
  // Their outcomes are counted once durable: after the sync of the batch that made the rows visible.
  await app.appliance.context.writes.synced();
  await sleep(50);
  receiverUp = false;
  const attemptsBefore = { delivered: (await metric('postino_webhook_attempts_total{outcome="delivered"}')) ?? 0, retrying: (await metric('postino_webhook_attempts_total{outcome="retrying"}')) ?? 0 };
  const ids: string[] = [];
  for (const toAddress of ['eve@example.com', 'fay@example.com']) ids.push((await app.api('POST', '/v1/email/send', { ...email, toAddress })).body.id);
  await waitUntil(() => ids.every((id) => linesOf(id).some((l) => l.msg === 'webhook attempt')), 'a failed attempt for each');
  assert.equal(pendingRows(), 2);
  assert.equal(await metric('postino_webhook_deliveries_pending'), 2, 'the gauge matches the database');
  assert.ok(((await metric('postino_webhook_attempts_total{outcome="retrying"}')) ?? 0) - attemptsBefore.retrying >= 2);
  receiverUp = true;
  await waitUntil(() => pendingRows() === 0, 'the deliveries retried and delivered', 15_000);
  assert.equal(await metric('postino_webhook_deliveries_pending'), 0, 'drained: back at 0');
  // Counters move once an outcome's write is durable (after its fsync), a moment after the row is visible.
  const delivered = async () => ((await metric('postino_webhook_attempts_total{outcome="delivered"}')) ?? 0) - attemptsBefore.delivered;
  await waitUntil(async () => (await delivered()) >= 2, 'both deliveries counted');
  assert.equal(await delivered(), 2, 'each delivery counted once');
});

test('/metrics: deliveries held by a disabled webhook endpoint leave postino_webhook_deliveries_pending for postino_webhook_deliveries_paused, and come back when it is enabled', async () => {
  const pendingRows = () => (app.appliance.context.database.sqlite.prepare("select count(*) from webhook_deliveries where status = 'pending'").pluck().get() as number);
  let receiverUp = false;
  receiver.on('/hooks', () => ({ status: receiverUp ? 200 : 500 }));
  await waitUntil(() => pendingRows() === 0, 'earlier tests\' webhooks delivered');
  const listed = await app.api('GET', '/v1/webhooks');
  const endpointId = (listed.body.data as { id: string }[])[0]!.id;
  const ids: string[] = [];
  for (const toAddress of ['gil@example.com', 'hal@example.com']) ids.push((await app.api('POST', '/v1/email/send', { ...email, toAddress })).body.id);
  await waitUntil(() => ids.every((id) => linesOf(id).some((l) => l.msg === 'webhook attempt')), 'a failed attempt for each');
  assert.equal(await metric('postino_webhook_deliveries_pending'), 2);

  // Paused by the operator: nothing will send them until it is enabled again, so a backlog alert must clear.
  assert.equal((await app.api('PATCH', `/v1/webhooks/${endpointId}`, { enabled: false })).status, 200);
  assert.equal(pendingRows(), 2, 'kept for when it is enabled again (docs/webhooks.md)');
  assert.equal(await metric('postino_webhook_deliveries_pending'), 0, 'nothing waits to be sent');
  assert.equal(await metric('postino_webhook_deliveries_paused'), 2, 'counted apart');

  receiverUp = true;
  assert.equal((await app.api('PATCH', `/v1/webhooks/${endpointId}`, { enabled: true })).status, 200);
  await waitUntil(() => pendingRows() === 0, 'delivered once enabled', 15_000);
  assert.equal(await metric('postino_webhook_deliveries_pending'), 0);
  assert.equal(await metric('postino_webhook_deliveries_paused'), 0);
});
