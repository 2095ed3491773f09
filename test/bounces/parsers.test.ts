import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { parseFieldGroups, stripAddressType } from '../../src/bounces/fields.js';
import { isComplaint, parseFeedbackReport } from '../../src/bounces/parse-arf.js';
import { classifyRecipient, interpretDeliveryStatus, parseDeliveryStatus, statusOf } from '../../src/bounces/parse-dsn.js';
import { aliasOfFailedMember, failedMembersOf } from '../../src/bounces/alias-member.js';
import { detectTextBounce } from '../../src/bounces/parse-text-bounce.js';
import { reportedEnvelopeSenders } from '../../src/bounces/feedback-loop.js';
import { parseReport, readReport } from '../../src/bounces/read-report.js';
import { bounceTypeOf, findBasicCode, findEnhancedCode, isAddressFailure } from '../../src/bounces/status-code.js';
import { nextStatus } from '../../src/bounces/transitions.js';
import { createVerp } from '../../src/bounces/verp.js';
import { createUrlSigner } from '../../src/lib/signing.js';
import { arfComplaint, eximAliasMemberFailed, eximAliasPipeFailed, eximTextBounce, exchangeHardBounce, gmailHardBounce, microsoftJmrpComplaint, postfixDelayed, postfixHardBounce, postmasterHelpdeskAutoReply, qmailTextBounce, yahooCflComplaint } from './samples.js';

const params = { to: 'bounce-65a4f0c1a1b2c3d4e5000001-0123456789abcdef0123@bounce.sender.test', rcpt: 'nobody@inbox.test' };

describe('status codes', () => {
  const enhanced: [string, string | undefined][] = [
    ['5.1.1', '5.1.1'],
    ['Status: 5.1.10 (recipient not found)', '5.1.10'],
    ['smtp; 550-5.1.1 The email account', '5.1.1'],
    ['4.4.7', '4.4.7'],
    ['version 1.2.3.4', undefined],
    ['ip 10.5.1.1', undefined],
    ['no code here', undefined],
    [' 5.01.001 ', '5.1.1'],
  ];
  for (const [text, expected] of enhanced) test(`enhanced code in ${JSON.stringify(text)} → ${expected}`, () => assert.equal(findEnhancedCode(text), expected));

  const basic: [string, string | undefined][] = [
    ['Remote host said: 554 delivery error', '554'],
    ['#550 5.1.1 RESOLVER', '550'],
    ['550-5.1.1 The email', '550'],
    ['421 try later', '421'],
    ['on 2024-01-15 at 10:45:00', undefined],
    ['order 5500 shipped', undefined],
    ['x550 y', undefined],
    ['<<< 550 Requested action not taken', '550'],
    ['The server replied: 552 too big', '552'],
    ['(reason: 550 5.7.1 blocked)', '550'],
    ['For urgent matters call 555-0100.', undefined],
    ['Your ticket #512 has been opened', undefined],
    ['We have 450 open positions', undefined],
    ["554: delivery error: dd This user doesn't have a yahoo.com account", '554'],
    ['Remote host said: 550: no such user', '550'],
    ['Meeting at 10:30: agenda', undefined],
  ];
  for (const [text, expected] of basic) test(`basic code in ${JSON.stringify(text)} → ${expected}`, () => assert.equal(findBasicCode(text), expected));

  const types: [string, string | undefined][] = [
    ['5.1.1', 'hard'],
    ['5.7.1', 'hard'],
    ['5.2.2', 'transient'], // mailbox full: the mailbox exists
    ['4.2.2', 'transient'],
    ['4.4.1', 'transient'],
    ['2.0.0', undefined],
  ];
  for (const [status, expected] of types) test(`${status} → ${expected}`, () => assert.equal(bounceTypeOf(status), expected));

  // Which permanent failures suppress the address: the ones about it, not about the message or sender.
  const aboutAddress: [string, boolean][] = [
    ['5.0.0', true],
    ['5.1.1', true],
    ['5.1.10', true],
    ['5.2.1', true],
    ['5.4.4', true],
    ['5.2.3', false], // message longer than the mailbox allows
    ['5.1.7', false], // the sender's address is bad
    ['5.1.8', false], // the sender's domain is bad (Sender address rejected: Domain not found)
    ['5.4.7', false], // this message's delivery time expired
    ['5.3.4', false],
    ['5.5.2', false],
    ['5.6.0', false],
    ['5.7.1', false],
    ['5.7.26', false],
  ];
  for (const [status, expected] of aboutAddress) test(`${status} is ${expected ? '' : 'not '}about the address`, () => assert.equal(isAddressFailure(status), expected));
  test("Outlook.com's 5.5.0 for an address that does not exist is about the address; another 5.5.0 is not", () => {
    assert.equal(isAddressFailure('5.5.0', 'smtp; 550 5.5.0 Requested action not taken: mailbox unavailable (S2017062302). [DM6NAM12FT012.eop-nam12.prod.protection.outlook.com]'), true);
    assert.equal(isAddressFailure('5.5.0', '550 5.5.0 <x@example.com>: Recipient address rejected: User unknown'), true);
    assert.equal(isAddressFailure('5.5.0', '550 5.5.0 Syntax error in parameters'), false);
    assert.equal(isAddressFailure('5.5.0'), false);
  });
});

