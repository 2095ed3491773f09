import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { dkimVerify } from 'mailauth/lib/dkim/verify';
import { classify, classifyThroughRelay, parseSmtpResponse, refusesSendingHost, type SmtpReply } from '../../src/delivery/classify.js';
import { ConfigError } from '../../src/config/load.js';
import { createResolver } from '../../src/lib/resolver.js';
import { canonicalizeBodyRelaxed, canonicalizeHeaderRelaxed, createInlineDkimSigner } from '../../src/delivery/dkim.js';
import { createMessageBuilder } from '../../src/delivery/message-builder.js';
import { createLogger } from '../../src/lib/logger.js';
import { orderByPreference, resolveHostAddresses, shuffleAddresses } from '../../src/delivery/resolve-mx.js';
import { startDnsServer } from '../helpers/dns-server.js';
import { judgeSending, type SuspensionPolicy } from '../../src/delivery/reputation.js';
import { decideRetry } from '../../src/delivery/retry.js';
import { parseRelayUrl } from '../../src/delivery/relay-url.js';
import { createDomainLimiter } from '../../src/delivery/domain-limiter.js';

test('classify: the rule table', () => {
  const cases: [SmtpReply, string, boolean, string][] = [
    [{ code: 250, enhanced: '2.0.0', message: 'OK' }, 'delivered', false, 'success'],
    [{ code: 251, message: 'User not local; will forward' }, 'delivered', false, 'success'],
    [{ code: 0, message: 'ECONNREFUSED' }, 'defer', false, 'no-reply'],
    [{ code: 421, enhanced: '4.7.0', message: 'Try again later, closing connection' }, 'defer', true, 'throttle-421'],
    [{ code: 450, enhanced: '4.7.28', message: 'unusual rate of unsolicited mail' }, 'defer', true, 'throttle-4.7'],
    // Greylisting refuses one message until its retry (milter-greylist's wording is 451 4.7.1), not the destination's traffic.
    [{ code: 451, enhanced: '4.7.1', message: 'Greylisting in action, please come back later' }, 'defer', false, 'greylisted'],
    [{ code: 450, enhanced: '4.7.1', message: '<bob@example.org>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/' }, 'defer', false, 'greylisted'],
    [{ code: 450, message: 'Grey-listed for 5 minutes' }, 'defer', false, 'greylisted'],
    [{ code: 421, enhanced: '4.7.0', message: 'Greylisted, closing connection' }, 'defer', true, 'throttle-421'],
    [{ code: 450, enhanced: '4.7.1', message: 'Client host [192.0.2.1] blocked using zen.spamhaus.org' }, 'defer', true, 'throttle-4.7'],
    [{ code: 451, enhanced: '4.3.0', message: 'Temporary server error' }, 'defer', false, 'transient'],
    [{ code: 452, enhanced: '4.2.2', message: 'Mailbox full' }, 'defer', false, 'transient'],
    [{ code: 550, enhanced: '5.1.1', message: 'No such user' }, 'bounce', false, 'permanent'],
    [{ code: 552, enhanced: '5.2.2', message: 'The recipient\'s inbox is out of storage space' }, 'defer', false, 'mailbox-full'],
    [{ code: 552, message: 'Requested mail action aborted: exceeded storage allocation' }, 'defer', false, 'mailbox-full'],
    [{ code: 552, message: 'Too many recipients', command: 'RCPT TO' }, 'defer', false, 'mailbox-full'],
    // Yahoo, AOL and att.net: a bare 552 for an address that does not exist, retried for days as a full mailbox before.
    [{ code: 552, message: '1 Requested mail action aborted, mailbox not found', command: 'RCPT TO' }, 'bounce', false, 'permanent'],
    [{ code: 552, message: 'Message size exceeds fixed maximum message size', command: 'DATA' }, 'bounce', false, 'permanent'],
    [{ code: 552, enhanced: '5.3.4', message: 'Message size exceeds fixed limit' }, 'bounce', false, 'permanent'],
    [{ code: 554, enhanced: '5.7.1', message: 'Message rejected' }, 'bounce', false, 'permanent'],
    [{ code: 550, enhanced: '4.2.0', message: 'mislabelled transient' }, 'defer', false, 'enhanced-transient'],
    [{ code: 354, message: 'unexpected' }, 'defer', false, 'unexpected'],
  ];
  for (const [reply, action, throttle, rule] of cases) {
    const result = classify(reply);
    assert.equal(result.action, action, `${reply.code} ${reply.message}`);
    assert.equal(result.throttle, throttle, `${reply.code} throttle`);
    assert.equal(result.rule, rule, `${reply.code} rule`);
    assert.equal(result.bounceType, action === 'bounce' ? 'hard' : undefined);
  }
});

