import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../../src/lib/clock.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, eventsOf, jobOf, routeToSink, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

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

test('/metrics: postino_delivery_oldest_queued_seconds is the age of the longest-queued email, not of the lowest id', async () => {
  // Ahead of the wall clock: ids never go back to an earlier second (lib/ids.ts), and this process's ids
  // already carry today's.
  const clock = new ManualClock('2031-03-01T08:00:00.000Z');
  const stuck = await startRig({ app: { clock } });
  try {
    await addSendingDomain(stuck, 'sender.test');
    stuck.dns.fail('broken.test', 'SERVFAIL');
    const scrapeStuck = async () => (await fetch(`${stuck.app.baseUrl}/metrics`)).text();
    assert.equal(value(await scrapeStuck(), 'postino_delivery_oldest_queued_seconds'), 0, 'an empty queue');

    // Accepted first (the lowest id) but queued only when its schedule releases it, two hours later.
    const scheduled = await send(stuck, { toAddress: 'later@broken.test', fromAddress: 'hello@sender.test', scheduledAt: '2031-03-01T10:00:00.000Z' });
    clock.advance(3600_000);
    const waiting = await send(stuck, { toAddress: 'waiting@broken.test', fromAddress: 'hello@sender.test' });
    await waitUntil(() => eventsOf(stuck, waiting).some((e) => e.type === 'deferred'), 'deferred');
    clock.advance(3600_000);
    await stuck.app.appliance.context.emails.releaseScheduled(clock.now());
    await waitUntil(() => jobOf(stuck, scheduled) !== undefined, 'released into the queue');

    // Queued at 09:00 and still there at 10:00: an hour, whatever sorts first by id.
    assert.equal(value(await scrapeStuck(), 'postino_delivery_oldest_queued_seconds'), 3600);
    clock.advance(1800_000);
    assert.equal(value(await scrapeStuck(), 'postino_delivery_oldest_queued_seconds'), 5400, 'grows while nothing leaves');
  } finally {
    await stuck.stop();
  }
});