describe('field groups', () => {
  test('folded values, blank-line groups, lowercased names, first occurrence wins', () => {
    const groups = parseFieldGroups('Reporting-MTA: dns; a.test\r\n\r\nFinal-Recipient: rfc822; x@y.test\r\nDiagnostic-Code: smtp; 550 one\r\n  two\r\nStatus: 5.1.1\r\nStatus: 2.0.0\r\n');
    assert.equal(groups.length, 2);
    assert.equal(groups[0].get('reporting-mta'), 'dns; a.test');
    assert.equal(groups[1].get('diagnostic-code'), 'smtp; 550 one two');
    assert.equal(groups[1].get('status'), '5.1.1');
  });
  test('address type and brackets are stripped', () => {
    assert.equal(stripAddressType('rfc822; <X@Y.test>'), 'X@Y.test');
    assert.equal(stripAddressType('x@y.test'), 'x@y.test');
    assert.equal(stripAddressType('rfc822;'), undefined);
  });
});

describe('delivery status (RFC 3464)', () => {
  const recipients: [string, Parameters<typeof classifyRecipient>[0], string | undefined, string | undefined][] = [
    ['failed 5.1.1', { action: 'failed', status: '5.1.1' }, 'hard', '5.1.1'],
    ['failed 4.4.7 (Postfix gave up)', { action: 'failed', status: '4.4.7' }, 'transient', '4.4.7'],
    ['delayed 4.4.1', { action: 'delayed', status: '4.4.1' }, 'transient', '4.4.1'],
    ['delayed without status', { action: 'delayed' }, 'transient', undefined],
    ['delivered 2.0.0', { action: 'delivered', status: '2.0.0' }, undefined, '2.0.0'],
    ['relayed', { action: 'relayed', status: '2.0.0' }, undefined, '2.0.0'],
    ['failed, code only in Diagnostic-Code', { action: 'failed', diagnosticCode: 'smtp; 550 5.7.1 rejected' }, 'hard', '5.7.1'],
    ['failed, basic code only', { action: 'failed', diagnosticCode: 'smtp; 554 no such user' }, 'hard', '5.0.0'],
    ['failed, no status at all', { action: 'failed' }, 'hard', '5.0.0'],
    ['no action, 5.x.x', { status: '5.1.2' }, 'hard', '5.1.2'],
    ['failed 5.2.2 mailbox full', { action: 'failed', status: '5.2.2' }, 'transient', '5.2.2'],
    ['failed 5.0.0, the Diagnostic-Code says mailbox full', { action: 'failed', status: '5.0.0', diagnosticCode: 'smtp; 552 5.2.2 Mailbox full, quota exceeded' }, 'transient', '5.2.2'],
    ['failed 5.0.0, the Diagnostic-Code says over quota for now', { action: 'failed', status: '5.0.0', diagnosticCode: 'smtp; 452 4.2.2 over quota' }, 'transient', '4.2.2'],
    ['failed 5.0.0, a bare 552 in the Diagnostic-Code: a full mailbox, not a hard bounce', { action: 'failed', status: '5.0.0', diagnosticCode: 'smtp; 552 Mailbox full, try again later' }, 'transient', '5.2.2'],
    ['failed 5.0.0, a bare 552 saying the message is too large: a bounce of that message (X.3 suppresses nothing)', { action: 'failed', status: '5.0.0', diagnosticCode: 'smtp; 552 Message size exceeds fixed maximum message size' }, 'hard', '5.3.4'],
    ["failed 5.0.0, Yahoo's bare 552 for a mailbox that does not exist: a hard bounce", { action: 'failed', status: '5.0.0', diagnosticCode: 'smtp; 552 1 Requested mail action aborted, mailbox not found' }, 'hard', '5.1.1'],
    ['failed, a bare 552 only', { action: 'failed', diagnosticCode: 'smtp; 552 Requested mail action aborted: exceeded storage allocation' }, 'transient', '5.2.2'],
    ['a specific Status is kept whatever the Diagnostic-Code says', { action: 'failed', status: '5.1.1', diagnosticCode: 'smtp; 550 5.7.1 rejected' }, 'hard', '5.1.1'],
  ];
  for (const [name, recipient, type, status] of recipients) {
    test(name, () => {
      assert.equal(classifyRecipient(recipient), type);
      assert.equal(statusOf(recipient), status);
    });
  }

  test('per-message and per-recipient groups', () => {
    const report = parseDeliveryStatus('Reporting-MTA: dns; mx.a.test\nArrival-Date: x\n\nFinal-Recipient: rfc822; one@a.test\nAction: delivered\nStatus: 2.0.0\n\nFinal-Recipient: rfc822; two@a.test\nAction: failed\nStatus: 5.1.1\nRemote-MTA: dns; store.a.test\n');
    assert.equal(report.reportingMta, 'mx.a.test');
    assert.deepEqual(report.recipients.map((r) => [r.finalRecipient, r.action]), [['one@a.test', 'delivered'], ['two@a.test', 'failed']]);
    assert.equal(report.recipients[1].remoteMta, 'store.a.test');
  });

  test("the email's own recipient group is preferred", () => {
    const text = 'Final-Recipient: rfc822; other@a.test\nAction: failed\nStatus: 5.1.1\n\nFinal-Recipient: rfc822; Mine@a.test\nAction: delayed\nStatus: 4.2.2\n';
    assert.equal(interpretDeliveryStatus(text, 'mine@a.test')?.bounceType, 'transient');
    assert.equal(interpretDeliveryStatus(text)?.bounceType, 'hard');
    assert.equal(interpretDeliveryStatus('Final-Recipient: rfc822; x@a.test\nAction: delivered\nStatus: 2.0.0\n'), undefined);
  });

  test('of several groups about the email (an alias expanded), the most final wins: the first, a delay, hid a failure', () => {
    const group = (action: string, status: string) => `Original-Recipient: rfc822; mine@a.test\nFinal-Recipient: rfc822; member@b.test\nAction: ${action}\nStatus: ${status}\n`;
    const delayedThenFailed = [group('delayed', '4.4.1'), group('failed', '5.1.1')].join('\n');
    assert.deepEqual([interpretDeliveryStatus(delayedThenFailed, 'mine@a.test')?.bounceType, interpretDeliveryStatus(delayedThenFailed, 'mine@a.test')?.status], ['hard', '5.1.1']);
    const delayedThenGaveUp = [group('delayed', '4.4.1'), group('failed', '4.4.7')].join('\n');
    assert.deepEqual([interpretDeliveryStatus(delayedThenGaveUp, 'mine@a.test')?.action, interpretDeliveryStatus(delayedThenGaveUp, 'mine@a.test')?.status], ['failed', '4.4.7']);
  });
});

