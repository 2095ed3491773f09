import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { simpleParser } from 'mailparser';
import { emails } from '../../src/db/schema/emails.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { addSendingDomain, routeToSink, startRig, verifyDkim, waitForFinal } from '../delivery/harness.js';

// What a submitted message holds must reach the recipient as its sender meant it: the real appliance,
// a real SMTP client sending the message's bytes as they are, the stored email read through the API and
// the delivered message read from capture mode.

let t: TestAppliance;

before(async () => {
  t = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture' } });
});
after(() => t.stop());

/** Sends `raw` byte for byte (nodemailer's SMTP client adds only the dot-stuffing), STARTTLS + AUTH with the API key. */
async function submitRaw(to: string, raw: Buffer, app = t): Promise<string> {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port: app.appliance.submissionPort,
    secure: false,
    requireTLS: true,
    tls: { rejectUnauthorized: false },
    auth: { user: 'legacy-app', pass: t.apiKey },
  } as any);
  const info = await transport.sendMail({ envelope: { from: 'erp@sender.test', to: [to] }, raw });
  return info.response;
}

function storedRow(toAddress: string) {
  const [row] = t.appliance.context.database.db.select().from(emails).where(eq(emails.toAddress, toAddress)).all();
  assert.ok(row, `an email to ${toAddress} is stored`);
  return row;
}

/** The delivered message as bytes (capture mode), once the worker has written it. */
async function capturedBytes(emailId: string): Promise<Buffer> {
  for (let i = 0; i < 100; i++) {
    const response = await fetch(`${t.baseUrl}/v1/captured/${emailId}`, { headers: { authorization: `Bearer ${t.apiKey}` } });
    if (response.status === 200) return Buffer.from(await response.arrayBuffer());
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`no captured message for ${emailId}`);
}

const latin1 = (text: string) => Buffer.from(text, 'latin1');
const replacement = Buffer.from('\uFFFD'); // EF BF BD

// ---------------------------------------------------------------------------------------------------
// 8-bit text without a charset (PHP mail(), printers, legacy ERPs), or with a declared 8-bit charset
// ---------------------------------------------------------------------------------------------------

interface CharsetCase {
  name: string;
  to: string;
  raw: Buffer;
  subject?: string;
  text?: string;
  html?: string;
  /** The attachments' names, stored and delivered. */
  attachments?: string[];
}