test('classify: a bounce suppresses the recipient only when the refusal is about the address', () => {
  const cases: [SmtpReply, boolean][] = [
    [{ code: 550, enhanced: '5.1.1', message: 'No such user', command: 'RCPT TO' }, true],
    [{ code: 550, enhanced: '5.2.1', message: 'Mailbox disabled', command: 'RCPT TO' }, true],
    [{ code: 550, enhanced: '5.0.0', message: 'Recipient address rejected: User unknown', command: 'RCPT TO' }, true],
    [{ code: 550, message: 'Mailbox unavailable', command: 'RCPT TO' }, true],
    [{ code: 553, message: 'Mailbox name not allowed', command: 'RCPT TO' }, true],
    [{ code: 552, message: '1 Requested mail action aborted, mailbox not found', command: 'RCPT TO' }, true],
    [{ code: 550, enhanced: '5.5.0', message: 'Requested action not taken: mailbox unavailable (S2017062302).', command: 'RCPT TO' }, true],
    [{ code: 550, enhanced: '5.5.0', message: 'Requested action not taken: mailbox unavailable', command: 'DATA' }, false],
    // The appliance's own DNS outcomes: NXDOMAIN, null MX, no address for the mail hosts.
    [{ code: 550, enhanced: '5.1.2', message: 'Domain not found' }, true],
    [{ code: 556, enhanced: '5.1.10', message: 'null MX' }, true],
    [{ code: 550, enhanced: '5.4.4', message: 'No address for the mail hosts' }, true],
    // Recipient verification after DATA still names the address.
    [{ code: 550, enhanced: '5.1.1', message: 'No such user', command: 'DATA' }, true],
    // So does a mailbox status (X.2.x) there: a disabled account refused at end of DATA is suppressed, or
    // every later email to it would be attempted and bounce again (5.2.3, the message's size, stays out below).
    [{ code: 550, enhanced: '5.2.1', message: 'The email account that you tried to reach is disabled', command: 'DATA' }, true],
    // About the sender, the message or the sending IP: the next message to the address may be taken.
    [{ code: 553, enhanced: '5.1.8', message: 'Sender address rejected: Domain not found', command: 'MAIL FROM' }, false],
    [{ code: 550, message: 'Sender rejected', command: 'MAIL FROM' }, false],
    [{ code: 550, enhanced: '5.7.1', message: 'Client host blocked using zen.spamhaus.org', command: 'RCPT TO' }, false],
    // The same without an enhanced code (Postfix's default reply_code for RBLs): the sending IP, not the address.
    [{ code: 554, message: 'Service unavailable; Client host [203.0.113.5] blocked using zen.spamhaus.org', command: 'RCPT TO' }, false],
    // This host's HELO name or reverse DNS refused (Postfix gives it at RCPT TO): nothing of the address.
    [{ code: 504, enhanced: '5.5.2', message: '<vm>: Helo command rejected: need fully-qualified hostname', command: 'RCPT TO' }, false],
    [{ code: 550, enhanced: '5.7.25', message: 'Client host rejected: cannot find your hostname, [127.0.0.1]', command: 'RCPT TO' }, false],
    // Our sender refused in the reply to RCPT TO: Exim's sender callout (bare), Postfix naming the sender.
    [{ code: 550, message: 'Verification failed for <bounce@x.test> Unrouteable address Sender verify failed', command: 'RCPT TO' }, false],
    [{ code: 550, enhanced: '5.1.0', message: '<bounce@x.test>: Sender address rejected: undeliverable address', command: 'RCPT TO' }, false],
    [{ code: 550, enhanced: '5.7.26', message: 'Unauthenticated email is not accepted (DMARC)', command: 'DATA' }, false],
    [{ code: 552, message: 'Message size exceeds fixed maximum message size', command: 'DATA' }, false],
    [{ code: 552, enhanced: '5.3.4', message: 'Message size exceeds fixed limit', command: 'DATA' }, false],
    [{ code: 552, enhanced: '5.2.3', message: 'Message length exceeds administrative limit', command: 'DATA' }, false],
    [{ code: 554, enhanced: '5.6.0', message: 'Corrupt message content', command: 'DATA' }, false],
    [{ code: 553, enhanced: '5.6.7', message: 'does not support SMTPUTF8' }, false],
    [{ code: 554, enhanced: '5.0.0', message: 'Message rejected as spam', command: 'DATA' }, false],
    [{ code: 550, message: 'Message rejected', command: 'DATA' }, false],
    [{ code: 554, message: 'Transaction failed', command: 'RCPT TO' }, true],
    [{ code: 550, enhanced: '5.4.4', message: 'Refusing to deliver to private addresses', localPolicy: true }, false],
  ];
  for (const [reply, suppress] of cases) {
    const result = classify(reply);
    assert.equal(result.action, 'bounce', reply.message);
    assert.equal(result.suppressRecipient, suppress, `${reply.code} ${reply.enhanced ?? ''} ${reply.command ?? '(no command)'}: ${reply.message}`);
  }
  // Outcomes that are not bounces never suppress.
  assert.equal(classify({ code: 250, message: 'OK' }).suppressRecipient, false);
  assert.equal(classify({ code: 450, enhanced: '4.1.1', message: 'try later', command: 'RCPT TO' }).suppressRecipient, false);
});