describe('feedback reports (RFC 5965)', () => {
  const types: [string, boolean][] = [
    ['abuse', true],
    ['fraud', true],
    ['virus', true],
    ['Abuse', true],
    ['auth-failure', false], // DMARC/DKIM failure report, RFC 6591
    ['not-spam', false],
    ['other', false],
  ];
  for (const [type, complaint] of types) {
    test(`Feedback-Type: ${type} → complaint ${complaint}`, () => {
      const report = parseFeedbackReport(`Feedback-Type: ${type}\nUser-Agent: X/1\nVersion: 1\nOriginal-Rcpt-To: <a@b.test>\n`);
      assert.ok(report);
      assert.equal(isComplaint(report), complaint);
      assert.equal(report.originalRcptTo, 'a@b.test');
    });
  }
  test('no Feedback-Type → not a report', () => assert.equal(parseFeedbackReport('User-Agent: X/1\nVersion: 1\n'), undefined));

  test('a feedback-loop report names the envelope senders of its original: Original-Mail-From, then the Return-Path inside it', async () => {
    const other = 'bounce-65a4f0c1a1b2c3d4e5000002-0123456789abcdef0123@bounce.sender.test';
    const yahoo = yahooCflComplaint({ to: 'postmaster@sender.test', returnPath: params.to }).replace(`Return-Path: <${params.to}>`, `Return-Path: <${other}>`);
    assert.deepEqual(reportedEnvelopeSenders(await parseReport(Buffer.from(yahoo))), [params.to, other]);
    for (const headersOnly of [false, true]) {
      const jmrp = microsoftJmrpComplaint({ to: 'postmaster@sender.test', returnPath: params.to }, headersOnly);
      assert.deepEqual(reportedEnvelopeSenders(await parseReport(Buffer.from(jmrp))), [params.to], `headersOnly ${headersOnly}`);
    }
    // A bounce names none: only an ARF report speaks for the complainant.
    assert.deepEqual(reportedEnvelopeSenders(await parseReport(Buffer.from(postfixHardBounce(params)))), []);
    assert.deepEqual(reportedEnvelopeSenders({ unreadable: 'x' }), []);
  });
});

