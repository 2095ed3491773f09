import { boundedForChecks, signaturesChecked } from '../../src/inbound/auth-verdicts.js';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { hostname } from 'node:os';
import { after, before, describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import { simpleParser } from 'mailparser';
import { addSendingDomain, startRig, type DeliveryRig } from '../delivery/harness.js';
import { openSmtpSession } from '../helpers/smtp-raw.js';
import { waitUntil } from '../helpers/wait-until.js';
import { startReceiver } from '../webhooks/receiver.js';
import { pruneReceivedEmails } from '../../src/inbound/retention.js';
import { webhookTextMax } from '../../src/inbound/receive.js';
import { recordTextMax } from '../../src/inbound/repo.js';
import { withProtocol } from '../../src/smtp/inbound.js';
import { traceHeaders } from '../../src/inbound/trace-headers.js';

/**
 * Inbound routes and received emails (spec §2.7, §2.8, §4.9) end to end: routes made through the API,
 * messages delivered to the real inbound SMTP port by a real client (nodemailer, DKIM-signing as a
 * remote MTA would), authentication checked against records in a real DNS server on loopback, the
 * email.received webhook at a real HTTP receiver.
 */
let rig: DeliveryRig;
let hooks: Awaited<ReturnType<typeof startReceiver>>;
const senderKey = generateKeyPairSync('rsa', { modulusLength: 2048 });
const senderPublicKey = senderKey.publicKey.export({ type: 'spki', format: 'der' }).toString('base64');

before(async () => {
  hooks = await startReceiver();
  rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true', POSTINO_LOG_LEVEL: 'info' } });
  await addSendingDomain(rig, 'inbox.test');
  // The remote sender's domain: SPF allows loopback, DKIM key and DMARC policy published.
  rig.dns.set('remote.test', 'TXT', ['v=spf1 ip4:127.0.0.1 -all']);
  rig.dns.set('sel._domainkey.remote.test', 'TXT', [`v=DKIM1; k=rsa; p=${senderPublicKey}`]);
  rig.dns.set('_dmarc.remote.test', 'TXT', ['v=DMARC1; p=reject']);
  rig.dns.set('spoofed.test', 'TXT', ['v=spf1 ip4:192.0.2.1 -all']);
  rig.dns.set('_dmarc.spoofed.test', 'TXT', ['v=DMARC1; p=reject']);
  assert.equal((await rig.app.api('POST', '/v1/webhooks', { url: hooks.url('/in'), events: ['email.received'] })).status, 201);
});

after(async () => {
  await rig?.stop();
  await hooks?.stop();
});

const api = (method: string, path: string, body?: unknown) => rig.app.api(method, path, body);

/** Sends one message to the inbound port as a remote MTA would; resolves with the server's answer. */
async function deliver(message: { from: string; to: string | string[]; envelopeFrom?: string; subject?: string; text?: string; html?: string; cc?: string; replyTo?: string; attachments?: { filename: string; content: string }[]; dkim?: boolean }) {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: rig.app.smtpPort, secure: false, ignoreTLS: true, name: 'mta.remote.test' });
  try {
    return await transport.sendMail({
      ...message,
      envelope: { from: message.envelopeFrom ?? message.from, to: message.to },
      dkim: message.dkim === false ? undefined : { domainName: 'remote.test', keySelector: 'sel', privateKey: senderKey.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() },
    });
  } finally {
    transport.close();
  }
}