test('parseSmtpResponse reads multi-line replies and enhanced codes', () => {
  assert.deepEqual(parseSmtpResponse('550-5.1.1 The email account does not exist.\r\n550 5.1.1 https://support.example/?p=NoSuchUser'), {
    code: 550,
    enhanced: '5.1.1',
    message: 'The email account does not exist. https://support.example/?p=NoSuchUser',
  });
  assert.deepEqual(parseSmtpResponse('250 OK: queued as 12345'), { code: 250, enhanced: undefined, message: 'OK: queued as 12345' });
  assert.deepEqual(parseSmtpResponse('garbage', 0), { code: 0, message: 'garbage' });
  // The codes alone, with no text after them (RFC 3463 needs none).
  assert.deepEqual(parseSmtpResponse('550 5.7.1'), { code: 550, enhanced: '5.7.1', message: '' });
  assert.deepEqual(parseSmtpResponse('450 4.7.1\r\n'), { code: 450, enhanced: '4.7.1', message: '' });
  assert.deepEqual(parseSmtpResponse('550-5.7.1\r\n550 5.7.1 Blocked'), { code: 550, enhanced: '5.7.1', message: 'Blocked' });
  // RFC 5321 §4.2: the text after the code is optional.
  assert.deepEqual(parseSmtpResponse('550'), { code: 550, enhanced: undefined, message: '' });
  assert.deepEqual(parseSmtpResponse('421\r\n'), { code: 421, enhanced: undefined, message: '' });
  assert.deepEqual(parseSmtpResponse('550-\r\n550 No such user'), { code: 550, enhanced: undefined, message: 'No such user' });
  assert.deepEqual(parseSmtpResponse('5501 not a reply', 0), { code: 0, message: '5501 not a reply' });
  // The enhanced code on a later line only: a bare 550 read from the first suppressed the address.
  assert.deepEqual(parseSmtpResponse('550-Your message was rejected\r\n550 5.7.1 by policy'), { code: 550, enhanced: '5.7.1', message: 'Your message was rejected by policy' });
  assert.equal(classify({ ...parseSmtpResponse('550-Your message was rejected\r\n550 5.7.1 by policy'), command: 'RCPT TO' }).suppressRecipient, false);
});

test('retry schedule: entries in order, the last repeats, give-up after the deadline', () => {
  const policy = { schedule: [1000, 5000, 60_000], giveUpAfterMs: 200_000 };
  const cases: [number, number, ReturnType<typeof decideRetry>][] = [
    [1, 0, { kind: 'retry', atMs: 1000 }],
    [2, 1000, { kind: 'retry', atMs: 6000 }],
    [3, 6000, { kind: 'retry', atMs: 66_000 }],
    [7, 66_000, { kind: 'retry', atMs: 126_000 }],
    [8, 180_000, { kind: 'retry', atMs: 200_000 }], // capped at the deadline
    [9, 200_000, { kind: 'give-up' }],
    // Held past the deadline without attempts (a paused project): its first deferral is retried on schedule.
    [1, 250_000, { kind: 'retry', atMs: 251_000 }],
    [2, 251_000, { kind: 'give-up' }],
    // First tried just before the deadline: its retry keeps the schedule's delay (greylisting), not the deadline.
    [1, 199_500, { kind: 'retry', atMs: 200_500 }],
    [2, 200_500, { kind: 'give-up' }],
  ];
  for (const [attempts, now, expected] of cases) assert.deepEqual(decideRetry(policy, attempts, 0, now), expected, `attempt ${attempts}`);
});

