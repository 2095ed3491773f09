import Database from 'better-sqlite3';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { startAppliance } from '../helpers/appliance.js';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkpointGateOf } from '../../src/db/client.js';
import { addSendingDomain, eventsOf, jobOf, routeToSink, send, startRig, waitForFinal } from './harness.js';

test('an attempt that outlasts its lease is not claimed and sent again meanwhile', async () => {
  // The sink holds its answer to DATA 2.5 s; the lease is 1 s. Without renewal the job came due again
  // twice during the session, and the sink received three copies.
  let held = 0;
  const rig = await startRig({
    env: { POSTINO_DELIVERY_LEASE: '1s' },
    sink: {
      beforeReply: async () => {
        held++;
        await new Promise((resolve) => setTimeout(resolve, 2500));
      },
    },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'slow.test');
    const id = await send(rig, { toAddress: 'kim@slow.test', fromAddress: 'hello@sender.test' });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const during = jobOf(rig, id);
    assert.ok(during?.leaseUntil && during.leaseUntil > Date.now(), 'the lease is renewed while the session runs');
    assert.equal(await waitForFinal(rig, id), 'delivered');
    // Give a wrongly started second attempt time to show up at the sink.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal(held, 1, 'one session reached DATA');
    assert.equal(rig.sink.messages.filter((m) => m.rcptTo.includes('kim@slow.test')).length, 1);
    assert.deepEqual(eventsOf(rig, id).map((e) => e.type), ['queued', 'delivered']);
    assert.equal(jobOf(rig, id), undefined, 'the job is gone once delivered');
  } finally {
    await rig.stop();
  }
});

test('a job claimed again in the commit that made it due, while its attempt was ending, is not left leased until the lease expires', async () => {
  // The sink defers the first DATA (451). While the deferral is written, the group commit is held (as
  // the checkpointer's gate may hold it), so the reschedule (due 100 ms later) and the next claim land
  // in one batch, the claim after it: the claim leases the job again while its attempt is still ending.
  let dataCalls = 0;
  let gate: Int32Array | undefined;
  let deferredAt = 0;
  const rig = await startRig({
    env: { POSTINO_DELIVERY_LEASE: '20s', POSTINO_DELIVERY_RETRY_SCHEDULE: '100ms' },
    sink: {
      onData: () => {
        if (++dataCalls > 1) return undefined;
        deferredAt = Date.now();
        const hold = setInterval(() => Atomics.store(gate!, 0, 1), 1);
        setTimeout(() => {
          clearInterval(hold);
          Atomics.store(gate!, 0, 0);
          Atomics.notify(gate!, 0);
        }, 450);
        return { code: 451, message: '4.3.0 try again later' };
      },
    },
  });
  gate = checkpointGateOf(rig.app.appliance.context.database.sqlite);
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'reclaim.test');
    const id = await send(rig, { toAddress: 'kim@reclaim.test', fromAddress: 'hello@sender.test' });
    // Before, it went out only when the 20 s lease of the dropped claim expired.
    assert.equal(await waitForFinal(rig, id, 10_000), 'delivered');
    assert.ok(Date.now() - deferredAt < 10_000);
    assert.equal(dataCalls, 2);
  } finally {
    await rig.stop();
  }
});

test('a start after a run that stopped while delivering warns, naming the emails that may arrive twice (it said a count at info)', async () => {
  const env = { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9', POSTINO_DELIVERY_RETRY_SCHEDULE: '1h' };
  const first = await startAppliance({ env, keepDataDir: true });
  const sent = await first.api('POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject: 'leased', text: 'x' });
  assert.equal(sent.status, 200, JSON.stringify(sent.body));
  await first.stop();
  // As a kill -9 mid-attempt leaves it: the job still leased.
  const db = new Database(join(first.dataDir, 'postino.sqlite'));
  db.prepare('update delivery_jobs set lease_until = ? where email_id = ?').run(Date.now() + 60_000, sent.body.id);
  db.close();
  const second = await startAppliance({ env, dataDir: first.dataDir });
  try {
    const line = second.logs.find((entry) => entry.includes('the previous run stopped while delivering'));
    assert.ok(line, 'warned');
    assert.match(line, /"level":"warn"/);
    assert.ok(line.includes(`"count":1,"emailIds":["${sent.body.id}"]`), line);
  } finally {
    await second.stop();
    rmSync(first.dataDir, { recursive: true, force: true });
  }
});
