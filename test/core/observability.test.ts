import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';
import { startReceiver } from '../webhooks/receiver.js';

/**
 * What an operator sees in the log at the default level (info): one line per state change of an email,
 * with its id (DESIGN convention 10), so grepping an id follows the email from accept to its final state.
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

test('every accepted email, queued, scheduled, suppressed or in a batch, has an info line with its id and status', async () => {
  assert.equal((await app.api('POST', '/v1/suppressions', { emailAddress: 'gone@example.com' })).status, 201);
  const queued = await app.api('POST', '/v1/email/send', { ...email, toAddress: 'ann@example.com' });
  const scheduled = await app.api('POST', '/v1/email/send', { ...email, toAddress: 'ann@example.com', scheduledAt: '2999-01-01T00:00:00Z' });
  const suppressed = await app.api('POST', '/v1/email/send', { ...email, toAddress: 'gone@example.com' });
  const batch = await app.api('POST', '/v1/email/send', [
    { ...email, toAddress: 'bob@example.com' },
    { ...email, toAddress: 'cy@example.com' },
  ]);
  const accepted = [
    [queued.body.id, 'queued'],
    [scheduled.body.id, 'scheduled'],
    [suppressed.body.id, 'suppressed'],
    [batch.body[0].id, 'queued'],
    [batch.body[1].id, 'queued'],
  ];
  for (const [id, status] of accepted) {
    assert.ok(id, 'accepted');
    const line = linesOf(id).find((l) => l.msg === 'email accepted');
    assert.ok(line, `an accept line names ${id} (${status}); its lines: ${JSON.stringify(linesOf(id))}`);
    assert.equal(line.level, 'info');
    assert.equal(line.status, status);
    assert.equal(line.projectId, app.appliance.defaultProjectId);
  }
});

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
