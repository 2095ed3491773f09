import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSmtpClient } from '../../src/delivery/smtp-client.js';
import { silentLogger } from '../../src/lib/logger.js';
import { startSmtpSink } from '../helpers/smtp-sink.js';

// A soak run (greylisting and refusing destinations beside accepting ones) opened one TCP connection per
// refused attempt: 56,888 connections for 103,904 delivered messages and 55,684 refusals. A refusal of a
// message is the server's answer to that message, not a broken session: nodemailer's own pool sends
// RSET and keeps the connection, and so must the delivery client (with STARTTLS, every new connection
// is a TLS handshake, and receivers limit connections per client).
const client = () =>
  createSmtpClient({ heloName: 'mta.postino.test', connectTimeoutMs: 5000, greetingTimeoutMs: 5000, socketTimeoutMs: 10_000, idleTimeoutMs: 2000, maxMessagesPerConnection: 100, log: silentLogger });
const message = Buffer.from('Subject: hi\r\n\r\nhello\r\n');

test('a refused message (4xx/5xx to RCPT TO or after DATA) leaves its connection open for the next message', async () => {
  const sink = await startSmtpSink({
    onRcpt: (address) => (address.startsWith('grey') ? { code: 451, message: '4.2.0 Greylisted' } : address.startsWith('gone') ? { code: 550, message: '5.1.1 No such user' } : undefined),
    onData: (m) => (m.rcptTo[0].startsWith('spam') ? { code: 554, message: '5.7.1 Rejected as spam' } : undefined),
  });
  const smtp = client();
  const target = { host: 'mx.dest.test', address: '127.0.0.1', port: sink.port, secure: false, requireTls: false, verifyTls: false, group: 'dest.test' };
  try {
    const send = (to: string) => smtp.send(target, { from: 'a@sender.test', to }, message);
    const grey = await send('grey@dest.test');
    assert.equal(grey.kind, 'reply');
    assert.equal(grey.kind === 'reply' && grey.reply.code, 451);
    const gone = await send('gone@dest.test');
    assert.equal(gone.kind === 'reply' && gone.reply.code, 550);
    const spam = await send('spam@dest.test');
    assert.equal(spam.kind === 'reply' && spam.reply.code, 554);
    const ok = await send('ok@dest.test');
    assert.equal(ok.kind === 'reply' && ok.reply.code, 250, JSON.stringify(ok));
    assert.equal(sink.messages.length, 1);
    assert.deepEqual(sink.messages[0].rcptTo, ['ok@dest.test']);
    assert.equal(sink.connections, 1, 'every message went over the one connection');
    assert.equal(smtp.openConnections, 1);
    // Many refusals on one connection leave no listeners behind on it (MaxListenersExceededWarning).
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    for (let i = 0; i < 30; i++) assert.equal(((r) => r.kind === 'reply' && r.reply.code)(await send(`grey${i}@dest.test`)), 451);
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    assert.deepEqual(warnings.map((w) => w.name), []);
    assert.equal(sink.connections, 1);
  } finally {
    smtp.close();
    await sink.stop();
  }
});

test('a 421 still closes the connection (the server is ending the session)', async () => {
  let refused = false;
  const sink = await startSmtpSink({ onRcpt: () => (refused ? undefined : ((refused = true), { code: 421, message: '4.7.0 Too many connections' })) });
  const smtp = client();
  const target = { host: 'mx.dest.test', address: '127.0.0.1', port: sink.port, secure: false, requireTls: false, verifyTls: false, group: 'dest.test' };
  try {
    const first = await smtp.send(target, { from: 'a@sender.test', to: 'x@dest.test' }, message);
    assert.equal(first.kind === 'reply' && first.reply.code, 421);
    const second = await smtp.send(target, { from: 'a@sender.test', to: 'y@dest.test' }, message);
    assert.equal(second.kind === 'reply' && second.reply.code, 250);
    assert.equal(sink.connections, 2);
  } finally {
    smtp.close();
    await sink.stop();
  }
});
