import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { capturedMessages } from '../../src/db/schema/index.js';
import { startSmtpSink } from '../helpers/smtp-sink.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, eventsOf, routeToSink, send, startRig, verifyDkim, waitForFinal, type DeliveryRig } from './harness.js';
import { createTestCa } from './test-ca.js';

function selfSignedCert(): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'postino-cert-'));
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '1', '-subj', '/CN=mx.tls.test'], { stdio: 'ignore' });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('opportunistic STARTTLS to an MX with a self-signed certificate', async () => {
  const rig = await startRig({ sink: { tls: selfSignedCert() } });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'tls.test');
    const id = await send(rig, { toAddress: 'kim@tls.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    assert.equal(rig.sink.messages[0].secure, true, 'the transaction ran over TLS');
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.tls, true);
  } finally {
    await rig.stop();
  }
});

test('relay mode: through a smarthost with AUTH, ignoring MX records', async () => {
  const relay = await startSmtpSink({ users: { relayuser: 's3cret:pw' } });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://relayuser:s3cret%3Apw@127.0.0.1:${relay.port}?starttls=optional` } });
  try {
    await addSendingDomain(rig, 'sender.test');
    // No DNS at all for the recipient domain: the relay does the routing.
    const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    assert.equal(relay.messages.length, 1);
    assert.equal(relay.messages[0].authUser, 'relayuser');
    // What ?starttls=optional means to a relay that offers no STARTTLS (the deferral without it says so).
    assert.equal(relay.messages[0].secure, false, 'the credentials went in clear');
    assert.deepEqual(relay.messages[0].rcptTo, ['lee@anywhere.example']);
    assert.equal(rig.sink.messages.length, 0);
    const results = await verifyDkim(relay.messages[0].raw, rig.dns.address);
    assert.equal(results[0].status.result, 'pass');
  } finally {
    await rig.stop();
    await relay.stop();
  }
});

test('relay mode to an IP address over STARTTLS: no Node deprecation warning about an IP as the TLS server name', async () => {
  const relay = await startSmtpSink({ tls: selfSignedCert() });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://127.0.0.1:${relay.port}?tls_verify=false` } });
  // DEP0123 (RFC 6066 forbids an IP address as SNI) went to stderr, outside the JSON log, per process.
  const warnings: Error[] = [];
  const onWarning = (warning: Error) => warnings.push(warning);
  process.on('warning', onWarning);
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'lou@anywhere.example', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    assert.equal(relay.messages[0].secure, true, 'the transaction ran over TLS');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(warnings.map((w) => `${w.name} ${(w as { code?: string }).code ?? ''}`), []);
  } finally {
    process.off('warning', onWarning);
    await rig.stop();
    await relay.stop();
  }
});

test('relay mode: the relay host is looked up through dns.servers, and its certificate is checked against its name', async () => {
  // A CI job (or an operator) whose smarthost name only its own DNS server knows: looked up with the
  // system resolver instead, every email was deferred with ENOTFOUND.
  const ca = createTestCa();
  const dir = mkdtempSync(join(tmpdir(), 'postino-relay-ca-'));
  const caFile = join(dir, 'ca.pem');
  writeFileSync(caFile, ca.certPem);
  // The certificate names the host only (no IP address): verified against the address, it would fail.
  const relay = await startSmtpSink({ tls: ca.issue(['smarthost.ci.test']) });
  const rig = await startRig({
    env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://smarthost.ci.test:${relay.port}?starttls=required`, POSTINO_DELIVERY_EXTRA_CA_FILE: caFile },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
    // Not known yet even there: the operator's to fix, so the mail waits (never a bounce) and goes once it is.
    await waitUntil(() => eventsOf(rig, id).some((e) => e.type === 'deferred' && String(e.data?.smtpResponse).includes('relay Host smarthost.ci.test has no usable address')), 'deferred');
    rig.dns.set('smarthost.ci.test', 'A', ['127.0.0.1']);
    assert.equal(await waitForFinal(rig, id), 'delivered', JSON.stringify(eventsOf(rig, id)));
    assert.equal(relay.messages.length, 1);
    assert.equal(relay.messages[0].secure, true, 'verified STARTTLS to the relay');
    assert.ok(rig.dns.queries.some((q) => q.name === 'smarthost.ci.test' && q.type === 'A'), 'asked the configured DNS server');
  } finally {
    await rig.stop();
    await relay.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('relay mode with dns.servers set: a relay named localhost is still reached (RFC 6761: never a DNS name)', async () => {
  const relay = await startSmtpSink();
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://localhost:${relay.port}` } });
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered', JSON.stringify(eventsOf(rig, id)));
    assert.ok(!rig.dns.queries.some((q) => q.name === 'localhost'), 'not asked of the DNS server');
  } finally {
    await rig.stop();
    await relay.stop();
  }
});

test('relay mode without credentials: a relay certificate that fails verification is never answered by sending in plaintext', async () => {
  const relay = await startSmtpSink({ tls: selfSignedCert() });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://127.0.0.1:${relay.port}` } });
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'kim@anywhere.example', fromAddress: 'hello@sender.test' });
    await waitUntil(() => eventsOf(rig, id).some((e) => e.type === 'deferred'), 'deferred');
    assert.match(String(eventsOf(rig, id).find((e) => e.type === 'deferred')!.data?.smtpResponse), /self[- ]signed/i);
    await waitUntil(() => rig.app.logs.some((line) => line.includes('relay session failed; mail waits for it')), 'the operator is told');
    assert.equal(relay.messages.length, 0, 'nothing sent in clear');
  } finally {
    await rig.stop();
    await relay.stop();
  }
});