test('MX order: by preference, equal preferences shuffled', () => {
  const records = [
    { exchange: 'c', priority: 20 },
    { exchange: 'a', priority: 10 },
    { exchange: 'b', priority: 10 },
  ];
  let values = [0.9, 0.5, 0.1];
  const first = orderByPreference(records, () => values.shift()!).map((r) => r.exchange);
  assert.deepEqual(first, ['b', 'a', 'c']);
  values = [0.9, 0.1, 0.5];
  assert.deepEqual(orderByPreference(records, () => values.shift()!).map((r) => r.exchange), ['a', 'b', 'c']);
});

test("a host's addresses: shuffled for each attempt, IPv4 still ahead of IPv6", () => {
  const addresses = ['192.0.2.1', '192.0.2.2', '192.0.2.3', '2001:db8::1', '2001:db8::2'];
  // random() = 0 swaps each position, last to second, with the first: a fixed order that is not DNS's.
  assert.deepEqual(shuffleAddresses(addresses, () => 0), ['192.0.2.2', '192.0.2.3', '192.0.2.1', '2001:db8::2', '2001:db8::1']);
  const firsts = new Set(Array.from({ length: 200 }, () => shuffleAddresses(addresses)[0]));
  assert.deepEqual([...firsts].sort(), ['192.0.2.1', '192.0.2.2', '192.0.2.3'], 'any IPv4 address may come first, never an IPv6 one');
  assert.deepEqual(shuffleAddresses(addresses).slice().sort(), [...addresses].sort(), 'a permutation');
});

test('suspension rule: rates above 4.95% / 0.095%, counts for young projects, operator switch', () => {
  const policy: SuspensionPolicy = { enabled: true, windowMs: 1, minVolume: 1000, youngMaxBounces: 50, youngMaxComplaints: 5 };
  const cases: [Partial<SuspensionPolicy>, number, number, number, boolean][] = [
    [{}, 10_000, 495, 0, false],
    [{}, 10_000, 496, 0, true],
    [{}, 100_000, 0, 95, false],
    [{}, 100_000, 0, 96, true],
    [{}, 500, 50, 0, false], // young: 10% bounce rate but within the count limit
    [{}, 500, 51, 0, true],
    [{}, 500, 0, 6, true],
    // Past minVolume the young counts stay allowed: one more good email never pauses a project.
    [{}, 999, 0, 3, false],
    [{}, 1000, 0, 3, false],
    [{}, 1000, 0, 5, false],
    [{}, 1000, 0, 6, true],
    [{}, 5264, 0, 5, false],
    [{}, 5264, 0, 6, true],
    [{}, 999, 50, 0, false],
    [{}, 1000, 50, 0, false],
    [{}, 1000, 51, 0, true],
    [{ enabled: false }, 10_000, 5000, 5000, false],
  ];
  for (const [override, sent, bounces, complaints, paused] of cases) {
    assert.equal(judgeSending({ ...policy, ...override }, { sent, bounces, complaints }).paused, paused, `${sent}/${bounces}/${complaints}`);
  }
  // The reason a paused project reads must not round its rate down onto the limit ("4.95% is above 4.95%").
  assert.deepEqual(judgeSending(policy, { sent: 2020, bounces: 100, complaints: 0 }), { paused: true, reason: 'bounce rate 4.9505% is above 4.95%' });
  assert.deepEqual(judgeSending(policy, { sent: 10_510, bounces: 0, complaints: 10 }), { paused: true, reason: 'complaint rate 0.0951% is above 0.095%' });
  assert.deepEqual(judgeSending(policy, { sent: 1000, bounces: 60, complaints: 0 }), { paused: true, reason: 'bounce rate 6.00% is above 4.95%' });
  // Delivering more never turns the verdict against the project, at any volume.
  for (const [bounces, complaints] of [[0, 3], [0, 5], [49, 0], [50, 4]]) {
    let wasPaused = true;
    for (let sent = 1; sent <= 20_000; sent++) {
      const paused = judgeSending(policy, { sent, bounces, complaints }).paused;
      assert.ok(!(paused && !wasPaused), `${bounces}/${complaints}: paused again at ${sent} sent`);
      wasPaused = paused;
    }
  }
});

