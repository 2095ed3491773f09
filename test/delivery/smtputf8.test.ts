import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { SMTPServer } from 'smtp-server';
import { eq } from 'drizzle-orm';
import { deliveryJobs, emails } from '../../src/db/schema/index.js';
import { needsSmtpUtf8 } from '../../src/delivery/smtp-client.js';
import { addSendingDomain, emailStatus, eventsOf, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

/**
 * SMTPUTF8 (RFC 6531). The send API accepts ASCII addresses only (spec §4.2), so a non-ASCII recipient
 * reaches the queue only through other paths; the test writes one straight into the queue. Two sinks on
 * the same port: 127.0.0.2 offers SMTPUTF8, 127.0.0.3 hides it.
 */
interface Received {
  rcpt: string;
  mailArgs: Record<string, unknown>;
  raw: Buffer;
}

async function startUtf8Sink(host: string, port: number, offerSmtpUtf8: boolean) {
  const received: Received[] = [];
  const server = new SMTPServer({
    logger: false,
    disableReverseLookup: true,
    hideSTARTTLS: true,
    hideSMTPUTF8: !offerSmtpUtf8,
    authOptional: true,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        received.push({ rcpt: session.envelope.rcptTo[0].address, mailArgs: (session.envelope.mailFrom as { args?: Record<string, unknown> }).args ?? {}, raw: Buffer.concat(chunks) });
        callback(null, 'OK');
      });
    },
  });
  server.on('error', () => {});
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  return { received, stop: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

let rig: DeliveryRig;
let utf8Sink: Awaited<ReturnType<typeof startUtf8Sink>>;
let asciiSink: Awaited<ReturnType<typeof startUtf8Sink>>;

before(async () => {
  rig = await startRig();
  utf8Sink = await startUtf8Sink('127.0.0.2', rig.sink.port, true);
  asciiSink = await startUtf8Sink('127.0.0.3', rig.sink.port, false);
  await addSendingDomain(rig, 'sender.test');
  rig.dns.set('intl.test', 'MX', [{ preference: 10, exchange: 'mx.intl.test' }]);
  rig.dns.set('mx.intl.test', 'A', ['127.0.0.2']);
  rig.dns.set('legacy.test', 'MX', [{ preference: 10, exchange: 'mx.legacy.test' }]);
  rig.dns.set('mx.legacy.test', 'A', ['127.0.0.3']);
  // The preferred MX lacks SMTPUTF8, the backup has it.
  rig.dns.set('mixed.test', 'MX', [
    { preference: 10, exchange: 'mx.legacy.test' },
    { preference: 20, exchange: 'mx.intl.test' },
  ]);
});
after(async () => {
  await rig.stop();
  await utf8Sink.stop();
  await asciiSink.stop();
});

/** Creates a scheduled email through the API, then readdresses it and queues it directly. */
async function queueTo(address: string): Promise<string> {
  const id = await send(rig, { toAddress: 'placeholder@example.com', fromAddress: 'hello@sender.test', scheduledAt: '2099-01-01T00:00:00.000Z' });
  const db = rig.app.appliance.context.database.db;
  const row = db.select().from(emails).where(eq(emails.id, id)).get()!;
  const now = rig.app.appliance.context.clock.nowMs();
  db.update(emails).set({ toAddress: address, status: 'queued' }).where(eq(emails.id, id)).run();
  db.insert(deliveryJobs).values({ emailId: id, projectId: row.projectId, recipientDomain: address.split('@')[1], nextAttemptAt: now, attempts: 0, queuedAt: now }).run();
  return id;
}

test('needsSmtpUtf8: non-ASCII envelope or raw UTF-8 headers', () => {
  const ascii = Buffer.from('From: a@b.test\r\nSubject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe?=\r\n\r\nbody ü');
  assert.equal(needsSmtpUtf8({ from: 'a@b.test', to: 'c@d.test' }, ascii), false, '8-bit body alone needs 8BITMIME, not SMTPUTF8');
  assert.equal(needsSmtpUtf8({ from: 'a@b.test', to: 'jörg@d.test' }, ascii), true);
  assert.equal(needsSmtpUtf8({ from: 'a@b.test', to: 'c@d.test' }, Buffer.from('To: jörg@d.test\r\n\r\nx')), true);
});

test('non-ASCII local part → SMTPUTF8 used where the server offers it', async () => {
  const id = await queueTo('jörg@intl.test');
  assert.equal(await waitForFinal(rig, id), 'delivered');
  const message = utf8Sink.received.find((m) => m.rcpt === 'jörg@intl.test');
  assert.ok(message, 'delivered to the SMTPUTF8 sink');
  assert.equal(message.mailArgs.SMTPUTF8, true, 'MAIL FROM carried the SMTPUTF8 parameter');
});

test('non-ASCII local part to a server without SMTPUTF8 → bounce 553 5.6.7, nothing sent', async () => {
  const id = await queueTo('zoë@legacy.test');
  assert.equal(await waitForFinal(rig, id), 'bounce');
  assert.equal(asciiSink.received.length, 0);
  const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
  assert.match(String(bounce.data?.smtpResponse), /^553 5\.6\.7 .*SMTPUTF8/);
  assert.equal(emailStatus(rig, id), 'bounce');
});

test('a preferred MX without SMTPUTF8 is passed over for one that has it', async () => {
  const id = await queueTo('renée@mixed.test');
  assert.equal(await waitForFinal(rig, id), 'delivered');
  assert.ok(utf8Sink.received.some((m) => m.rcpt === 'renée@mixed.test'), 'delivered by the backup MX');
  assert.equal(asciiSink.received.length, 0);
  assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.mxHost, 'mx.intl.test');
});