test('relay mode with credentials: a relay that offers no STARTTLS is not sent the password (unless ?starttls=optional)', async () => {
  const relay = await startSmtpSink({ users: { relayuser: 'right' } });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://relayuser:right@127.0.0.1:${relay.port}` } });
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
    await waitUntil(() => eventsOf(rig, id).some((e) => e.type === 'deferred'), 'deferred');
    const deferred = eventsOf(rig, id).find((e) => e.type === 'deferred')!;
    // The operator is told what happened and what to do about it, not only that a TLS handshake failed
    // (this relay leaves STARTTLS out of EHLO but, asked anyway, fails the handshake).
    const told = String(deferred.data?.smtpResponse);
    assert.match(told, /127\.0\.0\.1 offered no STARTTLS/);
    assert.match(told, /credentials, which are never sent in clear/);
    assert.match(told, /\?starttls=optional/);
    await waitUntil(() => rig.app.logs.some((line) => line.includes('relay session failed; mail waits for it') && line.includes('offered no STARTTLS')), 'the warning says it too');
    assert.equal(relay.messages.length, 0);
    assert.equal(relay.authAttempts, 0, 'no AUTH was sent');
  } finally {
    await rig.stop();
    await relay.stop();
  }
});

test('relay mode with a wrong password defers instead of losing the mail, warns the operator, and a give-up suppresses nobody', async () => {
  const relay = await startSmtpSink({ users: { relayuser: 'right' } });
  const rig = await startRig({
    env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://relayuser:wrong@127.0.0.1:${relay.port}?starttls=optional`, POSTINO_DELIVERY_GIVE_UP_AFTER: '1500ms' },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
    const deadline = Date.now() + 5000;
    while (!eventsOf(rig, id).some((e) => e.type === 'deferred') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const deferred = eventsOf(rig, id).find((e) => e.type === 'deferred');
    assert.ok(deferred, 'deferred');
    assert.match(String(deferred.data?.smtpResponse), /535/);
    assert.equal(relay.messages.length, 0);
    // Logged right after the deferral's write, which the loop above may see first.
    await waitUntil(() => rig.app.logs.some((line) => line.includes('relay session failed; mail waits for it') && line.includes('535')), 'a warning names the cause');
    // ...and the email and project it held, so the operator can find the mail that waits.
    const warning = JSON.parse(rig.app.logs.find((line) => line.includes('relay session failed; mail waits for it'))!);
    assert.equal(warning.emailId, id);
    assert.equal(warning.projectId, projectOf(rig, id));
    // The email record says why it is still queued (extension fields of the event).
    const shown = (await rig.app.api('GET', `/v1/email/${id}`)).body.email.events.find((e: { type: string }) => e.type === 'deferred');
    assert.equal(shown.mxHost, '127.0.0.1');
    assert.match(shown.smtpResponse, /535/);
    assert.ok(!Number.isNaN(Date.parse(shown.nextAttemptAt)));
    assert.equal(shown.rule, undefined, 'internal fields stay out');
    // The relay's refusal is not the recipient's: giving up bounces this email, and later mail to the address still goes.
    assert.equal(await waitForFinal(rig, id), 'bounce');
    const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
    assert.equal(bounce.data?.gaveUp, true);
    assert.equal(bounce.data?.recipientSuppressed, false);
    assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data, []);
    // Nor the project's (§8): a relay outage would otherwise pause every project with mail queued.
    const bounces = countedBounces(rig);
    assert.equal(bounces, 0);
  } finally {
    await rig.stop();
    await relay.stop();
  }
});

test('relay mode: the relay refusing to relay (bare 550, 5.7.1, MAIL FROM) defers and warns; its 5.1.1 for a recipient bounces and suppresses', async () => {
  const refusals: Record<string, string> = {
    'exim@anywhere.example': '550 relay not permitted',
    'postfix@anywhere.example': '554 5.7.1 <postfix@anywhere.example>: Relay access denied',
    'gone@anywhere.example': '550 5.1.1 <gone@anywhere.example>: Recipient address rejected: User unknown',
  };
  const relay = await startSmtpSink({
    onMail: (address) => (address.startsWith('bounce-') && refusingSender.value ? { code: 553, message: 'sender not allowed' } : undefined),
    onRcpt: (address) => {
      const refusal = refusals[address];
      return refusal ? { code: Number(refusal.slice(0, 3)), message: refusal.slice(4) } : undefined;
    },
  });
  const refusingSender = { value: false };
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://127.0.0.1:${relay.port}`, POSTINO_DELIVERY_GIVE_UP_AFTER: '1500ms' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    const exim = await send(rig, { toAddress: 'exim@anywhere.example', fromAddress: 'hello@sender.test' });
    const postfix = await send(rig, { toAddress: 'postfix@anywhere.example', fromAddress: 'hello@sender.test' });
    const gone = await send(rig, { toAddress: 'gone@anywhere.example', fromAddress: 'hello@sender.test' });
    for (const id of [exim, postfix]) {
      await waitUntil(() => eventsOf(rig, id).some((e) => e.type === 'deferred'), 'deferred, not bounced');
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'deferred')!.data?.rule, 'relay-refused');
    }
    await waitUntil(() => rig.app.logs.some((line) => line.includes('the relay refused the mail') && line.includes('relay not permitted')), 'a warning names the cause');
    const refusedWarning = JSON.parse(rig.app.logs.find((line) => line.includes('the relay refused the mail') && line.includes('relay not permitted'))!);
    assert.equal(refusedWarning.emailId, exim, 'names the email it held');
    assert.equal(refusedWarning.projectId, projectOf(rig, exim));
    // A recipient the relay knows to be gone is that recipient's: bounced and suppressed at once.
    assert.equal(await waitForFinal(rig, gone), 'bounce');
    assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data.map((s: { emailAddress: string }) => s.emailAddress), ['gone@anywhere.example']);
    // Refused at MAIL FROM: deferred too.
    refusingSender.value = true;
    const sender = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
    await waitUntil(() => eventsOf(rig, sender).some((e) => e.type === 'deferred' && e.data?.rule === 'relay-refused'), 'a MAIL FROM refusal deferred');
    // Never cleared: a soft bounce at give-up that suppresses no one and does not count (§8).
    for (const id of [exim, postfix, sender]) {
      assert.equal(await waitForFinal(rig, id), 'bounce');
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')!.data?.gaveUp, true);
    }
    assert.equal((await rig.app.api('GET', '/v1/suppressions')).body.data.length, 1, 'only the gone recipient');
    const bounces = countedBounces(rig);
    assert.equal(bounces, 1, 'only the gone recipient counts');
  } finally {
    await rig.stop();
    await relay.stop();
  }
});