async function createRoute(body: Record<string, unknown>) {
  const res = await api('POST', '/v1/inbound/routes', body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.created;
}

/** The newest received email's full record. */
async function newestReceived() {
  const list = await api('GET', '/v1/inbound/emails?limit=1');
  assert.equal(list.status, 200);
  return (await api('GET', `/v1/inbound/emails/${list.body.data[0].id}`)).body;
}

describe('routes API', () => {
  test('create, list, update and delete a route; a catch-all by default', async () => {
    const route = await createRoute({ domain: 'Support.Inbox.test' });
    assert.deepEqual({ ...route, id: undefined, createdAt: undefined, updatedAt: undefined }, { id: undefined, domain: 'support.inbox.test', localPart: '*', isCatchAll: true, responseMode: 'accept', isEnabled: true, createdAt: undefined, updatedAt: undefined });
    assert.ok((await api('GET', '/v1/inbound/routes')).body.data.some((r: any) => r.id === route.id));
    const updated = await api('PATCH', `/v1/inbound/routes/${route.id}`, { responseMode: 'reject-temp' });
    assert.equal(updated.status, 200);
    assert.deepEqual([updated.body.updated.responseMode, updated.body.updated.isEnabled], ['reject-temp', true]);
    assert.deepEqual((await api('DELETE', `/v1/inbound/routes/${route.id}`)).body, { deleted: true });
    assert.deepEqual((await api('DELETE', `/v1/inbound/routes/${route.id}`)).body, { deleted: false });
    assert.equal((await api('PATCH', `/v1/inbound/routes/${route.id}`, { isEnabled: false })).status, 404);
  });

  test('every rule of create and update: one accepted and one refused value each', async () => {
    const refused = async (method: string, path: string, body: unknown, message: RegExp, status = 400) => {
      const res = await api(method, path, body);
      assert.equal(res.status, status, JSON.stringify(res.body));
      assert.match(res.body.developerMessage, message);
    };
    // domain: a verified domain of the project or a subdomain of one.
    await createRoute({ domain: 'inbox.test', localPart: 'rules-ok' });
    await refused('POST', '/v1/inbound/routes', { domain: 'elsewhere.test' }, /domain: elsewhere\.test is not a verified domain of this project/);
    assert.equal((await api('POST', '/v1/domains', { domain: 'unpublished.test' })).status, 200);
    await refused('POST', '/v1/inbound/routes', { domain: 'in.unpublished.test' }, /domain: in\.unpublished\.test is under unpublished\.test, whose status is (pending|failed): verify it first \(POST \/v1\/domains\/[0-9a-f]{24}\/verify\)/);
    await createRoute({ domain: 'in.inbox.test', localPart: 'sub' });
    await refused('POST', '/v1/inbound/routes', { domain: 'not a domain' }, /domain: must be a domain name/);
    await refused('POST', '/v1/inbound/routes', {}, /domain: is required/);
    // localPart: * or at most 128 characters without @.
    await createRoute({ domain: 'inbox.test', localPart: 'a'.repeat(128) });
    await refused('POST', '/v1/inbound/routes', { domain: 'inbox.test', localPart: 'a'.repeat(129) }, /localPart: must be at most 128 characters/);
    await refused('POST', '/v1/inbound/routes', { domain: 'inbox.test', localPart: 'a@b' }, /localPart: must be "\*" or the part of an address before @/);
    await refused('POST', '/v1/inbound/routes', { domain: 'inbox.test', localPart: 'a..b' }, /localPart: must be "\*" or the part of an address before @/);
    await createRoute({ domain: 'inbox.test', localPart: 'first.last' });
    await refused('POST', '/v1/inbound/routes', { domain: 'inbox.test', localPart: 'RULES-OK' }, /already exists/, 403);
    // responseMode and isEnabled.
    await createRoute({ domain: 'inbox.test', localPart: 'rules-perm', responseMode: 'reject-perm', isEnabled: false });
    await refused('POST', '/v1/inbound/routes', { domain: 'inbox.test', localPart: 'x', responseMode: 'bounce' }, /responseMode: must be one of accept, reject-temp, reject-perm/);
    await refused('POST', '/v1/inbound/routes', { domain: 'inbox.test', localPart: 'x', isEnabled: 'yes' }, /isEnabled: must be true or false/);
    const route = await createRoute({ domain: 'inbox.test', localPart: 'rules-update' });
    assert.equal((await api('PATCH', `/v1/inbound/routes/${route.id}`, { isEnabled: false })).body.updated.isEnabled, false);
    await refused('PATCH', `/v1/inbound/routes/${route.id}`, {}, /give at least one of responseMode, isEnabled/);
    await refused('PATCH', `/v1/inbound/routes/${route.id}`, { responseMode: 'drop' }, /responseMode: must be one of/);
  });
});

describe('receiving', () => {
  let catchAll: any;
  before(async () => {
    catchAll = await createRoute({ domain: 'inbox.test' });
    await createRoute({ domain: 'inbox.test', localPart: 'later', responseMode: 'reject-temp' });
    await createRoute({ domain: 'inbox.test', localPart: 'never', responseMode: 'reject-perm' });
    await createRoute({ domain: 'inbox.test', localPart: 'off', responseMode: 'reject-perm', isEnabled: false });
  });

  test('an accepted message is stored with its parsed fields, authentication verdicts, spam score, raw bytes and html preview; email.received is posted', async () => {
    const sent = await deliver({
      from: '"Ann Remote" <ann@remote.test>',
      to: 'Help Desk <help@inbox.test>',
      cc: 'boss@inbox.test',
      replyTo: 'replies@remote.test',
      subject: 'Grüße aus Brno',
      text: 'Hello there',
      html: '<p>Hello <b>there</b><img src="https://tracker.example/p.gif"></p>',
      attachments: [{ filename: 'notes.txt', content: 'some notes' }],
    });
    assert.match(sent.response, /^250 /);
    const email = await newestReceived();
    assert.equal(email.destination, 'help@inbox.test');
    assert.deepEqual(email.from, { email: 'ann@remote.test', name: 'Ann Remote' });
    assert.deepEqual(email.to, [{ email: 'help@inbox.test', name: 'Help Desk' }]);
    assert.deepEqual(email.cc, [{ email: 'boss@inbox.test', name: null }]);
    assert.deepEqual(email.replyTo, [{ email: 'replies@remote.test', name: null }]);
    assert.equal(email.subject, 'Grüße aus Brno');
    assert.equal(email.text.trim(), 'Hello there');
    assert.equal(email.htmlAvailable, true);
    assert.deepEqual(email.attachments, [{ name: 'notes.txt', contentType: 'text/plain', size: 10 }]);
    assert.equal(email.inboundRouteId, catchAll.id);
    assert.equal(email.headers['subject'], '=?UTF-8?Q?Gr=C3=BC=C3=9Fe_aus_Brno?=');
    assert.deepEqual([email.auth.spf.result, email.auth.dkim.map((d: any) => [d.result, d.domain]), email.auth.dmarc.result], ['pass', [['pass', 'remote.test']], 'pass']);
    assert.match(email.auth.authenticationResults, /dkim=pass/);
    // One header, as docs/inbound.md says: Authentication-Results (RFC 8601) with its folded lines, not
    // the Received-SPF line the raw message's trace carries above it.
    assert.match(email.auth.authenticationResults, /^Authentication-Results: [^\r\n]+(\r\n[ \t][^\r\n]+)*$/);
    assert.deepEqual([email.spam.isSpam, email.spam.threshold, email.spam.action], [false, 5, 'no action']);
    assert.ok(email.spam.symbols.includes('R_DKIM_ALLOW') && email.spam.symbols.includes('DMARC_POLICY_ALLOW'), email.spam.symbols.join());
    assert.deepEqual({ ...email.envelope, size: undefined }, { mailFrom: 'ann@remote.test', rcptTo: ['help@inbox.test'], remoteAddress: '127.0.0.1', helo: 'mta.remote.test', protocol: 'ESMTP', size: undefined });

    const raw = await fetch(email.rawEmailUrl);
    assert.equal(raw.status, 200);
    assert.equal(raw.headers.get('content-type'), 'message/rfc822');
    const rawBytes = Buffer.from(await raw.arrayBuffer());
    // This hop's trace (RFC 5321 §4.4) above the message as it arrived, byte for byte.
    const arrived = rawBytes.subarray(rawBytes.indexOf('DKIM-Signature: '));
    assert.equal(email.envelope.size, arrived.length);
    assert.match(arrived.toString(), /Hello there/);
    const trace = rawBytes.subarray(0, rawBytes.length - arrived.length).toString();
    const date = new Date(email.receivedAt).toUTCString().replace('GMT', '+0000');
    assert.match(trace, /^Return-Path: <ann@remote\.test>\r\n/);
    assert.ok(trace.includes(`${email.auth.authenticationResults}\r\n`), trace);
    assert.match(trace, /\r\nReceived-SPF: pass/);
    const received = `Received: from mta.remote.test ([127.0.0.1])\r\n\tby ${rig.app.config.smtp.hostname || hostname()} (Postino) with ESMTP id ${email.id}\r\n\tfor <help@inbox.test>; ${date}\r\n`;
    assert.ok(trace.endsWith(received), trace);
    // Trace headers break no signature: the served message verifies as the arrived one did.
    const { authenticate } = await import('mailauth');
    const resolver = new Resolver();
    resolver.setServers([rig.dns.address]);
    const resolve = (name: string, type: string) => resolver.resolve(name, type as 'TXT');
    const verified = await authenticate(rawBytes, { ip: '127.0.0.1', helo: 'mta.remote.test', sender: 'ann@remote.test', resolver: resolve, disableArc: true, disableBimi: true } as any);
    assert.equal((verified as any).dkim.results[0].status.result, 'pass');
    const preview = await fetch(email.previewHtmlUrl);
    assert.match(await preview.text(), /<b>there<\/b>/);
    assert.match(preview.headers.get('content-security-policy') ?? '', /^sandbox; default-src 'none'; img-src data:/, 'no remote images: the sender learns nothing');

    await waitUntil(() => hooks.to('/in').some((r) => JSON.parse(r.body).data.id === email.id), 'the email.received webhook');
    const hook = JSON.parse(hooks.to('/in').find((r) => JSON.parse(r.body).data.id === email.id)!.body);
    assert.equal(hook.type, 'email.received');
    assert.deepEqual([hook.data.subject, hook.data.destination, hook.data.spam.score, hook.data.rawEmailUrl], [email.subject, 'help@inbox.test', email.spam.score, undefined]);
  });

  test('the Received line writes the client address as an RFC 5321 address literal: [IPv6:…] for an IPv6 client, as Postfix does', () => {
    const facts = { mailFrom: 'ann@remote.test', helo: 'mta.remote.test', protocol: 'ESMTP', receivedBy: 'mx.inbox.test', id: 'r1', destination: 'help@inbox.test', receivedAtMs: 0, authenticationResults: '' };
    assert.match(traceHeaders({ ...facts, remoteAddress: '2001:db8::25' }, '\r\n'), /^Received: from mta\.remote\.test \(\[IPv6:2001:db8::25\]\)\r\n/m);
    assert.match(traceHeaders({ ...facts, remoteAddress: '192.0.2.25' }, '\r\n'), /^Received: from mta\.remote\.test \(\[192\.0\.2\.25\]\)\r\n/m);
    // No zone (the syntax has none), and an IPv4-mapped client is the IPv4 one.
    assert.match(traceHeaders({ ...facts, remoteAddress: 'fe80::25%eth0' }, '\r\n'), /^Received: from mta\.remote\.test \(\[IPv6:fe80::25\]\)\r\n/m);
    assert.match(traceHeaders({ ...facts, remoteAddress: '::ffff:192.0.2.25' }, '\r\n'), /^Received: from mta\.remote\.test \(\[192\.0\.2\.25\]\)\r\n/m);
  });

  test('headers are shown as they arrived: unfolded, encoded words kept, raw 8-bit values read as UTF-8 (RFC 6532)', async () => {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      await session.command('MAIL FROM:<ann@remote.test>');
      assert.match(await session.command('RCPT TO:<raw@inbox.test>'), /^250 /);
      assert.match(await session.command('DATA'), /^354/);
      const message = ['From: ann@remote.test', 'To: raw@inbox.test', 'Subject: a folded', '  subject line', 'X-Note: Grüße aus Brno', 'X-Tag: one', 'X-Tag: two', '', 'body'].join('\r\n');
      await session.write(Buffer.concat([Buffer.from(message, 'utf8'), Buffer.from('\r\n.\r\n')]));
      assert.match(await session.reply(), /^250 /);
    } finally {
      session.close();
    }
    const email = await newestReceived();
    assert.equal(email.destination, 'raw@inbox.test');
    assert.equal(email.headers['x-note'], 'Grüße aus Brno');
    assert.equal(email.headers['subject'], 'a folded  subject line');
    assert.deepEqual(email.headers['x-tag'], ['one', 'two']);
  });

  test('headers named like Object.prototype keys are kept as they arrived: __proto__, constructor, toString', async () => {
    const message = ['From: ann@remote.test', 'Subject: proto', '__proto__: first', '__proto__: second', 'Constructor: c1', 'toString: t1', '', 'body'].join('\r\n');
    const reply = await deliverRaw('proto@inbox.test', message);
    assert.match(reply, /^250 /, rig.app.logs.filter((l) => /error|warn/.test(l)).join('\n'));
    const list = await api('GET', '/v1/inbound/emails?limit=1');
    const res = await fetch(`${rig.app.baseUrl}/v1/inbound/emails/${list.body.data[0].id}`, { headers: { authorization: `Bearer ${rig.app.apiKey}` } });
    // Read from the JSON text itself: a parsed object would hide a lost `__proto__` key behind its accessor.
    const json = await res.text();
    assert.match(json, /"__proto__":\["first","second"\]/);
    const headers = JSON.parse(json).headers;
    assert.deepEqual(Object.getOwnPropertyDescriptor(headers, '__proto__')?.value, ['first', 'second']);
    assert.equal(headers.constructor, 'c1');
    assert.equal(headers.tostring, 't1');
  });

  test("a sender's Authentication-Results or Received-SPF claiming this host's name is not shown in headers (RFC 8601 §5); others are, and the raw message keeps the bytes", async () => {
    const host = rig.app.config.smtp.hostname || hostname();
    const forged = [
      `Authentication-Results: ${host};\r\n dkim=pass header.d=paypal.com;\r\n dmarc=pass header.from=paypal.com`,
      `Authentication-Results: (a comment; with a semicolon) "${host.toUpperCase()}." 1; spf=pass smtp.mailfrom=paypal.com`,
      `Received-SPF: pass (${host}: domain of service@paypal.com designates 127.0.0.1 as permitted sender) client-ip=127.0.0.1;`,
      `Received-SPF: pass receiver=${host}; client-ip=127.0.0.1`,
    ];
    const foreign = ['Authentication-Results: mx.google.com; dkim=pass header.d=remote.test', `Authentication-Results: not-${host}; spf=pass`, 'Received-SPF: pass (mx.google.com: domain of ann@remote.test designates 127.0.0.1 as permitted sender)'];
    const message = [...forged, ...foreign, 'From: PayPal <service@paypal.com>', 'Subject: forged results', '', 'body'].join('\r\n');
    assert.match(await deliverRaw('forged-ar@inbox.test', message), /^250 /);
    const email = await newestReceived();
    assert.equal(email.destination, 'forged-ar@inbox.test');
    assert.deepEqual(email.headers['authentication-results'], ['mx.google.com; dkim=pass header.d=remote.test', `not-${host}; spf=pass`]);
    assert.equal(email.headers['received-spf'], 'pass (mx.google.com: domain of ann@remote.test designates 127.0.0.1 as permitted sender)');
    // This host's verdict is the record's own, and the trace's.
    assert.deepEqual([email.auth.dkim, email.auth.dmarc.result], [[], 'none']);
    // The raw message: this hop's trace above the bytes as they arrived (docs/inbound.md), forged lines and all.
    const raw = await (await fetch(email.rawEmailUrl)).text();
    assert.ok(raw.endsWith(`${message}\r\n`), raw);
    assert.ok(raw.indexOf(`${email.auth.authenticationResults}\r\nReceived: from mta.remote.test `) > 0, "this host's own results are the trace's, on top");
  });

  test('the raw message of a HELO session from a bounce (null sender) with a malformed name: Return-Path <>, the name read as unknown, SMTP, LF kept', async () => {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('HELO not(a)host;name');
      assert.match(await session.command('MAIL FROM:<>'), /^250 /);
      assert.match(await session.command('RCPT TO:<trace@inbox.test>'), /^250 /);
      assert.match(await session.command('DATA'), /^354/);
      await session.write('From: mailer-daemon@remote.test\nSubject: bare LF\n\nbody\r\n.\r\n');
      assert.match(await session.reply(), /^250 /);
    } finally {
      session.close();
    }
    const email = await newestReceived();
    assert.deepEqual([email.envelope.mailFrom, email.envelope.helo, email.envelope.protocol], ['', 'not(a)host;name', 'SMTP']);
    const raw = await (await fetch(email.rawEmailUrl)).text();
    assert.match(raw, /^Return-Path: <>\n/);
    assert.match(raw, /\nReceived: from unknown \(\[127\.0\.0\.1\]\)\n\tby \S+ \(Postino\) with SMTP id \w+\n\tfor <trace@inbox\.test>; /);
    assert.ok(raw.endsWith('>; ' + new Date(email.receivedAt).toUTCString().replace('GMT', '+0000') + '\nFrom: mailer-daemon@remote.test\nSubject: bare LF\n\nbody\r\n'), raw);
  });

  test('a message sent with SMTPUTF8 keeps its UTF-8 addresses in the trace (RFC 6532), said by its with-protocol (RFC 6531 UTF8SMTP), not as ?', async () => {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      assert.match(await session.command('MAIL FROM:<zoë@remote.test> SMTPUTF8'), /^250 /);
      assert.match(await session.command('RCPT TO:<jörg@inbox.test>'), /^250 /);
      assert.match(await session.command('DATA'), /^354/);
      await session.write(Buffer.concat([Buffer.from('From: zoë@remote.test\r\nSubject: utf8\r\n\r\nbody', 'utf8'), Buffer.from('\r\n.\r\n')]));
      assert.match(await session.reply(), /^250 /);
    } finally {
      session.close();
    }
    const email = await newestReceived();
    assert.equal(email.envelope.protocol, 'UTF8SMTP');
    const raw = Buffer.from(await (await fetch(email.rawEmailUrl)).arrayBuffer()).toString('utf8');
    assert.match(raw, /^Return-Path: <zoë@remote\.test>\r\n/);
    assert.match(raw, /\tby \S+ \(Postino\) with UTF8SMTP id \w+\r\n\tfor <jörg@inbox\.test>; /);
    // The registered names for the other kinds of session.
    assert.deepEqual(['ESMTPS', 'ESMTPSA', 'ESMTPA', 'SMTP'].map((type) => withProtocol(type, true)), ['UTF8SMTPS', 'UTF8SMTPSA', 'UTF8SMTPA', 'UTF8SMTP']);
    assert.equal(withProtocol('ESMTPS', false), 'ESMTPS');
  });

  /** One message written by hand to the inbound port; resolves with the reply to its final dot. */
  async function deliverRaw(to: string, message: string, mailFrom = 'ann@remote.test'): Promise<string> {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      await session.command(`MAIL FROM:<${mailFrom}>`);
      assert.match(await session.command(`RCPT TO:<${to}>`), /^250 /);
      assert.match(await session.command('DATA'), /^354/);
      await session.write(`${message}\r\n.\r\n`);
      return await session.reply();
    } finally {
      session.close();
    }
  }

  test('a header section of more than 2,000 lines is refused 552 before any check: one header folded 50,000 times held the appliance 9 s', async () => {
    const folded = `From: ann@remote.test\r\nSubject: folded\r\nX-Fold: a${'\r\n b'.repeat(50_000)}\r\n\r\nbody`;
    const started = performance.now();
    assert.match(await deliverRaw('fold@inbox.test', folded), /^552 5\.3\.4 The message's header section has more than 2,000 lines/);
    // Not a timing assertion of the code's speed: the refusal comes before mailauth, which took seconds.
    assert.ok(performance.now() - started < 5_000);
    const fine = `From: ann@remote.test\r\nSubject: many received lines\r\n${'Received: from relay.remote.test\r\n'.repeat(500)}\r\nbody`;
    assert.match(await deliverRaw('fold@inbox.test', fine), /^250 /);
    assert.equal((await newestReceived()).subject, 'many received lines');
  });

  test('a message checks its first 8 DKIM signatures: 300 forged ones do not make 300 queries to the domain they name, nor 300 passes over the body', async () => {
    // bh: the hash of an empty body, so each signature gets as far as its key lookup; each its own l=.
    const signatures = Array.from({ length: 300 }, (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=victim.test; s=s${i}; l=${i}; h=from; bh=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=; b=AAAA`);
    const before = rig.dns.queries.length;
    assert.match(await deliverRaw('dkim@inbox.test', [...signatures, 'From: ann@remote.test', 'Subject: signed a lot', '', ''].join('\r\n')), /^250 /);
    const keyLookups = rig.dns.queries.slice(before).filter((q) => q.name.endsWith('._domainkey.victim.test'));
    assert.deepEqual(keyLookups.map((q) => q.name).sort(), Array.from({ length: 8 }, (_, i) => `s${i}._domainkey.victim.test`).sort());
    const email = await newestReceived();
    assert.equal(email.subject, 'signed a lot');
    assert.equal(email.auth.dkim.length, 8);
    assert.match(email.headers['dkim-signature'].at(-1), /s=s299;/, 'the record keeps every header as it arrived');
  });

  test('a From field listing thousands of addresses is read by the checks as its first (mailauth parsed it in time square to their number): a DMARC fail, the record shows the first', async () => {
    const many = Array.from({ length: 5_000 }, (_, i) => `u${i}@spoofed.test`).join(', ');
    assert.match(await deliverRaw('many-from@inbox.test', `From: ceo@spoofed.test, ${many}\r\nSubject: many authors\r\n\r\nbody`), /^250 /);
    const email = await newestReceived();
    assert.equal(email.subject, 'many authors');
    assert.deepEqual(email.from, { email: 'ceo@spoofed.test', name: null });
    assert.equal(email.auth.dmarc.result, 'fail');
    assert.equal(email.headers.from.length > 5_000 * 10, true, 'the record keeps the field as it arrived');
  });

  test("a From whose display name holds other addresses is checked as the address the record shows: spoofed.test's p=reject is not turned into remote.test's pass", async () => {
    const decoys = Array.from({ length: 21 }, () => 'ann@remote.test').join(' ');
    assert.match(await deliverRaw('display-spoof@inbox.test', `From: "${decoys}" <ceo@spoofed.test>\r\nSubject: decoy names\r\n\r\nwire the money`), /^250 /);
    const email = await newestReceived();
    assert.equal(email.subject, 'decoy names');
    assert.equal(email.from.email, 'ceo@spoofed.test');
    assert.deepEqual([email.auth.dmarc.result, email.auth.dmarc.domain], ['fail', 'spoofed.test']);
    assert.equal(email.spam.isSpam, true);
  });

  test("an html-only message's text is made from its html (mailparser gives it \"\")", async () => {
    const reply = await deliverRaw('html@inbox.test', 'From: ann@remote.test\r\nSubject: html only\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<html><body><h1>Title</h1><p>Para &amp; more</p></body></html>');
    assert.match(reply, /^250 /);
    const email = await newestReceived();
    assert.match(email.text, /Title/);
    assert.match(email.text, /Para & more/);
    // Shown a text, it still has no text part of its own: the spam score says so (docs/inbound.md).
    assert.ok(email.spam.symbols.includes('MIME_HTML_ONLY'), email.spam.symbols.join());
    assert.ok(!email.spam.symbols.includes('EMPTY_BODY'), email.spam.symbols.join());
    // html beside a text part is no such message.
    assert.match(await deliverRaw('both@inbox.test', 'From: ann@remote.test\r\nSubject: both\r\nContent-Type: multipart/alternative; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nPara\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>Para</p>\r\n--b--\r\n'), /^250 /);
    assert.ok(!(await newestReceived()).spam.symbols.includes('MIME_HTML_ONLY'));
  });

  test('a text file attached inline (Apple Mail) or named in its Content-Type alone (Exchange) is an attachment, not more text (RFC 2183 §2.3)', async () => {
    const message = [
      'From: ann@remote.test',
      'Subject: the notes',
      'Content-Type: multipart/mixed; boundary="mix"',
      '',
      '--mix',
      'Content-Type: multipart/alternative; boundary="alt"',
      '',
      '--alt',
      'Content-Type: text/plain; name="body.txt"',
      '',
      'See the notes file.',
      '--alt',
      'Content-Type: text/html; name="body.html"',
      '',
      '<p>See the notes file.</p>',
      '--alt--',
      '--mix',
      'Content-Disposition: inline; filename=notes.txt',
      'Content-Type: text/plain; x-unix-mode=0644; name="notes.txt"',
      '',
      'These are the file contents.',
      '--mix',
      'Content-Type: text/plain; name="log.txt"',
      '',
      'log line',
      '--mix',
      'Content-Type: text/html; charset=utf-8',
      'Content-Disposition: inline',
      '',
      '<p>A signature, no file.</p>',
      '--mix--',
      '',
    ].join('\r\n');
    assert.match(await deliverRaw('files@inbox.test', message), /^250 /);
    const email = await newestReceived();
    assert.deepEqual(email.attachments, [
      { name: 'notes.txt', contentType: 'text/plain', size: 'These are the file contents.'.length },
      { name: 'log.txt', contentType: 'text/plain', size: 'log line'.length },
    ]);
    // The body: its named alternatives stay the body, and an unnamed inline part is still text.
    assert.doesNotMatch(email.text, /file contents|log line/);
    assert.match(email.text, /See the notes file\./);
    const preview = await (await fetch(email.previewHtmlUrl)).text();
    assert.match(preview, /See the notes file\.<\/p>[\s\S]*A signature, no file\./);
    assert.doesNotMatch(preview, /file contents|log line/);
    // A message whose only part names a file is that file shown as the body, as mail clients show it.
    assert.match(await deliverRaw('files@inbox.test', 'From: ann@remote.test\r\nSubject: one part\r\nContent-Type: text/plain; name="only.txt"\r\n\r\nThe only part.\r\n'), /^250 /);
    const onePart = await newestReceived();
    assert.deepEqual([onePart.text.trim(), onePart.attachments], ['The only part.', []]);
    // So is a named text part first in its multipart, before a file.
    const namedFirst = [
      'From: ann@remote.test',
      'Subject: named body',
      'Content-Type: multipart/mixed; boundary="b"',
      '',
      '--b',
      'Content-Type: text/plain; charset=utf-8; name="message.txt"',
      'Content-Disposition: inline; filename="message.txt"',
      '',
      'The body text.',
      '--b',
      'Content-Type: application/pdf; name="invoice.pdf"',
      'Content-Disposition: attachment; filename="invoice.pdf"',
      'Content-Transfer-Encoding: base64',
      '',
      'JVBERi0xLjQK',
      '--b--',
      '',
    ].join('\r\n');
    assert.match(await deliverRaw('files@inbox.test', namedFirst), /^250 /);
    const firstPart = await newestReceived();
    assert.deepEqual([firstPart.text.trim(), firstPart.attachments.map((attachment: { name: string }) => attachment.name)], ['The body text.', ['invoice.pdf']]);
  });

  test("the html preview shows the message's cid: images as data: URLs, the only images its sandbox loads; an unknown cid stays", async () => {
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
    const message = [
      'From: ann@remote.test',
      'Subject: inline image',
      'Content-Type: multipart/related; boundary="rel"',
      '',
      '--rel',
      'Content-Type: text/html; charset=utf-8',
      '',
      '<p>Logo: <img src="cid:image001.png@01DA1234.56789ABC"> gone: <img src="cid:missing@x"></p>',
      '--rel',
      'Content-Type: image/png; name="image001.png"',
      'Content-Transfer-Encoding: base64',
      'Content-ID: <image001.png@01DA1234.56789ABC>',
      'Content-Disposition: inline; filename="image001.png"',
      '',
      png.toString('base64'),
      '--rel--',
      '',
    ].join('\r\n');
    assert.match(await deliverRaw('inline-image@inbox.test', message), /^250 /);
    const email = await newestReceived();
    assert.deepEqual(email.attachments, [{ name: 'image001.png', contentType: 'image/png', size: png.length }]);
    const preview = await (await fetch(email.previewHtmlUrl)).text();
    assert.ok(preview.includes(`<img src="data:image/png;base64,${png.toString('base64')}">`), preview);
    assert.ok(preview.includes('<img src="cid:missing@x">'), preview);
  });

  test('an IDN destination is stored in A-labels, as its route, however the sender wrote it', async () => {
    await createRoute({ domain: 'bücher.inbox.test', localPart: 'anna' });
    assert.match(await deliverRaw('anna@bücher.inbox.test', 'From: ann@remote.test\r\nSubject: idn\r\n\r\nbody'), /^250 /);
    const email = await newestReceived();
    assert.deepEqual([email.destination, email.envelope.rcptTo], ['anna@xn--bcher-kva.inbox.test', ['anna@xn--bcher-kva.inbox.test']]);
  });

  test('a message with no header section shows no header with an empty name', async () => {
    assert.match(await deliverRaw('noheaders@inbox.test', 'just a body, no headers at all\r\nsecond line'), /^250 /);
    const email = await newestReceived();
    assert.equal(email.destination, 'noheaders@inbox.test');
    assert.equal('' in email.headers, false, JSON.stringify(email.headers));
  });

  test('the email.received webhook carries at most 256 K characters of text (textTruncated); the record 1 M, the raw message all of it', async () => {
    const long = `${'word '.repeat(60_000)}end`; // 300,003 characters
    await deliver({ from: 'ann@remote.test', to: 'long@inbox.test', subject: 'long text', text: long });
    const email = await newestReceived();
    assert.equal(email.text.trim(), long);
    await waitUntil(() => hooks.to('/in').some((r) => JSON.parse(r.body).data.id === email.id), 'the email.received webhook');
    const hook = JSON.parse(hooks.to('/in').find((r) => JSON.parse(r.body).data.id === email.id)!.body);
    assert.equal(hook.data.textTruncated, true);
    assert.equal(hook.data.text, email.text.slice(0, webhookTextMax));
    const short = JSON.parse(hooks.to('/in').find((r) => JSON.parse(r.body).data.subject !== 'long text')!.body);
    assert.equal(short.data.textTruncated, undefined);
    assert.equal(email.textTruncated, undefined);
    // Past 1 M characters the record is cut too (20 requests at once for a 24 MB text exhausted the heap).
    // Two-unit characters (U+1F600) across the cut, which falls inside one: never half of one.
    const huge = `a${'\u{1F600}'.repeat(600_000)} end`;
    await deliver({ from: 'ann@remote.test', to: 'long@inbox.test', subject: 'huge text', text: huge });
    const cut = await newestReceived();
    assert.equal(cut.subject, 'huge text');
    assert.deepEqual([cut.textTruncated, cut.text.length], [true, recordTextMax - 1]);
    assert.ok(huge.startsWith(cut.text));
    const raw = await simpleParser(Buffer.from(await (await fetch(cut.rawEmailUrl)).arrayBuffer()));
    assert.equal(raw.text!.trim(), huge);
    // A U+0000 in the text (SQLite's text functions stop there) is no cut.
    const withNul = ['From: ann@remote.test', 'Subject: nul', 'Content-Type: text/plain; charset=utf-8', 'Content-Transfer-Encoding: quoted-printable', '', 'Before the byte=00after it.', ''].join('\r\n');
    assert.match(await deliverRaw('long@inbox.test', withNul), /^250 /);
    const nul = await newestReceived();
    assert.deepEqual([nul.text.trim(), nul.textTruncated], ['Before the byte\u0000after it.', undefined]);
  });

  test('a message that fails SPF and DMARC and has no signature is scored as spam (stored: the route accepts)', async () => {
    await deliver({ from: 'ceo@spoofed.test', to: 'pay@inbox.test', subject: 'Urgent wire', text: 'Send money', dkim: false });
    const email = await newestReceived();
    assert.equal(email.destination, 'pay@inbox.test');
    assert.deepEqual([email.auth.spf.result, email.auth.dkim, email.auth.dmarc.result], ['fail', [], 'fail']);
    assert.deepEqual([email.spam.isSpam, email.spam.action], [true, 'add header']);
    assert.ok(email.spam.score >= 5, String(email.spam.score));
    for (const symbol of ['R_SPF_FAIL', 'R_DKIM_NA', 'DMARC_POLICY_REJECT']) assert.ok(email.spam.symbols.includes(symbol), `${symbol} in ${email.spam.symbols.join()}`);
  });

  test('more than one From address is a DMARC fail and spam (RFC 7489 §6.6.1), and the record shows the first, which the checks read', async () => {
    // spoofed.test publishes p=reject; the envelope's remote.test passes SPF. mailauth gives no verdict for
    // two From addresses: unchanged, each of these read dmarc none and scored 0.3.
    const cases = [
      { label: 'two From fields', from: ['From: "Jörg CEO" <ceo@spoofed.test>', 'From: Ann <ann@remote.test>'], shown: { email: 'ceo@spoofed.test', name: 'Jörg CEO' } },
      { label: 'the same, the other way round', from: ['From: Ann <ann@remote.test>', 'From: =?UTF-8?Q?J=C3=B6rg_CEO?= <ceo@spoofed.test>'], shown: { email: 'ann@remote.test', name: 'Ann' } },
      { label: 'one field, two addresses', from: ['From: CEO <ceo@spoofed.test>, Ann <ann@remote.test>'], shown: { email: 'ceo@spoofed.test', name: 'CEO' } },
    ];
    for (const { label, from, shown } of cases) {
      assert.match(await deliverRaw('multi-from@inbox.test', [...from, `Subject: ${label}`, 'Date: Wed, 25 Nov 2026 11:00:00 +0000', 'Message-ID: <m@remote.test>', '', 'Please wire 50k.'].join('\r\n')), /^250 /);
      const email = await newestReceived();
      assert.equal(email.subject, label);
      assert.deepEqual(email.from, shown, label);
      const domain = shown.email.split('@')[1];
      assert.deepEqual(email.auth.dmarc, { result: 'fail', domain, policy: null }, label);
      assert.match(email.auth.authenticationResults, new RegExp(`;\\r\\n dmarc=fail \\(multiple From addresses\\) header\\.from=${domain.replace('.', '\\.')}$`), label);
      assert.deepEqual([email.spam.isSpam, email.spam.action], [true, 'add header'], label);
      assert.ok(email.spam.symbols.includes('MULTIPLE_FROM') && !email.spam.symbols.includes('DMARC_POLICY_SOFTFAIL'), `${label}: ${email.spam.symbols.join()}`);
      const raw = await (await fetch(email.rawEmailUrl)).text();
      assert.ok(raw.includes(`${email.auth.authenticationResults}\r\nReceived: `), 'the trace says so too');
    }
    // One From address: DMARC checked as ever (remote.test aligns through SPF).
    assert.match(await deliverRaw('multi-from@inbox.test', 'From: Ann <ann@remote.test>\r\nSubject: one\r\n\r\nbody'), /^250 /);
    const single = await newestReceived();
    assert.deepEqual([single.auth.dmarc.result, single.spam.symbols.includes('MULTIPLE_FROM'), single.spam.symbols.includes('MISSING_FROM')], ['pass', false, false]);
    // No From at all: DMARC has no domain (none), and the message is scored as one RFC 5322 forbids.
    assert.match(await deliverRaw('multi-from@inbox.test', 'Sender: ann@remote.test\r\nSubject: none\r\n\r\nbody'), /^250 /);
    const none = await newestReceived();
    assert.deepEqual([none.from, none.auth.dmarc.result, none.spam.symbols.includes('MISSING_FROM')], [{ email: '', name: null }, 'none', true]);
    // Its score as docs/inbound.md lists it: no SPF nor DKIM for the sender (0.5 each), no From (2), Date or Message-ID (1 each) is 5, spam.
    assert.match(await deliverRaw('multi-from@inbox.test', 'Subject: bare\r\n\r\nbody', 'ann@nospf.test'), /^250 /);
    const bare = await newestReceived();
    assert.deepEqual([bare.spam.score, bare.spam.isSpam, bare.spam.action], [5, true, 'add header'], bare.spam.symbols.join());
  });

  test("SPF as receivers evaluate it: a name written with a trailing dot passes (mailauth called it a permanent error), an include that cannot be read now is temperror (it was skipped)", async () => {
    rig.dns.set('dotted.test', 'TXT', ['v=spf1 a:relay.dotted.test. -all']);
    rig.dns.set('relay.dotted.test', 'A', ['127.0.0.1']);
    rig.dns.set('shaky.test', 'TXT', ['v=spf1 include:_spf.shaky.test ip4:127.0.0.1 -all']);
    rig.dns.fail('_spf.shaky.test', 'SERVFAIL');
    try {
      const spfOf = async (domain: string) => {
        assert.match(await deliverRaw('spf-eval@inbox.test', `From: ann@${domain}\r\nSubject: ${domain}\r\n\r\nbody`, `ann@${domain}`), /^250 /);
        return (await newestReceived()).auth.spf.result;
      };
      assert.equal(await spfOf('dotted.test'), 'pass');
      assert.equal(await spfOf('shaky.test'), 'temperror');
    } finally {
      rig.dns.clearFailure('_spf.shaky.test');
    }
  });

  test('an IDN envelope sender is checked by SPF in its A-labels (smtp-server hands U-labels over), and its Return-Path is ASCII outside SMTPUTF8', async () => {
    // bücher.test: SPF allows loopback, DMARC p=reject, aligned through SPF (no signature).
    rig.dns.set('xn--bcher-kva.test', 'TXT', ['v=spf1 ip4:127.0.0.1 -all']);
    rig.dns.set('_dmarc.xn--bcher-kva.test', 'TXT', ['v=DMARC1; p=reject']);
    rig.dns.set('xn--mnchen-3ya.test', 'TXT', ['v=spf1 -all']);
    const cases = [
      { mailFrom: 'news@xn--bcher-kva.test', from: 'news@xn--bcher-kva.test', spf: 'pass', dmarc: 'pass', returnPath: 'news@xn--bcher-kva.test' },
      { mailFrom: 'info@xn--mnchen-3ya.test', from: 'info@xn--mnchen-3ya.test', spf: 'fail', dmarc: 'none', returnPath: 'info@xn--mnchen-3ya.test' },
      // With SMTPUTF8 the client may write U-labels, and the trace may keep them (RFC 6532).
      { mailFrom: 'news@bücher.test', from: 'news@bücher.test', spf: 'pass', dmarc: 'pass', returnPath: 'news@bücher.test', smtpUtf8: true },
    ];
    for (const { mailFrom, from, spf, dmarc, returnPath, smtpUtf8 } of cases) {
      const session = await openSmtpSession(rig.app.smtpPort);
      try {
        await session.command('EHLO mta.remote.test');
        assert.match(await session.command(`MAIL FROM:<${mailFrom}>${smtpUtf8 ? ' SMTPUTF8' : ''}`), /^250 /);
        assert.match(await session.command('RCPT TO:<idn-sender@inbox.test>'), /^250 /);
        assert.match(await session.command('DATA'), /^354/);
        await session.write(Buffer.from(`From: ${from}\r\nSubject: from ${mailFrom}\r\n\r\nbody\r\n.\r\n`, 'utf8'));
        assert.match(await session.reply(), /^250 /);
      } finally {
        session.close();
      }
      const email = await newestReceived();
      assert.equal(email.subject, `from ${mailFrom}`);
      assert.deepEqual([email.auth.spf.result, email.auth.spf.domain, email.auth.dmarc.result], [spf, mailFrom.split('@')[1].replace('bücher', 'xn--bcher-kva'), dmarc], mailFrom);
      const raw = Buffer.from(await (await fetch(email.rawEmailUrl)).arrayBuffer()).toString('utf8');
      assert.ok(raw.startsWith(`Return-Path: <${returnPath}>\r\n`), raw);
    }
  });

  test('RCPT answers by route: accept 250, reject-temp 450, reject-perm 550, a disabled route or none 550 5.1.1; the exact route wins over the catch-all, +tags find their base', async () => {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      await session.command('MAIL FROM:<ann@remote.test>');
      assert.match(await session.command('RCPT TO:<anything@inbox.test>'), /^250 /);
      assert.match(await session.command('RCPT TO:<later@inbox.test>'), /^450 4\.2\.1 /);
      assert.match(await session.command('RCPT TO:<Later+tag@Inbox.test>'), /^450 4\.2\.1 /);
      assert.match(await session.command('RCPT TO:<never@inbox.test>'), /^550 5\.7\.1 /);
      assert.match(await session.command('RCPT TO:<off@inbox.test>'), /^250 /, 'a disabled route: the catch-all takes it');
      assert.match(await session.command('RCPT TO:<someone@unrouted.test>'), /^550 5\.1\.1 /);
    } finally {
      await session.close();
    }
  });

  test('a route set to reject between RCPT TO and the end of DATA takes no message: 451 4.3.0, and the retry hears the route\'s answer', async () => {
    // Guards the route check at end of DATA: only a vanished route was refused there, so a message accepted at
    // RCPT would still be stored (and posted to webhooks) for a route the user had just set to refuse mail.
    const route = await createRoute({ domain: 'inbox.test', localPart: 'switch' });
    const newestId = async () => (await api('GET', '/v1/inbound/emails?limit=1')).body.data[0]?.id;
    const newestBefore = await newestId();
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      assert.match(await session.command('MAIL FROM:<ann@remote.test>'), /^250 /);
      assert.match(await session.command('RCPT TO:<switch@inbox.test>'), /^250 /);
      const patched = await api('PATCH', `/v1/inbound/routes/${route.id}`, { responseMode: 'reject-perm' });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      assert.match(await session.command('DATA'), /^354 /);
      await session.write('From: ann@remote.test\r\nTo: switch@inbox.test\r\nSubject: switched\r\n\r\nbody\r\n.\r\n');
      assert.match(await session.reply(), /^451 4\.3\.0 /);
      assert.equal(await newestId(), newestBefore, 'nothing stored');
      // The sender's retry is told the route's own answer at RCPT.
      assert.match(await session.command('MAIL FROM:<ann@remote.test>'), /^250 /);
      assert.match(await session.command('RCPT TO:<switch@inbox.test>'), /^550 5\.7\.1 /);
    } finally {
      session.close();
    }
  });

  test('a quoted local part, or one with needless backslashes, is the same mailbox as the plain one: it meets that address\'s route, not the catch-all', async () => {
    const exact = await createRoute({ domain: 'inbox.test', localPart: 'quoted-team' });
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      await session.command('MAIL FROM:<ann@remote.test>');
      assert.match(await session.command('RCPT TO:<"never"@inbox.test>'), /^550 5\.7\.1 /, 'reject-perm');
      assert.match(await session.command('RCPT TO:<ne\\ver@inbox.test>'), /^550 5\.7\.1 /);
      assert.match(await session.command('RCPT TO:<n"eve"r@inbox.test>'), /^550 5\.7\.1 /, 'quoted in parts');
      assert.match(await session.command('RCPT TO:<never(x)@inbox.test>'), /^550 5\.7\.1 /, 'with a comment');
      assert.match(await session.command('RCPT TO:<"later"@inbox.test>'), /^450 4\.2\.1 /, 'reject-temp');
    } finally {
      session.close();
    }
    assert.match(await deliverRaw('"quoted-team"@inbox.test', 'From: ann@remote.test\r\nSubject: quoted\r\n\r\nbody'), /^250 /);
    const email = await newestReceived();
    assert.deepEqual([email.subject, email.destination, email.inboundRouteId], ['quoted', 'quoted-team@inbox.test', exact.id]);
  });

  test("mail for postmaster@ a sending domain is read for complaint reports and kept by the project's route too (it was acknowledged and dropped)", async () => {
    const logged = rig.app.logs.length;
    assert.match(await deliverRaw('postmaster@inbox.test', 'From: ann@remote.test\r\nSubject: hello postmaster\r\n\r\nplease confirm the feedback loop'), /^250 /);
    const email = await newestReceived();
    assert.deepEqual([email.subject, email.destination, email.inboundRouteId], ['hello postmaster', 'postmaster@inbox.test', catchAll.id]);
    assert.ok(!rig.app.logs.slice(logged).some((line) => line.includes('mail for postmaster received: logged here, not kept')), 'not said to be dropped');
  });

  test("a postmaster route of a project that does not own the sending domain keeps none of its mail (complaint reports name the owner's recipients)", async () => {
    const other = await api('POST', '/v1/project', { name: 'not the owner' });
    const { sqlite } = rig.app.appliance.context.database;
    // Written as a sandbox without the verified-domain rule would let it be made.
    sqlite.prepare(`insert into inbound_routes values ('bbbbbbbbbbbbbbbbbbbbbbb1', ?, 'inbox.test', 'postmaster', 'accept', 1, 0, 0)`).run(other.body.id);
    try {
      const before = sqlite.prepare('select count(*) from received_emails').pluck().get();
      assert.match(await deliverRaw('postmaster@inbox.test', 'From: ann@remote.test\r\nSubject: for the owner\r\n\r\nbody'), /^250 /);
      await waitUntil(() => rig.app.logs.some((line) => line.includes('mail for postmaster received: logged here, not kept') && line.includes('for the owner')), 'logged as not kept');
      assert.equal(sqlite.prepare('select count(*) from received_emails').pluck().get(), before);
    } finally {
      sqlite.prepare(`delete from inbound_routes where id = 'bbbbbbbbbbbbbbbbbbbbbbb1'`).run();
      await api('DELETE', '/v1/project', { id: other.body.id });
    }
  });

  test('of two Subject fields the record shows the first, as mail clients do and as it shows the first From', async () => {
    assert.match(await deliverRaw('subjects@inbox.test', 'From: ann@remote.test\r\nSubject: =?UTF-8?Q?first_J=C3=B6rg?=\r\nSubject: second\r\n\r\nbody'), /^250 /);
    assert.equal((await newestReceived()).subject, 'first Jörg');
  });

  test('a transaction takes 100 routed recipients (RFC 5321 §4.5.3.1.8); the 101st is told 452 4.5.3', async () => {
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      await session.command('MAIL FROM:<ann@remote.test>');
      for (let i = 0; i < 100; i++) assert.match(await session.command(`RCPT TO:<member${i}@inbox.test>`), /^250 /, `recipient ${i + 1}`);
      assert.match(await session.command('RCPT TO:<member100@inbox.test>'), /^452 4\.5\.3 /);
    } finally {
      session.close();
    }
  });

  test('a message to two routed recipients is a received email per recipient over one stored message; deleting a route leaves what it received', async () => {
    const route = await createRoute({ domain: 'inbox.test', localPart: 'team' });
    const { sqlite } = rig.app.appliance.context.database;
    const messagesBefore = sqlite.prepare('select count(*) from received_messages').pluck().get() as number;
    await deliver({ from: 'ann@remote.test', to: ['team@inbox.test', 'other@inbox.test'], subject: 'Two copies', text: 'shared body' });
    const list = (await api('GET', '/v1/inbound/emails?limit=2')).body.data;
    assert.deepEqual(list.map((e: any) => [e.destination, e.inboundRouteId]).sort(), [['other@inbox.test', catchAll.id], ['team@inbox.test', route.id]]);
    // The bytes once: one 2 MB message to 100 addresses wrote 400 MB.
    assert.equal(sqlite.prepare('select count(*) from received_messages').pluck().get(), messagesBefore + 1);
    for (const summary of list) {
      const email = (await api('GET', `/v1/inbound/emails/${summary.id}`)).body;
      assert.equal(email.text.trim(), 'shared body');
      assert.match(await (await fetch(email.rawEmailUrl)).text(), /shared body/);
    }
    assert.deepEqual((await api('DELETE', `/v1/inbound/routes/${route.id}`)).body, { deleted: true });
    const kept = list.find((e: any) => e.destination === 'team@inbox.test');
    assert.equal((await api('GET', `/v1/inbound/emails/${kept.id}`)).body.inboundRouteId, route.id);
  });

  test("a message's headers and attachment list are stored once for all its recipients, and what each recipient's record repeats is bounded: a hostile To list made a list page past the heap", async () => {
    const { sqlite } = rig.app.appliance.context.database;
    const to = Array.from({ length: 120 }, (_, i) => `"${'N'.repeat(300)}" <reader${i}@inbox.test>`).join(', ');
    const longName = `${'a'.repeat(1_000)}.pdf`;
    const message = [
      'From: ann@remote.test',
      `To: ${to}`,
      `Subject: ${'s'.repeat(20_000)}`,
      'MIME-Version: 1.0',
      'Content-Type: multipart/mixed; boundary="b"',
      '',
      '--b',
      'Content-Type: text/plain',
      '',
      'see attached',
      '--b',
      `Content-Type: application/pdf; name="${longName}"`,
      'Content-Disposition: attachment',
      'Content-Transfer-Encoding: base64',
      '',
      'JVBERi0=',
      '--b--',
      '',
    ].join('\r\n');
    const session = await openSmtpSession(rig.app.smtpPort);
    try {
      await session.command('EHLO mta.remote.test');
      await session.command('MAIL FROM:<ann@remote.test>');
      for (let i = 0; i < 3; i++) assert.match(await session.command(`RCPT TO:<bounded${i}@inbox.test>`), /^250 /);
      assert.match(await session.command('DATA'), /^354/);
      await session.write(`${message}\r\n.\r\n`);
      assert.match(await session.reply(), /^250 /);
    } finally {
      session.close();
    }
    const page = (await api('GET', '/v1/inbound/emails?limit=3')).body.data;
    assert.deepEqual(page.map((e: any) => e.destination).sort(), ['bounded0@inbox.test', 'bounded1@inbox.test', 'bounded2@inbox.test']);
    for (const summary of page) {
      assert.equal(summary.to.length, 50);
      assert.equal(summary.addressesTruncated, true);
      assert.equal(summary.to[0].name.length, 200);
      assert.equal(summary.subject.length, 10_000);
    }
    const email = (await api('GET', `/v1/inbound/emails/${page[0].id}`)).body;
    assert.deepEqual(email.attachments.map((a: any) => [a.name.length, a.contentType]), [[255, 'application/pdf']]);
    assert.equal(email.headers.to.length > 120 * 300, true, 'the headers as they arrived');
    const stored = sqlite.prepare('select e.headers as emailHeaders, e.attachments as emailAttachments, length(m.headers) as messageHeaders from received_emails e join received_messages m on m.id = e.message_id where e.id = ?').get(page[0].id) as any;
    assert.deepEqual([stored.emailHeaders, stored.emailAttachments], ['{}', '[]'], 'not copied into each recipient\'s row');
    assert.ok(stored.messageHeaders > 120 * 300);
    // A message stored before (migration 0035) has its recipients' own copies: still read.
    sqlite.prepare(`update received_emails set headers = '{"subject":"old"}', attachments = '[{"name":"old.pdf","contentType":"application/pdf","size":1}]' where id = ?`).run(page[0].id);
    sqlite.prepare('update received_messages set headers = null, attachments = null where id = (select message_id from received_emails where id = ?)').run(page[0].id);
    const old = (await api('GET', `/v1/inbound/emails/${page[0].id}`)).body;
    assert.deepEqual([old.headers, old.attachments.map((a: any) => a.name)], [{ subject: 'old' }, ['old.pdf']]);
    // Such a row with a hostile list stored whole is bounded when it is shown.
    const whole = { from: { email: 'ann@remote.test', name: null }, to: Array.from({ length: 120 }, (_, i) => ({ email: `r${i}@inbox.test`, name: null })), cc: [], replyTo: [] };
    sqlite.prepare('update received_emails set addresses = ?, subject = ? where id = ?').run(JSON.stringify(whole), 'x'.repeat(30_000), page[0].id);
    const shown = (await api('GET', '/v1/inbound/emails?limit=3')).body.data.find((e: any) => e.id === page[0].id);
    assert.deepEqual([shown.to.length, shown.addressesTruncated, shown.subject.length], [50, true, 10_000]);
    const record = (await api('GET', `/v1/inbound/emails/${page[0].id}`)).body;
    assert.deepEqual([record.to.length, record.addressesTruncated, record.subject.length], [50, true, 10_000]);
  });

  test('the list: summaries only, newest first, limit 1–100, cursors both ways; another project sees none of it', async () => {
    for (let i = 0; i < 5; i++) await deliver({ from: 'ann@remote.test', to: 'pages@inbox.test', subject: `page ${i}`, text: 'x' });
    const first = (await api('GET', '/v1/inbound/emails?limit=2')).body;
    assert.deepEqual(first.data.map((e: any) => e.subject), ['page 4', 'page 3']);
    assert.deepEqual(Object.keys(first.data[0]).sort(), ['cc', 'destination', 'from', 'id', 'inboundRouteId', 'receivedAt', 'replyTo', 'spam', 'subject', 'to']);
    assert.deepEqual(Object.keys(first.data[0].spam), ['score']);
    assert.deepEqual([first.hasMore, first.paginationCursorPrev, first.limit], [true, null, 2]);
    const second = (await api('GET', `/v1/inbound/emails?limit=2&paginationCursorNext=${first.paginationCursorNext}`)).body;
    assert.deepEqual(second.data.map((e: any) => e.subject), ['page 2', 'page 1']);
    const back = (await api('GET', `/v1/inbound/emails?limit=2&paginationCursorPrev=${second.paginationCursorPrev}`)).body;
    assert.deepEqual(back.data.map((e: any) => e.subject), ['page 4', 'page 3']);
    assert.equal(back.paginationCursorPrev, null, 'nothing newer');
    // Walked until `data` is empty, as the spec ends a listing: the last page's cursor leads to an empty one.
    let page = second;
    while (page.hasMore) page = (await api('GET', `/v1/inbound/emails?limit=100&paginationCursorNext=${page.paginationCursorNext}`)).body;
    assert.equal(page.paginationCursorNext, page.data.at(-1).id);
    const past = (await api('GET', `/v1/inbound/emails?paginationCursorNext=${page.paginationCursorNext}`)).body;
    assert.deepEqual([past.data, past.hasMore, past.paginationCursorNext], [[], false, null]);
    assert.equal((await api('GET', '/v1/inbound/emails?limit=101')).status, 400);
    assert.equal((await api('GET', '/v1/inbound/emails?paginationCursorNext=nope')).status, 400);

    const other = await api('POST', '/v1/project', { name: 'elsewhere' });
    const theirs = await rig.app.api('GET', '/v1/inbound/emails', undefined, { key: other.body.apiKey });
    assert.deepEqual(theirs.body.data, []);
    const stranger = await rig.app.api('GET', `/v1/inbound/emails/${first.data[0].id}`, undefined, { key: other.body.apiKey });
    assert.equal(stranger.status, 404);
  });
});

test('deleting a project deletes its routes and received emails; its addresses are refused again', async () => {
  const linked = await api('POST', '/v1/project', { name: 'leaving' });
  const call = (method: string, path: string, body?: unknown) => rig.app.api(method, path, body, { key: linked.body.apiKey });
  const domain = await call('POST', '/v1/domains', { domain: 'leaving.test' });
  const { sqlite } = rig.app.appliance.context.database;
  sqlite.prepare(`update domains set status = 'success' where id = ?`).run(domain.body.id);
  assert.equal((await call('POST', '/v1/inbound/routes', { domain: 'leaving.test' })).status, 200);
  await deliver({ from: 'ann@remote.test', to: 'x@leaving.test', subject: 'before', text: 'x' });
  const count = (table: string) => sqlite.prepare(`select count(*) from ${table} where project_id = ?`).pluck().get(linked.body.id);
  assert.deepEqual([count('inbound_routes'), count('received_emails')], [1, 1]);
  const messages = () => sqlite.prepare('select count(*) from received_messages').pluck().get() as number;
  const messagesBefore = messages();
  assert.deepEqual((await call('DELETE', '/v1/project')).body, { deleted: true });
  assert.deepEqual([count('inbound_routes'), count('received_emails')], [0, 0]);
  assert.equal(messages(), messagesBefore - 1, 'its message went with it');
  await assert.rejects(deliver({ from: 'ann@remote.test', to: 'x@leaving.test', subject: 'after', text: 'x' }), /550 5\.1\.1/);
});

test('smtp.received_retention: the hourly prune deletes received emails older than it, raw message and all; 0s keeps them', async () => {
  const { writes, log } = rig.app.appliance.context;
  const { sqlite } = rig.app.appliance.context.database;
  await deliver({ from: 'ann@remote.test', to: 'kept@inbox.test', subject: 'kept', text: 'x' });
  const total = () => sqlite.prepare('select count(*) from received_emails').pluck().get() as number;
  const before = total();
  assert.ok(before > 0);
  assert.equal(await pruneReceivedEmails(writes, log, new Date(Date.now() + 86_400_000), 0), 0, '0s keeps them');
  assert.equal(await pruneReceivedEmails(writes, log, new Date(), 86_400_000), 0, 'none is a day old');
  assert.equal(await pruneReceivedEmails(writes, log, new Date(Date.now() + 2 * 86_400_000), 86_400_000), before);
  assert.equal(total(), 0);
  assert.equal(sqlite.prepare('select count(*) from received_messages').pluck().get(), 0, 'raw messages and bodies too');
});

test('what the checks read: DKIM signatures past the first 8, an ARC chain past 50 sets, a From of more than 20 addresses are bounded in a copy; a message within bounds is read as it is', () => {
  const body = '\r\n\r\nthe body, untouched\r\n';
  const plain = Buffer.from(`From: Ann <ann@remote.test>\r\nDKIM-Signature: v=1; d=a.test;\r\n b=AAAA\r\nSubject: hi${body}`);
  assert.equal(boundedForChecks(plain, 'ann@remote.test'), plain, 'the same buffer: no copy for ordinary mail');
  const signatures = Array.from({ length: 12 }, (_, i) => `DKIM-Signature: v=1; d=a.test; s=s${i};\r\n l=${i}; b=AAAA\r\nARC-Seal: i=${i}; cv=none\r\n`).join('');
  const authors = Array.from({ length: 25 }, (_, i) => `"Name ${i}" <u${i}@spoofed.test>`).join(',\r\n ');
  const bounces = Array.from({ length: 25 }, (_, i) => `<b${i}@remote.test>`).join(' ');
  const bounded = boundedForChecks(Buffer.from(`${signatures}From: ${authors}\r\nReturn-Path: ${bounces}\r\nSubject: hi${body}`), 'u0@spoofed.test').toString('latin1');
  assert.equal(bounded.match(/^DKIM-Signature:/gm)?.length, signaturesChecked);
  assert.equal(bounded.match(/^ l=/gm)?.length, signaturesChecked, 'folded lines go with their field');
  assert.equal(bounded.match(/^ARC-Seal:/gm)?.length, 12, 'an ARC chain within the RFC 8617 limit is kept whole');
  assert.match(bounded, /^From: <u0@spoofed\.test>\r\nSubject: hi\r\n\r\nthe body, untouched\r\n$/m, 'the From the record shows; the Return-Path left out');
  const tokens = boundedForChecks(Buffer.from(`From: ${'a,'.repeat(5_000)}ann@remote.test\r\nSubject: hi${body}`), 'ann@remote.test').toString('latin1');
  assert.match(tokens, /^From: <ann@remote\.test>\r\nSubject: hi\r\n/, 'a field of bare tokens, no @ among them, is bounded by its length');
  assert.ok(bounded.endsWith(body));
  const longChain = Array.from({ length: 51 }, (_, i) => `ARC-Seal: i=${i}; cv=pass\r\nARC-Message-Signature: i=${i}; l=${i}; bh=A; b=A\r\n`).join('');
  const unchained = boundedForChecks(Buffer.from(`${longChain}From: ann@remote.test\r\nSubject: hi${body}`), 'ann@remote.test').toString('latin1');
  assert.doesNotMatch(unchained, /^ARC-/m, 'past 50 sets the chain is not read at all (arc=none), rather than cut into a forged-looking one');
});