// 0xE9 é, 0xE8 è, 0xFB û, 0x80 € and 0x93/0x94 “ ” (the last three are windows-1252's, not Latin-1's).
const charsetCases: CharsetCase[] = [
  {
    name: 'text/plain, 8-bit Latin-1, no charset parameter',
    to: 'cs-none@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-none@rcpt.test\r\nSubject: Invoice\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: 8bit\r\n\r\nCaf\xe9 cr\xe8me br\xfbl\xe9e: 5 \x80, \x93merci\x94\r\n'),
    text: 'Café crème brûlée: 5 €, “merci”',
  },
  {
    name: "PHP mail(): no MIME header at all, the Subject and the sender's name in raw Latin-1 too",
    to: 'cs-php@rcpt.test',
    raw: latin1('From: Ren\xe9 M\xfcller <erp@sender.test>\r\nTo: cs-php@rcpt.test\r\nSubject: R\xe9sum\xe9 \x80\r\n\r\nGr\xfc\xdfe aus K\xf6ln\r\n'),
    subject: 'Résumé €',
    text: 'Grüße aus Köln',
  },
  {
    name: 'charset=us-ascii (the RFC 2045 default written out) over 8-bit bytes',
    to: 'cs-ascii@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-ascii@rcpt.test\r\nSubject: s\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\nna\xefve fa\xe7ade\r\n'),
    text: 'naïve façade',
  },
  {
    name: "charset=unknown-8bit (RFC 1428, Sendmail's label for bytes of no known charset)",
    to: 'cs-unknown@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-unknown@rcpt.test\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=unknown-8bit\r\nContent-Transfer-Encoding: 8bit\r\n\r\n\xc0 bient\xf4t\r\n'),
    text: 'À bientôt',
  },
  {
    name: 'quoted-printable 8-bit bytes (=E9) with no charset',
    to: 'cs-qp@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-qp@rcpt.test\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nd=E9j=E0 vu =80\r\n'),
    text: 'déjà vu €',
  },
  {
    name: 'charset=iso-8859-1 html (read as windows-1252, as mail clients do: 0x80 is €)',
    to: 'cs-latin1@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-latin1@rcpt.test\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=iso-8859-1\r\nContent-Transfer-Encoding: 8bit\r\n\r\n<p>Caf\xe9 \x80 5</p>\r\n'),
    html: '<p>Café € 5</p>',
  },
  {
    name: 'charset=windows-1252 text',
    to: 'cs-1252@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-1252@rcpt.test\r\nSubject: s\r\nContent-Type: text/plain; charset=windows-1252\r\n\r\n\x93Caf\xe9\x94 \x96 5 \x80\r\n'),
    text: '“Café” – 5 €',
  },
  {
    name: 'valid UTF-8 with no charset stays UTF-8 (not read as windows-1252: no "CafÃ©")',
    to: 'cs-utf8@rcpt.test',
    raw: Buffer.from('From: erp@sender.test\r\nTo: cs-utf8@rcpt.test\r\nSubject: Café €\r\nContent-Type: text/plain\r\n\r\nCafé € 5 “merci” 😀\r\n'),
    subject: 'Café €',
    text: 'Café € 5 “merci” 😀',
  },
  {
    name: 'multipart/alternative: undeclared Latin-1 text next to a declared UTF-8 html, each read by its own bytes',
    to: 'cs-mixed@rcpt.test',
    raw: Buffer.concat([
      latin1('From: erp@sender.test\r\nTo: cs-mixed@rcpt.test\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="alt"\r\n\r\n'),
      latin1('--alt\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: 8bit\r\n\r\nCaf\xe9 \x80\r\n'),
      Buffer.from('--alt\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n<p>Café €</p>\r\n--alt--\r\n'),
    ]),
    text: 'Café €',
    html: '<p>Café €</p>',
  },
  {
    name: "an attachment's raw Latin-1 file name (no RFC 2231/2047 encoding) in a nested part's headers, next to one in UTF-8: each read by its own bytes",
    to: 'cs-filename@rcpt.test',
    raw: Buffer.concat([
      latin1('From: erp@sender.test\r\nTo: cs-filename@rcpt.test\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="mix"\r\n\r\n'),
      latin1('--mix\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nSee attached.\r\n'),
      latin1('--mix\r\nContent-Type: application/pdf; name="R\xe9sum\xe9 \x80.pdf"\r\nContent-Disposition: attachment;\r\n filename="R\xe9sum\xe9 \x80.pdf"\r\nContent-Transfer-Encoding: base64\r\n\r\n'),
      Buffer.from(`${Buffer.from('%PDF-1.4 one').toString('base64')}\r\n`),
      Buffer.from('--mix\r\nContent-Type: application/pdf; name="Café.pdf"\r\nContent-Disposition: attachment; filename="Café.pdf"\r\nContent-Transfer-Encoding: base64\r\n\r\n'),
      Buffer.from(`${Buffer.from('%PDF-1.4 two').toString('base64')}\r\n--mix--\r\n`),
    ]),
    text: 'See attached.',
    attachments: ['Résumé €.pdf', 'Café.pdf'],
  },
  {
    name: 'html with no charset parameter but <meta charset="iso-8859-2">: decoded in that charset, not as windows-1252',
    to: 'cs-meta@rcpt.test',
    // "Zażółć gęślą jaźń" in ISO-8859-2 (0xB3 is ł there, ³ in windows-1252).
    raw: latin1('From: erp@sender.test\r\nTo: cs-meta@rcpt.test\r\nSubject: s\r\nX-Postino-Open-Tracking: false\r\nMIME-Version: 1.0\r\nContent-Type: text/html\r\nContent-Transfer-Encoding: 8bit\r\n\r\n<html><head><meta charset="iso-8859-2"></head><body><p>Za\xbf\xf3\xb3\xe6 g\xea\xb6l\xb1 ja\xbc\xf1</p></body></html>\r\n'),
    html: '<html><head><meta charset="iso-8859-2"></head><body><p>Zażółć gęślą jaźń</p></body></html>',
  },
  {
    name: 'html with charset=us-ascii over 8-bit bytes and <meta http-equiv="Content-Type" content="text/html; charset=windows-1251">, after a <style> block',
    to: 'cs-meta-equiv@rcpt.test',
    // "Привет" in windows-1251, quoted-printable.
    raw: latin1(
      'From: erp@sender.test\r\nTo: cs-meta-equiv@rcpt.test\r\nSubject: s\r\nX-Postino-Open-Tracking: false\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=us-ascii\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n' +
        `<html><head><style>${'p { margin: 0 }\r\n'.repeat(100)}</style>\r\n<META HTTP-EQUIV=3D"Content-Type" CONTENT=3D"text/html; charset=3DWindows-1251"></head><body><p>=CF=F0=E8=E2=E5=F2</p></body></html>\r\n`,
    ),
    html: `<html><head><style>${'p { margin: 0 }\n'.repeat(100)}</style>\n<META HTTP-EQUIV="Content-Type" CONTENT="text/html; charset=Windows-1251"></head><body><p>Привет</p></body></html>`,
  },
  {
    name: 'html whose <meta charset="utf-8"> its bytes are not: read as windows-1252, as undeclared bytes are',
    to: 'cs-meta-wrong@rcpt.test',
    raw: latin1('From: erp@sender.test\r\nTo: cs-meta-wrong@rcpt.test\r\nSubject: s\r\nContent-Type: text/html\r\n\r\n<meta charset="utf-8"><p>Caf\xe9 \x80</p>\r\n'),
    html: '<meta charset="utf-8"><p>Café €</p>',
  },
];

