import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { waitUntil } from '../helpers/wait-until.js';
import { holdReplies, routeToSink, startRig, type DeliveryRig } from './harness.js';

// A project deleted while one of its emails is on the wire: the purge removes the email and its job, and
// the session's outcome then has nothing to record. That is expected, not a crash.
let rig: DeliveryRig;
const reply = holdReplies();

before(async () => {
  rig = await startRig({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_LOG_LEVEL: 'info' }, sink: { beforeReply: reply.beforeReply } });
  routeToSink(rig.dns, 'inbox.test');
});
after(() => rig.stop());

test('an email whose project is deleted during its SMTP session: delivered once, nothing recorded, no crash logged', async () => {
  const linked = await rig.app.api('POST', '/v1/project', { name: 'Leaving client' });
  const key: string = linked.body.apiKey;
  const sent = await rig.app.api('POST', '/v1/email/send', { toAddress: 'ann@inbox.test', fromAddress: 'app@leaving.test', subject: 'Bye', text: 'Bye' }, { key });
  assert.equal(sent.status, 200);
  await waitUntil(reply.onTheWire, 'the message on the wire');

  assert.deepEqual((await rig.app.api('DELETE', '/v1/project', undefined, { key })).body, { deleted: true });
  const { sqlite } = rig.app.appliance.context.database;
  assert.equal(sqlite.prepare('select count(*) from emails where id = ?').pluck().get(sent.body.id), 0);
  reply.release();

  await waitUntil(() => rig.app.logs.some((line) => line.includes('its email was deleted meanwhile')), 'the outcome dropped');
  assert.equal(rig.sink.messages.length, 1);
  assert.ok(!rig.app.logs.some((line) => line.includes('delivery attempt crashed')), rig.app.logs.filter((line) => line.includes('"error"')).join('\n'));
});

test("a project being deleted sends none of its queued mail: a delivery under way stops before its session", async () => {
  const linked = await rig.app.api('POST', '/v1/project', { name: 'Leaving with a backlog' });
  const key: string = linked.body.apiKey;
  routeToSink(rig.dns, 'held.test');
  rig.dns.hold('held.test');
  const received = rig.sink.messages.length;
  const sent = await rig.app.api('POST', '/v1/email/send', { toAddress: 'bob@held.test', fromAddress: 'app@leaving.test', subject: 'Late', text: 'Late' }, { key });
  assert.equal(sent.status, 200);
  await waitUntil(() => rig.dns.queries.some((query) => query.name === 'held.test'), 'the MX lookup under way');
  // What DELETE /v1/project's first write leaves while its purge has not reached this email yet.
  const { sqlite } = rig.app.appliance.context.database;
  sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${linked.body.id}`);
  rig.dns.release('held.test');

  await waitUntil(() => rig.app.logs.some((line) => line.includes('delivery dropped: the project is being deleted')), 'the delivery dropped');
  assert.equal(sqlite.prepare('select count(*) from delivery_jobs where email_id = ?').pluck().get(sent.body.id), 0);
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(rig.sink.messages.length, received, 'nothing sent');
});

test('a message waiting for its destination\'s connection stops there when its address was suppressed or its project deleted meanwhile', async () => {
  // One connection to the destination, held by a first message: the others are claimed (the claim
  // read no suppression, no deletion) and wait behind it.
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  let holding = false;
  const waiting = await startRig({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_LOG_LEVEL: 'info', POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '1' },
    sink: {
      beforeReply: (message) => {
        if (message.rcptTo[0] !== 'first@wait.test') return Promise.resolve();
        holding = true;
        return held;
      },
    },
  });
  try {
    routeToSink(waiting.dns, 'wait.test');
    const send = (toAddress: string, key?: string) =>
      waiting.app.api('POST', '/v1/email/send', { toAddress, fromAddress: 'app@sender.test', subject: 'S', text: 'T' }, key ? { key } : undefined).then((res) => res.body.id as string);
    // A quick first session: the destination's pace is known, so messages may wait for its connection.
    const warmUp = await send('warm@wait.test');
    await waitUntil(() => waiting.app.appliance.context.database.sqlite.prepare('select status from emails where id = ?').pluck().get(warmUp) === 'delivered', 'the warm-up delivered');
    const first = await send('first@wait.test');
    await waitUntil(() => holding, 'the first message on the wire');
    const leaving = (await waiting.app.api('POST', '/v1/project', { name: 'Leaving' })).body;
    const suppressedId = await send('second@wait.test');
    const deletedId = await send('third@wait.test', leaving.apiKey);
    const { sqlite } = waiting.app.appliance.context.database;
    const leased = (id: string) => sqlite.prepare('select lease_until from delivery_jobs where email_id = ?').pluck().get(id) !== null;
    await waitUntil(() => leased(suppressedId) && leased(deletedId), 'both claimed');

    assert.equal((await waiting.app.api('POST', '/v1/suppressions', { emailAddress: 'second@wait.test' })).status, 201);
    // What DELETE /v1/project's first write leaves while its purge has not reached this email yet.
    sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${leaving.id}`);
    release();

    const status = (id: string) => sqlite.prepare('select status from emails where id = ?').pluck().get(id);
    await waitUntil(() => status(first) === 'delivered' && status(suppressedId) === 'suppressed', 'the first delivered, the second suppressed');
    await waitUntil(() => waiting.app.logs.some((line) => line.includes('delivery dropped: the project is being deleted')), 'the third dropped');
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(waiting.sink.messages.map((m) => m.rcptTo[0]), ['warm@wait.test', 'first@wait.test']);
  } finally {
    release();
    await waiting.stop();
  }
});