/** The project an email belongs to. */
function projectOf(rig: DeliveryRig, emailId: string): string {
  return rig.app.appliance.context.database.sqlite.prepare('select project_id from emails where id = ?').pluck().get(emailId) as string;
}

/** Bounces counted against the rig's projects by the suspension rule (§8). */
function countedBounces(rig: DeliveryRig): number {
  return rig.app.appliance.context.database.sqlite.prepare('select coalesce(sum(bounces), 0) from project_sending_stats').pluck().get() as number;
}

/**
 * A relay refusing the message after DATA for its own account's setup: every email is deferred as the
 * relay's refusal with a warning naming the cause, gives up as a soft bounce, suppresses no one and is
 * not counted against the project. Read as the recipient's, every queued email bounced hard, every
 * recipient was suppressed and the project was paused.
 */
async function assertRelaysOwnRefusal(refusals: string[], named: string): Promise<void> {
  let next = 0;
  const relay = await startSmtpSink({ onData: () => ({ code: 554, message: refusals[next++ % refusals.length] }) });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://127.0.0.1:${relay.port}`, POSTINO_DELIVERY_GIVE_UP_AFTER: '1500ms' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    const ids = [];
    for (const toAddress of refusals.map((_, i) => `u${i}@anywhere.example`)) ids.push(await send(rig, { toAddress, fromAddress: 'hello@sender.test' }));
    for (const id of ids) {
      await waitUntil(() => eventsOf(rig, id).some((e) => e.type === 'deferred' || e.type === 'bounce'), 'an outcome');
      const first = eventsOf(rig, id).find((e) => e.type === 'deferred' || e.type === 'bounce')!;
      assert.equal(first.type, 'deferred', `not bounced: ${first.data?.smtpResponse}`);
      assert.equal(first.data?.rule, 'relay-refused');
    }
    await waitUntil(() => rig.app.logs.some((line) => line.includes('the relay refused the mail') && line.includes(named)), 'a warning names the cause');
    for (const id of ids) {
      assert.equal(await waitForFinal(rig, id), 'bounce');
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')!.data?.gaveUp, true);
    }
    assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data, []);
    const bounces = countedBounces(rig);
    assert.equal(bounces, 0);
  } finally {
    await rig.stop();
    await relay.stop();
  }
}

