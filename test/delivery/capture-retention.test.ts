import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildJobs } from '../../src/appliance.js';
import { pruneCapturedMessages } from '../../src/delivery/capture-retention.js';
import { ManualClock } from '../../src/lib/clock.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';

// Capture mode keeps what it would have sent for delivery.capture_retention (default 7 days), then the
// hourly job deletes the messages; the email records stay.
let app: TestAppliance;
const clock = new ManualClock('2026-05-01T08:00:00.000Z');
const day = 24 * 3600_000;

before(async () => {
  app = await startAppliance({ clock, env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
});
after(() => app?.stop());

async function sendAndCapture(subject: string): Promise<string> {
  const res = await app.api('POST', '/v1/email/send', { toAddress: 'qa@example.com', fromAddress: 'ci@sender.test', subject, text: 'hello' });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const deadline = Date.now() + 10_000;
  while ((await app.api('GET', `/v1/captured/${res.body.id}`)).status !== 200) {
    if (Date.now() > deadline) assert.fail(`email ${res.body.id} was not captured`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return res.body.id;
}

test('captured messages older than the retention are deleted by the hourly job; email records stay', async () => {
  const job = buildJobs(app.appliance.context).find((j) => j.name === 'delivery.prune-captured');
  assert.ok(job, 'the scheduler has the job');
  assert.equal(app.config.delivery.capture_retention, 7 * day, 'default retention: 7 days');
  const old = [await sendAndCapture('old 1'), await sendAndCapture('old 2')];
  clock.advance(3 * day);
  const recent = await sendAndCapture('recent');
  clock.advance(5 * day); // old ones are 8 days old, the recent one 5

  await job.run(clock.now());
  for (const id of old) {
    const res = await app.api('GET', `/v1/captured/${id}`);
    assert.equal(res.status, 404);
    assert.equal(res.body.errorCode, 'not-found');
    // The appliance knows it captured this one: the answer says the retention deleted it, not three guesses.
    assert.match(res.body.developerMessage, /^The captured message was deleted: captured messages are kept for delivery\.capture_retention \(7d\) after capture\./);
    assert.equal((await app.api('GET', `/v1/email/${id}`)).body.email.status, 'delivered', 'the record is kept');
  }
  assert.equal((await app.api('GET', `/v1/captured/${recent}`)).status, 200);

  assert.equal(await pruneCapturedMessages(app.appliance.context.writes, app.appliance.context.log, new Date(clock.nowMs() + 365 * day), 0), 0, '0s keeps everything');
  assert.equal((await app.api('GET', `/v1/captured/${recent}`)).status, 200);
});