test('relaxed canonicalization (RFC 6376 §3.4.2, §3.4.4 examples)', () => {
  assert.equal(canonicalizeHeaderRelaxed('SUBJect:  AbC  \r\n\t def \r\n'), 'subject:AbC def\r\n');
  assert.equal(canonicalizeBodyRelaxed(' C \r\nD \t E\r\n\r\n\r\n').toString(), ' C\r\nD E\r\n');
  assert.equal(canonicalizeBodyRelaxed('\r\n\r\n').toString(), '');
});

test('relaxed body canonicalization: the quick route for bodies without whitespace to collapse gives the bytes of the rule', () => {
  // The rule as written in RFC 6376 §3.4.4, one step per sentence.
  const reference = (body: string) => {
    const text = body.replace(/[ \t]+\r\n/g, '\r\n').replace(/[ \t]+/g, ' ').replace(/[ \t]+$/, '').replace(/(\r\n)+$/, '');
    return text === '' ? '' : `${text}\r\n`;
  };
  const pieces = ['a', 'word', ' ', '  ', '\t', '\r\n', '\r\n\r\n', '=20', '.', '\r', '\n', 'é'];
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const bodies = ['', '\r\n', 'abc', 'abc\r\n', 'abc\r\n\r\n\r\n', 'abc ', 'a\tb\r\n'];
  for (let i = 0; i < 2000; i++) bodies.push(Array.from({ length: 1 + Math.floor(next() * 12) }, () => pieces[Math.floor(next() * pieces.length)]).join(''));
  for (const body of bodies) assert.equal(canonicalizeBodyRelaxed(Buffer.from(body, 'latin1')).toString('latin1'), reference(body), JSON.stringify(body));
});

test('inline signer and the worker-thread builder both produce signatures mailauth accepts', async () => {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const p = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
  const verify = async (signed: Buffer) =>
    (await dkimVerify(signed, { resolver: async () => [[`v=DKIM1; k=rsa; p=${p}`]], curTime: new Date('2026-01-02') } as never)).results[0].status.result;
  const key = { domain: 'example.com', selector: 's1', privateKeyPem: pem };
  const message = Buffer.from('From: a@example.com\r\nTo: b@example.org\r\nSubject: hi  there\r\nDate: Thu, 01 Jan 2026 00:00:00 +0000\r\nMessage-ID: <x@example.com>\r\n\r\nbody  line \r\n\r\n');
  const signed = await createInlineDkimSigner().sign(message, key, 1_767_225_600);
  assert.equal(await verify(signed), 'pass');
  // Oversigned (RFC 6376 §8.15): a field added to a captured message, one it has or one it never had, fails.
  const withAdded = (field: string) => Buffer.concat([Buffer.from(`${field}\r\n`), signed]);
  for (const field of ['Subject: Urgent: verify your account', 'Reply-To: attacker@evil.example', 'List-Unsubscribe: <https://evil.example/u>', 'From: x@evil.example']) {
    assert.equal(await verify(withAdded(field)), 'fail', field);
  }
  assert.equal(await verify(withAdded('X-Added-By-A-Relay: yes')), 'pass', 'a field outside the signed set may still be added');
  // A name present twice signs both instances (bottom up), the upper one included.
  const twice = Buffer.from('From: a@example.com\r\nTo: b@example.org\r\nIn-Reply-To: <one@example.com>\r\nIn-Reply-To: <two@example.com>\r\n\r\nbody\r\n');
  const twiceSigned = await createInlineDkimSigner().sign(twice, key, 1_767_225_600);
  assert.equal(await verify(twiceSigned), 'pass');
  assert.equal(await verify(Buffer.from(twiceSigned.toString().replace('<one@', '<ONE@'))), 'fail', 'the upper instance is signed too');

  const builder = createMessageBuilder({ threads: 2, log: createLogger({ level: 'silent' }) });
  try {
    assert.equal(builder.threads, 2, 'the worker script was found: composing runs on threads');
    const built = await Promise.all(
      [1, 2, 3].map((n) =>
        builder.build(
          {
            emailId: `e${n}`, toAddress: 'b@example.org', fromAddress: 'a@example.com', fromName: 'Ä Sender', replyToAddress: null, replyToName: null,
            subject: `Hello ${n}`, html: '<p>hi</p>', text: 'hi', headers: { 'List-Unsubscribe': '<https://example.com/u>' }, messageId: null,
            attachments: [{ name: 'a.txt', contentType: 'text/plain', content: Buffer.from('attached'), contentId: null }], date: new Date('2026-01-01T00:00:00Z'),
          },
          key,
          1_767_225_600,
        ),
      ),
    );
    for (const [i, raw] of built.entries()) {
      assert.match(raw.toString(), new RegExp(`Subject: Hello ${i + 1}`));
      const signedNames = /h=([^;]+);/.exec(raw.toString())![1].replace(/\s+/g, '');
      assert.equal(
        signedNames,
        'from:from:to:to:cc:reply-to:subject:subject:date:date:message-id:message-id:in-reply-to:references:mime-version:mime-version:content-type:content-type:content-transfer-encoding:list-unsubscribe:list-unsubscribe:list-unsubscribe-post:list-id:feedback-id',
      );
      for (const line of raw.toString().split('\r\n')) assert.ok(line.length <= 78, `a short line: ${line}`);
      assert.equal(await verify(raw), 'pass');
    }
  } finally {
    await builder.close();
  }
});

