import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import MailComposer from 'nodemailer/lib/mail-composer';
import { simpleParser } from 'mailparser';
import { composeMessage, mailOptions, type ComposeInput } from '../../src/delivery/compose.js';

/**
 * composeMessage serialises MailComposer's tree without streams. Its output must be the bytes
 * MailComposer's own build() produces for the same tree (same boundary, same date), for every shape
 * a stored email can take.
 */
const base: ComposeInput = {
  emailId: '0123456789abcdef01234567',
  toAddress: 'alice@inbox.test',
  fromAddress: 'hello@sender.test',
  fromName: null,
  replyToAddress: null,
  replyToName: null,
  subject: 'Hello',
  html: null,
  text: null,
  headers: null,
  messageId: null,
  attachments: [],
  date: new Date('2026-11-22T10:00:00Z'),
};

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
      { name: 'Übersicht März.csv', contentType: 'text/csv', content: Buffer.from('a,b\n1,2\n') },
      { name: 'chart.png', contentType: 'image/png', content: randomBytes(3_000), contentId: 'chart-1@postino' },
    ],
  }],
  ['explicit Message-ID', { text: 'x', messageId: '<custom-id@sender.test>' }],
];

for (const [name, overrides] of cases) {
  test(`compose: ${name} — same bytes as MailComposer.build()`, async () => {
    const input = { ...base, ...overrides };
    const reference = crlfOnly(await new MailComposer(mailOptions(input, 'a1b2c3d4e5f60718')).compile().build());
    const ours = composeMessage(input, 'a1b2c3d4e5f60718');
    assertSameBytes(ours, reference);
  });
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

/** On a difference, shows where (a full dump of a 100 kB message helps nobody). */
function assertSameBytes(actual: Buffer, expected: Buffer): void {
  if (actual.equals(expected)) return;
  let i = 0;
  while (i < actual.length && i < expected.length && actual[i] === expected[i]) i++;
  const around = (b: Buffer) => JSON.stringify(b.subarray(Math.max(0, i - 60), i + 60).toString('latin1'));
  assert.fail(`differs at byte ${i} of ${actual.length} (expected ${expected.length}):\n  ours:      ${around(actual)}\n  reference: ${around(expected)}`);
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
