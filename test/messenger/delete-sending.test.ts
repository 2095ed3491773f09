import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { waitUntil } from '../helpers/wait-until.js';
import { holdReplies, routeToSink, startRig, type DeliveryRig } from '../delivery/harness.js';
import { startAppliance } from '../helpers/appliance.js';

// A broadcast deleted while it goes out (sent by mistake): the emails already made and queued for
// delivery were all delivered after the DELETE answered {deleted: true}. Real delivery to a real sink
// whose first message is held on the wire, so the rest of the broadcast is still queued at the DELETE.
let rig: DeliveryRig;
const reply = holdReplies();

before(async () => {
  rig = await startRig({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '1', POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test' },
    sink: { beforeReply: reply.beforeReply },
  });
  routeToSink(rig.dns, 'readers.test');
});
after(() => rig.stop());

test('deleting a broadcast that is going out deletes its queued emails: only those under way at that moment are delivered', async () => {
  const recipients = 30;
  for (let i = 0; i < recipients; i++) {
    assert.equal((await rig.app.api('POST', '/v1/contacts', { emailAddress: `reader${i}@readers.test` })).status, 200);
  }
  const draft = await rig.app.api('POST', '/v1/messenger', { fromAddress: 'news@sender.test', subject: 'Oops', html: '<p>Not yet</p>', status: 'queued' });
  assert.equal(draft.status, 200, JSON.stringify(draft.body));
  await rig.app.appliance.context.messenger.runDue(new Date());
  const { sqlite } = rig.app.appliance.context.database;
  const ofDraft = () => sqlite.prepare('select count(*) from emails where messenger_id = ?').pluck().get(draft.body.id) as number;
  assert.equal(ofDraft(), recipients, 'the whole broadcast made and queued');
  await waitUntil(reply.onTheWire, 'the first message on the wire');

  assert.deepEqual((await rig.app.api('DELETE', `/v1/messenger/${draft.body.id}`)).body, { deleted: true });
  // Left: the emails a delivery had claimed (the one on the wire, any waiting for its connection).
  const underWay = ofDraft();
  assert.ok(underWay >= 1 && underWay < recipients, `${underWay} of ${recipients} left`);
  const unclaimedJobs = sqlite.prepare('select count(*) from delivery_jobs j join emails e on e.id = j.email_id where e.messenger_id = ? and j.lease_until is null').pluck().get(draft.body.id);
  assert.equal(unclaimedJobs, 0, 'no queued email of it is left to claim');

  reply.release();
  await waitUntil(() => (sqlite.prepare(`select count(*) from emails where messenger_id = ? and status = 'queued'`).pluck().get(draft.body.id) as number) === 0, 'the ones under way finished');
  await new Promise((resolve) => setTimeout(resolve, 300));
  // Delivered: the one on the wire, and none that was not under way (one claimed but still waiting for
  // its connection is dropped when its session would start).
  assert.ok(rig.sink.messages.length >= 1 && rig.sink.messages.length <= underWay, `${rig.sink.messages.length} delivered, ${underWay} under way`);
  assert.equal(ofDraft(), rig.sink.messages.length, 'the rest dropped');
});

