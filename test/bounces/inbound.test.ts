import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { capturedMessages, emailEvents, suppressions } from '../../src/db/schema/index.js';
import { webhookEvents } from '../../src/db/schema/webhooks.js';
import { addSendingDomain, emailStatus, eventsOf, routeToSink, send, startRig, waitForEvent, waitForFinal, type DeliveryRig } from '../delivery/harness.js';
import { waitUntil } from '../helpers/wait-until.js';
import { openSmtpSession } from '../helpers/smtp-raw.js';
import { startReceiver } from '../webhooks/receiver.js';
import { arfComplaint, eximAliasMemberFailed, eximAliasPipeFailed, eximRefusedAtEndOfData, eximTextBounce, exchangeOnlineMessageExpired, eximRetryTimeout, eximFailedWithoutReply, gmailRelayedYahooMailboxNotFound, microsoftJmrpComplaint, parcelNotice, postfixDelayed, postfixHardBounce, postfixRefusedAtEndOfData, postmasterHelpdeskAutoReply, yahooCflComplaint } from './samples.js';

/**
 * Asynchronous bounces and complaints end to end: the real appliance sends in capture mode (so the
 * VERP Return-Path is known), then a DSN/ARF is delivered to its inbound SMTP port the way a remote MTA
 * does it: a null reverse-path and RCPT TO the VERP address.
 */
let rig: DeliveryRig;
let receiver: Awaited<ReturnType<typeof startReceiver>>;

before(async () => {
  receiver = await startReceiver();
  rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true', POSTINO_LOG_LEVEL: 'info', POSTINO_SMTP_MAX_MESSAGE_BYTES: String(4 * 1024 * 1024) } });
  await addSendingDomain(rig, 'sender.test');
  const hook = await rig.app.api('POST', '/v1/webhooks', { url: receiver.url('/hooks') });
  assert.equal(hook.status, 201, JSON.stringify(hook.body));
});

after(async () => {
  await rig.stop();
  await receiver.stop();
});

const db = () => rig.app.appliance.context.database.db;

/** Sends one email through the real pipeline; answers its id and the Return-Path it went out with. */
async function sendCaptured(toAddress: string): Promise<{ id: string; verp: string }> {
  const id = await send(rig, { toAddress, fromAddress: 'hello@sender.test' });
  assert.equal(await waitForFinal(rig, id), 'delivered');
  const row = db().select().from(capturedMessages).where(eq(capturedMessages.emailId, id)).get();
  assert.ok(row, 'captured');
  return { id, verp: row.mailFrom };
}

/** Delivers `raw` to the appliance's inbound listener like an MTA; resolves with the SMTP reply code. */
async function deliverReport(to: string, raw: string | Buffer, from = ''): Promise<number> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: rig.app.smtpPort, secure: false, ignoreTLS: true, name: 'mx.inbox.test' });
  try {
    const info = await transport.sendMail({ envelope: { from, to: [to] }, raw });
    return Number(/^(\d{3})/.exec(info.response)?.[1]);
  } catch (error) {
    const code = (error as { responseCode?: number }).responseCode;
    if (typeof code !== 'number') throw error;
    return code;
  } finally {
    transport.close();
  }
}

function suppressionOf(address: string) {
  return db().select().from(suppressions).where(eq(suppressions.emailAddress, address)).get();
}

function webhookEventsFor(emailId: string) {
  return db()
    .select()
    .from(webhookEvents)
    .all()
    .filter((event) => (event.data as { emailId?: string }).emailId === emailId);
}

