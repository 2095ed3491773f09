import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { simpleParser } from 'mailparser';
import { buildJobs } from '../../src/appliance.js';
import { defaultConfig } from '../../src/config/schema.js';
import { catchUpEmailIndex } from '../../src/emails/fts-indexer.js';
import type { CursorStep } from '../../src/lib/batches.js';
import { pruneFinishedEmails } from '../../src/emails/retention.js';
import { createIdGenerator } from '../../src/lib/ids.js';
import { ManualClock } from '../../src/lib/clock.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';
import { startReceiver } from '../webhooks/receiver.js';

// emails.retention: finished emails are deleted by an hourly job once their last change is older than
// the retention, with their attachments, events, captured message and text-index rows. Everything else
// that tells of them (the suppression list, webhook events) stays.
let app: TestAppliance;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
const clock = new ManualClock('2026-05-01T08:00:00.000Z');
const day = 24 * 3600_000;
const sql = (query: string, ...args: unknown[]) => app.appliance.context.database.sqlite.prepare(query).all(...args) as any[];

before(async () => {
  receiver = await startReceiver();
  app = await startAppliance({
    clock,
    env: {
      POSTINO_DELIVERY_MODE: 'capture',
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      POSTINO_SENDING_CLICK_TRACKING: 'true',
      POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
      POSTINO_EMAILS_RETENTION: '30d',
    },
  });
});
after(async () => {
  await app?.stop();
  await receiver?.stop();
});

async function send(fields: Record<string, unknown>): Promise<string> {
  const res = await app.api('POST', '/v1/email/send', { toAddress: 'qa@example.com', fromAddress: 'ci@sender.test', ...fields });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.id;
}

async function sentHtml(id: string): Promise<string> {
  await waitUntil(async () => (await app.api('GET', `/v1/captured/${id}`)).status === 200, `email ${id} to be captured`);
  return String((await simpleParser(Buffer.from((await app.api('GET', `/v1/captured/${id}`)).body as string))).html);
}

const subjects = ['old', 'suppressed', 'scheduled', 'opened', 'recent'].map((name) => `Invoice retained-${name}`);
/** The ids search finds, over every subject of this test (subjects match exactly). */
async function searchSubjects(): Promise<string[]> {
  const ids: string[] = [];
  for (const subject of subjects) ids.push(...(await app.api('POST', '/v1/email/search', { query: { subject } })).body.data.map((email: { id: string }) => email.id));
  return ids.sort();
}

test('emails.retention defaults to 0s (keep everything) and the scheduler has the hourly job', () => {
  assert.equal(defaultConfig().emails.retention, 0);
  assert.equal(app.config.emails.retention, 30 * day);
  assert.ok(buildJobs(app.appliance.context).some((job) => job.name === 'emails.prune'));
});

test('finished emails last changed before the retention go with their attachments, events, captured message and text-index rows; the rest stays', async () => {
  const endpoint = await app.api('POST', '/v1/webhooks', { url: receiver.url('/retention') });
  assert.equal(endpoint.status, 201, JSON.stringify(endpoint.body));
  const suppressed = await app.api('POST', '/v1/suppressions', { emailAddress: 'gone@example.com' });
  assert.ok(suppressed.status < 300, JSON.stringify(suppressed.body));

  const old = await send({
    subject: 'Invoice retained-old',
    html: '<body><p>old</p><a href="https://example.com/paid">paid</a></body>',
    attachments: [{ name: 'invoice.txt', content: Buffer.from('old invoice').toString('base64') }],
  });
  const oldHtml = await sentHtml(old);
  const toSuppressed = await send({ toAddress: 'gone@example.com', subject: 'Invoice retained-suppressed', text: 'never sent' });
  const scheduled = await send({ subject: 'Invoice retained-scheduled', text: 'later', scheduledAt: new Date(clock.nowMs() + 60 * day).toISOString() });
  const opened = await send({ subject: 'Invoice retained-opened', html: '<body><p>read later</p></body>' });
  const openedHtml = await sentHtml(opened);
  await waitUntil(() => receiver.to('/retention').some((request) => request.body.includes(old)), 'email.delivered of the old email to be posted');
  await catchUpEmailIndex(app.appliance.context.writes);
  assert.deepEqual(await searchSubjects(), [old, toSuppressed, scheduled, opened].sort(), 'search finds all four');

  clock.advance(29 * day);
  // Opened a day before it would have gone: its last change is now recent.
  assert.equal((await fetch(/src="([^"]+\/t\/o\/[^"]+)"/.exec(openedHtml)![1])).status, 200);
  clock.advance(2 * day);
  const recent = await send({ subject: 'Invoice retained-recent', text: 'fresh' });
  await sentHtml(recent);
  // Signed links handed out just before the prune, still within their lifetime.
  const { email: beforePrune } = (await app.api('GET', `/v1/email/${old}`)).body;
  assert.equal(beforePrune.status, 'delivered');
  const eventsBefore = sql('select count(*) as n from webhook_events')[0].n;
  const suppressionsBefore = sql('select email_address, reason from suppressions order by email_address');

  const job = buildJobs(app.appliance.context).find((candidate) => candidate.name === 'emails.prune')!;
  assert.equal(await job.run(clock.now()), 2, 'the old delivered email and the old suppressed one');

  for (const id of [old, toSuppressed]) {
    const res = await app.api('GET', `/v1/email/${id}`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, { email: null }, 'the contract: the result is null when not found');
    assert.equal((await app.api('GET', `/v1/captured/${id}`)).status, 404);
  }
  for (const id of [scheduled, opened, recent]) assert.ok((await app.api('GET', `/v1/email/${id}`)).body.email, `${id} stays`);
  assert.deepEqual(await searchSubjects(), [scheduled, opened, recent].sort(), 'search skips the pruned ones');

  for (const url of [beforePrune.htmlReferenceUrl, beforePrune.attachments[0].fileUrl]) {
    const file = await fetch(url);
    assert.equal(file.status, 404);
    assert.equal((await file.json()).errorCode, 'not-found');
  }
  // A reader clicking a link of a pruned email is shown where it points, to follow it from there (no blind
  // redirect for an email no longer on file); nothing is recorded.
  const click = await fetch(/href="([^"]+\/t\/c\/[^"]+)"/.exec(oldHtml)![1], { redirect: 'manual' });
  assert.deepEqual([click.status, click.headers.get('location')], [200, null]);
  assert.match(await click.text(), /<a href="https:\/\/example\.com\/paid" rel="noreferrer">/);

  const sqlite = app.appliance.context.database.sqlite;
  for (const table of ['email_events', 'email_attachments', 'captured_messages', 'delivery_jobs']) {
    assert.equal(sql(`select count(*) as n from ${table} where email_id in (?, ?)`, old, toSuppressed)[0].n, 0, `no ${table} rows left`);
  }
  assert.equal(sqlite.prepare(`select count(*) from emails_fts where emails_fts match '"retained-old" OR "retained-suppressed"'`).pluck().get(), 0, 'no text-index rows left');
  await catchUpEmailIndex(app.appliance.context.writes); // the recent email, past the watermark
  assert.doesNotThrow(() => sqlite.prepare(`insert into emails_fts(emails_fts, rank) values ('integrity-check', 1)`).run(), 'the text index matches the emails');
  assert.deepEqual(sql('select email_address, reason from suppressions order by email_address'), suppressionsBefore, 'the suppression list outlives the emails');
  assert.ok(suppressionsBefore.some((row) => row.email_address === 'gone@example.com'));
  assert.equal(sql('select count(*) as n from webhook_events')[0].n, eventsBefore, 'webhook events are pruned by their own retention');
  const eventOfOld = receiver.to('/retention').find((request) => request.body.includes(old))!.headers['webhook-id'];
  const deliveries = (await app.api('GET', `/v1/webhooks/${endpoint.body.id}/deliveries`)).body.data as { id: string; eventId: string }[];
  const ofOld = deliveries.find((delivery) => delivery.eventId === eventOfOld);
  assert.ok(ofOld, 'the delivery of email.delivered about the pruned email is still listed');
  assert.equal((await app.api('POST', `/v1/webhooks/deliveries/${ofOld.id}/replay`)).status, 202, 'a delivery about a pruned email can still be replayed');

  assert.ok(app.logs.some((line) => line.includes('"msg":"emails pruned"') && line.includes('"count":2')), 'the job logs how many it deleted');
  assert.equal(await pruneFinishedEmails(app.appliance.context.writes, app.appliance.context.log, new Date(clock.nowMs() + 365 * day), 0), 0, '0s keeps everything');
});

