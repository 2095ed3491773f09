import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createDomainLimiter, growConnectionLimitAfter } from '../../src/delivery/domain-limiter.js';
import { addSendingDomain, eventsOf, routeToSink, startRig, waitForFinal, type DeliveryRig } from './harness.js';

/** Lets queued promise callbacks (a woken acquire) run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

test('domain limiter: a connection refused beside others lowers the destination\'s limit to them; alone, it is a throttle', async () => {
  const limiter = createDomainLimiter(5, () => 1_000);
  const releases = await Promise.all(Array.from({ length: 5 }, () => limiter.acquire('capped.test')));
  assert.equal(limiter.refusedConnection('capped.test'), true, 'four others were under way');
  assert.equal(limiter.connectionLimit('capped.test'), 4);
  releases.pop()!(false);
  let retried = false;
  const retry = limiter.acquire('capped.test').then((release) => ((retried = true), release));
  await settle();
  assert.equal(retried, false, 'four sessions at a limit of four: the refused message waits');
  assert.equal(limiter.refusedConnection('capped.test'), true);
  releases.pop()!(false);
  assert.equal(limiter.refusedConnection('capped.test'), true);
  releases.pop()!(false);
  assert.equal(limiter.connectionLimit('capped.test'), 2, 'the two sessions the destination took');
  await settle();
  assert.equal(retried, false);
  releases.pop()!();
  await settle();
  assert.equal(retried, true, 'a slot freed under the new limit');
  assert.equal(limiter.connectionLimit('other.test'), 5, 'per destination');

  const alone = createDomainLimiter(5, () => 1_000);
  const release = await alone.acquire('throttling.test');
  assert.equal(alone.refusedConnection('throttling.test'), false, 'nobody else was under way: a throttle');
  assert.equal(alone.connectionLimit('throttling.test'), 5);
  release();
  releases.pop()!();
  (await retry)();
});

test('domain limiter: refused with nothing else under way right after a session ended: once taken for the closed connection still counted, then a throttle', async () => {
  let now = 1_000;
  const limiter = createDomainLimiter(2, () => now);
  (await limiter.acquire('d.test'))();
  now += 10;
  const first = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test'), true, 'a session ended 10 ms ago: the receiver may still count it');
  assert.equal(limiter.connectionLimit('d.test'), 2, 'the limit stays');
  first(false);
  const second = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test'), false, 'refused again: a throttle');
  second(false);
  limiter.recordSuccess('d.test');
  const third = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test'), true, 'a delivery since: once more');
  third(false);
  now += 1_000;
  const fourth = await limiter.acquire('d.test');
  limiter.recordSuccess('d.test');
  assert.equal(limiter.refusedConnection('d.test'), false, 'the last session ended a second ago: a throttle');
  fourth(false);
});

test('domain limiter: a lowered limit grows by one after a run of deliveries, and survives a throttle\'s recovery', async () => {
  let now = 1_000;
  const limiter = createDomainLimiter(3, () => now, { baseMs: 100, maxMs: 1_000 });
  const first = await limiter.acquire('d.test');
  const second = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test'), true);
  assert.equal(limiter.connectionLimit('d.test'), 1);
  second(false);
  first();
  for (let i = 1; i < growConnectionLimitAfter; i++) limiter.recordSuccess('d.test');
  assert.equal(limiter.connectionLimit('d.test'), 1, `${growConnectionLimitAfter - 1} deliveries`);
  const held = await limiter.acquire('d.test');
  let woken = false;
  const waiting = limiter.acquire('d.test').then((release) => ((woken = true), release));
  await settle();
  assert.equal(woken, false);
  limiter.recordSuccess('d.test');
  await settle();
  assert.equal(limiter.connectionLimit('d.test'), 2, 'one more connection is tried');
  assert.equal(woken, true, 'and given to a message waiting for one');
  held();
  (await waiting)();

  // A throttle: one probe at a time, then back to the learned limit, not to per_domain_concurrency.
  limiter.recordThrottle('d.test');
  assert.equal(limiter.connectionLimit('d.test'), 1);
  now += 200;
  limiter.recordSuccess('d.test');
  assert.equal(limiter.connectionLimit('d.test'), 2);
});

describe('a destination that takes fewer connections than per_domain_concurrency (smtp-server maxClients 2)', () => {
  let rig: DeliveryRig;

  before(async () => {
    rig = await startRig({ sink: { maxClients: 2 }, env: { POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '5', POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '1s' } });
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'capped.test');
  });
  after(() => rig.stop());

  test('gets every message once, with no deferral: the refused connections lower the limit, no attempt is charged', async () => {
    const count = 300;
    const ids: string[] = [];
    for (let batch = 0; batch < count / 50; batch++) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `r${batch * 50 + i}@capped.test`, fromAddress: 'hello@sender.test', subject: 'Hi', text: 'Hello' }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      ids.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    for (const id of ids) assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    const deferred = ids.filter((id) => eventsOf(rig, id).some((e) => e.type === 'deferred'));
    assert.deepEqual(deferred, [], 'no message deferred for a connection the destination refused');
    assert.equal(rig.sink.messages.length, count, 'each message once');
    const refused = rig.sink.tcpConnections - rig.sink.connections;
    // Three of the first five connections, then at most one try of a third connection per run of deliveries.
    const most = 3 + Math.floor(count / growConnectionLimitAfter);
    assert.ok(refused >= 3 && refused <= most, `${refused} connections refused (3 to ${most} expected)`);
    const metrics = await (await fetch(`${rig.app.baseUrl}/metrics`)).text();
    assert.match(metrics, new RegExp(`^postino_delivery_connections_refused_total ${refused}$`, 'm'), 'operators see each refusal');
  });
});

describe('a connection closed after its share of messages (100) is gone before its replacement opens', () => {
  let rig: DeliveryRig;

  before(async () => {
    rig = await startRig({ sink: { maxClients: 2 }, env: { POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '2' } });
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'rotating.test');
  });
  after(() => rig.stop());

  test('never more connections open than per_domain_concurrency, and none refused', async () => {
    const ids: string[] = [];
    for (let batch = 0; batch < 9; batch++) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `r${batch * 50 + i}@rotating.test`, fromAddress: 'hello@sender.test', subject: 'Hi', text: 'Hello' }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      ids.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    for (const id of ids) assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    assert.ok(rig.sink.connections >= 5, `450 messages at 100 per connection take at least 5 connections (${rig.sink.connections})`);
    assert.equal(rig.sink.mostOpenAtOnce, 2);
    assert.equal(rig.sink.tcpConnections, rig.sink.connections, 'no connection refused at the greeting');
  });
});