test('8-bit text reaches the recipient as its sender meant it: declared charsets decoded, undeclared bytes that are not UTF-8 read as windows-1252, UTF-8 kept, no U+FFFD', async (ctx) => {
  for (const c of charsetCases) {
    await ctx.test(c.name, async () => {
      assert.match(await submitRaw(c.to, c.raw), /^250 /);
      const row = storedRow(c.to);

      // Stored: the record (its text), and the html as the API serves it (htmlReferenceUrl).
      if (c.subject !== undefined) assert.equal(row.subject, c.subject, 'stored subject');
      if (c.text !== undefined) assert.equal(row.text?.trimEnd(), c.text, 'stored text');
      const { email } = (await t.api('GET', `/v1/email/${row.id}`)).body;
      if (c.html !== undefined) {
        const served = await (await fetch(email.htmlReferenceUrl)).text();
        assert.equal(served.trimEnd(), c.html, 'html served by the API');
      }
      assert.ok(!JSON.stringify(email).includes('\uFFFD'), 'no U+FFFD in the API record');
      if (c.attachments !== undefined) assert.deepEqual(email.attachments.map((a: { name: string }) => a.name), c.attachments, 'stored attachment names');

      // Delivered: the composed message, read back by a mail parser.
      const delivered = await capturedBytes(row.id);
      assert.equal(delivered.indexOf(replacement), -1, 'no U+FFFD in the delivered message');
      const parsed = await simpleParser(delivered);
      if (c.subject !== undefined) assert.equal(parsed.subject, c.subject, 'delivered subject');
      if (c.text !== undefined) assert.equal(parsed.text?.trimEnd(), c.text, 'delivered text');
      if (c.html !== undefined) assert.ok(typeof parsed.html === 'string' && parsed.html.startsWith(c.html), `delivered html ${JSON.stringify(parsed.html)}`);
      if (c.attachments !== undefined) assert.deepEqual(parsed.attachments.map((a) => a.filename), c.attachments, 'delivered attachment names');
    });
  }
  assert.equal(storedRow('cs-php@rcpt.test').fromName, 'René Müller', "the sender's raw Latin-1 display name");
});

// ---------------------------------------------------------------------------------------------------
// A forwarded email: a message/rfc822 part
// ---------------------------------------------------------------------------------------------------

/** The forwarded email: its own headers, an undeclared Latin-1 body and an attachment of its own, CRLF lines. */
const forwarded = Buffer.concat([
  Buffer.from(
    [
      'Return-Path: <bob@customer.test>',
      'From: Bob Customer <bob@customer.test>',
      'To: support@sender.test',
      'Subject: Broken invoice',
      'Date: Mon, 1 Jan 2024 10:00:00 +0000',
      'Message-ID: <original-42@customer.test>',
      'MIME-Version: 1.0',
      'Content-Type: multipart/mixed; boundary="inner"',
      '',
      '--inner',
      'Content-Type: text/plain',
      'Content-Transfer-Encoding: 8bit',
      '',
      '',
    ].join('\r\n'),
  ),
  latin1('The invoice total is wrong: 12,50 \x80 instead of 10 \x80. Merci, Ren\xe9\r\n'),
  Buffer.from(
    [
      '--inner',
      'Content-Type: application/pdf; name="invoice.pdf"',
      'Content-Disposition: attachment; filename="invoice.pdf"',
      'Content-Transfer-Encoding: base64',
      '',
      Buffer.from('%PDF-1.4 the invoice').toString('base64'),
      '--inner--',
      '',
    ].join('\r\n'),
  ),
]);