describe('free-form bounces (best effort)', () => {
  const cases: { name: string; input: Parameters<typeof detectTextBounce>[0]; expected: { bounceType: string; status: string } | undefined }[] = [
    { name: 'Exim text with enhanced code', input: { subject: 'Mail delivery failed: returning message to sender', text: '  x@y.test\n    SMTP error from remote mail server after RCPT TO:<x@y.test>:\n    550 5.1.1 User unknown\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'qmail with a basic code only', input: { subject: 'failure notice', text: 'Remote host said: 554 delivery error: dd This user doesn\'t have an account\n' }, expected: { bounceType: 'hard', status: '5.0.0' } },
    { name: 'Yahoo: a code followed by a colon', input: { subject: 'Failure Notice', from: 'MAILER-DAEMON@yahoo.com', text: 'Sorry, we were unable to deliver your message to the following address.\n\n<x@yahoo.com>:\n554: delivery error: dd This user doesn\'t have a yahoo.com account (x@yahoo.com) [0] - mta1001.mail.gq1.yahoo.com\n' }, expected: { bounceType: 'hard', status: '5.0.0' } },
    { name: "Yahoo: a bare 552 for a mailbox that does not exist", input: { subject: 'Failure Notice', from: 'MAILER-DAEMON@aol.com', text: 'Sorry, we were unable to deliver your message to the following address.\n\n<x@aol.com>:\nRemote host said: 552 1 Requested mail action aborted, mailbox not found [RCPT_TO]\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'phrase only: no such account', input: { subject: 'Failure Notice', text: "This user doesn't have a yahoo.com account\n" }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'legacy Exchange NDR', input: { subject: 'Undeliverable: Hello', from: 'postmaster@corp.test', text: 'Generating server: mx.corp.test\nx@corp.test\n#550 5.1.1 RESOLVER.ADR.RecipNotFound; not found ##\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'temporary failure in text', input: { subject: 'Delivery Status Notification (Delay)', text: '451 4.3.0 Mail server temporarily rejected message.\n' }, expected: { bounceType: 'transient', status: '4.3.0' } },
    { name: 'phrase only: user unknown', input: { subject: 'Returned mail: see transcript for details', text: '... while talking to mx.y.test:\n>>> RCPT To:<x@y.test>\n<<< User unknown\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'phrase only: mailbox full', input: { subject: 'Undelivered Mail', text: 'The mailbox is full.\n' }, expected: { bounceType: 'transient', status: '4.2.2' } },
    { name: 'a code only inside the quoted original does not count', input: { subject: 'failure notice', text: 'Sorry.\n\n--- Below this line is a copy of the message.\n\nOur order 550 5.1.1 shipped\n' }, expected: undefined },
    { name: 'an ordinary reply mentioning 550 5.1.1 is not a bounce', input: { subject: 'Re: your invoice', from: 'Bob <bob@y.test>', text: 'We saw 550 5.1.1 in our logs.\n' }, expected: undefined },
    { name: 'a vacation notice sent with <> is not a bounce, whatever numbers it holds', input: { subject: 'Automatic reply: Your order', from: 'Ann <ann@y.test>', text: 'I am out of the office until Monday.\n550 5.1.1 is not my problem. For urgent matters call 555-0100.\n' }, expected: undefined },
    { name: 'an auto-acknowledgement sent with <> is not a bounce', input: { subject: 'We received your request', from: 'Support <help@y.test>', text: 'Your ticket #512 has been opened.\n' }, expected: undefined },
    { name: 'an out-of-office notice from a postmaster address is still not a bounce', input: { subject: 'Out of Office: Hello', from: 'postmaster@y.test', text: 'Back on Monday. Mailbox is full of work.\n' }, expected: undefined },
    { name: 'a German Outlook auto-reply about a shipping email is not a bounce, its dates are not codes', input: { subject: 'Automatische Antwort: Delivery notification for order 12', from: 'Max <max@y.test>', text: 'Ich bin bis 5.1.25 nicht im Buero.\n' }, expected: undefined },
    { name: 'a Dutch auto-reply', input: { subject: 'Automatisch antwoord: Your parcel could not be delivered', text: 'Ik ben tot 5.1.25 afwezig.\n' }, expected: undefined },
    { name: 'a Portuguese auto-reply', input: { subject: 'Resposta automática: Delivery notification', text: 'Estou ausente até 5.1.25 inclusive.\n' }, expected: undefined },
    { name: 'a vacation reply to a billing email ("Re: Payment failure notice") is not a bounce, the phone number in its signature is no reply code', input: { subject: 'Re: Payment failure notice', from: 'Dana <dana@y.test>', text: 'I am on vacation until January 29.\n\nDana\n503-555-0142\n' }, expected: undefined },
    { name: 'a German reply (AW:) to a shipping email is not a bounce', input: { subject: 'AW: Your parcel could not be delivered', text: 'Danke.\n550 Main Street\n' }, expected: undefined },
    { name: 'a date shaped like a status code (d.m.yy) is not one: no bounce without a code or phrase', input: { subject: 'Undeliverable: Hello', text: 'We are closed until 5.1.25 for the holidays.\n' }, expected: undefined },
    { name: 'a German bounce: the code after the reply code, not the date before it', input: { subject: 'Unzustellbar: Hallo', from: 'postmaster@y.test', text: 'Ihre Nachricht vom 4.1.25 konnte nicht zugestellt werden.\nmx.y.test: 550 5.1.1 User unknown\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'a registered code standing alone still counts', input: { subject: 'Undeliverable: Hello', text: 'Status 5.1.10 recipient address rejected\n' }, expected: { bounceType: 'hard', status: '5.1.10' } },
    { name: 'success codes are not bounces', input: { subject: 'Delivery Status Notification (Success)', text: '250 2.0.0 OK\n' }, expected: undefined },
    // A bare reply code opening a line is a server's reply only where a bounce quotes one; in prose or an
    // address it is a street number, and read as a hard bounce it suppressed a working address for good.
    {
      name: 'a bare 550 opening an address line is no reply code, even from postmaster: "550 Main St"',
      input: { subject: 'Ticket received', from: 'Northwind IT <postmaster@northwind.test>', text: 'Thanks for writing to us. A ticket has been opened.\n\nNorthwind Traders\n550 Main St, Suite 200\nSpringfield\n' },
      expected: undefined,
    },
    {
      name: 'a shipping notice from a named sender whose subject reads like a bounce: its street number is no reply code',
      input: { subject: 'Your parcel could not be delivered', from: 'Parcel Desk <parcels@shop.test>', namedSender: true, text: 'We tried to deliver parcel 4471 today.\nCollect it from our depot:\n550 Main St\nSpringfield\n' },
      expected: undefined,
    },
    {
      // RFC 5321 §4.5.5: every bounce is sent with <>; a named sender's numbers count only as a quoted reply.
      name: 'a named sender\'s message that reads like a bounce: a code standing alone in its prose (section 5.1.2 of the terms) is no status',
      input: { subject: 'Delivery failed: parcel 4471', from: 'Parcel Desk <parcels@shop.test>', namedSender: true, text: 'We could not deliver parcel 4471. As section 5.1.2 of our terms says, it is held at the depot for 7 days.\n' },
      expected: undefined,
    },
    {
      // RFC 3834 auto-replies: postmaster is a role mailbox a helpdesk answers from, not only an MTA's name.
      name: 'a helpdesk\'s auto-reply from postmaster (Auto-Submitted, no bounce subject) is not a bounce, whatever phrases and numbers it holds',
      input: {
        subject: 'Your request has been received [#48213]',
        from: 'Northwind IT Helpdesk <postmaster@northwind.test>',
        autoSubmitted: 'auto-replied',
        text: "Thank you for writing to the Northwind postmaster.\nIf you reported 'user unknown' errors, please reply with the full bounce.\n\nNorthwind Traders\n550 Main St, Suite 200\n",
      },
      expected: undefined,
    },
    { name: 'a named sender quoting a server\'s reply still counts: "550 5.1.1"', input: { subject: 'Undeliverable: Hello', from: 'postmaster@corp.test', namedSender: true, text: 'Delivery has failed.\nmx.corp.test: 550 5.1.1 User unknown\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: "Exim's own DSN text from Mailer-Daemon (Auto-Submitted too) is still a bounce", input: { subject: 'Mail delivery failed: returning message to sender', from: 'Mail Delivery System <Mailer-Daemon@y.test>', autoSubmitted: 'auto-replied', text: '  x@y.test\n    host mx.y.test [10.0.0.7]\n    SMTP error from remote mail server after end of data:\n    550 Message rejected as spam\n' }, expected: { bounceType: 'hard', status: '5.0.0' } },
    { name: 'an Exchange NDR from postmaster with Auto-Submitted and an "Undeliverable" subject is still a bounce', input: { subject: 'Undeliverable: Hello', from: 'postmaster@corp.test', autoSubmitted: 'auto-replied', text: '#550 5.1.1 RESOLVER.ADR.RecipNotFound; not found ##\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    { name: 'a localized Exchange NDR from postmaster with Auto-Submitted ("Unzustellbar:") is still a bounce', input: { subject: 'Unzustellbar: Hallo', from: 'postmaster@corp.test', autoSubmitted: 'auto-replied', text: 'mx.corp.test: 550 5.1.1 User unknown\n' }, expected: { bounceType: 'hard', status: '5.1.1' } },
    // Where bounces quote a bare reply code: on the line after the words that introduce it.
    { name: 'Postfix wrapping at 80 columns: a bare reply on the line after "said:"', input: { subject: 'Undelivered Mail Returned to Sender', from: 'MAILER-DAEMON@mx.y.test', text: '<x@y.test>: host mail-in.long-hostname.y.test[10.0.0.7] said:\n    550 User unknown in local recipient table (in reply to RCPT TO command)\n' }, expected: { bounceType: 'hard', status: '5.0.0' } },
    { name: 'Gmail (older): a bare reply under "The error that the other server returned was:"', input: { subject: 'Delivery Status Notification (Failure)', from: 'Mail Delivery Subsystem <mailer-daemon@googlemail.com>', text: 'Technical details of permanent failure:\nThe error that the other server returned was:\n550 Requested action not taken: mailbox unavailable\n' }, expected: { bounceType: 'hard', status: '5.0.0' } },
    { name: 'Sendmail: a bare reply that names the address (550 <x@y.test>... User unknown)', input: { subject: 'Returned mail: see transcript for details', from: 'Mail Delivery Subsystem <MAILER-DAEMON@y.test>', text: '   ----- Transcript of session follows -----\n550 <x@y.test>... User unknown\n' }, expected: { bounceType: 'hard', status: '5.0.0' } },
  ];
  for (const { name, input, expected } of cases) {
    test(name, () => {
      const found = detectTextBounce(input);
      assert.deepEqual(found && { bounceType: found.bounceType, status: found.status }, expected);
      if (found) assert.equal(found.source, 'text');
    });
  }
});

describe("a failed member of the recipient's alias (Exim)", () => {
  // Exim's words under a failed address that an alias or forward generated (deliver.c print_address_information).
  const cases: [string, string, string | undefined][] = [
    ['a member the alias expanded to', '  ann@elsewhere.test\n    (generated from team@inbox.test)\n    host mx.elsewhere.test [10.0.0.8]\n', 'team@inbox.test'],
    ['through an alias of the alias, written in other case', '  ann@elsewhere.test\n    (ultimately generated from Team@Inbox.test)\n', 'team@inbox.test'],
    ['a pipe in the alias', '  pipe to |/usr/local/bin/helpdesk-intake\n    generated by team@inbox.test\n    local delivery failed\n', 'team@inbox.test'],
    ['a member hidden by hide_child_in_errors', '  an undisclosed address\n    (generated from team@inbox.test)\n', 'team@inbox.test'],
    ['the recipient itself failed', '  team@inbox.test\n    host mx.inbox.test [10.0.0.7]\n    550 5.1.1 User unknown\n', undefined],
    ['the alias keeps a copy in its own mailbox, which failed too: about the recipient', '  team@inbox.test\n    Unrouteable address\n\n  ann@elsewhere.test\n    (generated from team@inbox.test)\n', undefined],
    ['a member of some other address', '  ann@elsewhere.test\n    (generated from other@inbox.test)\n', undefined],
    // Postfix writes this for a rewrite of the address itself (canonical maps) too, not only for an alias.
    ["Postfix's \"expanded from\"", '<ann@elsewhere.test> (expanded from <team@inbox.test>): host mx.elsewhere.test[10.0.0.8] said: 550 5.1.1 User unknown\n', undefined],
  ];
  for (const [name, text, expected] of cases) test(name, () => assert.equal(aliasOfFailedMember(text, ['team@inbox.test']), expected));
  test('no recipient to compare with: no alias', () => assert.equal(aliasOfFailedMember(cases[0][1], [undefined]), undefined));

  // Which members failed, and the reply their server gave: each failed address on a line of its own,
  // Exim's words about it on the lines under it (deliver.c print_address_information, print_address_error).
  const members: [string, string, { address: string; diagnosticCode: string | null }[]][] = [
    [
      'a member refused by its server',
      '  ann@elsewhere.test\n    (generated from team@inbox.test)\n    host mx.elsewhere.test [10.0.0.8]\n    SMTP error from remote mail server after RCPT TO:<ann@elsewhere.test>:\n    550 5.1.1 User unknown\n',
      [{ address: 'ann@elsewhere.test', diagnosticCode: '550 5.1.1 User unknown' }],
    ],
    [
      'two members of the alias, one of another address, with a reply over several lines',
      [
        'The following address(es) failed:',
        '',
        '  ann@elsewhere.test',
        '    (generated from team@inbox.test)',
        '    host mx.elsewhere.test [10.0.0.8]',
        '    SMTP error from remote mail server after RCPT TO:<ann@elsewhere.test>:',
        '    550-5.1.1 The email account that you tried to reach does not exist.',
        '    550 5.1.1 Please try double-checking the recipient',
        '',
        '  carl@other.test',
        '    (generated from sales@inbox.test)',
        '    Unrouteable address',
        '',
        '  bob@gone.test',
        '    (ultimately generated from Team@Inbox.test)',
        '    Unrouteable address',
      ].join('\r\n'),
      [
        { address: 'ann@elsewhere.test', diagnosticCode: '550-5.1.1 The email account that you tried to reach does not exist. 550 5.1.1 Please try double-checking the recipient' },
        { address: 'bob@gone.test', diagnosticCode: null },
      ],
    ],
    [
      'older Exim: the host and the reply on the line of the command',
      '  ann@elsewhere.test\n    (generated from team@inbox.test)\n    SMTP error from remote mail server after RCPT TO:<ann@elsewhere.test>: host mx.elsewhere.test [10.0.0.8]: 550 5.1.1 <ann@elsewhere.test>: User unknown\n',
      [{ address: 'ann@elsewhere.test', diagnosticCode: '550 5.1.1 <ann@elsewhere.test>: User unknown' }],
    ],
    [
      'a refusal at the end of data',
      '  ann@elsewhere.test\n    (generated from team@inbox.test)\n    host mx.elsewhere.test [10.0.0.8]\n    SMTP error from remote mail server after end of data:\n    554 5.7.1 Message rejected as spam\n',
      [{ address: 'ann@elsewhere.test', diagnosticCode: '554 5.7.1 Message rejected as spam' }],
    ],
    [
      'a pipe in the alias: no server replied',
      '  pipe to |/usr/local/bin/helpdesk-intake\n    generated by team@inbox.test\n    local delivery failed\n',
      [{ address: 'pipe to |/usr/local/bin/helpdesk-intake', diagnosticCode: null }],
    ],
    [
      'a member hidden by hide_child_in_errors',
      '  an undisclosed address\n    (generated from team@inbox.test)\n',
      [{ address: 'an undisclosed address', diagnosticCode: null }],
    ],
  ];
  for (const [name, text, expected] of members) test(`failed members: ${name}`, () => assert.deepEqual(failedMembersOf(text, 'team@inbox.test'), expected));
  test('failed members: at most 50 of one report, a reply cut at 500 characters', () => {
    const member = (i: number) => `  m${i}@elsewhere.test\n    (generated from team@inbox.test)\n    SMTP error from remote mail server after RCPT TO:<m${i}@elsewhere.test>:\n    550 ${'x'.repeat(600)}\n\n`;
    const found = failedMembersOf(Array.from({ length: 60 }, (_, i) => member(i)).join(''), 'team@inbox.test');
    assert.equal(found.length, 50);
    assert.equal(found[49].address, 'm49@elsewhere.test');
    assert.equal(found[0].diagnosticCode?.length, 500);
  });
});

describe('whole reports through mailparser', () => {
  const cases: { name: string; raw: string; nullSender?: boolean; expected: Record<string, unknown> }[] = [
    { name: 'Postfix hard bounce', raw: postfixHardBounce(params), expected: { kind: 'bounce', bounceType: 'hard', status: '5.1.1', source: 'dsn', reportingMta: 'mx.inbox.test', remoteMta: 'store.inbox.test', memberOf: undefined } },
    { name: 'Postfix delay warning', raw: postfixDelayed(params), expected: { kind: 'bounce', bounceType: 'transient', status: '4.4.1', source: 'dsn' } },
    { name: 'Exchange Online NDR', raw: exchangeHardBounce(params), expected: { kind: 'bounce', bounceType: 'hard', status: '5.1.10', source: 'dsn' } },
    { name: 'Gmail DSN', raw: gmailHardBounce(params), expected: { kind: 'bounce', bounceType: 'hard', status: '5.1.1', source: 'dsn', reportingMta: 'googlemail.com' } },
    { name: 'Exim free-form bounce', raw: eximTextBounce(params), nullSender: true, expected: { kind: 'bounce', bounceType: 'hard', status: '5.1.1', source: 'text', memberOf: undefined } },
    // Exim's DSN names the alias as Final-Recipient whichever member failed; only its text names the member.
    { name: "Exim DSN: a member of the recipient's alias failed", raw: eximAliasMemberFailed(params), expected: { kind: 'bounce', bounceType: 'hard', status: '5.1.1', source: 'dsn', recipient: params.rcpt, memberOf: params.rcpt, failedMembers: JSON.stringify([{ address: 'ann.leaver@elsewhere.test', diagnosticCode: '550 5.1.1 User unknown' }]) } },
    { name: "Exim free-form bounce: a member of the recipient's alias failed", raw: eximTextBounce(params, 'ann.leaver@elsewhere.test'), nullSender: true, expected: { kind: 'bounce', bounceType: 'hard', status: '5.1.1', source: 'text', memberOf: params.rcpt, failedMembers: JSON.stringify([{ address: 'ann.leaver@elsewhere.test', diagnosticCode: '550 5.1.1 User unknown' }]) } },
    { name: "Exim DSN: a pipe in the recipient's alias failed", raw: eximAliasPipeFailed(params), expected: { kind: 'bounce', bounceType: 'hard', status: '5.0.0', source: 'dsn', memberOf: params.rcpt, failedMembers: JSON.stringify([{ address: 'pipe to |/usr/local/bin/helpdesk-intake', diagnosticCode: null }]) } },
    { name: 'qmail free-form bounce', raw: qmailTextBounce(params), nullSender: true, expected: { kind: 'bounce', bounceType: 'hard', status: '5.0.0', source: 'text' } },
    { name: 'ARF abuse complaint', raw: arfComplaint(params), expected: { kind: 'complaint', feedbackType: 'abuse' } },
    { name: 'ARF auth-failure (DMARC) is not a complaint', raw: arfComplaint(params, 'auth-failure'), expected: { kind: 'ignored' } },
    { name: 'plain reply', raw: 'From: bob@y.test\r\nSubject: thanks\r\n\r\nThanks!\r\n', nullSender: false, expected: { kind: 'ignored' } },
    {
      // Sent with <> but neither bounce-like by its sender nor its subject: the code in its text says nothing.
      name: 'an auto-acknowledgement sent with <> that quotes a code is not a bounce',
      raw: 'From: Support <help@y.test>\r\nSubject: We received your request\r\n\r\nYour ticket #512 is open. The log you sent shows 550 5.1.1 from your old server.\r\n',
      nullSender: true,
      expected: { kind: 'ignored' },
    },
    {
      // The Auto-Submitted header reaches the reader: without it, the phrase below reads as 5.1.1.
      name: "a helpdesk's auto-reply from postmaster (Auto-Submitted: auto-replied) is not a bounce",
      raw: postmasterHelpdeskAutoReply(params.to),
      nullSender: true,
      expected: { kind: 'ignored' },
    },
    {
      name: 'vacation auto-reply (RFC 3834) to the Return-Path',
      raw: 'From: Ann Example <ann@y.test>\r\nSubject: Automatic reply: Your receipt\r\nAuto-Submitted: auto-replied\r\nX-Autoreply: yes\r\n\r\nI am away until 3 March. For urgent matters call 555-0100.\r\n',
      nullSender: true,
      expected: { kind: 'ignored' },
    },
  ];
  for (const { name, raw, nullSender = true, expected } of cases) {
    test(name, async () => {
      const finding = await readReport(Buffer.from(raw), { nullSender, toAddress: params.rcpt });
      const flat = { kind: finding.kind, ...(finding.kind === 'bounce' ? finding.bounce : finding.kind === 'complaint' ? finding.feedback : {}) } as Record<string, unknown>;
      // An array field is compared as its JSON.
      for (const [key, value] of Object.entries(expected)) assert.equal(Array.isArray(flat[key]) ? JSON.stringify(flat[key]) : flat[key], value, `${key} in ${JSON.stringify(flat)}`);
    });
  }

  const garbage: [string, Buffer][] = [
    ['empty', Buffer.alloc(0)],
    ['random bytes', randomBytes(4096)],
    ['NUL bytes', Buffer.alloc(1000)],
    ['unterminated multipart/report', Buffer.from('Content-Type: multipart/report; report-type=delivery-status; boundary="x"\r\n\r\n--x\r\nContent-Type: message/delivery-status\r\n\r\nAction: fai')],
    ['feedback report without fields', Buffer.from('Content-Type: multipart/report; report-type=feedback-report; boundary="x"\r\n\r\n--x\r\nContent-Type: message/feedback-report\r\n\r\n\u0000\u0001\r\n--x--\r\n')],
    ['header flood', Buffer.from(`${'X-A: b\r\n'.repeat(20000)}\r\nbody`)],
    ['broken encodings', Buffer.from('Content-Type: text/plain; charset=x-nonsense\r\nContent-Transfer-Encoding: base64\r\nSubject: =?bogus?Q?=ZZ?=\r\n\r\n!!!not base64!!!\r\n')],
  ];
  for (const [name, raw] of garbage) {
    test(`garbage never throws: ${name}`, async () => {
      const finding = await readReport(raw, { nullSender: true, toAddress: params.rcpt });
      assert.equal(finding.kind, 'ignored');
    });
  }
});

describe('status transitions', () => {
  const table: [Parameters<typeof nextStatus>[0], 'bounce' | 'complaint', string | undefined][] = [
    ['delivered', 'bounce', 'bounce'],
    ['open', 'bounce', 'bounce'],
    ['queued', 'bounce', undefined],
    ['bounce', 'bounce', undefined],
    ['complaint', 'bounce', undefined],
    ['suppressed', 'bounce', undefined],
    ['delivered', 'complaint', 'complaint'],
    ['open', 'complaint', 'complaint'],
    ['bounce', 'complaint', 'complaint'],
    ['complaint', 'complaint', undefined],
    ['error', 'complaint', undefined],
  ];
  for (const [from, outcome, to] of table) test(`${from} + ${outcome} → ${to ?? 'unchanged'}`, () => assert.equal(nextStatus(from, outcome), to));
});

describe('VERP addresses', () => {
  const verp = createVerp(createUrlSigner('secret-one'));
  const id = '65a4f0c1a1b2c3d4e5000001';
  test('round trip, case-insensitive local part', () => {
    const address = verp.address(id, 'bounce.sender.test');
    assert.match(address, /^bounce-65a4f0c1a1b2c3d4e5000001-[0-9a-f]{20}@bounce\.sender\.test$/);
    assert.equal(verp.parse(address), id);
    assert.equal(verp.parse(address.toUpperCase()), id);
  });
  test('forged, tampered, legacy and foreign addresses are refused', () => {
    const address = verp.address(id, 'bounce.sender.test');
    const otherId = '65a4f0c1a1b2c3d4e5000002';
    assert.equal(verp.parse(address.replace(id, otherId)), undefined);
    assert.equal(verp.parse(address.replace(/-([0-9a-f])([0-9a-f]{19})@/, (_m, a: string, rest: string) => `-${a === '0' ? '1' : '0'}${rest}@`)), undefined);
    assert.equal(verp.parse(`bounce-${id}@bounce.sender.test`), undefined);
    assert.equal(verp.parse(createVerp(createUrlSigner('secret-two')).address(id, 'bounce.sender.test')), undefined);
    for (const bad of ['', '@', 'postmaster@bounce.sender.test', 'bounce-@x', 'bounce-zz-zz@x']) assert.equal(verp.parse(bad), undefined, bad);
  });
});
