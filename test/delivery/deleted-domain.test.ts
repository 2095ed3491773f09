import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { retiredSigningKeys } from '../../src/db/schema/index.js';
import { buildJobs } from '../../src/appliance.js';
import { ManualClock } from '../../src/lib/clock.js';
import type { Reply } from '../helpers/smtp-sink.js';
import { addSendingDomain, jobOf, routeToSink, send, startRig, verifyDkim, waitForEvent, waitForFinal, type DeliveryRig } from './harness.js';
import { waitUntil } from '../helpers/wait-until.js';

/**
 * A sending domain deleted while mail accepted under it waits for a retry: that mail still goes out
 * signed with the domain's key (it was accepted under it, and the DNS record usually outlives the
 * deletion), mail accepted after the deletion does not, and the kept key is forgotten once no mail
 * queued before the deletion can be waiting any more.
 */
let rig: DeliveryRig;
const rcptScript = new Map<string, Reply[]>();

before(async () => {
  rig = await startRig({
    sink: { onRcpt: (address) => rcptScript.get(address)?.shift() },
    env: {
      // Room to delete the domain between the first attempt and the retry, which comes after delivery
      // has forgotten the key it looked up for the first (it keeps one for 5 s).
      POSTINO_DELIVERY_RETRY_SCHEDULE: '5500ms',
      // A sandbox: the sender needs no verified domain, so mail from it is accepted after the deletion.
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
    },
  });
});
after(() => rig.stop());

test('mail queued before its domain was deleted goes out signed with the kept key; mail queued after goes out unsigned', async () => {
  await addSendingDomain(rig, 'sender.test');
  const pending = await rig.app.api('POST', '/v1/domains', { domain: 'never-verified.test' });
  routeToSink(rig.dns, 'slow.test');
  rcptScript.set('dave@slow.test', [{ code: 451, message: '4.3.0 Try again later' }]);

  const queuedBefore = await send(rig, { toAddress: 'dave@slow.test', fromAddress: 'news@sender.test' });
  await waitForEvent(rig, queuedBefore, 'deferred');
  const domainId = (await rig.app.api('GET', '/v1/domains')).body.data.find((d: { domain: string }) => d.domain === 'sender.test').id;
  assert.deepEqual((await rig.app.api('DELETE', `/v1/domains/${domainId}`)).body, { deleted: true });
  assert.deepEqual((await rig.app.api('DELETE', `/v1/domains/${pending.body.id}`)).body, { deleted: true });
  assert.deepEqual((await rig.app.api('GET', '/v1/domains')).body.data, [], 'both domains are gone from the API');
  const kept = rig.app.appliance.context.database.db.select().from(retiredSigningKeys).all();
  assert.deepEqual(kept.map((k) => k.domain), ['sender.test'], 'only a domain that could sign leaves its key');

  assert.equal(await waitForFinal(rig, queuedBefore, 15_000), 'delivered');
  const queuedAfter = await send(rig, { toAddress: 'erin@slow.test', fromAddress: 'news@sender.test' });
  assert.equal(await waitForFinal(rig, queuedAfter), 'delivered');

  const signed = rig.sink.messages.find((m) => m.rcptTo[0] === 'dave@slow.test')!;
  const results = await verifyDkim(signed.raw, rig.dns.address);
  assert.equal(results.length, 1, 'the retried message carries one signature');
  assert.equal(results[0].status.result, 'pass', JSON.stringify(results[0].status));
  assert.equal(results[0].signingDomain, 'sender.test');
  const unsigned = rig.sink.messages.find((m) => m.rcptTo[0] === 'erin@slow.test')!;
  assert.doesNotMatch(unsigned.raw.toString(), /^DKIM-Signature:/m, 'mail accepted after the deletion is not signed with the kept key');
});