/**
 * A message that forwards `forwarded` in a part with the given headers. `encode`: that part's body in
 * base64, as some clients write it; `undeclaredComment`: the message's own text in windows-1252 with no
 * charset (0x92 is ’), so the charset pass runs over the message too.
 */
function forwarding(to: string, partHeaders: string[], { encode = false, undeclaredComment = false } = {}): Buffer {
  const head = Buffer.concat([
    Buffer.from(
      [
        'From: helpdesk@sender.test',
        `To: ${to}`,
        'Subject: Fwd: Broken invoice',
        'MIME-Version: 1.0',
        'Content-Type: multipart/mixed; boundary="outer"',
        '',
        '--outer',
        undeclaredComment ? 'Content-Type: text/plain' : 'Content-Type: text/plain; charset=utf-8',
        '',
        '',
      ].join('\r\n'),
    ),
    undeclaredComment ? latin1('Ticket 42: the customer\x92s email is attached.') : Buffer.from('Ticket 42: the customer’s email is attached.'),
    Buffer.from(['', '--outer', ...partHeaders, '', ''].join('\r\n')),
  ]);
  const body = encode ? Buffer.from(`${forwarded.toString('base64').replace(/.{76}/g, '$&\r\n')}\r\n`) : forwarded;
  // The CRLF before a boundary belongs to the boundary (RFC 2046 §5.1.1): the part's content is `forwarded` exactly.
  return Buffer.concat([head, body, Buffer.from('\r\n--outer--\r\n')]);
}

const forwardCases = [
  {
    name: 'forwarded as an attachment, named (Thunderbird, Apple Mail)',
    to: 'fwd-named@rcpt.test',
    partHeaders: ['Content-Type: message/rfc822; name="Broken invoice.eml"', 'Content-Disposition: attachment; filename="Broken invoice.eml"'],
    filename: 'Broken invoice.eml',
  },
  { name: 'a message/rfc822 part with no name and no disposition (an app)', to: 'fwd-bare@rcpt.test', partHeaders: ['Content-Type: message/rfc822'], filename: 'forwarded-message.eml' },
  {
    name: 'a message/rfc822 part with Content-Disposition: inline (was flattened into the body)',
    to: 'fwd-inline@rcpt.test',
    partHeaders: ['Content-Type: message/rfc822', 'Content-Disposition: inline'],
    filename: 'forwarded-message.eml',
  },
  {
    name: 'named after a long subject: the name is cut to the limit before its .eml',
    to: 'fwd-long@rcpt.test',
    partHeaders: ['Content-Type: message/rfc822', `Content-Disposition: attachment; filename="Re: ${'x'.repeat(120)}.eml"`],
    filename: `Re: ${'x'.repeat(91)}.eml`,
  },
  {
    name: 'a message/rfc822 part in base64 (RFC 2046 §5.2.1 forbids it; some clients write it)',
    to: 'fwd-base64@rcpt.test',
    partHeaders: ['Content-Type: message/rfc822; name="original.eml"', 'Content-Transfer-Encoding: base64', 'Content-Disposition: attachment; filename="original.eml"'],
    encode: true,
    filename: 'original.eml',
  },
  {
    name: "next to the message's own undeclared Latin-1 text: the text is read as windows-1252, the forwarded email left as it is",
    to: 'fwd-latin1@rcpt.test',
    partHeaders: ['Content-Type: message/rfc822; name="Broken invoice.eml"', 'Content-Disposition: attachment; filename="Broken invoice.eml"'],
    undeclaredComment: true,
    filename: 'Broken invoice.eml',
  },
];

