import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { addSendingDomain, eventsOf, routeToSink, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

let rig: DeliveryRig;
before(async () => {
  rig = await startRig({ sink: { onRcpt: (address) => (address.startsWith('gone@') ? { code: 550, message: '5.1.1 No such user' } : undefined) } });
  await addSendingDomain(rig, 'sender.test');
});
after(() => rig.stop());

async function scrape(): Promise<string> {
  const response = await fetch(`${rig.app.baseUrl}/metrics`);
  assert.equal(response.status, 200);
  return response.text();
}

function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  assert.ok(line, `series ${series} present`);
  return Number(line.slice(series.length + 1));
}

test('/metrics: attempts by outcome, queue depth and delivery latency move with deliveries', async () => {
  const before = await scrape();
  assert.equal(value(before, 'postino_delivery_attempts_total{outcome="delivered"}'), 0);
  assert.equal(value(before, 'postino_delivery_queue_depth'), 0);
  assert.equal(value(before, 'postino_delivery_latency_seconds_count'), 0);

  routeToSink(rig.dns, 'inbox.test');
  rig.dns.fail('broken.test', 'SERVFAIL');
  const delivered = await send(rig, { toAddress: 'ok@inbox.test', fromAddress: 'hello@sender.test' });
  const bounced = await send(rig, { toAddress: 'gone@inbox.test', fromAddress: 'hello@sender.test' });
  const deferred = await send(rig, { toAddress: 'later@broken.test', fromAddress: 'hello@sender.test' });
  assert.equal(await waitForFinal(rig, delivered), 'delivered');
  assert.equal(await waitForFinal(rig, bounced), 'bounce');
  for (let i = 0; i < 500 && !eventsOf(rig, deferred).some((e) => e.type === 'deferred'); i++) await new Promise((r) => setTimeout(r, 10));

  // Counters move when an outcome's write is durable (after its fsync), a moment after the row is visible.
  let after = await scrape();
  for (let i = 0; i < 200; i++) {
    const settled = (() => {
      try {
        return (
          value(after, 'postino_delivery_attempts_total{outcome="delivered"}') === 1 &&
          value(after, 'postino_delivery_attempts_total{outcome="bounced"}') === 1 &&
          value(after, 'postino_delivery_attempts_total{outcome="deferred"}') >= 1 &&
          value(after, 'postino_delivery_latency_seconds_count') === 1
        );
      } catch {
        return false; // a labelled series appears only after its first increment
      }
    })();
    if (settled) break;
    await new Promise((r) => setTimeout(r, 25));
    after = await scrape();
  }
  assert.equal(value(after, 'postino_delivery_attempts_total{outcome="delivered"}'), 1);
  assert.equal(value(after, 'postino_delivery_attempts_total{outcome="bounced"}'), 1);
  assert.ok(value(after, 'postino_delivery_attempts_total{outcome="deferred"}') >= 1);
  assert.equal(value(after, 'postino_delivery_queue_depth'), 1, 'the deferred email is still queued');
  assert.equal(value(after, 'postino_delivery_latency_seconds_count'), 1);
  assert.ok(value(after, 'postino_delivery_latency_seconds_sum') > 0);
  assert.equal(value(after, 'postino_delivery_latency_seconds_bucket{le="+Inf"}'), 1);
});
