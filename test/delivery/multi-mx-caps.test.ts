import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { createSmtpClient, type SmtpTarget } from '../../src/delivery/smtp-client.js';
import { silentLogger } from '../../src/lib/logger.js';
import { startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, eventsOf, holdReplies, startRig, waitForFinal, type DeliveryRig } from './harness.js';

test('smtp client: a host that refused a connection beside one of ours is at capacity while that one is busy, not once it is idle; refused beside none of ours, nothing is learned', async () => {
  let held = holdReplies();
  const sinkOptions = { host: '0.0.0.0', maxClients: 1, beforeReply: () => held.beforeReply() };
  const othersHost = await startSmtpSink(sinkOptions);
  const cappedHost = await startSmtpSink(sinkOptions);
  const options = { heloName: 'me.test', connectTimeoutMs: 5_000, greetingTimeoutMs: 5_000, socketTimeoutMs: 5_000, idleTimeoutMs: 60_000, maxMessagesPerConnection: 100, log: silentLogger };
  const client = createSmtpClient(options);
  const someoneElse = createSmtpClient(options);
  const target = (address: string, port: number, host = 'mx.two-hosts.test'): SmtpTarget => ({ host, address, port, secure: false, requireTls: false, verifyTls: false, group: 'two-hosts.test' });
  const envelope = { from: 'a@sender.test', to: 'r@two-hosts.test' };
  const message = Buffer.from('Subject: x\r\n\r\nhello\r\n');
  const onTheWire = async () => {
    while (!held.onTheWire()) await new Promise((resolve) => setTimeout(resolve, 10));
  };
  try {
    // Another sender's connection is the one the host takes: ours is refused beside none of ours.
    const other = target('127.0.0.1', othersHost.port);
    const theirs = someoneElse.send(other, envelope, message);
    await onTheWire();
    assert.equal((await client.send(other, envelope, message)).kind, 'connection-failed');
    assert.equal(client.hostAtCapacity(other), false, 'refused beside none of ours: a throttle, or another sender\'s connection');
    held.release();
    assert.equal((await theirs).kind, 'reply');

    held = holdReplies();
    const capped = target('127.0.0.1', cappedHost.port);
    const busy = client.send(capped, envelope, message);
    await onTheWire();
    const refused = await client.send(capped, envelope, message);
    assert.equal(refused.kind, 'connection-failed');
    assert.equal(refused.reply.sessionReply?.code, 421);
    assert.equal(client.hostAtCapacity(capped), true, 'one of ours taken and busy: another would be refused');
    assert.equal(client.hostAtCapacity(target('127.0.0.1', cappedHost.port, 'another-name.test')), true, 'the same host, by another name');
    assert.equal(client.hostAtCapacity(target('127.0.0.2', cappedHost.port)), false, 'per host');
    held.release();
    assert.equal((await busy).kind, 'reply');
    assert.equal(client.hostAtCapacity(capped), false, 'its connection is idle: reused, not a new one');
  } finally {
    client.close();
    someoneElse.close();
    await othersHost.stop();
    await cappedHost.stop();
  }
});

describe('two MX hosts taking different numbers of connections (2 at the preferred one, 5 at the other)', () => {
  let rig: DeliveryRig;
  let backup: SmtpSink;
  const perDomainConcurrency = 7;

  before(async () => {
    rig = await startRig({ sink: { host: '127.0.0.2', maxClients: 2 }, env: { POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: String(perDomainConcurrency) } });
    backup = await startSmtpSink({ host: '127.0.0.3', port: rig.sink.port, maxClients: 5 });
    await addSendingDomain(rig, 'sender.test');
    rig.dns.set('two-mx.test', 'MX', [{ preference: 10, exchange: 'a.two-mx.test' }, { preference: 20, exchange: 'b.two-mx.test' }]);
    rig.dns.set('a.two-mx.test', 'A', ['127.0.0.2']);
    rig.dns.set('b.two-mx.test', 'A', ['127.0.0.3']);
  });
  after(async () => {
    await rig.stop();
    await backup.stop();
  });

  test('every message once, no deferral; the preferred host is not asked for a connection per message, and the other host\'s connections are reused', async () => {
    const count = 1_000;
    const ids: string[] = [];
    for (let batch = 0; batch < count / 50; batch++) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `r${batch * 50 + i}@two-mx.test`, fromAddress: 'hello@sender.test', subject: 'Hi', text: 'Hello' }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      ids.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    for (const id of ids) assert.equal(await waitForFinal(rig, id, 60_000), 'delivered');
    const deferred = ids.filter((id) => eventsOf(rig, id).some((e) => e.type === 'deferred'));
    assert.deepEqual(deferred, [], 'no message deferred');
    assert.equal(rig.sink.messages.length + backup.messages.length, count, 'each message once');
    assert.ok(rig.sink.messages.length > 0 && backup.messages.length > 0, 'both hosts used');
    // Before: ~110 refused at the preferred host, and a connection per message at the other (each closed
    // to make room for the next try of the preferred one). Now 10-15: the first burst's refusals, before
    // any connection there was greeted, the ones under way as the cap was learned, and now and then one
    // as a connection closed after its 100th message crosses its replacement (a loaded machine).
    const refusedAtPreferred = rig.sink.tcpConnections - rig.sink.connections;
    assert.ok(refusedAtPreferred <= 3 * perDomainConcurrency, `${refusedAtPreferred} connections refused at the preferred host`);
    assert.ok(backup.connections <= backup.messages.length / 20, `${backup.connections} connections for ${backup.messages.length} messages at the other host`);
  });
});