test('a backlog of 200,000 old emails is pruned in short writes while sends keep being answered', async () => {
  const { sqlite } = app.appliance.context.database;
  const oldClock = new ManualClock('2026-01-02T00:00:00.000Z');
  const oldId = createIdGenerator();
  const email = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, text, is_open_tracked, created_at, updated_at)
     values (?, ?, 'delivered', ?, 'news@sender.test', ?, 'text', 'A newsletter of a few hundred bytes, as most are.', 0, ?, ?)`,
  );
  const event = sqlite.prepare(`insert into email_events (id, email_id, type, time) values (?, ?, 'delivered', ?)`);
  const backlog = 200_000;
  sqlite.transaction(() => {
    for (let i = 0; i < backlog; i++) {
      const id = oldId(oldClock);
      email.run(id, app.appliance.defaultProjectId, `reader${i}@example.com`, `Newsletter ${i}`, oldClock.nowMs(), oldClock.nowMs());
      event.run(oldId(oldClock), id, oldClock.nowMs());
      if (i % 10 === 0) oldClock.advance(1_000);
    }
  })();
  while ((await catchUpEmailIndex(app.appliance.context.writes)) > 0); // in the text index, as they would be

  // Every write of the job, counted: how many emails each one deleted.
  const writes = app.appliance.context.writes;
  const perWrite: number[] = [];
  const counting = {
    ...writes,
    call: async (name: string, args: unknown) => {
      const step = (await writes.call(name as 'emails.prune-finished', args as never)) as CursorStep;
      perWrite.push(step.pruned);
      return step;
    },
  } as typeof writes;
  let pruneFinished = false;
  const pruning = pruneFinishedEmails(counting, app.appliance.context.log, clock.now(), app.config.emails.retention).finally(() => (pruneFinished = true));
  const answeredDuringPrune: string[] = [];
  while (!pruneFinished) {
    const res = await app.api('POST', '/v1/email/send', { toAddress: 'qa@example.com', fromAddress: 'ci@sender.test', subject: 'during the prune', text: 'hello' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    if (!pruneFinished) answeredDuringPrune.push(res.body.id);
  }
  assert.equal(await pruning, backlog, 'every old email went');
  assert.ok(answeredDuringPrune.length >= 1, 'sends were answered between the writes of the prune');
  assert.ok(Math.max(...perWrite) <= 500, `no write deleted more than 500 emails (${Math.max(...perWrite)})`);
  assert.ok(perWrite.length >= backlog / 500, `${perWrite.length} writes`);
  assert.equal(sqlite.prepare("select count(*) from emails where subject like 'Newsletter %'").pluck().get(), 0);
  assert.equal(sqlite.prepare('select count(*) from emails where id in (select value from json_each(?))').pluck().get(JSON.stringify(answeredDuringPrune)), answeredDuringPrune.length, 'the sends are kept');
});