test('relay URL parsing', () => {
  assert.deepEqual(parseRelayUrl('smtp://user%40x:p%3Ass@relay.example.com:2525?starttls=required'), {
    host: 'relay.example.com',
    address: 'relay.example.com',
    port: 2525,
    secure: false,
    requireTls: true,
    tlsRequiredBy: 'delivery.relay_url requires it (?starttls=required), so the mail waits',
    verifyTls: true,
    auth: { user: 'user@x', pass: 'p:ss' },
    group: 'relay',
  });
  assert.equal(parseRelayUrl('smtps://relay.example.com').port, 465);
  assert.equal(parseRelayUrl('smtps://relay.example.com?tls_verify=false').verifyTls, false);
  assert.throws(() => parseRelayUrl('http://relay'), /smtp:\/\//);
  // A password with an unencoded '/' or '#' breaks the URL; the error must not print it.
  assert.throws(
    () => parseRelayUrl('smtp://apikey:S3cr/t#x@smtp.provider.net:587'),
    (error: Error) => error instanceof ConfigError && /percent-encode/.test(error.message) && !error.message.includes('S3cr'),
  );
  assert.throws(() => parseRelayUrl(''), /delivery\.relay_url is empty \(relay mode needs it\)/);
  // A bare % in the password is not percent-encoding: named, with the fix, and the password not shown.
  assert.throws(
    () => parseRelayUrl('smtp://user:50%off@smtp.example.com:587'),
    (error: Error) => error instanceof ConfigError && /delivery\.relay_url: .*write % as %25/.test(error.message) && !error.message.includes('50%off'),
  );
  assert.equal(parseRelayUrl('smtp://user:50%25off@smtp.example.com:587').auth?.pass, '50%off');
  // Credentials need STARTTLS unless the URL says otherwise: the password would go in clear.
  assert.equal(parseRelayUrl('smtp://user:pw@smtp.example.com:587').requireTls, true);
  assert.equal(parseRelayUrl('smtp://user:pw@smtp.example.com:587?starttls=optional').requireTls, false);
  assert.equal(parseRelayUrl('smtp://smtp.example.com:25').requireTls, false);
  assert.throws(() => parseRelayUrl('smtp://?starttls=required'), /delivery\.relay_url names no host/);
  assert.throws(() => parseRelayUrl('smtp://user:pw@smtp.example.com?starttls=require'), /delivery\.relay_url: starttls=require is not one of required, optional/);
  assert.throws(() => parseRelayUrl('smtp://smtp.example.com?tls_verify=no'), /tls_verify=no is not one of true, false/);
  assert.throws(() => parseRelayUrl('smtp://smtp.example.com?starttls=required&tlsverify=false'), /unknown option tlsverify/);
  // A # or / in an unencoded password that still parses (host apikey, port 1234): refused, password not shown.
  for (const url of ['smtp://apikey:1234#secret@127.0.0.1:42714', 'smtp://apikey:1234/secret@relay.example.com']) {
    assert.throws(() => parseRelayUrl(url), (error: Error) => error instanceof ConfigError && /has a path or a #fragment.*percent-encode/.test(error.message) && !error.message.includes('secret'), url);
  }
  assert.equal(parseRelayUrl('smtp://relay.example.com/').host, 'relay.example.com', 'a bare trailing slash is fine');
  // Half the credentials: the password was dropped (and STARTTLS not required), or every AUTH failed.
  assert.throws(() => parseRelayUrl('smtp://:tokenpassword@relay.example.com'), /a password without a user name: give both/);
  assert.throws(() => parseRelayUrl('smtp://user@relay.example.com'), /a user name without a password: give both/);
  assert.throws(() => parseRelayUrl('smtp://u:p@127.0.0.1:0'), /port 0 is no port/);
  // An internationalised host name reaches the resolver in ASCII, not percent-encoded.
  assert.equal(parseRelayUrl('smtp://u:p@bücher.example:25').host, 'xn--bcher-kva.example');
});

test('dns.servers takes IP addresses with optional ports; a host name is a configuration error', () => {
  assert.doesNotThrow(() => createResolver({ servers: ['127.0.0.1:5353', '[::1]:53', '9.9.9.9'] }));
  assert.throws(() => createResolver({ servers: ['localhost:5353'] }), (error: Error) => error instanceof ConfigError && /dns\.servers: each entry must be an IP address/.test(error.message));
  // Node would wrap these ports silently (99999 → 34463) and every lookup then fails at delivery time.
  for (const server of ['127.0.0.1:99999', '[::1]:70000', '127.0.0.1:0', '127.0.0.1:']) {
    assert.throws(() => createResolver({ servers: [server] }), (error: Error) => error instanceof ConfigError && /a port is 1 to 65535/.test(error.message), server);
  }
  assert.doesNotThrow(() => createResolver({ servers: ['::1', '2001:db8::53', '127.0.0.1:65535'] }));
});

test('domain limiter caps concurrency and drops to one while throttled', async () => {
  let now = 0;
  const limiter = createDomainLimiter(2, () => now);
  const r1 = await limiter.acquire('d');
  const r2 = await limiter.acquire('d');
  let third = false;
  const p3 = limiter.acquire('d').then((release) => ((third = true), release));
  await new Promise((r) => setImmediate(r));
  assert.equal(third, false);
  r1();
  const r3 = await p3;
  assert.equal(third, true);
  limiter.recordThrottle('d');
  r2();
  r3();
  const a = await limiter.acquire('d');
  let second = false;
  const pb = limiter.acquire('d').then((release) => ((second = true), release));
  await new Promise((r) => setImmediate(r));
  assert.equal(second, false, 'only one at a time while throttled');
  now = 2000;
  a();
  (await pb)();
});

test('an MX host whose AAAA queries go unanswered: its IPv4 addresses are used after a short grace, not after every resolver retry', async () => {
  const dns = await startDnsServer();
  try {
    dns.set('mx.v4only.test', 'A', ['192.0.2.7']);
    dns.fail('mx.v4only.test', 'timeout', 'AAAA');
    // Without the grace the lookup waits for the resolver to give up on AAAA (c-ares: 5 s at least).
    const resolver = createResolver({ servers: [dns.address], timeoutMs: 60_000, tries: 1 });
    const started = performance.now();
    assert.deepEqual(await resolveHostAddresses(resolver, 'mx.v4only.test', 200), { kind: 'addresses', addresses: ['192.0.2.7'], incomplete: true });
    assert.ok(performance.now() - started < 3_000, `took ${(performance.now() - started).toFixed(0)} ms`);
    assert.ok(dns.queries.some((q) => q.name === 'mx.v4only.test' && q.type === 'AAAA'), 'AAAA was asked');
    // An AAAA lookup that failed for now leaves the IPv6 addresses as unknown as one not waited for.
    dns.set('mx.v6fails.test', 'A', ['192.0.2.8']);
    dns.fail('mx.v6fails.test', 'SERVFAIL', 'AAAA');
    assert.deepEqual(await resolveHostAddresses(resolver, 'mx.v6fails.test', 2_000), { kind: 'addresses', addresses: ['192.0.2.8'], incomplete: true });
  } finally {
    await dns.stop();
  }
});

test('through a relay, its own refusals before DATA and any refusal of our sender are deferred; a recipient refusal with its code and other refusals after DATA are as direct', () => {
  const cases: [SmtpReply, string, boolean, string][] = [
    [{ code: 550, message: 'relay not permitted', command: 'RCPT TO' }, 'defer', false, 'relay-refused'],
    [{ code: 554, enhanced: '5.7.1', message: 'Relay access denied', command: 'RCPT TO' }, 'defer', false, 'relay-refused'],
    [{ code: 530, enhanced: '5.7.0', message: 'Authentication required', command: 'MAIL FROM' }, 'defer', false, 'relay-refused'],
    [{ code: 553, enhanced: '5.1.8', message: 'Sender address rejected', command: 'MAIL FROM' }, 'defer', false, 'relay-refused'],
    [{ code: 550, enhanced: '5.1.1', message: 'User unknown', command: 'RCPT TO' }, 'bounce', true, 'permanent'],
    [{ code: 554, enhanced: '5.7.1', message: 'Message refused as spam', command: 'DATA' }, 'bounce', false, 'permanent'],
    [{ code: 550, message: 'content rejected', command: 'DATA' }, 'bounce', false, 'permanent'],
    // Our sender refused, whatever the step and its code: Postfix's sender login maps at RCPT, Exchange Online after DATA.
    [{ code: 553, enhanced: '5.1.0', message: '<bounce-x@bounce.sender.test>: Sender address rejected: not owned by user relay@example.net', command: 'RCPT TO' }, 'defer', false, 'relay-refused'],
    [{ code: 554, enhanced: '5.2.252', message: 'SendAsDenied; relay@contoso.example not allowed to send as hello@sender.test; STOREDRV.Submission.Exception:SendAsDeniedException.MapiExceptionSendAsDenied', command: 'DATA' }, 'defer', false, 'relay-refused'],
    [{ code: 554, enhanced: '5.2.0', message: 'STOREDRV.Submission.Exception:SendAsDeniedException.MapiExceptionSendAsDenied; Failed to process message', command: 'DATA' }, 'defer', false, 'relay-refused'],
    // Amazon SES: an identity of the message not verified in the SES account.
    [{ code: 554, message: 'Message rejected: Email address is not verified. The following identities failed the check in region US-EAST-1: hello@sender.test', command: 'DATA' }, 'defer', false, 'relay-refused'],
    [{ code: 451, enhanced: '4.3.0', message: 'try later', command: 'RCPT TO' }, 'defer', false, 'transient'],
    // The relay refusing this host's HELO name: the operator's setup, not the recipient's.
    [{ code: 504, enhanced: '5.5.2', message: '<vm>: Helo command rejected: need fully-qualified hostname', command: 'RCPT TO' }, 'defer', false, 'relay-refused'],
    [{ code: 250, message: 'ok' }, 'delivered', false, 'success'],
  ];
  for (const [reply, action, suppress, rule] of cases) {
    const outcome = classifyThroughRelay(reply);
    assert.deepEqual([outcome.action, outcome.suppressRecipient, outcome.rule, outcome.bounceType], [action, suppress, rule, action === 'bounce' ? 'hard' : undefined], JSON.stringify(reply));
  }
  // Delivered direct, the same bare 550 at RCPT refuses the recipient.
  assert.deepEqual([classify(cases[0][0]).action, classify(cases[0][0]).suppressRecipient], ['bounce', true]);
});

test('refusesSendingHost: blocklistings of the sending IP, not of the sender domain or the content', () => {
  const cases: [string, boolean][] = [
    ['Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org; https://www.spamhaus.org/query/ip/192.0.2.1', true],
    ['Unfortunately, messages from [192.0.2.1] weren\'t sent. Please contact your Internet service provider since part of their network is on our block list (S3150).', true],
    ['Access denied, banned sending IP [192.0.2.1]', true],
    ['Rejected: 192.0.2.1 listed at bl.spamcop.net', true],
    ['Your IP address 192.0.2.1 is blacklisted', true],
    // The host's name and its reverse DNS (Postfix's reject_non_fqdn_helo_hostname, reject_unknown_client_hostname; Gmail).
    ['<vm>: Helo command rejected: need fully-qualified hostname', true],
    ['Client host rejected: cannot find your hostname, [192.0.2.1]', true],
    ['The IP address sending this message does not have a PTR record setup, or the corresponding forward DNS entry does not point to the sending IP.', true],
    ['Invalid HELO name (See RFC 5321 4.1.1.1)', true],
    ['Helo name invalid', true],
    ['Service unavailable; Sender address [a@example.com] blocked using dbl.spamhaus.org', false],
    ['Message rejected as spam by Content Filtering', false],
    ['No such user', false],
  ];
  for (const [message, expected] of cases) assert.equal(refusesSendingHost({ code: 550, enhanced: '5.7.1', message }), expected, message);
});
