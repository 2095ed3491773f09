import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { waitUntil } from '../helpers/wait-until.js';
import { emailStatus, routeToSink, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

// delivery.concurrency bounds the messages being built or in an SMTP session. A delivered message whose
// outcome is still being written (batched, then fsync'ed) gives its slot back when its session ends, so
// the next message does not wait for that write.
let rig: DeliveryRig;
let releaseOutcomes: () => void = () => {};
const outcomesHeld = new Promise<void>((resolve) => (releaseOutcomes = resolve));

before(async () => {
  rig = await startRig({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_CONCURRENCY: '1' } });
  routeToSink(rig.dns, 'inbox.test');
  // Every write still commits at once; the answers of writes that return nothing (delivery outcomes,
  // unlike claims, which return the claimed jobs) reach the engine only once released.
  const writes = rig.app.appliance.context.writes;
  const run = writes.run.bind(writes);
  writes.run = (work) => run(work).then(async (value) => (value === undefined ? outcomesHeld.then(() => value) : value)) as never;
});
after(async () => {
  releaseOutcomes();
  await rig.stop();
});

test('with one slot, the second message goes out while the first one\'s outcome is still being written', async () => {
  const first = await send(rig, { toAddress: 'ann@inbox.test', fromAddress: 'app@sender.test' });
  const second = await send(rig, { toAddress: 'bob@inbox.test', fromAddress: 'app@sender.test' });
  await waitUntil(() => rig.sink.messages.length === 2, 'both messages received while the outcomes are held');
  assert.deepEqual(rig.sink.messages.map((message) => message.rcptTo).flat().sort(), ['ann@inbox.test', 'bob@inbox.test']);

  releaseOutcomes();
  assert.equal(await waitForFinal(rig, first), 'delivered');
  assert.equal(await waitForFinal(rig, second), 'delivered');
  assert.equal(emailStatus(rig, first), 'delivered');
});

test('with fewer slots free than a claim batch, mail is claimed after a short gather instead of waiting for slow sessions', async () => {
  // 8 slots, claims of at least 2: six sessions held by a slow destination leave 2 free, one of them
  // taken by a seventh held message; the last one must still go out while the others hang.
  let releaseSlow: () => void = () => {};
  const slowHeld = new Promise<void>((resolve) => (releaseSlow = resolve));
  const slow = await startRig({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_CONCURRENCY: '8', POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '10' },
    sink: { beforeReply: (message) => (message.rcptTo.some((to) => to.endsWith('@slow.test')) ? slowHeld : Promise.resolve()) },
  });
  try {
    routeToSink(slow.dns, 'slow.test');
    routeToSink(slow.dns, 'fast.test');
    for (let i = 0; i < 7; i++) await send(slow, { toAddress: `u${i}@slow.test`, fromAddress: 'app@sender.test' });
    await waitUntil(() => slow.sink.connections >= 7, 'seven sessions held');
    const fast = await send(slow, { toAddress: 'quick@fast.test', fromAddress: 'app@sender.test' });
    assert.equal(await waitForFinal(slow, fast, 5_000), 'delivered', 'delivered while seven sessions still hang');
  } finally {
    releaseSlow();
    await slow.stop();
  }
});
