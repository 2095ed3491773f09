import { test } from 'node:test';
import assert from 'node:assert/strict';
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
