import assert from 'node:assert/strict';
import { test } from 'node:test';
import { simpleParser } from 'mailparser';
import { aliasOfFailedMember, failedMembersOf } from '../../src/bounces/alias-member.js';
import { statusOf } from '../../src/bounces/parse-dsn.js';
import { detectTextBounce } from '../../src/bounces/parse-text-bounce.js';
import { enhancedFromBasic, findBasicCode } from '../../src/bounces/status-code.js';
import { subjectOf } from '../../src/delivery/compose.js';
import { rewriteLinks } from '../../src/emails/tracking.js';
import { createUrlSigner } from '../../src/lib/signing.js';
import { buildSendInputs } from '../../src/smtp/submission-message.js';
import { splitFrontMatter } from '../../src/render/markdown-email.js';
import { contentSchema } from '../../src/render/schema.js';
import { cssColor, cssLength } from '../../src/render/style-values.js';

// Input a client (or anyone, for a report to a bounce address) can send, on which a pattern took time
// growing with a power of the length: seconds to minutes of the event loop, the whole appliance frozen.
// Each case took 3–15 s before its fix; linear now, it takes milliseconds. The bound only tells a
// stall from a scan, on any machine.
const stallMs = 1_500;

function timed<T>(work: () => T): T {
  const started = performance.now();
  const value = work();
  const elapsed = performance.now() - started;
  assert.ok(elapsed < stallMs, `took ${elapsed.toFixed(0)} ms`);
  return value;
}

test('bounce reports: a Diagnostic-Code of line separators or spaces, and one that says "exceeds" thousands of times', () => {
  const separators = `x${'\u2028'.repeat(100_000)}x`;
  assert.equal(timed(() => findBasicCode(separators)), undefined);
  assert.equal(timed(() => statusOf({ action: 'failed', diagnosticCode: `smtp; ${separators}` } as never)), '5.0.0');
  assert.equal(timed(() => findBasicCode(`said${' '.repeat(100_000)}x`)), undefined);
  assert.equal(timed(() => enhancedFromBasic('552', 'exceed '.repeat(30_000))), '5.2.2');
  // What they are for still works.
  assert.equal(findBasicCode('>>> RCPT TO:<a@b>\n<<< 550 no such user'), '550');
  assert.equal(enhancedFromBasic('552', 'message size exceeds fixed maximum'), '5.3.4');
});

test('template styles: a colour or a column width padded with thousands of spaces is refused at once', () => {
  const pad = ' '.repeat(1_500);
  assert.equal(timed(() => cssColor(`rgb(1${pad}1${pad}1${pad}x`)), undefined);
  assert.equal(timed(() => cssLength(`1${' '.repeat(100_000)}x`)), undefined);
  const box = (width: string) => [{ type: 'box', columns: [{ width, elements: [] }] }];
  assert.equal(timed(() => contentSchema.safeParse(box(`1${' '.repeat(100_000)}x`)).success), false);
  // What they are for still works.
  assert.equal(cssColor(' rgb(1, 2, 3) '), '#010203');
  assert.equal(contentSchema.safeParse(box(' 50 % ')).success, true);
});

test('markdown front matter: a line of blanks ending in a line separator, a value with thousands of blanks before no comment', () => {
  const blanks = `---\n${' '.repeat(100_000)}\u2028\n---\nBody`;
  assert.deepEqual(timed(() => splitFrontMatter(blanks)).meta, {});
  const value = `---\nsubject: a${' '.repeat(100_000)}b\n---\nBody`;
  assert.equal(timed(() => splitFrontMatter(value)).meta.subject, `a${' '.repeat(100_000)}b`);
  // What it is for still works.
  assert.deepEqual(splitFrontMatter('---\nsubject: Hi  # a comment\n---\nBody').meta, { subject: 'Hi' });
});