async function waitForHook(type: string, emailId: string) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const hit = receiver.to('/hooks').find((r) => r.body.includes(`"${type}"`) && r.body.includes(emailId));
    if (hit) return JSON.parse(hit.body) as { type: string; data: Record<string, unknown> };
    if (Date.now() > deadline) throw new Error(`no ${type} webhook for ${emailId}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The project's counts for the suspension rule (project_sending_stats), all days together. */
function sendingCounts(): { sent: number; bounces: number; complaints: number } {
  return rig.app.appliance.context.database.sqlite
    .prepare('select coalesce(sum(sent), 0) as sent, coalesce(sum(bounces), 0) as bounces, coalesce(sum(complaints), 0) as complaints from project_sending_stats')
    .get() as { sent: number; bounces: number; complaints: number };
}

describe('asynchronous bounces and complaints over inbound SMTP', () => {
  test('the Return-Path is a signed VERP address on the MAIL FROM domain', async () => {
    const { id, verp } = await sendCaptured('verp@inbox.test');
    assert.match(verp, new RegExp(`^bounce-${id}-[0-9a-f]{20}@bounce\\.sender\\.test$`));
  });

  test('a Postfix DSN (5.1.1) → bounce, suppression, event and email.bounce webhook (hard); the next send is suppressed', async () => {
    const { id, verp } = await sendCaptured('gone@inbox.test');
    const countsBefore = sendingCounts();
    assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'gone@inbox.test', messageId: `<${id}@sender.test>` })), 250);
    assert.deepEqual(sendingCounts(), { ...countsBefore, bounces: countsBefore.bounces + 1 }, 'a bounce for the suspension rule, not a second sent email');

    assert.equal(emailStatus(rig, id), 'bounce');
    const event = eventsOf(rig, id).find((e) => e.type === 'bounce');
    assert.ok(event, 'bounce event');
    assert.equal(event.data?.source, 'dsn');
    assert.equal(event.data?.status, '5.1.1');
    assert.equal(event.data?.reportingMta, 'mx.inbox.test');
    assert.equal(event.data?.recipientSuppressed, true);
    const presented = (await rig.app.api('GET', `/v1/email/${id}`)).body.email.events.find((e: { type: string }) => e.type === 'bounce');
    assert.deepEqual([presented.status, presented.reportingMta, presented.bounceType], ['5.1.1', 'mx.inbox.test', 'hard']);
    assert.match(presented.diagnosticCode, /5\.1\.1/);
    const suppression = suppressionOf('gone@inbox.test');
    assert.equal(suppression?.reason, 'hard-bounce');
    assert.match(String(suppression?.detail), /5\.1\.1/);
    const hooks = webhookEventsFor(id).filter((e) => e.type === 'email.bounce');
    assert.equal(hooks.length, 1);
    assert.equal((hooks[0].data as Record<string, unknown>).bounceType, 'hard');
    const posted = await waitForHook('email.bounce', id);
    assert.equal(posted.data.bounceType, 'hard');
    // The reply as a bounce at delivery gives it, without the Diagnostic-Code's `smtp;` type.
    assert.match(String(posted.data.smtpResponse), /^550 5\.1\.1/);

    // The same DSN again (a sender retrying after a lost 250) records history but no second webhook.
    assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'gone@inbox.test' })), 250);
    assert.equal(webhookEventsFor(id).filter((e) => e.type === 'email.bounce').length, 1);

    const next = await send(rig, { toAddress: 'gone@inbox.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, next), 'suppressed');
  });

  test('an open after the bounce is recorded but sends no email.open and leaves the status at bounce (as an open before it does)', async () => {
    const { id, verp } = await sendCaptured('opened-late@inbox.test');
    assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'opened-late@inbox.test' })), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    // A mail gateway or scanner fetching the pixel of a message whose final hop failed.
    const pixel = `${rig.app.baseUrl}/t/o/${rig.app.appliance.context.signer.sign(`o:${id}`)}`;
    assert.equal((await fetch(pixel)).status, 200);
    assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(eventsOf(rig, id).filter((e) => e.type === 'open').length, 1, 'the open is kept in the record');
    assert.deepEqual(webhookEventsFor(id).map((e) => e.type), ['email.delivered', 'email.bounce']);
  });

  test('a DSN refusing the content (5.7.1) bounces the email but does not suppress the address', async () => {
    // Status 5.0.0 says little; the Diagnostic-Code's 5.7.1 says the message was refused, not the mailbox.
    const spamBounce = (verp: string, messageId: string) =>
      postfixHardBounce({ to: verp, rcpt: 'fine@inbox.test', messageId })
        .replace('Status: 5.1.1', 'Status: 5.0.0')
        .replace(/550 5\.1\.1 <fine@inbox\.test>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/, '550 5.7.1 Message rejected as spam');
    const { id, verp } = await sendCaptured('fine@inbox.test');
    const report = spamBounce(verp, `<${id}@sender.test>`);
    assert.match(report, /Diagnostic-Code: smtp; 550 5\.7\.1 Message rejected as spam/);
    assert.equal(await deliverReport(verp, report), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    const event = eventsOf(rig, id).find((e) => e.type === 'bounce');
    assert.equal(event?.data?.recipientSuppressed, false);
    assert.equal(suppressionOf('fine@inbox.test'), undefined);
    assert.equal((await waitForHook('email.bounce', id)).data.bounceType, 'hard');

    const next = await send(rig, { toAddress: 'fine@inbox.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, next), 'delivered');
  });

  test('Exchange Online\'s "Message expired" after a later hop stayed unreachable (5.4.316 connection refused, 5.4.300, 5.4.312 DNS query failed) bounces the email but suppresses no one', async () => {
    // Microsoft 365 retries a hop behind it (an on-premises server, a partner's filter) for 24 hours, then
    // returns the message with one of these codes: the mailbox exists, its server was down or blocked.
    const variants: [string, string, string][] = [
      ['expired-refused@inbox.test', '5.4.316', 'Message expired, connection refused(Socket error code 10061)'],
      ['expired@inbox.test', '5.4.300', 'Message expired'],
      ['expired-dns@inbox.test', '5.4.312', 'Message expired, DNS query failed'],
    ];
    for (const [address, code, text] of variants) {
      const { id, verp } = await sendCaptured(address);
      assert.equal(await deliverReport(verp, exchangeOnlineMessageExpired({ to: verp, rcpt: address }, code, text)), 250);
      assert.equal(emailStatus(rig, id), 'bounce', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false, address);
      assert.equal(suppressionOf(address), undefined, address);
    }
  });

  test('a report that a hop refused the sending IP for a blocklist (relay mode: the relay\'s address, every project\'s) bounces the email but counts in no project\'s bounce rate', async () => {
    // As when the appliance is refused so itself (delivery/classify.ts refusesSendingHost): every project
    // sends through that address, so one project's spam that got it listed must not pause the others.
    const { id, verp } = await sendCaptured('listed@inbox.test');
    const report = postfixHardBounce({ to: verp, rcpt: 'listed@inbox.test', messageId: `<${id}@sender.test>` })
      .replace('Status: 5.1.1', 'Status: 5.7.1')
      .replace(/550 5\.1\.1 <listed@inbox\.test>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/, '554 5.7.1 Service unavailable; Client host [203.0.113.7] blocked using zen.spamhaus.org');
    assert.match(report, /Diagnostic-Code: smtp; 554 5\.7\.1 Service unavailable; Client host \[203\.0\.113\.7\] blocked using zen\.spamhaus\.org/);
    const before = sendingCounts();
    assert.equal(await deliverReport(verp, report), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(suppressionOf('listed@inbox.test'), undefined);
    assert.equal((await waitForHook('email.bounce', id)).data.bounceType, 'hard');
    assert.deepEqual(sendingCounts(), before, 'counted in no project\'s rate');
  });

  test('a report about the address suppresses it even when the email has bounced already (a second report)', async () => {
    const { id, verp } = await sendCaptured('twice@inbox.test');
    const spam = postfixHardBounce({ to: verp, rcpt: 'twice@inbox.test', messageId: `<${id}@sender.test>` })
      .replace('Status: 5.1.1', 'Status: 5.0.0')
      .replace(/550 5\.1\.1 <twice@inbox\.test>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/, '550 5.7.1 Message rejected as spam');
    assert.equal(await deliverReport(verp, spam), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(suppressionOf('twice@inbox.test'), undefined);
    assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'twice@inbox.test', messageId: `<${id}@sender.test>` })), 250);
    const second = eventsOf(rig, id).filter((e) => e.type === 'bounce')[1];
    assert.equal(second?.data?.recipientSuppressed, true);
    assert.equal(suppressionOf('twice@inbox.test')?.reason, 'hard-bounce', 'the event says so, and so does the list');
  });

  test('refusals of the sender (5.1.8) or of the message at end of DATA (bare 5.0.0) bounce the email but suppress no one', async () => {
    const variants: [string, (report: string) => string][] = [
      ['sender@inbox.test', (report) => report.replace('Status: 5.1.1', 'Status: 5.1.8').replace(/550 5\.1\.1 <sender@inbox\.test>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/, '553 5.1.8 <hello@sender.test>: Sender address rejected: Domain not found')],
      ['content@inbox.test', (report) => report.replace('Status: 5.1.1', 'Status: 5.0.0').replace(/550 5\.1\.1 <content@inbox\.test>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/, '554 Message rejected as spam (in reply to end of DATA command)')],
    ];
    for (const [address, rewrite] of variants) {
      const { id, verp } = await sendCaptured(address);
      const report = rewrite(postfixHardBounce({ to: verp, rcpt: address, messageId: `<${id}@sender.test>` }));
      assert.match(report, /Diagnostic-Code: smtp; 55[34] (5\.1\.8 <hello@sender\.test>: Sender address rejected|Message rejected as spam \(in reply to end of DATA command\))/);
      assert.equal(await deliverReport(verp, report), 250);
      assert.equal(emailStatus(rig, id), 'bounce', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false, address);
      assert.equal(suppressionOf(address), undefined, address);
    }
  });

  test('a bare refusal at end of DATA said only in the report\'s text (Postfix, Exim DSN and Exim text) bounces the email but suppresses no one', async () => {
    // Real DSNs carry the reply alone in Diagnostic-Code; the command it answered is in the human-readable part.
    const variants: [string, (params: { to: string; rcpt: string }) => string][] = [
      ['spam-postfix@inbox.test', postfixRefusedAtEndOfData],
      ['spam-exim@inbox.test', eximRefusedAtEndOfData],
      ['spam-eximtext@inbox.test', (params) => eximTextBounce(params).replace(/after RCPT TO:<\S+>:\r\n    550 5\.1\.1 User unknown/, 'after end of data:\r\n    550 Message rejected as spam')],
    ];
    for (const [address, sample] of variants) {
      const { id, verp } = await sendCaptured(address);
      const report = sample({ to: verp, rcpt: address });
      assert.doesNotMatch(report, /Diagnostic-Code:.*end of data/i);
      assert.match(report, /end of data/i);
      assert.equal(await deliverReport(verp, report), 250);
      assert.equal(emailStatus(rig, id), 'bounce', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false, address);
      assert.equal(suppressionOf(address), undefined, address);
    }
  });

  test('a later hop refusing our sender at MAIL FROM, said only in the report\'s text (Postfix, Exim), bounces the email but suppresses no one', async () => {
    // A forwarder passed the message on and the next hop refused its Return-Path (SPF after forwarding):
    // about our sender, not the recipient, as delivery reads a refused MAIL FROM (classify.ts).
    const variants: [string, (params: { to: string; rcpt: string }) => string][] = [
      ['spf-postfix@inbox.test', (params) => postfixRefusedAtEndOfData(params).replace('Status: 5.0.0', 'Status: 5.1.0').replace('said: 554 Message rejected as\r\n    spam (in reply to end of DATA command)', 'said: 550 5.1.0 SPF check\r\n    failed (in reply to MAIL FROM command)').replace('smtp; 554 Message rejected as spam', 'smtp; 550 5.1.0 SPF check failed')],
      ['spf-exim@inbox.test', (params) => eximRefusedAtEndOfData(params).replace('after end of data:', `after MAIL FROM:<${params.to}> SIZE=1234:`).replaceAll('550 Message rejected as spam', '550 SPF check failed')],
    ];
    for (const [address, sample] of variants) {
      const { id, verp } = await sendCaptured(address);
      const report = sample({ to: verp, rcpt: address });
      assert.match(report, /Diagnostic-Code: smtp; 550 (5\.1\.0 )?SPF check failed\r\n/);
      assert.match(report, /MAIL FROM/);
      assert.equal(await deliverReport(verp, report), 250);
      assert.equal(emailStatus(rig, id), 'bounce', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false, address);
      assert.equal(suppressionOf(address), undefined, address);
    }
  });

  test('the command a refusal answered is read across the line breaks Postfix wraps its report text at (end of DATA, MAIL FROM): the recipient is not suppressed', async () => {
    // Postfix wraps the human-readable part at 80 columns with a 4-space indent, anywhere a space falls:
    // "(in reply to end of\n    DATA command)" is as common in real reports as the phrase on one line.
    const variants: [string, (params: { to: string; rcpt: string }) => string][] = [
      ['wrapped-data@inbox.test', (params) => postfixRefusedAtEndOfData(params).replace('said: 554 Message rejected as\r\n    spam (in reply to end of DATA command)', 'said: 554 Message rejected as spam (in reply to end of\r\n    DATA command)')],
      ['wrapped-mail@inbox.test', (params) => postfixRefusedAtEndOfData(params).replace('Status: 5.0.0', 'Status: 5.1.0').replace('said: 554 Message rejected as\r\n    spam (in reply to end of DATA command)', 'said: 550 5.1.0 SPF check failed (in reply to\r\n    MAIL FROM command)').replace('smtp; 554 Message rejected as spam', 'smtp; 550 5.1.0 SPF check failed')],
    ];
    for (const [address, sample] of variants) {
      const { id, verp } = await sendCaptured(address);
      const report = sample({ to: verp, rcpt: address });
      assert.match(report, /\(in reply to( end of)?\r\n    (DATA|MAIL FROM) command\)/);
      assert.equal(await deliverReport(verp, report), 250);
      assert.equal(emailStatus(rig, id), 'bounce', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false, address);
      assert.equal(suppressionOf(address), undefined, address);
    }
  });

  test('a refusal of our sender at MAIL FROM that Exim reports as "after pipelined MAIL FROM" (a PIPELINING host: most) suppresses no one', async () => {
    // Exim names the command with "pipelined " before it when the remote host offered PIPELINING.
    const address = 'spf-exim-pipelined@inbox.test';
    const { id, verp } = await sendCaptured(address);
    const report = eximRefusedAtEndOfData({ to: verp, rcpt: address })
      .replace('after end of data:', `after pipelined MAIL FROM:<${verp}> SIZE=2880:`)
      .replaceAll('550 Message rejected as spam', '550 SPF check failed');
    assert.match(report, /after pipelined MAIL FROM:/);
    assert.equal(await deliverReport(verp, report), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false);
    assert.equal(suppressionOf(address), undefined);
  });

  test('a hop that refused our sender (Exim sender verify, Postfix "Sender address rejected") bounces the email but suppresses no one, as when the appliance is refused so itself', async () => {
    // A forwarder or gateway accepted the message; the next hop refused it for our Return-Path, which says
    // nothing about the recipient (delivery/classify.ts reads the same refusals this way at delivery).
    const original = /550 5\.1\.1 <(\S+@inbox\.test)>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/;
    const variants: [string, (report: string, verp: string) => string][] = [
      ['verify@inbox.test', (report, verp) => report.replace('Status: 5.1.1', 'Status: 5.0.0').replace(original, `550-Verification failed for <${verp}>\r\n    550-Unrouteable address 550 Sender verify failed`)],
      ['unlisted@inbox.test', (report, verp) => report.replace('Status: 5.1.1', 'Status: 5.1.0').replace(original, `553 5.1.0 <${verp}>: Sender address\r\n    rejected: User unknown in local recipient table`)],
    ];
    for (const [address, rewrite] of variants) {
      const { id, verp } = await sendCaptured(address);
      const report = rewrite(postfixHardBounce({ to: verp, rcpt: address, messageId: `<${id}@sender.test>` }), verp);
      assert.match(report, /Diagnostic-Code: smtp; 55[03][ -](Verification failed|5\.1\.0)/);
      assert.equal(await deliverReport(verp, report), 250);
      assert.equal(emailStatus(rig, id), 'bounce', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.recipientSuppressed, false, address);
      assert.equal(suppressionOf(address), undefined, address);
      assert.equal((await waitForHook('email.bounce', id)).data.bounceType, 'hard');
    }
  });

  test('an out-of-office reply sent with <> that quotes a failure report below the original is ignored', async () => {
    const { id, verp } = await sendCaptured('away@inbox.test');
    const reply = [
      'From: Ann <away@inbox.test>',
      `To: ${verp}`,
      'Subject: Automatic reply: Nightly backup report',
      'Auto-Submitted: auto-replied',
      '',
      'I am out of the office until Monday.',
      '',
      '-----Original Message-----',
      'Reporting-MTA: dns; backup.example.test',
      'Final-Recipient: rfc822; away@inbox.test',
      'Action: failed',
      'Status: 5.1.1',
      '',
    ].join('\r\n');
    assert.equal(await deliverReport(verp, reply), 250);
    assert.equal(emailStatus(rig, id), 'delivered');
    assert.equal(suppressionOf('away@inbox.test'), undefined);
  });

  test('a vacation reply to an email whose subject reads like a bounce ("Re: Payment failure notice") is ignored, whatever its signature holds', async () => {
    // RFC 3834 responders (Sieve vacation, the classic vacation program) answer the Return-Path with
    // "Re: <subject>"; a billing or shipping subject then reads like a bounce, and a phone number opening a
    // signature line reads like a reply code (`503-555-0142`).
    const { id, verp } = await sendCaptured('vacation@inbox.test');
    const hooksBefore = webhookEventsFor(id).length;
    const reply = [
      'From: Dana Reyes <vacation@inbox.test>',
      `To: ${verp}`,
      'Subject: Re: Payment failure notice',
      'Auto-Submitted: auto-replied',
      'Precedence: bulk',
      '',
      'Thanks for your message. I am on vacation until January 29 and will reply when I return.',
      '',
      'Dana Reyes',
      'Accounts Payable, Riverbend Supply Co.',
      '503-555-0142',
      '',
    ].join('\r\n');
    assert.equal(await deliverReport(verp, reply), 250);
    assert.equal(emailStatus(rig, id), 'delivered');
    assert.deepEqual(eventsOf(rig, id).filter((e) => e.type === 'bounce' || e.type === 'delayed'), []);
    assert.equal(suppressionOf('vacation@inbox.test'), undefined);
    assert.equal(webhookEventsFor(id).length, hooksBefore);
  });

  test('an html-only free-form bounce is read from its text; deeply nested html does not hold the appliance', async () => {
    const { id, verp } = await sendCaptured('html-only@inbox.test');
    const html = (body: string) => ['From: Mail Delivery System <MAILER-DAEMON@mx.inbox.test>', `To: ${verp}`, 'Subject: Undelivered Mail Returned to Sender', 'Content-Type: text/html; charset=utf-8', '', body, ''].join('\r\n');
    assert.equal(await deliverReport(verp, html('<html><body><p>Delivery failed.</p><p>550&nbsp;5.1.1 &lt;html-only@inbox.test&gt;: user unknown</p></body></html>')), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.status, '5.1.1');

    // 1 MB of nested lists: mailparser's html-to-text took ~20 s on it, holding every session and request.
    const { id: other, verp: otherVerp } = await sendCaptured('nested@inbox.test');
    const started = performance.now();
    assert.equal(await deliverReport(otherVerp, html('<ol><li>'.repeat(125_000))), 250);
    assert.ok(performance.now() - started < 5000, `took ${Math.round(performance.now() - started)} ms`);
    assert.equal(emailStatus(rig, other), 'delivered');

    // Tags that never close: a regular expression per tag rescanned to the end from every `<` (180 kB
    // held the event loop 19 s; the 1 MiB read would take minutes). Anyone can send these: the return
    // address is in every message's Return-Path.
    for (const body of ['<'.repeat(300_000), '<br'.repeat(100_000), '<script>'.repeat(40_000), `${'<a href=http://a>'.repeat(30_000)}${'</a>'.repeat(30_000)}`, '<a href="'.repeat(60_000)]) {
      const { id: hostile, verp: hostileVerp } = await sendCaptured('unclosed@inbox.test');
      const sentAt = performance.now();
      assert.equal(await deliverReport(hostileVerp, html(body)), 250);
      assert.ok(performance.now() - sentAt < 5000, `${body.slice(0, 8)}…: took ${Math.round(performance.now() - sentAt)} ms`);
      assert.equal(emailStatus(rig, hostile), 'delivered');
    }
  });

  test('an ARF abuse report → complaint, suppression (complaint) and email.complaint webhook', async () => {
    const { id, verp } = await sendCaptured('angry@inbox.test');
    const countsBefore = sendingCounts();
    assert.equal(await deliverReport(verp, arfComplaint({ to: verp, rcpt: 'angry@inbox.test' }), 'feedback@arf.mail.yahoo.com'), 250);
    assert.equal(emailStatus(rig, id), 'complaint');
    assert.deepEqual(sendingCounts(), { ...countsBefore, complaints: countsBefore.complaints + 1 });
    assert.equal(suppressionOf('angry@inbox.test')?.reason, 'complaint');
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'complaint')?.data?.feedbackType, 'abuse');
    // The record says what the report said.
    const { email } = (await rig.app.api('GET', `/v1/email/${id}`)).body;
    const complaint = email.events.find((e: { type: string }) => e.type === 'complaint');
    assert.deepEqual([complaint.feedbackType, complaint.sourceIp], ['abuse', '192.0.2.1']);
    assert.deepEqual(webhookEventsFor(id).map((e) => e.type).filter((t) => t !== 'email.delivered'), ['email.complaint']);
    const posted = await waitForHook('email.complaint', id);
    assert.equal(posted.data.toAddress, 'angry@inbox.test');
  });

  test('a 4.x.x delay DSN records an event only', async () => {
    const { id, verp } = await sendCaptured('slow@inbox.test');
    const hooksBefore = webhookEventsFor(id).length;
    assert.equal(await deliverReport(verp, postfixDelayed({ to: verp, rcpt: 'slow@inbox.test' })), 250);
    assert.equal(emailStatus(rig, id), 'delivered');
    const delayed = eventsOf(rig, id).find((e) => e.type === 'delayed');
    assert.equal(delayed?.data?.status, '4.4.1');
    assert.equal(suppressionOf('slow@inbox.test'), undefined);
    assert.equal(webhookEventsFor(id).length, hooksBefore);
  });

  /**
   * A later hop that gave up on a temporary problem (RFC 3464 `failed` with a 4.x.x or 5.2.2 status): the
   * message is lost, so a soft bounce, as when the appliance itself gives up; the address is fine, so
   * nothing is suppressed. Kept as a `delayed` event only, the email read `delivered` for good.
   */
  async function assertSoftBounce(id: string, address: string, status: string) {
    assert.equal(emailStatus(rig, id), 'bounce', address);
    const event = eventsOf(rig, id).find((e) => e.type === 'bounce');
    assert.deepEqual([event?.data?.bounceType, event?.data?.status, event?.data?.recipientSuppressed], ['soft', status, false], address);
    assert.equal(suppressionOf(address), undefined, address);
    const hooks = webhookEventsFor(id).filter((e) => e.type === 'email.bounce');
    assert.deepEqual(hooks.map((e) => (e.data as Record<string, unknown>).bounceType), ['soft'], address);
  }

  test('Exim giving up on a bare 4xx reply (its Status is always 5.0.0, the Diagnostic-Code says 451 or 421) is a soft bounce: no suppression', async () => {
    // Exim writes `Status: 5.0.0` for any failure; the reply it kept getting is the report's own code, a
    // temporary one, as Postfix reports the same give-up with `failed` and a 4.x.x status.
    for (const [address, reply] of [['tempfail@inbox.test', '451 Temporary local problem - please try later'], ['busy@inbox.test', '421 Too many concurrent connections']]) {
      const { id, verp } = await sendCaptured(address);
      assert.equal(await deliverReport(verp, eximRetryTimeout({ to: verp, rcpt: address }, reply)), 250);
      await assertSoftBounce(id, address, '4.0.0');
    }
  });

  test('a DSN with Status 5.0.0 and no Diagnostic-Code whose text says the mailbox is full (Exim, local delivery) is a soft bounce: no suppression', async () => {
    const { id, verp } = await sendCaptured('localfull@inbox.test');
    assert.equal(await deliverReport(verp, eximFailedWithoutReply({ to: verp, rcpt: 'localfull@inbox.test' })), 250);
    await assertSoftBounce(id, 'localfull@inbox.test', '4.2.2');
  });

  test('an Exim report that its retries timed out with no reply from any host (Status 5.0.0, no Diagnostic-Code) is a soft bounce: no suppression', async () => {
    // Nothing answered (a host down or blocked for days): when the appliance gives up so itself, it
    // suppresses no one either (delivery/service.ts nothingAnswered).
    const reasons: [string, string][] = [
      ['unreachable@inbox.test', 'retry timeout exceeded'],
      ['longfail@inbox.test', "all hosts for 'inbox.test' have been failing for a long time (and retry time not reached)"],
    ];
    for (const [address, reason] of reasons) {
      const { id, verp } = await sendCaptured(address);
      assert.equal(await deliverReport(verp, eximFailedWithoutReply({ to: verp, rcpt: address }, reason)), 250);
      await assertSoftBounce(id, address, '4.4.7');
    }
  });

  test('a DSN with Status 5.0.0 whose Diagnostic-Code says mailbox full is a soft bounce: no suppression', async () => {
    const { id, verp } = await sendCaptured('full@inbox.test');
    const report = postfixHardBounce({ to: verp, rcpt: 'full@inbox.test', messageId: `<${id}@sender.test>` })
      .replace('Status: 5.1.1', 'Status: 5.0.0')
      .replace(/550 5\.1\.1 <full@inbox\.test>: Recipient address rejected: User\r\n    unknown in virtual mailbox table/, '552 5.2.2 Mailbox full, quota exceeded');
    assert.match(report, /Diagnostic-Code: smtp; 552 5\.2\.2 Mailbox full/);
    assert.equal(await deliverReport(verp, report), 250);
    await assertSoftBounce(id, 'full@inbox.test', '5.2.2');
  });

  test("Yahoo's and AOL's bare 552 \"mailbox not found\" is a hard bounce about the address, not a full mailbox", async () => {
    // Yahoo-hosted mail (yahoo, aol, att.net) answers an address that does not exist with `552 1 Requested
    // mail action aborted, mailbox not found`; read as RFC 5321's "storage allocation" it was a delay only.
    const { id, verp } = await sendCaptured('nobody@inbox.test');
    assert.equal(await deliverReport(verp, gmailRelayedYahooMailboxNotFound({ to: verp, rcpt: 'nobody@inbox.test' })), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    const event = eventsOf(rig, id).find((e) => e.type === 'bounce');
    assert.deepEqual([event?.data?.status, event?.data?.recipientSuppressed], ['5.1.1', true]);
    assert.equal(suppressionOf('nobody@inbox.test')?.reason, 'hard-bounce');
    const posted = await waitForHook('email.bounce', id);
    assert.equal(posted.data.bounceType, 'hard');
    assert.equal(webhookEventsFor(id).filter((e) => e.type === 'email.bounce').length, 1);
  });

  test('a message that only reads like a bounce (a postmaster helpdesk\'s auto-reply with <>, a carrier\'s notice from a named sender) leaves the email delivered and suppresses no one, whatever street number opens a line', async () => {
    // Read as hard bounces, each suppressed a working address for good: a bare "550" opening an address
    // line is no server's reply, and an auto-reply from postmaster is not its MTA's report.
    const variants: [string, (to: string) => string, string][] = [
      ['helpdesk@northwind.test', postmasterHelpdeskAutoReply, ''],
      ['parcels-customer@inbox.test', parcelNotice, 'parcels@shop.test'],
    ];
    for (const [address, sample, from] of variants) {
      const { id, verp } = await sendCaptured(address);
      const hooksBefore = webhookEventsFor(id).length;
      const report = sample(verp);
      assert.match(report, /^550 Main St/m);
      assert.equal(await deliverReport(verp, report, from), 250);
      assert.equal(emailStatus(rig, id), 'delivered', address);
      assert.deepEqual(eventsOf(rig, id).filter((e) => e.type === 'bounce' || e.type === 'delayed'), [], address);
      assert.equal(suppressionOf(address), undefined, address);
      assert.equal(webhookEventsFor(id).length, hooksBefore, address);
    }
  });

  test('an Exim report that an address the recipient\'s alias expands to failed (a member, in its DSN or free-form text; a pipe in the alias) is recorded as a member-bounce: the email stays delivered, the alias is not suppressed, no webhook, no bounce counted', async () => {
    // The alias took the email (250) and its other members got it; Exim's DSN names the alias as
    // Final-Recipient whichever member failed, so read as the alias's own bounce it suppressed the alias.
    const refused = [{ address: 'ann.leaver@elsewhere.test', diagnosticCode: '550 5.1.1 User unknown' }];
    const variants: [string, (params: { to: string; rcpt: string }) => string, string, { address: string; diagnosticCode: string | null }[]][] = [
      ['team@inbox.test', (params) => eximAliasMemberFailed(params), '5.1.1', refused],
      ['sales@inbox.test', (params) => eximTextBounce(params, 'ann.leaver@elsewhere.test'), '5.1.1', refused],
      ['support@inbox.test', eximAliasPipeFailed, '5.0.0', [{ address: 'pipe to |/usr/local/bin/helpdesk-intake', diagnosticCode: null }]],
    ];
    for (const [address, sample, status, failedMembers] of variants) {
      const { id, verp } = await sendCaptured(address);
      const hooksBefore = webhookEventsFor(id).length;
      const countsBefore = sendingCounts();
      const report = sample({ to: verp, rcpt: address });
      assert.match(report, new RegExp(`generated (from|by) ${address}`));
      assert.equal(await deliverReport(verp, report), 250);
      assert.equal(emailStatus(rig, id), 'delivered', address);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce'), undefined, address);
      const member = eventsOf(rig, id).find((e) => e.type === 'member-bounce');
      assert.deepEqual([member?.data?.status, member?.data?.memberOf, member?.data?.recipientSuppressed], [status, address, false], address);
      assert.deepEqual(member?.data?.failedMembers, failedMembers, `${address}: which member failed, and its server's reply`);
      assert.equal(suppressionOf(address), undefined, address);
      assert.equal(webhookEventsFor(id).length, hooksBefore, address);
      assert.deepEqual(sendingCounts(), countsBefore, address);
      const presented = (await rig.app.api('GET', `/v1/email/${id}`)).body.email.events.find((e: { type: string }) => e.type === 'member-bounce');
      assert.equal(presented?.status, status, 'the record shows what the report said');
      const next = await send(rig, { toAddress: address, fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, next), 'delivered', `${address}: the next email is sent`);
    }
  });

  test('a free-form (Exim) bounce with the code only in its text → hard bounce', async () => {
    const { id, verp } = await sendCaptured('old@inbox.test');
    assert.equal(await deliverReport(verp, eximTextBounce({ to: verp, rcpt: 'old@inbox.test' })), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'bounce')?.data?.source, 'text');
    assert.equal(suppressionOf('old@inbox.test')?.reason, 'hard-bounce');
  });

  test('the report part is found even when the returned original is larger than the parse cap', async () => {
    const { id, verp } = await sendCaptured('big@inbox.test');
    const huge = postfixHardBounce({ to: verp, rcpt: 'big@inbox.test' }).replace('Hello there', `${'x'.repeat(998)}\r\n`.repeat(3000));
    assert.ok(huge.length > 2 * 1024 * 1024);
    assert.equal(await deliverReport(verp, huge), 250);
    assert.equal(emailStatus(rig, id), 'bounce');
  });

  test('a message over smtp.max_message_bytes is refused with 552 and changes nothing', async () => {
    const { id, verp } = await sendCaptured('huge@inbox.test');
    const tooBig = postfixHardBounce({ to: verp, rcpt: 'huge@inbox.test' }).replace('Hello there', `${'x'.repeat(998)}\r\n`.repeat(5000));
    assert.ok(tooBig.length > 4 * 1024 * 1024);
    assert.equal(await deliverReport(verp, tooBig), 552);
    assert.equal(emailStatus(rig, id), 'delivered');
    assert.equal(suppressionOf('huge@inbox.test'), undefined);
  });

  test('forged, legacy, unknown and random recipients are refused with 550 5.1.1', async () => {
    const { id, verp } = await sendCaptured('safe@inbox.test');
    const [local, domain] = verp.split('@');
    const flipped = `${local.slice(0, -1)}${local.endsWith('0') ? '1' : '0'}@${domain}`;
    const otherId = `${id.slice(0, -1)}${id.endsWith('0') ? '1' : '0'}`;
    const refused = [
      flipped, // tampered tag
      verp.replace(id, otherId), // someone else's id under this email's tag
      `bounce-${id}@${domain}`, // the unsigned form
      rig.app.appliance.context.bounces!.verp.address('0'.repeat(24), domain), // authentic tag, no such email
      'someone@random.test',
    ];
    for (const address of refused) {
      assert.equal(await deliverReport(address, postfixHardBounce({ to: address, rcpt: 'safe@inbox.test' })), 550, address);
    }
    assert.equal(emailStatus(rig, id), 'delivered');
    assert.equal(suppressionOf('safe@inbox.test'), undefined);
  });

  test('postmaster, at a domain it serves or none, is accepted (RFC 5321 §4.5.1 MUST) and said in the log, its body not kept', async () => {
    for (const address of ['postmaster@bounce.sender.test', 'PostMaster@sender.test']) {
      assert.equal(await deliverReport(address, Buffer.from('From: admin@inbox.test\r\nSubject: Your server\r\n sends us spam\r\n\r\nPlease look.\r\n'), 'admin@inbox.test'), 250, address);
    }
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      assert.match(await session.command('EHLO mx.inbox.test'), /^250/);
      assert.match(await session.command('MAIL FROM:<admin@inbox.test>'), /^250/);
      assert.match(await session.command('RCPT TO:<postmaster>'), /^250/, 'the bare form too');
      assert.match(await session.command('RCPT TO:<postmistress@bounce.sender.test>'), /^550 5\.1\.1/, 'only that name');
    } finally {
      session.close();
    }
    const logged = rig.app.logs.filter((line) => line.includes('mail for postmaster received'));
    assert.equal(logged.length, 2);
    assert.match(logged[0], /"level":"warn".*"from":"admin@inbox\.test".*"to":\["postmaster@bounce\.sender\.test"\].*"subject":"Your server sends us spam"/);
  });

  test('the logged subject of postmaster mail is readable: encoded-words decoded, 8-bit UTF-8 taken as UTF-8', async () => {
    const subjects = [
      ['Subject: =?UTF-8?Q?Beschwerde_=C3=BCber?=\r\n =?UTF-8?B?IElocmUgTWFpbHM=?=', 'Beschwerde über Ihre Mails'],
      ['Subject: Grüße aus Köln', 'Grüße aus Köln'], // RFC 6532 header, sent with 8BITMIME
      ['Subject: Caf\xe9 ferm\xe9', 'Café fermé'], // legacy 8-bit Latin-1, not UTF-8
    ];
    for (const [header] of subjects) {
      const raw = Buffer.concat([Buffer.from('From: admin@inbox.test\r\n'), Buffer.from(header, header.includes('\xe9') ? 'latin1' : 'utf8'), Buffer.from('\r\n\r\nPlease look.\r\n')]);
      assert.equal(await deliverReport('postmaster@sender.test', raw, 'admin@inbox.test'), 250);
    }
    const logged = rig.app.logs.filter((line) => line.includes('mail for postmaster received')).slice(-3);
    assert.deepEqual(
      logged.map((line) => JSON.parse(line).subject),
      subjects.map(([, subject]) => subject),
    );
  });

  test('postmaster at a domain the appliance does not serve is refused at RCPT, not accepted and dropped (no open-relay look)', async () => {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      assert.match(await session.command('EHLO mx.inbox.test'), /^250/);
      assert.match(await session.command('MAIL FROM:<admin@inbox.test>'), /^250/);
      for (const address of ['postmaster@gmail.com', 'POSTMASTER@example.org', '@relay.test:postmaster@gmail.com']) {
        assert.match(await session.command(`RCPT TO:<${address}>`), /^550 5\.(1\.1|7\.1)/, address);
      }
      assert.match(await session.command('RCPT TO:<postmaster@Sender.test>'), /^250/, 'a sending domain');
      assert.match(await session.command('RCPT TO:<postmaster@bounce.sender.test>'), /^250/, 'its MAIL FROM domain');
    } finally {
      session.close();
    }
  });

  describe('feedback-loop reports at the address registered with the provider (postmaster@)', () => {
    const reports: [string, string, (to: string, returnPath: string, messageId: string) => string][] = [
      ['Yahoo CFL (Original-Mail-From, original as message/rfc822)', 'postmaster@sender.test', (to, returnPath, messageId) => yahooCflComplaint({ to, returnPath, messageId })],
      ['Microsoft JMRP (no Original-Mail-From, recipient redacted, original inline)', 'postmaster@bounce.sender.test', (to, returnPath, messageId) => microsoftJmrpComplaint({ to, returnPath, messageId })],
      ['JMRP with the original headers only (text/rfc822-headers)', 'postmaster@sender.test', (to, returnPath, messageId) => microsoftJmrpComplaint({ to, returnPath, messageId }, true)],
    ];
    for (const [provider, postmaster, report] of reports) {
      test(`${provider} → complaint, suppression, counted, email.complaint webhook`, async () => {
        const address = `fbl-${reports.findIndex(([name]) => name === provider)}@inbox.test`;
        const { id, verp } = await sendCaptured(address);
        const countsBefore = sendingCounts();
        assert.equal(await deliverReport(postmaster, report(postmaster, verp, `<${id}@sender.test>`), 'feedback@fbl.provider.test'), 250);
        assert.equal(emailStatus(rig, id), 'complaint');
        assert.equal(suppressionOf(address)?.reason, 'complaint');
        assert.deepEqual(sendingCounts(), { ...countsBefore, complaints: countsBefore.complaints + 1 });
        assert.equal(eventsOf(rig, id).filter((e) => e.type === 'complaint').length, 1);
        assert.deepEqual(webhookEventsFor(id).map((e) => e.type), ['email.delivered', 'email.complaint']);
        assert.equal((await waitForHook('email.complaint', id)).data.toAddress, address);
      });
    }

    test('a report naming a forged VERP address (bad signature) changes nothing, and is logged as postmaster mail', async () => {
      const { id, verp } = await sendCaptured('forged-fbl@inbox.test');
      const forged = verp.replace(/-([0-9a-f]{20})@/, (_, tag: string) => `-${tag.startsWith('0') ? '1' : '0'}${tag.slice(1)}@`);
      assert.notEqual(forged, verp);
      const logsBefore = rig.app.logs.filter((line) => line.includes('mail for postmaster received')).length;
      for (const raw of [yahooCflComplaint({ to: 'postmaster@sender.test', returnPath: forged }), microsoftJmrpComplaint({ to: 'postmaster@sender.test', returnPath: forged })]) {
        assert.equal(await deliverReport('postmaster@sender.test', raw, 'feedback@fbl.provider.test'), 250);
      }
      assert.equal(emailStatus(rig, id), 'delivered');
      assert.equal(suppressionOf('forged-fbl@inbox.test'), undefined);
      assert.deepEqual(eventsOf(rig, id).map((e) => e.type).filter((type) => type === 'complaint'), []);
      assert.deepEqual(webhookEventsFor(id).map((e) => e.type), ['email.delivered']);
      assert.equal(rig.app.logs.filter((line) => line.includes('mail for postmaster received')).length, logsBefore + 2);
    });

    test('mail to postmaster that is not an ARF report, even one returning our original with its Return-Path, changes nothing', async () => {
      const { id, verp } = await sendCaptured('forwarded@inbox.test');
      // A person forwarding "your spam" as an attachment, and one pasting the headers: not a report.
      const forwarded = `From: admin@inbox.test\r\nSubject: Fwd: Hello\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="f"\r\n\r\n--f\r\nContent-Type: text/plain\r\n\r\nStop this.\r\n\r\n--f\r\nContent-Type: message/rfc822\r\n\r\nReturn-Path: <${verp}>\r\nFrom: hello@sender.test\r\nSubject: Hello\r\n\r\nHello there\r\n--f--\r\n`;
      const pasted = `From: admin@inbox.test\r\nSubject: Spam from you\r\n\r\nOriginal-Mail-From: <${verp}>\r\nReturn-Path: <${verp}>\r\nFeedback-Type: abuse\r\n`;
      for (const raw of [forwarded, pasted]) assert.equal(await deliverReport('postmaster@sender.test', raw, 'admin@inbox.test'), 250);
      assert.equal(emailStatus(rig, id), 'delivered');
      assert.equal(suppressionOf('forwarded@inbox.test'), undefined);
      assert.deepEqual(webhookEventsFor(id).map((e) => e.type), ['email.delivered']);
    });
  });

  test('postmaster at an internationalized sending domain is accepted, written in A-labels or U-labels', async () => {
    const created = await rig.app.api('POST', '/v1/domains', { domain: 'bücher.test' });
    assert.equal(created.status, 200);
    assert.equal(created.body.domain, 'xn--bcher-kva.test', 'stored in A-labels');
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      assert.match(await session.command('EHLO mx.inbox.test'), /^250/);
      assert.match(await session.command('MAIL FROM:<admin@inbox.test>'), /^250/);
      // An MTA writes the domain in A-labels, as its DNS has it; smtp-server hands it on in U-labels.
      assert.match(await session.command('RCPT TO:<postmaster@xn--bcher-kva.test>'), /^250/, 'the sending domain');
      assert.match(await session.command('RCPT TO:<postmaster@bounce.xn--bcher-kva.test>'), /^250/, 'its MAIL FROM domain');
      assert.match(await session.command('RCPT TO:<postmaster@BÜCHER.test>'), /^250/, 'in U-labels (SMTPUTF8)');
      assert.match(await session.command('RCPT TO:<postmaster@xn--bchner-3ya.test>'), /^550 5\.1\.1/, 'another IDN');
    } finally {
      session.close();
    }
  });

  test('the 11th recipient of one transaction is refused with 452, not accepted and left unprocessed', async () => {
    const sent: { id: string; verp: string }[] = [];
    for (let i = 0; i < 11; i++) sent.push(await sendCaptured('many@inbox.test'));
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      assert.match(session.greeting, /^220 \S+ ESMTP Postino\r\n$/);
      assert.match(await session.command('EHLO mx.inbox.test'), /^250/);
      assert.match(await session.command('MAIL FROM:<>'), /^250/);
      for (const { verp } of sent.slice(0, 10)) assert.match(await session.command(`RCPT TO:<${verp}>`), /^250/);
      assert.match(await session.command(`RCPT TO:<${sent[10].verp}>`), /^452 4\.5\.3/);
      assert.match(await session.command('DATA'), /^354/);
      await session.write(`${postfixHardBounce({ to: sent[0].verp, rcpt: 'many@inbox.test' })}\r\n.\r\n`);
      assert.match(await session.reply(), /^250/);
    } finally {
      session.close();
    }
    for (const { id } of sent.slice(0, 10)) assert.equal(emailStatus(rig, id), 'bounce');
    assert.equal(emailStatus(rig, sent[10].id), 'delivered', 'refused, so its sender delivers it again');
    assert.equal(await deliverReport(sent[10].verp, postfixHardBounce({ to: sent[10].verp, rcpt: 'many@inbox.test' })), 250);
    assert.equal(emailStatus(rig, sent[10].id), 'bounce');
  });

  test('reports repeated without end do not grow the email record without bound: past 100 of a kind no event is stored, the status still moves', async () => {
    // The VERP Return-Path is in every copy the recipient got (and in archives of it): one who replays a
    // report to it, or a remote system that loops, appended an event per message, kept for good and
    // returned by every GET /v1/email/{id}, as the tracking pixel did before its cap (maxTrackingEventsPerType).
    const { id, verp } = await sendCaptured('looping@inbox.test');
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: rig.app.smtpPort, secure: false, ignoreTLS: true, name: 'mx.inbox.test', pool: true, maxMessages: Infinity, maxConnections: 1 });
    try {
      const delayed = postfixDelayed({ to: verp, rcpt: 'looping@inbox.test' });
      for (let i = 0; i < 120; i++) {
        const info = await transport.sendMail({ envelope: { from: '', to: [verp] }, raw: delayed });
        assert.match(info.response, /^250/);
      }
    } finally {
      transport.close();
    }
    assert.equal(eventsOf(rig, id).filter((e) => e.type === 'delayed').length, 100, 'the first 100 delays are kept');
    assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'looping@inbox.test' })), 250);
    assert.equal(emailStatus(rig, id), 'bounce', 'a report of another kind still counts');
    assert.equal(suppressionOf('looping@inbox.test')?.reason, 'hard-bounce');
    const { email } = (await rig.app.api('GET', `/v1/email/${id}`)).body;
    assert.equal(email.events.filter((e: { type: string }) => e.type === 'delayed').length, 100);
    assert.equal(email.events.filter((e: { type: string }) => e.type === 'bounce').length, 1);
  });

  test('garbage at a valid VERP address is accepted (250) and changes nothing', async () => {
    const { id, verp } = await sendCaptured('calm@inbox.test');
    const eventsBefore = eventsOf(rig, id).length;
    const hooksBefore = webhookEventsFor(id).length;
    const bodies = [
      Buffer.from('this is not an email at all\r\n\u0000\u0001\u0002'),
      Buffer.from('Content-Type: multipart/report; report-type=delivery-status; boundary="x"\r\n\r\n--x\r\nContent-Type: message/delivery-status\r\n\r\nAction: '),
      Buffer.from('From: friend@inbox.test\r\nSubject: Re: Hello\r\n\r\nThanks, got it! Error 550 5.1.1 in our logs was fixed.\r\n'),
    ];
    for (const body of bodies) assert.equal(await deliverReport(verp, body, 'friend@inbox.test'), 250);
    assert.equal(emailStatus(rig, id), 'delivered');
    assert.equal(eventsOf(rig, id).length, eventsBefore);
    assert.equal(webhookEventsFor(id).length, hooksBefore);
    assert.equal(suppressionOf('calm@inbox.test'), undefined);
    assert.ok(rig.app.logs.some((line) => line.includes('inbound report') && line.includes(id) && line.includes('ignored')), 'logged');
    assert.equal(db().select().from(emailEvents).where(and(eq(emailEvents.emailId, id), eq(emailEvents.type, 'bounce'))).all().length, 0);
  });
});

