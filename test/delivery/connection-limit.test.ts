import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo, Socket } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { createDomainLimiter, growConnectionLimitAfter } from '../../src/delivery/domain-limiter.js';
import { createSmtpClient, type SmtpTarget } from '../../src/delivery/smtp-client.js';
import { silentLogger } from '../../src/lib/logger.js';
import { startSmtpSink } from '../helpers/smtp-sink.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, eventsOf, routeToSink, startRig, waitForFinal, type DeliveryRig } from './harness.js';

/** Lets queued promise callbacks (a woken acquire) run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

test('domain limiter: a connection refused beside others lowers the limit to the connections the destination took; the rest of the burst lowers nothing more', async () => {
  const limiter = createDomainLimiter(5, () => 1_000);
  const slots = await Promise.all(Array.from({ length: 5 }, () => limiter.acquire('capped.test')));
  // Five sessions at once to a receiver taking two: two past their greeting, three refused.
  assert.equal(limiter.refusedConnection('capped.test', 2, slots[2], false), true, 'two connections taken');
  assert.equal(limiter.connectionLimit('capped.test'), 2);
  assert.equal(limiter.refusedConnection('capped.test', 2, slots[3], false), true, 'refused in the same burst');
  assert.equal(limiter.refusedConnection('capped.test', 2, slots[4], false), true);
  assert.equal(limiter.connectionLimit('capped.test'), 2, 'granted before the limit changed: lowers nothing more');
  for (const refused of slots.splice(2)) refused(false);
  let retried = false;
  const retry = limiter.acquire('capped.test').then((release) => ((retried = true), release));
  await settle();
  assert.equal(retried, false, 'two sessions at a limit of two: the refused message waits');
  slots.pop()!();
  await settle();
  assert.equal(retried, true, 'a slot freed under the new limit');
  assert.equal(limiter.connectionLimit('other.test'), 5, 'per destination');

  // Refused again with as many taken as the limit (a receiver counting what this side does not): one less.
  const again = await retry;
  assert.equal(limiter.refusedConnection('capped.test', 2, again, false), true);
  assert.equal(limiter.connectionLimit('capped.test'), 1);
  again(false);
  slots.pop()!();
});

test('domain limiter: refused with no connection taken is a throttle, however many sessions were under way (a receiver greeting every connection with 421)', async () => {
  const limiter = createDomainLimiter(5, () => 1_000);
  const slots = await Promise.all(Array.from({ length: 5 }, () => limiter.acquire('throttling.test')));
  for (const slot of slots) assert.equal(limiter.refusedConnection('throttling.test', 0, slot, false), false);
  assert.equal(limiter.connectionLimit('throttling.test'), 5, 'the limit stays for after the cool-down');
  for (const slot of slots) slot(false);
});

test('domain limiter: refused with no connection taken, just after one of ours closed: once taken for the closed connection still counted, then a throttle', async () => {
  const limiter = createDomainLimiter(2, () => 1_000);
  assert.equal(limiter.admit('d.test'), 0, 'admitted, as the engine does, until it is done with the destination');
  const first = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test', 0, first, true), true, 'the receiver may still count the one just closed');
  assert.equal(limiter.connectionLimit('d.test'), 2, 'the limit stays');
  first(false);
  const second = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test', 0, second, true), false, 'refused again: a throttle');
  second(false);
  limiter.recordSuccess('d.test');
  const third = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test', 0, third, true), true, 'a delivery since: once more');
  third(false);
  limiter.recordSuccess('d.test');
  const fourth = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test', 0, fourth, false), false, 'nothing closed lately: a throttle');
  fourth(false);
});

test('domain limiter: a lowered limit grows by one after a run of deliveries, and survives a throttle\'s recovery', async () => {
  let now = 1_000;
  const limiter = createDomainLimiter(3, () => now, { baseMs: 100, maxMs: 1_000 });
  const first = await limiter.acquire('d.test');
  const second = await limiter.acquire('d.test');
  assert.equal(limiter.refusedConnection('d.test', 1, second, false), true);
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

test('a receiver greeting every connection with 421 for a while is throttling: the connection limit stays for after its cool-down', async () => {
  // Refuses every connection at first (a throttle of this sender, not a cap on its connections), then takes all.
  let refusing = true;
  let openNow = 0;
  let mostOpenAfterwards = 0;
  const receiver = new SMTPServer({
    logger: false,
    disableReverseLookup: true,
    authOptional: true,
    hideSTARTTLS: true,
    onConnect(_session, callback) {
      if (refusing) return callback(Object.assign(new Error('4.7.0 Try again later'), { responseCode: 421 }));
      callback();
    },
    onData(stream, _session, callback) {
      stream.resume();
      stream.on('end', () => setTimeout(() => callback(null, 'ok'), 50));
    },
  });
  receiver.on('error', () => {});
  let connections = 0;
  receiver.server.on('connection', (socket: Socket) => {
    connections++;
    openNow++;
    if (!refusing) mostOpenAfterwards = Math.max(mostOpenAfterwards, openNow);
    socket.once('close', () => openNow--);
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const port = (receiver.server.address() as AddressInfo).port;
  const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(port), POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '5', POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '1s' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'throttling.test');
    const sendBatch = async (prefix: string, count: number) => {
      const items = Array.from({ length: count }, (_, i) => ({ toAddress: `${prefix}${i}@throttling.test`, fromAddress: 'hello@sender.test', subject: 'Hi', text: 'Hello' }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      return (response.body as { id: string }[]).map((item) => item.id);
    };
    const first = await sendBatch('a', 5);
    // Sessions under way at once are refused together (one is held by the cool-down before it starts, at times).
    await waitUntil(() => first.filter((id) => eventsOf(rig, id).some((e) => e.type === 'deferred')).length >= 3, 'the sessions refused, deferred');
    const metrics = await (await fetch(`${rig.app.baseUrl}/metrics`)).text();
    assert.match(metrics, /^postino_delivery_connections_refused_total 0$/m, 'no connection was taken beside the refused ones');
    refusing = false;
    for (const id of first) assert.equal(await waitForFinal(rig, id, 20_000), 'delivered');
    const more = await sendBatch('b', 50);
    for (const id of more) assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    assert.ok(mostOpenAfterwards > 2, `per_domain_concurrency 5 to a receiver without a cap: ${mostOpenAfterwards} connection(s) at once after the cool-down`);
  } finally {
    await rig.stop();
    await new Promise<void>((resolve) => receiver.close(() => resolve()));
  }
});

test('domain limiter: a destination\'s pace counts as known once a session ended or one has run half a second, not on the second a session is assumed to take', async () => {
  let now = 1_000;
  const limiter = createDomainLimiter(5, () => now);
  assert.equal(limiter.paceKnown('d.test'), false, 'never seen');
  const first = await limiter.acquire('d.test');
  now += 499;
  assert.equal(limiter.paceKnown('d.test'), false, 'a session of 499 ms, none ended: the assumed pace');
  now += 1;
  assert.equal(limiter.paceKnown('d.test'), true, 'a session running half a second');
  first();
  assert.equal(limiter.paceKnown('d.test'), true, 'a session ended: measured');
});

test('smtp client: two sessions making room at once for one destination do not take it past its connection cap', async () => {
  const sink = await startSmtpSink({ host: '0.0.0.0', maxClients: 2 });
  const client = createSmtpClient({ heloName: 'me.test', connectTimeoutMs: 5_000, greetingTimeoutMs: 5_000, socketTimeoutMs: 5_000, idleTimeoutMs: 60_000, maxMessagesPerConnection: 100, maxConnectionsPerGroup: 2, log: silentLogger });
  try {
    // Two MX hosts of one destination: two connections left idle at the first, then two messages for the second at once.
    const target = (address: string, host: string): SmtpTarget => ({ host, address, port: sink.port, secure: false, requireTls: false, verifyTls: false, group: 'capped.test' });
    const envelope = { from: 'a@sender.test', to: 'r@capped.test' };
    const message = Buffer.from('Subject: x\r\n\r\nhello\r\n');
    const first = target('127.0.0.1', 'mx1.capped.test');
    const second = target('127.0.0.2', 'mx2.capped.test');
    for (const outcome of await Promise.all([client.send(first, envelope, message), client.send(first, envelope, message)])) assert.equal(outcome.kind, 'reply');
    assert.equal(client.openConnections, 2);
    const outcomes = await Promise.all([client.send(second, envelope, message), client.send(second, envelope, message)]);
    assert.deepEqual(outcomes.map((outcome) => `${outcome.kind} ${outcome.reply.code}`), ['reply 250', 'reply 250'], 'each waited for an idle connection to close, and none was refused');
    assert.equal(client.openConnections, 2, 'the cap, idle connections included');
    assert.equal(sink.tcpConnections, sink.connections, 'no connection refused at the greeting');
  } finally {
    client.close();
    await sink.stop();
  }
});