test('relay mode: the relay refusing our sender after DATA (Exchange Online SendAsDenied) defers and warns; nobody is suppressed or counted', async () => {
  // Microsoft 365 / Outlook.com SMTP AUTH refuse a sender the mailbox may not send as in the reply to the
  // message, with an addressing or mailbox code.
  await assertRelaysOwnRefusal(
    [
      '5.2.252 SendAsDenied; relay@contoso.example not allowed to send as hello@sender.test; STOREDRV.Submission.Exception:SendAsDeniedException.MapiExceptionSendAsDenied; Failed to process message due to a permanent exception with message [BeginDiagnosticData]Cannot submit message.',
      '5.2.0 STOREDRV.Submission.Exception:SendAsDeniedException.MapiExceptionSendAsDenied; Failed to process message due to a permanent exception with message Cannot submit message.',
    ],
    'SendAsDenied',
  );
});

test('relay mode: Amazon SES refusing an identity it has not verified (after DATA) defers and warns; nothing is counted against the project', async () => {
  // SES answers the message with a bare 554 when the From or Return-Path is not a verified identity (or,
  // in its sandbox, the recipient): the operator's SES account setup; counted, the project paused after 50.
  await assertRelaysOwnRefusal(['Message rejected: Email address is not verified. The following identities failed the check in region US-EAST-1: hello@sender.test'], 'not verified');
});

test('a sender without a DKIM key is warned about once per domain, not for every email', async () => {
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
  try {
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await send(rig, { toAddress: `u${i}@anywhere.example`, fromAddress: 'app@nokey.test' }));
    for (const id of ids) assert.equal(await waitForFinal(rig, id), 'delivered');
    const warnings = rig.app.logs.filter((line) => line.includes('no DKIM key for sender'));
    assert.equal(warnings.length, 1, warnings.join('\n'));
    assert.match(warnings[0], /"senderDomain":"nokey\.test"/);
  } finally {
    await rig.stop();
  }
});

test('capture mode stores the complete signed message and sends nothing', async () => {
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'capture' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    const id = await send(rig, { toAddress: 'max@inbox.test', fromAddress: 'hello@sender.test', html: '<p>captured</p>' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const delivered = eventsOf(rig, id).find((e) => e.type === 'delivered')!;
    assert.match(String(delivered.data?.smtpResponse), /captured/);
    const row = rig.app.appliance.context.database.db.select().from(capturedMessages).where(eq(capturedMessages.emailId, id)).get()!;
    assert.ok(row, 'captured row stored');
    assert.equal(row.rcptTo, 'max@inbox.test');
    assert.match(row.mailFrom, new RegExp(`^bounce-${id}-[0-9a-f]{20}@`));
    assert.match(row.raw.toString(), /<p>captured<\/p>/);
    const results = await verifyDkim(row.raw, rig.dns.address);
    assert.equal(results[0].status.result, 'pass');
    assert.equal(rig.sink.messages.length, 0);
    assert.equal(rig.sink.connections, 0);
    const download = await rig.app.api('GET', `/v1/captured/${id}`);
    assert.equal(download.status, 200);
    assert.equal(download.headers.get('content-type'), 'message/rfc822');
    assert.equal(download.body, row.raw.toString());
    const missing = await rig.app.api('GET', '/v1/captured/000000000000000000000000');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.errorCode, 'not-found');
    assert.match(missing.body.developerMessage, /^No email with this id/);
    // A CI job asking before capture has run is told to ask again, not to check its config.
    const scheduledAt = new Date(Date.now() + 3_600_000).toISOString();
    const later = await rig.app.api('POST', '/v1/email/send', { toAddress: 'max@inbox.test', fromAddress: 'hello@sender.test', subject: 'later', text: 'x', scheduledAt });
    const notYet = await rig.app.api('GET', `/v1/captured/${later.body.id}`);
    assert.equal(notYet.status, 404);
    assert.match(notYet.body.developerMessage, /^Not captured yet: the email is scheduled\..*ask again/);
  } finally {
    await rig.stop();
  }
});

test('outside capture mode, asking for a captured message names delivery.mode', async () => {
  const rig = await startRig();
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    const id = await send(rig, { toAddress: 'ida@inbox.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const res = await rig.app.api('GET', `/v1/captured/${id}`);
    assert.equal(res.status, 404);
    assert.match(res.body.developerMessage, /^Nothing is captured: delivery\.mode is "mx"/);
  } finally {
    await rig.stop();
  }
});