describe('reports that come before the delivery is recorded', () => {
  // The receiver's 250 is held: the message has arrived, its outcome is not written yet (as while the
  // outcome's write waits, or for a copy sent without an answer). A report then finds the email queued.
  const held: (() => void)[] = [];
  const arrived: { mailFrom: string; rcptTo: string[] }[] = [];
  let early: DeliveryRig;
  before(async () => {
    early = await startRig({
      env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true' },
      sink: {
        beforeReply: (message) => {
          arrived.push(message);
          return new Promise<void>((resolve) => held.push(resolve));
        },
      },
    });
    routeToSink(early.dns, 'inbox.test');
    // Events are written for an endpoint (whether it answers does not matter here).
    assert.equal((await early.app.api('POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hooks' })).status, 201);
  });
  after(async () => {
    for (const release of held) release();
    await early.stop();
  });

  const hooksOf = (id: string) =>
    early.app.appliance.context.database.db
      .select()
      .from(webhookEvents)
      .all()
      .filter((event) => (event.data as { emailId?: string }).emailId === id)
      .map((event) => event.type);

  for (const [kind, report, from, final, hook] of [
    ['a hard bounce report', postfixHardBounce, '', 'bounce', 'email.bounce'],
    ['a complaint', arfComplaint, 'feedback@arf.mail.yahoo.com', 'complaint', 'email.complaint'],
  ] as const) {
    test(`${kind} that comes first is applied once the delivery is: final status and webhook after email.delivered`, async () => {
      const toAddress = `${final}-first@inbox.test`;
      const id = await send(early, { toAddress, fromAddress: 'app@sender.test' });
      await waitUntil(() => arrived.some((m) => m.rcptTo[0] === toAddress), 'the message at the receiver, its reply held');
      const verp = arrived.find((m) => m.rcptTo[0] === toAddress)!.mailFrom;
      const transport = nodemailer.createTransport({ host: '127.0.0.1', port: early.app.smtpPort, secure: false, ignoreTLS: true, name: 'mx.inbox.test' });
      await transport.sendMail({ envelope: { from, to: [verp] }, raw: report({ to: verp, rcpt: toAddress }) });
      transport.close();
      assert.equal(emailStatus(early, id), 'queued', 'a report leaves a queued email to delivery');
      held.shift()!();
      await waitUntil(() => emailStatus(early, id) === final, `the email at ${final}`);
      assert.deepEqual(hooksOf(id), ['email.delivered', hook]);
    });
  }

  test('an open that comes first: its email.open webhook goes after email.delivered, with the first open\'s time, address and user agent', async () => {
    const toAddress = 'open-first@inbox.test';
    const id = await send(early, { toAddress, fromAddress: 'app@sender.test' });
    await waitUntil(() => arrived.some((m) => m.rcptTo[0] === toAddress), 'the message at the receiver, its reply held');
    const pixel = `${early.app.baseUrl}/t/o/${early.app.appliance.context.signer.sign(`o:${id}`)}`;
    for (const agent of ['FirstReader/1.0', 'SecondReader/2.0']) assert.equal((await fetch(pixel, { headers: { 'user-agent': agent } })).status, 200);
    assert.equal(emailStatus(early, id), 'queued');
    assert.deepEqual(hooksOf(id), [], 'nothing before the delivered outcome');
    held.shift()!();
    await waitUntil(() => emailStatus(early, id) === 'open', 'the email at open');
    assert.deepEqual(hooksOf(id), ['email.delivered', 'email.open']);
    const open = early.app.appliance.context.database.db.select().from(webhookEvents).all().find((event) => event.type === 'email.open' && (event.data as { emailId?: string }).emailId === id)!;
    const firstOpen = eventsOf(early, id).find((event) => event.type === 'open')!;
    assert.deepEqual(open.data, { id, emailId: id, time: new Date(firstOpen.time).toISOString(), ipAddress: '127.0.0.1', userAgent: 'FirstReader/1.0' });
    assert.equal((await fetch(pixel)).status, 200);
    assert.deepEqual(hooksOf(id), ['email.delivered', 'email.open'], 'the first open only');
  });

  test('a hard bounce and a complaint that both come first: each one\'s webhook, in rank order, the complaint last', async () => {
    const toAddress = 'both-first@inbox.test';
    const id = await send(early, { toAddress, fromAddress: 'app@sender.test' });
    await waitUntil(() => arrived.some((m) => m.rcptTo[0] === toAddress), 'the message at the receiver, its reply held');
    const verp = arrived.find((m) => m.rcptTo[0] === toAddress)!.mailFrom;
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: early.app.smtpPort, secure: false, ignoreTLS: true, name: 'mx.inbox.test' });
    await transport.sendMail({ envelope: { from: '', to: [verp] }, raw: postfixHardBounce({ to: verp, rcpt: toAddress }) });
    await transport.sendMail({ envelope: { from: 'feedback@arf.mail.yahoo.com', to: [verp] }, raw: arfComplaint({ to: verp, rcpt: toAddress }) });
    transport.close();
    held.shift()!();
    await waitUntil(() => emailStatus(early, id) === 'complaint', 'the email at complaint');
    assert.deepEqual(hooksOf(id), ['email.delivered', 'email.bounce', 'email.complaint']);
  });
});

