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

test('a backlog of large captured messages is pruned in short writes: a send issued meanwhile is answered before the prune ends', async () => {
  const { sqlite } = app.appliance.context.database;
  const projectId = sqlite.prepare('select id from projects limit 1').pluck().get() as string;
  const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, ?, 'delivered', 'qa@example.com', 'ci@sender.test', 'big', 'text', 0, 0, 0)`);
  const captured = sqlite.prepare(`insert into captured_messages (email_id, project_id, mail_from, rcpt_to, raw, captured_at) values (?, ?, 'ci@sender.test', 'qa@example.com', ?, 0)`);
  // 120 messages of 1 MB captured long ago (a CI sandbox sending attachments): one write of them all
  // held the writer thread, and with it every send, until the last was deleted.
  const message = Buffer.alloc(1024 * 1024, 'x');
  sqlite.transaction(() => {
    for (let i = 0; i < 120; i++) {
      email.run(`big-${i}`, projectId);
      captured.run(`big-${i}`, projectId, message);
    }
  })();
  let pruneFinished = false;
  const pruning = pruneCapturedMessages(app.appliance.context.writes, app.appliance.context.log, clock.now(), 7 * day).then((count) => {
    pruneFinished = true;
    return count;
  });
  const send = await app.api('POST', '/v1/email/send', { toAddress: 'qa@example.com', fromAddress: 'ci@sender.test', subject: 'during the prune', text: 'hello' });
  assert.equal(send.status, 200, JSON.stringify(send.body));
  assert.equal(pruneFinished, false, 'the send was answered between two of the prune writes');
  assert.equal(await pruning, 120, 'and the prune went on to delete every old message');
  assert.equal(sqlite.prepare("select count(*) from captured_messages where email_id like 'big-%'").pluck().get(), 0);
});