test('smtp client: a cap learned while another connection was still in its setup grows as that one is taken, instead of holding the host one short for five minutes', async () => {
  // A host taking 2 connections, whose second answers EHLO late (a slow TLS handshake, a busy server):
  // a third, refused at its greeting meanwhile, saw only one of ours past its setup.
  const { server, heldReplies } = await startRawHost({ ehloDelayMs: (n) => (n === 2 ? 400 : 0) });
  const client = createSmtpClient({ heloName: 'me.test', connectTimeoutMs: 5_000, greetingTimeoutMs: 5_000, socketTimeoutMs: 5_000, idleTimeoutMs: 60_000, maxMessagesPerConnection: 100, log: silentLogger });
  const target: SmtpTarget = { host: 'mx.capped.test', address: '127.0.0.1', port: (server.address() as AddressInfo).port, secure: false, requireTls: false, verifyTls: false, group: 'capped.test' };
  const envelope = { from: 'a@sender.test', to: 'r@capped.test' };
  const message = Buffer.from('Subject: x\r\n\r\nhello\r\n');
  try {
    const first = client.send(target, envelope, message);
    await waitUntil(() => heldReplies.length === 1, 'the first message on the wire');
    const second = client.send(target, envelope, message);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the second is in its slow EHLO
    assert.equal((await client.send(target, envelope, message)).kind, 'connection-failed', 'the third refused at its greeting');
    assert.equal(client.hostAtCapacity(target), true);
    await waitUntil(() => heldReplies.length === 2, 'the second message on the wire');
    for (const reply of heldReplies.splice(1)) reply();
    assert.equal((await second).kind, 'reply');
    // Both taken: the cap is 2. The second's connection idle, the first's busy: room for this target.
    assert.equal(client.hostAtCapacity(target), false);
    client.close(); // the idle one goes: one of ours open, of the two the host takes
    assert.equal(client.hostAtCapacity(target), false, 'learned 1 (and kept 5 minutes), it said the host was full');
    for (const reply of heldReplies.splice(0)) reply();
    assert.equal((await first).kind, 'reply');
  } finally {
    client.close();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('smtp client: a 4.7.x refusal of AUTH beside a connection of ours teaches no cap: it is about this sender, not the number of connections', async () => {
  const { server, heldReplies } = await startRawHost({ authReply: (n) => (n === 2 ? '454 4.7.0 Temporary authentication failure' : '235 ok') });
  const client = createSmtpClient({ heloName: 'me.test', connectTimeoutMs: 5_000, greetingTimeoutMs: 5_000, socketTimeoutMs: 5_000, idleTimeoutMs: 60_000, maxMessagesPerConnection: 100, log: silentLogger });
  const target: SmtpTarget = { host: 'mx.auth.test', address: '127.0.0.1', port: (server.address() as AddressInfo).port, secure: false, requireTls: false, verifyTls: false, group: 'auth.test', auth: { user: 'u', pass: 'p' } };
  const envelope = { from: 'a@sender.test', to: 'r@auth.test' };
  const message = Buffer.from('Subject: x\r\n\r\nhello\r\n');
  try {
    const first = client.send(target, envelope, message);
    await waitUntil(() => heldReplies.length === 1, 'the first message on the wire');
    const refused = await client.send(target, envelope, message);
    assert.equal(refused.kind, 'connection-failed');
    assert.equal(refused.reply.sessionReply?.enhanced, '4.7.0');
    assert.equal(client.hostAtCapacity(target), false);
    for (const reply of heldReplies.splice(0)) reply();
    assert.equal((await first).kind, 'reply');
  } finally {
    client.close();
    await new Promise((resolve) => server.close(resolve));
  }
});

/**
 * A mail host on loopback speaking just enough SMTP, taking 2 connections (421 at the greeting of a
 * third); the nth connection's EHLO and AUTH replies are the test's. Replies after the message wait in
 * `heldReplies` until the test sends them.
 */
async function startRawHost({ ehloDelayMs = () => 0, authReply = () => '235 ok' }: { ehloDelayMs?: (n: number) => number; authReply?: (n: number) => string }) {
  let open = 0;
  let accepted = 0;
  const heldReplies: (() => void)[] = [];
  const server = createServer((socket: Socket) => {
    if (open >= 2) return void socket.end('421 4.7.0 Too many connections\r\n');
    open++;
    const n = ++accepted;
    socket.on('close', () => open--);
    socket.write('220 capped.test ESMTP\r\n');
    let buffered = '';
    let inData = false;
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n'); end >= 0; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (inData) {
          if (line === '.') (inData = false), heldReplies.push(() => socket.write('250 ok\r\n'));
          continue;
        }
        const command = line.slice(0, 4).toUpperCase();
        if (command === 'EHLO') setTimeout(() => socket.write('250-capped.test\r\n250-AUTH PLAIN\r\n250 8BITMIME\r\n'), ehloDelayMs(n));
        else if (command === 'AUTH') socket.write(`${authReply(n)}\r\n`);
        else if (command === 'DATA') (inData = true), socket.write('354 go\r\n');
        else if (command === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, heldReplies };
}