test('a domain of the project that covers the sender signs before a kept key does', async () => {
  // sender.test added again: a new key pair under a new selector, while the deleted one's key is kept.
  const current = await addSendingDomain(rig, 'sender.test');
  const [kept] = rig.app.appliance.context.database.db.select().from(retiredSigningKeys).all();
  assert.notEqual(current.selector, kept.selector);
  // A subdomain sender both cover, not looked up before (delivery keeps a sender domain's key for 5 s).
  const id = await send(rig, { toAddress: 'fay@slow.test', fromAddress: 'news@mail.sender.test' });
  assert.equal(await waitForFinal(rig, id), 'delivered');
  const message = rig.sink.messages.find((m) => m.rcptTo[0] === 'fay@slow.test')!;
  const results = await verifyDkim(message.raw, rig.dns.address);
  assert.equal(results[0]?.status.result, 'pass', JSON.stringify(results[0]?.status));
  assert.equal(results[0].selector, current.selector, 'signed with the current key, not the kept one');
});

test('the kept key is pruned once mail queued before the deletion is past delivery.give_up_after', async () => {
  const { context } = rig.app.appliance;
  const prune = buildJobs(context).find((job) => job.name === 'domains.prune-retired-keys')!;
  assert.ok(prune, 'the scheduler runs the prune');
  const [kept] = context.database.db.select().from(retiredSigningKeys).all();
  assert.ok(kept, 'the first test left a kept key');
  const lifetimeMs = context.config.delivery.give_up_after + 24 * 60 * 60 * 1000;
  assert.deepEqual(await prune.run(new Date(kept.retiredAt + lifetimeMs)), { pruned: 0 }, 'kept while such mail may still wait');
  assert.deepEqual(await prune.run(new Date(kept.retiredAt + lifetimeMs + 1)), { pruned: 1 });
  assert.equal(context.database.db.select().from(retiredSigningKeys).all().length, 0);
});

test('the kept key stays while mail queued before the deletion still waits past give_up_after (held by the suspension rule): that mail goes out signed', async () => {
  const dayMs = 86_400_000;
  const clock = new ManualClock('2026-03-01T12:00:00Z');
  const held = await startRig({ app: { clock } });
  try {
    await addSendingDomain(held, 'sender.test');
    routeToSink(held.dns, 'inbox.test');
    const { context } = held.app.appliance;
    const { sqlite } = context.database;
    const id = await send(held, { toAddress: 'held@inbox.test', fromAddress: 'hello@sender.test', scheduledAt: new Date(clock.nowMs() + 60_000).toISOString() });
    const projectId = sqlite.prepare('select project_id from emails where id = ?').pluck().get(id) as string;
    // A bounce storm today pauses the project (spec §8); the scheduled email comes due and is held.
    sqlite.prepare('insert into project_sending_stats (project_id, day, sent, bounces, complaints) values (?, ?, 0, 100, 0)').run(projectId, Math.floor(clock.nowMs() / dayMs));
    clock.advance(61_000);
    await context.emails.releaseScheduled(clock.now());
    await waitUntil(() => jobOf(held, id)?.leaseUntil === null && jobOf(held, id)!.nextAttemptAt > clock.nowMs(), 'the email held for the pause');
    // The operator deletes the sending domain meanwhile; its key is kept for this mail.
    const domainId = sqlite.prepare("select id from domains where domain = 'sender.test'").pluck().get() as string;
    assert.deepEqual((await held.app.api('DELETE', `/v1/domains/${domainId}`)).body, { deleted: true });
    // The hourly prune, past give_up_after and its day of margin, while the pause (a 7-day window) goes on.
    clock.advance(6 * dayMs + 3_600_000);
    const prune = buildJobs(context).find((job) => job.name === 'domains.prune-retired-keys')!;
    assert.deepEqual(await prune.run(clock.now()), { pruned: 0 }, 'kept while mail queued before the deletion waits');
    // The bounces age out of the window: the mail goes out, signed as when it was accepted.
    sqlite.prepare('delete from project_sending_stats').run();
    clock.advance(11 * 60_000);
    assert.equal(await waitForFinal(held, id), 'delivered');
    const results = await verifyDkim(held.sink.messages[0].raw, held.dns.address);
    assert.equal(results[0]?.signingDomain, 'sender.test', 'signed with the kept key');
    assert.deepEqual(await prune.run(clock.now()), { pruned: 1 }, 'forgotten once that mail is finished');
  } finally {
    await held.stop();
  }
});