test("a broadcast whose project is being deleted stops quietly: no warning that it is tried again, which it is not", async () => {
  const linked = await rig.app.api('POST', '/v1/project', { name: 'Leaving with a broadcast' });
  const key: string = linked.body.apiKey;
  assert.equal((await rig.app.api('POST', '/v1/contacts', { emailAddress: 'last@readers.test' }, { key })).status, 200);
  const draft = await rig.app.api('POST', '/v1/messenger', { fromAddress: 'news@sender.test', subject: 'Bye', html: '<p>Bye</p>', status: 'queued' }, { key });
  assert.equal(draft.status, 200, JSON.stringify(draft.body));
  // What DELETE /v1/project's first write leaves while its purge has not reached the draft yet.
  const { sqlite } = rig.app.appliance.context.database;
  sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${linked.body.id}`);
  await rig.app.appliance.context.messenger.runDue(new Date());
  assert.equal(sqlite.prepare('select count(*) from emails where messenger_id = ?').pluck().get(draft.body.id), 0, 'nothing made');
  assert.equal(sqlite.prepare('select last_error from messenger_drafts where id = ?').pluck().get(draft.body.id), null);
  assert.ok(!rig.app.logs.some((line) => line.includes('tried again in a minute')), rig.app.logs.filter((line) => line.includes('messenger')).join('\n'));
});

test('a broadcast deleted as the appliance stopped (the deletion cut short): its queued emails are dropped by delivery after the restart, not delivered, before the scheduler finishes the deletion', async () => {
  // Made and queued by a first run whose deliveries only defer (no DNS server answers).
  const first = await startAppliance({
    keepDataDir: true,
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test', POSTINO_DNS_SERVERS: '127.0.0.1:9' },
  });
  let draftId: string;
  try {
    for (let i = 0; i < 20; i++) assert.equal((await first.api('POST', '/v1/contacts', { emailAddress: `reader${i}@stopped.test` })).status, 200);
    const draft = await first.api('POST', '/v1/messenger', { fromAddress: 'news@sender.test', subject: 'Oops', html: '<p>Not yet</p>', status: 'queued' });
    draftId = draft.body.id;
    await first.appliance.context.messenger.runDue(new Date());
  } finally {
    await first.stop();
  }
  type Sqlite = { prepare(sql: string): { pluck(): { get(...args: unknown[]): unknown } } };
  const ofDraft = (sqlite: Sqlite) => sqlite.prepare('select count(*) from emails where messenger_id = ?').pluck().get(draftId) as number;

  // The next start, with delivery that takes them at once (capture) and no scheduler (the test
  // appliance's default), as if the process died right after the DELETE marked the draft: every email
  // due, the ones under way at the kill among them (their leases released at start).
  const next = await startAppliance({
    dataDir: first.dataDir,
    env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test' },
    beforeStart: (appliance) => {
      const { sqlite } = appliance.context.database;
      assert.equal(sqlite.prepare(`select count(*) from emails where messenger_id = ? and status = 'queued'`).pluck().get(draftId), 20, 'queued, not delivered, before the stop');
      sqlite.prepare('update delivery_jobs set next_attempt_at = 0, lease_until = null where email_id in (select id from emails where messenger_id = ?)').run(draftId);
      sqlite.prepare('update messenger_drafts set deleting = 1 where id = ?').run(draftId);
    },
  });
  try {
    const { sqlite } = next.appliance.context.database;
    // Its log line comes once the write committed: waited for too.
    await waitUntil(() => ofDraft(sqlite) === 0 && next.logs.filter((line) => line.includes('delivery dropped: its broadcast was deleted')).length === 20, 'the deleted broadcast\'s emails to be dropped');
    assert.equal(sqlite.prepare(`select count(*) from emails where status = 'delivered'`).pluck().get(), 0, 'none delivered');
    // The scheduler's next run finishes the deletion itself.
    await next.appliance.context.messenger.runDue(new Date());
    assert.equal(sqlite.prepare('select count(*) from messenger_drafts where id = ?').pluck().get(draftId), 0);
  } finally {
    await next.stop();
  }
});

test('a send of the client\'s own that names a messengerId of no broadcast is delivered, not taken for a deleted broadcast\'s', async () => {
  const sent = await rig.app.api('POST', '/v1/email/send', { toAddress: 'own@readers.test', fromAddress: 'app@sender.test', subject: 'Tagged', text: 'Hi', messengerId: 'campaign-42' });
  assert.equal(sent.status, 200, JSON.stringify(sent.body));
  const { sqlite } = rig.app.appliance.context.database;
  await waitUntil(() => sqlite.prepare('select status from emails where id = ?').pluck().get(sent.body.id) === 'delivered', 'the tagged email to be delivered');
});