test('delivery: a subject of megabytes, and click tracking over html of unclosed <a tags', () => {
  const subject = `${'x'.repeat(800)} `.repeat(3_000);
  assert.equal(timed(() => subjectOf(subject)), subject, 'no run of 900 without a space: sent as it is');
  assert.notEqual(subjectOf(`${'x'.repeat(950)} y`), `${'x'.repeat(950)} y`, 'a run of 950 is encoded');
  const questions = '=?a?Q?x =?b?'.repeat(200_000);
  assert.equal(timed(() => subjectOf(questions)), questions, 'no encoded-word form among a megabyte of =? and ?');
  const signer = createUrlSigner('s'.repeat(64));
  const unclosed = '<a '.repeat(100_000);
  assert.equal(timed(() => rewriteLinks(unclosed, '0123456789abcdef01234567', signer, 'https://mail.example.com')), unclosed);
  // What it is for still works: every closed tag's link, whatever comes after it.
  const html = `<p><A class="x" HREF='https://example.com/a'>a</A> <a href="https://example.com/b">b</a> ${unclosed}</p>`;
  const tracked = rewriteLinks(html, '0123456789abcdef01234567', signer, 'https://mail.example.com');
  assert.equal((tracked.match(/https:\/\/mail\.example\.com\/t\/c\//g) ?? []).length, 2);
  assert.ok(tracked.endsWith(`${unclosed}</p>`));
  // A link of one long run of spaces inside: the spaces around a URL are stripped without rescanning it.
  const spaced = `<a href="https://example.com/a${' '.repeat(100_000)}b">x</a>`;
  assert.match(timed(() => rewriteLinks(spaced, '0123456789abcdef01234567', signer, 'https://mail.example.com')), /\/t\/c\//);
});

test('bounce reports: a code deep in one long line of text is still found (no cut at a fixed length)', () => {
  const prose = 'The message could not be delivered to the recipient because of a problem. '.repeat(40);
  assert.equal(findBasicCode(`${prose}Remote server said: 550 5.1.10 RecipNotFound`), '550');
  assert.equal(enhancedFromBasic('552', `${prose} message exceeds the fixed maximum`), '5.3.4');
  assert.equal(enhancedFromBasic('552', 'mailbox exceeds its quota\nmaximum storage reached'), '5.2.2', 'both words on one line');
});

test('bounce reports: bare reply codes opening thousands of lines under one long line ending in a colon are weighed at once', () => {
  const colonLine = `${'a@'.repeat(30_000)}:`;
  const text = `${colonLine}\n${'550 Main St\n'.repeat(3_000)}${'x@y:'.repeat(5_000)}\n`;
  const bounce = { subject: 'Undeliverable: Hello', from: 'postmaster@y.test' };
  assert.equal(timed(() => detectTextBounce({ ...bounce, text })), undefined);
  // What it is for still works: the reply under the address line it belongs to.
  assert.equal(detectTextBounce({ ...bounce, text: `<x@y.test>:\n554: delivery error: dd This user doesn't have an account\n` })?.status, '5.0.0');
});

test("bounce reports: an alias's member named thousands of times, and thousands of unclosed \"(generated from\"", () => {
  const named = `  team@inbox.test\n${'  ann@elsewhere.test\n    (generated from team@inbox.test)\n'.repeat(20_000)}`;
  assert.equal(timed(() => aliasOfFailedMember(named, ['team@inbox.test'])), undefined, 'the alias itself failed too');
  assert.equal(timed(() => aliasOfFailedMember(`(generated from ${'a'.repeat(50)}`.repeat(20_000), ['team@inbox.test'])), undefined);
  // What it is for still works.
  assert.equal(aliasOfFailedMember('  ann@elsewhere.test\n    (generated from team@inbox.test)\n', ['team@inbox.test']), 'team@inbox.test');
});

test("bounce reports: an alias's failed member with Exim's SMTP error phrase thousands of times on one line, and with no colon to end it", () => {
  const member = '  ann@elsewhere.test\n    (generated from team@inbox.test)\n';
  for (const line of [`    ${'SMTP error from remote mail server after x '.repeat(20_000)}`, `    SMTP error from remote mail server after ${'RCPT TO:<'.repeat(50_000)}`]) {
    assert.equal(timed(() => failedMembersOf(`${member}${line}\n`, 'team@inbox.test')).length, 1);
  }
  // What it is for still works.
  const refused = `${member}    SMTP error from remote mail server after RCPT TO:<ann@elsewhere.test>:\n    550 5.1.1 User unknown\n`;
  assert.deepEqual(failedMembersOf(refused, 'team@inbox.test'), [{ address: 'ann@elsewhere.test', diagnosticCode: '550 5.1.1 User unknown' }]);
});

test('SMTP submission: a message of 10,000 X- headers is mapped to its send input at once', async () => {
  const headers = Array.from({ length: 10_000 }, (_, i) => `X-Field-${i}: v${i}\r\n`).join('');
  const raw = Buffer.from(`From: app@sender.test\r\nTo: a@rcpt.test\r\nSubject: s\r\nX-Twice: first\r\n${headers}x-twice: last\r\n\r\nbody\r\n`);
  const parsed = await simpleParser(raw, { skipTextToHtml: true, skipImageLinks: true, skipHtmlToText: true });
  const { inputs } = timed(() => buildSendInputs(parsed, { mailFrom: 'app@sender.test', rcptTo: ['a@rcpt.test'] }));
  const sent = (inputs[0].headers ?? {}) as Record<string, string>;
  assert.equal(Object.keys(sent).length, 10_001);
  assert.equal(sent['X-Field-9999'], 'v9999');
  // What the scan was for still works: a field given twice keeps its last instance, under that spelling.
  assert.equal(sent['x-twice'], 'last');
  assert.equal(sent['X-Twice'], undefined);
});
