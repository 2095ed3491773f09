import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import MailComposer from 'nodemailer/lib/mail-composer';
import { foldLines } from 'nodemailer/lib/mime-funcs';
import { simpleParser } from 'mailparser';
import { composeMessage, mailOptions, subjectOf, type ComposeInput } from '../../src/delivery/compose.js';
import { exactQuotedPrintable, textAttachmentPart } from '../../src/delivery/transfer-encoding.js';
import { sampleComposeInput } from './compose-input.js';
import { headerProblem } from '../../src/emails/headers.js';

/**
 * composeMessage serialises MailComposer's tree without streams. Its output must be the bytes
 * MailComposer's own build() produces for the same tree (same boundary, same date), for every shape
 * a stored email can take.
 */
const base: ComposeInput = sampleComposeInput;

const longWord = 'x'.repeat(300);
const cases: [string, Partial<ComposeInput>][] = [
  ['text only', { text: 'Hi Alice' }],
  ['html only', { html: '<p>Hi <b>Alice</b></p>' }],
  ['html + text', { html: '<p>Hi</p>', text: 'Hi' }],
  ['non-ASCII subject and names', { subject: 'Grüße aus Köln — ✓ 🎉', fromName: 'Sénder, Ltd', replyToAddress: 'reply@sender.test', replyToName: 'Équipe "Support"', text: 'Grüße', html: '<p>Grüße</p>' }],
  ['long lines and trailing whitespace', { text: `line one   \nline two\t\n${longWord}\n`, html: `<p>${'word '.repeat(200)}</p>\r\n<p>${longWord}</p>` }],
  ['content ending in CR', { text: 'ends with a carriage return\r' }],
  ['bare LF and bare CR line breaks', { text: 'line1\nline2\rline3\r\n\nlast', html: '<p>one</p>\n<p>two</p>\n' }],
  ['mostly non-Latin text (base64)', { subject: '日本語の件名', text: 'こんにちは世界、これはテストです。'.repeat(20), html: '<p>こんにちは</p>' }],
  ['custom headers', { text: 'x', headers: { 'List-Unsubscribe': '<https://example.com/u/1>', 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click', 'X-Campaign': 'Über 9000' } }],
  ['attachments and an inline image', {
    html: '<p>Chart:</p><img src="cid:chart-1@postino">',
    text: 'Chart attached',
    attachments: [
      { name: 'report.pdf', contentType: 'application/pdf', content: randomBytes(100_000) },
      { name: 'Übersicht März.csv', contentType: 'text/csv', content: Buffer.from('a,b\r\n1,2\r\n') },
      { name: 'chart.png', contentType: 'image/png', content: randomBytes(3_000), contentId: 'chart-1@postino' },
    ],
  }],
  // Text attachments that go as 7bit or base64 (transfer-encoding.ts textAttachmentPart); quoted-printable
  // ones are the deliberate difference, tested below.
  ['text attachments as 7bit and base64', {
    text: 'x',
    attachments: [
      { name: 'notes.txt', contentType: 'text/plain', content: Buffer.from('Notes\r\n- one\r\n- two') },
      // 8-bit, not UTF-8 and without a charset: unlabelled, base64. (As UTF-8 it would be labelled and go as
      // quoted-printable, whose exact encoding differs from MailComposer's on purpose: text-attachments.test.ts.)
      { name: 'page.html', contentType: 'text/html', content: Buffer.from(`<p>${'Grüße, '.repeat(30)}</p>\r\n`, 'latin1') },
      { name: 'japanese.txt', contentType: 'text/plain; charset=utf-8', content: Buffer.from('こんにちは世界\r\n'.repeat(10)) },
      { name: 'nul.txt', contentType: 'text/plain', content: Buffer.from('a\0b') },
    ],
  }],
  ['explicit Message-ID', { text: 'x', messageId: '<custom-id@sender.test>' }],
  ['an empty attachment', { text: 'x', attachments: [{ name: 'export.csv', contentType: 'text/csv', content: Buffer.alloc(0) }] }],
];

for (const [name, overrides] of cases) {
  test(`compose: ${name} — same bytes as MailComposer.build()`, async () => {
    const input = { ...base, ...overrides };
    const reference = crlfOnly(await new MailComposer(mailOptions(input, 'a1b2c3d4e5f60718')).compile().build());
    const ours = composeMessage(input, 'a1b2c3d4e5f60718');
    assertSameBytes(ours, reference);
  });
}

/**
 * The direct route (no attachments, no custom headers) against MailComposer over a generated corpus: the
 * header and body values that change how a field is encoded or folded, or how a part is encoded, in
 * every combination the seed gives. Deterministic: the same seed, the same 400 inputs.
 */
test('compose: 400 generated emails — same bytes as MailComposer.build()', async () => {
  const random = seededRandom(20261124);
  const pick = <T>(values: readonly T[]): T => values[Math.floor(random() * values.length)];
  const subjects = ['', ' ', 'Hi', 'Order #1234 shipped', 'Grüße aus Köln', '日本語の件名です', 'Emoji 🎉 party', 'x'.repeat(120), `${'word '.repeat(40)}end`, 'Tab\there', 'Quote "this", please', `Your order "${'Blue Shirt '.repeat(10)}" has\tshipped`, 'Ünïcödé '.repeat(12), '=?UTF-8?Q?looks_encoded?=', 'a\u0007bell'];
  const names = [null, '', 'Shop', 'Sénder, Ltd', 'Équipe "Support"', 'O\'Brien & Sons', 'Dr. Who (Time Lord)', '山田太郎', 'A'.repeat(90), 'semi;colon'];
  const addresses = ['alice@inbox.test', 'bob.smith+tag@example.com', 'info@bücher.example', 'x@sub.domain.example.org', 'Mixed.Case@Example.COM', "o'hara&co=1@x-y.example", 'a..b@example.com', '"quoted local"@example.com', 'user@[192.0.2.1]'];
  const texts = [null, '', 'Hi', 'line1\nline2\r\nline3', `${'long '.repeat(30)}line`, 'Grüße, Jürgen', 'こんにちは世界'.repeat(10), 'ends with CR\r', '.dot at start\n.second', 'trailing spaces   \n\tand tab', 'x'.repeat(1000)];
  const htmls = [null, '', '<p>Hi</p>', `<p>${'Thanks for your order. '.repeat(20)}</p>`, '<p>Grüße</p>\n<p>Ünïcödé</p>', '<p>日本語のメールです。</p>'.repeat(5), '<div style="color: red">=3D equals</div>'];
  for (let i = 0; i < 400; i++) {
    const text = pick(texts);
    let html = pick(htmls);
    if (!text && !html) html = '<p>fallback</p>';
    const replyToAddress = random() < 0.4 ? pick(addresses) : null;
    const input: ComposeInput = {
      ...base,
      emailId: `0123456789abcdef${String(i).padStart(8, '0')}`,
      toAddress: pick(addresses),
      fromAddress: pick(addresses),
      fromName: pick(names),
      replyToAddress,
      replyToName: replyToAddress ? pick(names) : null,
      subject: pick(subjects),
      text,
      html,
      messageId: random() < 0.2 ? `<given-${i}@sender.test>` : null,
      date: new Date(Date.UTC(2026, 10, 22, 10, 0, i)),
    };
    const boundary = randomBytes(8).toString('hex');
    const reference = withEmptySubject(crlfOnly(await new MailComposer(mailOptions(input, boundary)).compile().build()), input);
    assertSameBytes(composeMessage(input, boundary), reference, JSON.stringify(input));
  }
});

/** mulberry32: a small seeded generator, so a failing case can be found again. */
function seededRandom(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test('compose: a large quoted-printable text decodes to the same text, lines within 76 characters', async () => {
  // MailComposer's stream encoder places soft line breaks relative to its input chunks (64 kB), so past
  // the first chunk the bytes differ from a one-pass encoding while both stay valid quoted-printable.
  const input = { ...base, text: 'Grüße und viele Wörter. '.repeat(3000) };
  const ours = composeMessage(input, 'a1b2c3d4e5f60718');
  const reference = await new MailComposer(mailOptions(input, 'a1b2c3d4e5f60718')).compile().build();
  assert.equal((await simpleParser(ours)).text, (await simpleParser(reference)).text);
  assert.equal((await simpleParser(ours)).text?.trim(), input.text.trim());
  for (const line of ours.toString('latin1').split('\r\n')) assert.ok(line.length <= 76, `line of ${line.length} characters`);
});

/**
 * build() keeps the content's line breaks; on the wire (and so for DKIM) every one is CRLF. The reference
 * gets them here, by another route than compose.ts takes.
 */
function crlfOnly(message: Buffer): Buffer {
  return Buffer.from(message.toString('latin1').split(/\r\n|\r|\n/).join('\r\n'), 'latin1');
}

test('compose: every line break of the message is CRLF, whatever the stored content used', () => {
  const message = composeMessage({ ...base, text: 'a\nb\rc\r\nd', html: '<p>a</p>\n<p>b</p>' }, 'a1b2c3d4e5f60718').toString('latin1');
  assert.doesNotMatch(message, /\r(?!\n)|(?<!\r)\n/);
  assert.match(message, /a\r\nb\r\nc\r\nd/);
});

/**
 * The deliberate differences in the Subject: MailComposer leaves a blank one out, compose.ts writes it as an
 * empty field; MailComposer encodes an ASCII one that holds a quote, compose.ts writes it as it is.
 */
function withEmptySubject(reference: Buffer, input: ComposeInput): Buffer {
  // compose.ts's rule, restated: printable ASCII (and tabs) with a quote, nothing that makes subjectOf encode it.
  const asIs = /^[\x20-\x7e\t]*"[\x20-\x7e\t]*$/.test(input.subject) && subjectOf(input.subject) === input.subject;
  if (asIs) return Buffer.from(reference.toString('latin1').replace(/^Subject: .*(?:\r\n[ \t].*)*/m, () => foldLines(`Subject: ${input.subject}`, 76)), 'latin1');
  if (input.subject.trim()) return reference;
  return Buffer.from(reference.toString('latin1').replace(/^Message-ID:/m, 'Subject: \r\nMessage-ID:'), 'latin1');
}

/** On a difference, shows where (a full dump of a 100 kB message helps nobody). */
function assertSameBytes(actual: Buffer, expected: Buffer, input?: string): void {
  if (actual.equals(expected)) return;
  let i = 0;
  while (i < actual.length && i < expected.length && actual[i] === expected[i]) i++;
  const around = (b: Buffer) => JSON.stringify(b.subarray(Math.max(0, i - 60), i + 60).toString('latin1'));
  assert.fail(`differs at byte ${i} of ${actual.length} (expected ${expected.length}):\n  ours:      ${around(actual)}\n  reference: ${around(expected)}${input ? `\n  input: ${input}` : ''}`);
}

test('compose: the message parses back to what was stored', async () => {
  const withAttachments = cases.find(([name]) => name === 'attachments and an inline image')![1];
  const input: ComposeInput = { ...base, ...withAttachments, subject: 'Grüße', fromName: 'Sénder', headers: { 'X-Campaign': 'spring' } };
  const parsed = await simpleParser(composeMessage(input));
  assert.equal(parsed.subject, 'Grüße');
  assert.equal(parsed.from?.value[0].name, 'Sénder');
  assert.equal(parsed.messageId, `<${base.emailId}@sender.test>`);
  assert.equal(parsed.headers.get('x-campaign'), 'spring');
  assert.equal(parsed.text?.trim(), 'Chart attached');
  const names = parsed.attachments.map((a) => a.filename).sort();
  assert.deepEqual(names, ['chart.png', 'report.pdf', 'Übersicht März.csv']);
  const pdf = parsed.attachments.find((a) => a.filename === 'report.pdf')!;
  assert.ok(pdf.content.equals(withAttachments.attachments![0].content));
  assert.equal(parsed.attachments.find((a) => a.filename === 'chart.png')!.cid, 'chart-1@postino');
});

test('compose: boundaries differ between messages', () => {
  const boundary = (m: Buffer) => /boundary="([^"]+)"/.exec(m.toString())?.[1];
  const input = { ...base, html: '<p>x</p>', text: 'x' };
  assert.notEqual(boundary(composeMessage(input)), boundary(composeMessage(input)));
});

test('compose: custom header values the send API accepts stay within 998 characters a line', () => {
  // headerProblem's limits: 998 characters in all, and no printable-ASCII run of 998 (such a run goes on a
  // folded line of its own, after a space).
  assert.equal(headerProblem('X-Long-Header-Name', 'y'.repeat(998)) !== undefined, true);
  for (const value of ['y'.repeat(997), `ab ${'y'.repeat(995)}`, `<https://example.com/${'u'.repeat(975)}>`, 'ü'.repeat(998)]) {
    assert.equal(headerProblem('X-Long-Header-Name', value), undefined);
    const message = composeMessage({ ...base, text: 'x', headers: { 'X-Long-Header-Name': value } });
    for (const line of message.toString('latin1').split('\r\n')) assert.ok(line.length <= 998, `a line of ${line.length} characters`);
  }
});

test('compose: a custom header with an empty or blank value is left out, the others are written (docs/delivery.md)', async () => {
  const message = composeMessage({ ...base, text: 'x', headers: { 'X-Empty': '', 'X-Blank': '  ', 'X-Campaign': 'spring' } });
  const parsed = await simpleParser(message);
  assert.equal(parsed.headers.get('x-campaign'), 'spring');
  assert.equal(parsed.headers.has('x-empty'), false);
  assert.equal(parsed.headers.has('x-blank'), false);
});

test('compose: In-Reply-To and References go out as given (the record has them so), not rewritten word by word into <>', () => {
  const references = ['<a@x.test>, <b@x.test>', '<a@x.test> (comment) <b@x.test>', Array.from({ length: 60 }, (_, i) => `<m${i}.1234567890@mail.example.com>`).join(' ')];
  references.forEach((value, index) => {
    // Field names are case-insensitive (RFC 5322 §1.2.2), and HTTP clients often lower-case a header map.
    const [inReplyToName, referencesName] = index === 1 ? ['in-reply-to', 'references'] : ['In-Reply-To', 'References'];
    const inReplyTo = index === 1 ? '<a@x.test> (comment)' : '<a@x.test>';
    const header = composeMessage({ ...base, text: 'x', headers: { [inReplyToName]: inReplyTo, [referencesName]: value } }).toString('latin1').split('\r\n\r\n')[0]!;
    const fields = header.replace(/\r\n[ \t]/g, ' ').split('\r\n');
    const valueOf = (name: string) => fields.find((field) => field.toLowerCase().startsWith(`${name}: `))?.slice(name.length + 2);
    assert.deepEqual([valueOf('in-reply-to'), valueOf('references')], [inReplyTo, value]);
    for (const line of header.split('\r\n')) assert.ok(line.length <= 998);
  });
});

test('compose: a subject with a long run of characters and no space stays within 998 characters a line, and decodes back', async () => {
  for (const subject of ['x'.repeat(1_000), `Token ${'A1b2'.repeat(2_000)} end`, `Grüße ${'ü'.repeat(1_200)}`]) {
    for (const overrides of [{ text: 'x' }, { text: 'x', headers: { 'X-Campaign': 'via MailComposer' } }]) {
      const message = composeMessage({ ...base, ...overrides, subject });
      for (const line of message.toString('latin1').split('\r\n')) assert.ok(line.length <= 998, `a line of ${line.length} characters`);
      assert.equal((await simpleParser(message)).subject, subject);
    }
  }
  // A long subject that can be folded at its spaces is written as before, unencoded.
  const spaced = 'word '.repeat(400).trim();
  assert.match(composeMessage({ ...base, text: 'x', subject: spaced }).toString('latin1'), /^Subject: word word/m);
});

test('compose: a subject with a run of over 70 blanks has no header line of blanks only, and decodes back with every blank', async () => {
  // Folding at 76 cut such a run into lines of spaces only: RFC 5322 §4.2's obsolete syntax, which
  // receivers read back with the run shortened (mailparser kept 4 of 200 spaces).
  for (const subject of [`Hello${' '.repeat(200)}world`, `Order\t${'\t'.repeat(100)}#1`, `${'word '.repeat(20)}${' '.repeat(80)}end`]) {
    for (const overrides of [{ text: 'x' }, { text: 'x', headers: { 'X-Campaign': 'via MailComposer' } }]) {
      const message = composeMessage({ ...base, ...overrides, subject });
      const header = message.toString('latin1').split('\r\n\r\n')[0];
      for (const line of header.split('\r\n')) assert.doesNotMatch(line, /^[ \t]*$/, `a header line of blanks only in ${JSON.stringify(header)}`);
      assert.equal((await simpleParser(message)).subject, subject);
    }
  }
  // A few blanks in a row are written as before, unencoded.
  assert.match(composeMessage({ ...base, text: 'x', subject: 'Order   #1' }).toString('latin1'), /^Subject: Order {3}#1\r$/m);
});

test('compose: a subject holding text in the form of an encoded-word reaches the recipient as written, not decoded', async () => {
  // RFC 2047 §5(1): in a Subject, `=?charset?Q?text?=` is an encoded-word to every reader, which shows
  // "Hi" for a subject that says =?UTF-8?B?SGk=?=.
  for (const subject of ['=?UTF-8?B?SGk=?= test', 'Price: =?utf-8?q?free?=', 'Grüße =?ISO-8859-1?Q?a?=', 'x=?UTF-8?Q?y?=z']) {
    for (const overrides of [{ text: 'x' }, { text: 'x', headers: { 'X-Campaign': 'via MailComposer' } }]) {
      const message = composeMessage({ ...base, ...overrides, subject });
      assert.equal((await simpleParser(message)).subject, subject);
    }
  }
  // An '=?' that cannot be read as an encoded-word is written as before.
  assert.match(composeMessage({ ...base, text: 'x', subject: 'Is 2+2=? Answer inside' }).toString('latin1'), /^Subject: Is 2\+2=\? Answer inside\r$/m);
});

test('compose: an ASCII subject holding a quote is written as it is, folded, not as encoded-words (rspamd SUBJ_EXCESS_QP)', async () => {
  const long = `Your order "${'Blue Shirt '.repeat(12)}" has shipped`;
  for (const subject of ['Your order "Blue Shirt" has shipped', '"', long]) {
    for (const overrides of [{ text: 'x' }, { html: '<p>x</p>', text: 'x' }, { text: 'x', headers: { 'X-Campaign': 'via MailComposer' } }]) {
      const message = composeMessage({ ...base, ...overrides, subject });
      const header = message.toString('latin1').split('\r\n\r\n')[0];
      assert.doesNotMatch(header, /=\?UTF-8\?/, header);
      assert.ok(header.split('\r\n').every((line) => line.length <= 76), header);
      assert.equal((await simpleParser(message)).subject, subject);
    }
  }
  // Not plain ASCII, or a quote beside an encoded-word form: encoded as before.
  assert.match(composeMessage({ ...base, text: 'x', subject: 'Grüße "Anna"' }).toString('latin1'), /^Subject: =\?UTF-8\?Q\?/m);
  assert.match(composeMessage({ ...base, text: 'x', subject: '"=?UTF-8?B?SGk=?="' }).toString('latin1'), /^Subject: =\?UTF-8\?Q\?/m);
});

test('compose: an empty subject is written as an empty Subject field, not left out (filters score a missing Subject: rspamd MISSING_SUBJECT)', () => {
  for (const subject of ['', '   ']) {
    for (const overrides of [{ text: 'x' }, { html: '<p>x</p>', text: 'x' }, { text: 'x', headers: { 'X-Campaign': 'via MailComposer' } }]) {
      const header = composeMessage({ ...base, ...overrides, subject }).toString('latin1').split('\r\n\r\n')[0];
      assert.equal(header.match(/^Subject:/gim)?.length, 1, `one Subject field in ${JSON.stringify(header)}`);
      assert.match(header, /^Subject: ?\r?$/m);
    }
  }
  // Blank to trim() but not to a mail client: written once, encoded, with attachments or headers too.
  for (const subject of ['\u00a0', '\u3000', '\u2029']) {
    const header = composeMessage({ ...base, text: 'x', subject, headers: { 'X-A': '1' } }).toString('latin1').split('\r\n\r\n')[0];
    assert.equal(header.match(/^Subject:/gim)?.length, 1, `one Subject field in ${JSON.stringify(header)}`);
    assert.match(header, /^Subject: =\?UTF-8\?/m);
  }
});

/** [what, content type, content, transfer encoding, the content type it goes out with when not the same] */
const textAttachmentCases: [string, string, Buffer, string | undefined, string?][] = [
  ['CRLF lines of printable ASCII', 'text/plain', Buffer.from('a,b\r\n1,2\r\n'), '7bit'],
  ['no line break at the end', 'text/csv', Buffer.from('a,b\r\n1,2'), '7bit'],
  ['empty', 'text/plain', Buffer.alloc(0), '7bit'],
  ['a line of 76 characters', 'text/plain', Buffer.from(`${'x'.repeat(76)}\r\n`), '7bit'],
  ['a line of 77 characters', 'text/plain', Buffer.from(`${'x'.repeat(77)}\r\n`), 'quoted-printable'],
  ['LF line breaks', 'text/csv', Buffer.from('a,b\n1,2\n'), 'quoted-printable'],
  ['a lone CR', 'text/plain', Buffer.from('a\rb'), 'quoted-printable'],
  ['a line ending in a space', 'text/plain', Buffer.from('a \r\nb'), 'quoted-printable'],
  ['ending in a tab', 'text/plain', Buffer.from('a\r\nb\t'), 'quoted-printable'],
  ['a control character', 'text/plain', Buffer.from('page\fbreak'), 'quoted-printable'],
  ['7-bit text over 128 KiB in short lines', 'text/csv', Buffer.from('1,2,3\r\n'.repeat(20_000)), 'quoted-printable'],
  ['a NUL', 'text/plain', Buffer.from('a\0b'), 'base64'],
  ['8-bit UTF-8 without a charset: labelled', 'text/plain', Buffer.from('Grüße'), 'quoted-printable', 'text/plain; charset=utf-8'],
  ['mostly non-Latin UTF-8 without a charset: labelled', 'text/plain', Buffer.from('こんにちは世界'), 'base64', 'text/plain; charset=utf-8'],
  ['8-bit, not UTF-8, without a charset (US-ASCII, RFC 2046 §4.1.2): unlabelled', 'text/plain', Buffer.from('Gr\xfc\xdfe', 'latin1'), 'base64'],
  ['8-bit UTF-8 with an empty charset', 'text/plain; charset=""', Buffer.from('Grüße'), 'base64'],
  ['7-bit without a charset: no label', 'text/plain', Buffer.from('Gruesse\r\n'), '7bit'],
  ['8-bit Latin text in a declared UTF-8', 'text/plain; charset=UTF-8', Buffer.from('Grüße aus Köln'), 'quoted-printable'],
  ['mostly non-Latin text in a declared UTF-8', 'text/plain; charset=utf-8', Buffer.from('こんにちは世界'), 'base64'],
  ['bytes that are not UTF-8 in a declared UTF-8', 'text/plain; charset=utf-8', Buffer.from('Gr\xfc\xdfe', 'latin1'), 'base64'],
  ['8-bit in a charset not checked here', 'text/plain; charset=iso-8859-1', Buffer.from('Gr\xfc\xdfe', 'latin1'), 'base64'],
  ['a binary type', 'application/pdf', Buffer.from('plain'), undefined],
  ['JSON (not text/*)', 'application/json', Buffer.from('{}'), undefined],
  ['a forwarded email', 'message/rfc822', Buffer.from('Subject: x\r\n\r\nx\r\n'), undefined],
];
for (const [what, contentType, content, expected, labelled] of textAttachmentCases) {
  test(`compose: a text attachment's transfer encoding — ${what}: ${expected ?? "MailComposer's"}`, () => {
    const part = textAttachmentPart(contentType, content);
    assert.equal(part.transferEncoding, expected);
    assert.equal(part.contentType, labelled ?? contentType);
  });
}

test('compose: a quoted-printable text attachment with a lone LF or CR decodes to the exact bytes sent (=0A/=0D, which MailComposer writes as a line break)', async () => {
  const csv = Buffer.from(`id,note\n1,${'long words '.repeat(15)}\n2,trailing blank \n3,dos\r\n4,mac\rend\n`);
  const message = composeMessage({ ...base, text: 'x', attachments: [{ name: 'export.csv', contentType: 'text/csv', content: csv }] }, 'a1b2c3d4e5f60718');
  const source = message.toString('latin1');
  assert.match(source, /Content-Transfer-Encoding: quoted-printable\r\n(?:[^\r\n]+\r\n)*\r\nid,note=0A=\r\n1,long words /, 'a line per line, the LF encoded');
  assert.match(source, /3,dos\r\n4,mac=0D=\r\nend=0A\r\n--/, 'a CRLF stays a hard line break; no soft break after the last encoded LF');
  for (const line of source.split('\r\n')) assert.ok(line.length <= 76, `a line of ${line.length} characters`);
  const attachment = (await simpleParser(message)).attachments[0];
  assert.ok(attachment.content.equals(csv), JSON.stringify(attachment.content.toString('latin1')));
});

/**
 * exactQuotedPrintable over a generated corpus of what changes its output: line breaks of each kind, blanks
 * before them and at the end, `=`, 8-bit bytes, control characters and lines longer than 76 characters.
 * Every one decodes to its bytes, in encoded lines of at most 76 characters none of which ends in a blank.
 */
test('compose: 300 generated text attachments as quoted-printable decode to the exact bytes sent', async () => {
  const random = seededRandom(20261128);
  const pieces = ['a', 'word ', ' ', '\t', '\r\n', '\n', '\r', '\n\r', '=', '=0A', '.', 'From ', 'ü', '\u00ff', '日本', '\f', '\u007f', 'x'.repeat(80), `${'y'.repeat(74)}=`, ' \r\n', '\t\n'];
  const generated = Array.from({ length: 300 }, () => Buffer.from(Array.from({ length: 1 + Math.floor(random() * 60) }, () => pieces[Math.floor(random() * pieces.length)]).join('')));
  // The longest encodings a byte has: a lone LF or CR is =0A or =0D and a soft line break.
  const densest = [Buffer.from('\n'.repeat(500)), Buffer.from('\r'.repeat(500)), Buffer.from('\n\r'.repeat(250)), Buffer.from(`${'='.repeat(25)}\n`.repeat(20))];
  for (const content of [...generated, ...densest]) {
    const encoded = exactQuotedPrintable(content).toString('latin1');
    for (const line of encoded.split('\r\n')) {
      assert.ok(line.length <= 76, `a line of ${line.length} characters for ${JSON.stringify(content.toString('latin1'))}`);
      assert.doesNotMatch(line, /[ \t]$/, `a line ending in a blank for ${JSON.stringify(content.toString('latin1'))}`);
    }
    assert.doesNotMatch(encoded, /\r(?!\n)|(?<!\r)\n/, 'no lone CR or LF');
    const attachment = (await simpleParser(quotedPrintableAttachment(encoded))).attachments[0];
    assert.ok(attachment.content.equals(content), `${JSON.stringify(attachment.content.toString('latin1'))} for ${JSON.stringify(content.toString('latin1'))}`);
  }
});

/** A message of one text attachment whose quoted-printable body is `encoded`, for mailparser to decode. */
function quotedPrintableAttachment(encoded: string): Buffer {
  const part = 'Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\nContent-Disposition: attachment; filename=a.txt\r\n\r\n';
  return Buffer.from(`MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n${part}${encoded}\r\n--b--\r\n`, 'latin1');
}