describe('a report about a copy sent without an answer', () => {
  // The receiver takes the message and never answers its final dot: the attempt ends without an answer
  // (socket_timeout, 1 s here) and the email stays queued. Its bounce report then comes, and suppresses
  // the address; the retry finds it suppressed.
  const seen: { mailFrom: string; rcptTo: string[] }[] = [];
  let silent: DeliveryRig;
  before(async () => {
    silent = await startRig({
      env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true', POSTINO_DELIVERY_SOCKET_TIMEOUT: '1s', POSTINO_DELIVERY_RETRY_SCHEDULE: '3s' },
      sink: {
        beforeReply: (message) => {
          seen.push(message);
          return new Promise<void>(() => {});
        },
      },
    });
    routeToSink(silent.dns, 'inbox.test');
    assert.equal((await silent.app.api('POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hooks' })).status, 201);
  });
  after(() => silent.stop());

  test('decides the email\'s status when it is retried: a bounce with its webhook, not "suppressed"', async () => {
    const toAddress = 'gone@inbox.test';
    const id = await send(silent, { toAddress, fromAddress: 'app@sender.test' });
    const deferred = await waitForEvent(silent, id, 'deferred');
    assert.match(String(deferred.data?.smtpResponse), /may have been delivered/);
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: silent.app.smtpPort, secure: false, ignoreTLS: true, name: 'mx.inbox.test' });
    await transport.sendMail({ envelope: { from: '', to: [seen[0].mailFrom] }, raw: postfixHardBounce({ to: seen[0].mailFrom, rcpt: toAddress }) });
    transport.close();
    assert.equal(emailStatus(silent, id), 'queued');
    assert.equal(await waitForFinal(silent, id, 15_000), 'bounce');
    const hooks = silent.app.appliance.context.database.db
      .select()
      .from(webhookEvents)
      .all()
      .filter((event) => (event.data as { emailId?: string }).emailId === id)
      .map((event) => event.type);
    assert.deepEqual(hooks, ['email.bounce']);
  });

  test('a complaint about it suppresses the address at once: the retry sends no second copy, and the complaint decides the status', async () => {
    const toAddress = 'annoyed@inbox.test';
    const id = await send(silent, { toAddress, fromAddress: 'app@sender.test' });
    await waitForEvent(silent, id, 'deferred');
    const copy = seen.find((message) => message.rcptTo[0] === toAddress)!;
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: silent.app.smtpPort, secure: false, ignoreTLS: true, name: 'fbl.inbox.test' });
    await transport.sendMail({ envelope: { from: '', to: [copy.mailFrom] }, raw: arfComplaint({ to: copy.mailFrom, rcpt: toAddress }) });
    transport.close();
    assert.equal(emailStatus(silent, id), 'queued');
    const { db } = silent.app.appliance.context.database;
    assert.equal(db.select().from(suppressions).where(eq(suppressions.emailAddress, toAddress)).get()?.reason, 'complaint', 'suppressed when the report came');
    assert.equal(await waitForFinal(silent, id, 15_000), 'complaint');
    assert.equal(seen.filter((message) => message.rcptTo[0] === toAddress).length, 1, 'no copy after the complaint');
    const hooks = db.select().from(webhookEvents).all().filter((event) => (event.data as { emailId?: string }).emailId === id).map((event) => event.type);
    assert.deepEqual(hooks, ['email.complaint']);
  });
});