test('a forwarded email (message/rfc822 part) is kept as an attached message, byte for byte, and reaches the recipient as one', async (ctx) => {
  for (const c of forwardCases) {
    await ctx.test(c.name, async () => {
      assert.match(await submitRaw(c.to, forwarding(c.to, c.partHeaders, c)), /^250 /);
      const row = storedRow(c.to);

      // Stored: the forwarding message's own text; the forwarded one as an attachment, its bytes as sent.
      assert.equal(row.text?.trimEnd(), 'Ticket 42: the customer’s email is attached.', 'the forwarded email is not flattened into the body');
      const { email } = (await t.api('GET', `/v1/email/${row.id}`)).body;
      assert.deepEqual(
        email.attachments.map((a: { name: string; contentType: string; size: number }) => [a.name, a.contentType, a.size]),
        [[c.filename, 'message/rfc822', forwarded.length]],
      );
      const file = Buffer.from(await (await fetch(email.attachments[0].fileUrl)).arrayBuffer());
      assert.ok(file.equals(forwarded), 'the stored attachment is the forwarded email byte for byte');

      // Delivered: an attached message (not inline), the forwarded email's bytes verbatim in it.
      const delivered = await capturedBytes(row.id);
      assert.ok(delivered.includes(forwarded), 'the delivered message holds the forwarded email byte for byte');
      const head = delivered.subarray(0, delivered.indexOf(forwarded)).toString('latin1').replace(/\r\n[ \t]+/g, ' ');
      const partHead = head.slice(head.lastIndexOf('\r\n--') + 2);
      assert.match(partHead, /^Content-Type: message\/rfc822[;\r]/m);
      assert.match(partHead, /^Content-Disposition: attachment;/m);
      assert.match(partHead, /^Content-Transfer-Encoding: 8bit\r$/m, 'RFC 2046 §5.2.1: 7bit, 8bit or binary only');
      const parsed = await simpleParser(delivered);
      assert.equal(parsed.text?.trimEnd(), 'Ticket 42: the customer’s email is attached.');
      assert.deepEqual(
        parsed.attachments.map((a) => [a.contentType, a.contentDisposition, a.filename]),
        [['message/rfc822', 'attachment', c.filename]],
      );
      assert.ok(parsed.attachments[0].content.equals(forwarded), "a mail client opens the forwarded email as it was sent, its Message-ID, its own attachment and its Latin-1 bytes");
    });
  }
});

test('a text file Apple Mail attaches inline (filename, disposition inline) is sent as the file it is, not appended to the text; one the send API has no extension for stays text', async () => {
  const to = 'notes-file@rcpt.test';
  const raw = [
    'From: App <erp@sender.test>',
    `To: ${to}`,
    'Subject: notes',
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="mix"',
    '',
    '--mix',
    'Content-Type: text/plain; charset=us-ascii',
    '',
    'See the notes file.',
    '--mix',
    'Content-Disposition: inline; filename=notes.txt',
    'Content-Type: text/plain; x-unix-mode=0644; name="notes.txt"',
    '',
    'These are the file contents.',
    '--mix',
    'Content-Type: text/plain; name="run.log"',
    '',
    'A log the send API has no extension for: text, as it always was.',
    '--mix--',
    '',
  ].join('\r\n');
  assert.match(await submitRaw(to, Buffer.from(raw)), /^250 /);
  const row = storedRow(to);
  const text = 'See the notes file.\nA log the send API has no extension for: text, as it always was.';
  assert.equal(row.text?.trimEnd(), text);
  const parsed = await simpleParser(await capturedBytes(row.id));
  assert.equal(parsed.text?.trimEnd(), text);
  assert.deepEqual(
    parsed.attachments.map((a) => [a.filename, a.contentType, a.content.toString()]),
    [['notes.txt', 'text/plain', 'These are the file contents.']],
  );
});

test("the send API's attachment extensions stay the spec's (.eml is refused there): only SMTP submission carries a forwarded email", async () => {
  const refused = await t.api('POST', '/v1/email/send', {
    fromAddress: 'app@sender.test',
    toAddress: 'api-eml@rcpt.test',
    subject: 's',
    text: 'x',
    attachments: [{ name: 'original.eml', content: forwarded.toString('base64') }],
  });
  assert.equal(refused.status, 400);
  assert.match(JSON.stringify(refused.body), /attachments\[0\]\.name/);
});

test('to a real MX: the forwarded email arrives byte for byte, declared as 8-bit (BODY=8BITMIME, RFC 6152), under a DKIM signature that verifies', async () => {
  const rig = await startRig();
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'mx-rcpt.test');
    const to = 'fwd@mx-rcpt.test';
    assert.match(await submitRaw(to, forwarding(to, forwardCases[0].partHeaders), rig.app), /^250 2\.0\.0 Accepted [0-9a-f]{24}/);
    const [row] = rig.app.appliance.context.database.db.select().from(emails).where(eq(emails.toAddress, to)).all();
    assert.equal(await waitForFinal(rig, row.id), 'delivered');
    const [received] = rig.sink.messages;
    assert.ok(received.raw.includes(forwarded), 'the MX got the forwarded email byte for byte');
    assert.equal(received.mailFromParams.BODY, '8BITMIME', 'an 8-bit message is announced as one');
    assert.equal((await verifyDkim(received.raw, rig.dns.address))[0].status.result, 'pass');
  } finally {
    await rig.stop();
  }
});
