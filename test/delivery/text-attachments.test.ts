import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { simpleParser } from 'mailparser';
import { addSendingDomain, routeToSink, send, startRig, verifyDkim, verifyWithDkimpy, waitForFinal, type DeliveryRig } from './harness.js';

/**
 * Text attachments sent through POST /v1/email/send, delivered to a real SMTP sink and read back with
 * mailparser. Filters score a base64 text part whose content is plain 7-bit text (rspamd
 * MIME_BASE64_TEXT_BOGUS, MIME_BASE64_TEXT): such a part goes as 7bit or quoted-printable, while the
 * bytes the recipient decodes stay the bytes that were sent, line breaks included.
 */
let rig: DeliveryRig;
let publicKey: string;

before(async () => {
  rig = await startRig();
  ({ publicKey } = await addSendingDomain(rig, 'sender.test'));
  routeToSink(rig.dns, 'inbox.test');
});
after(() => rig.stop());

/** [name, content, the transfer encoding its part must have] */
const attachments: [string, Buffer, string][] = [
  ['notes.txt', Buffer.from('Meeting notes\r\n- agenda\r\n- actions\r\n'), '7bit'],
  // Unix line breaks: quoted-printable with the LF as =0A, as 7bit or QP's hard line breaks would reach the recipient as CRLF.
  ['export.csv', Buffer.from('id,name,amount\n1,Alice,10.50\n2,Bob,=3\n'), 'quoted-printable'],
  ['mixed.txt', Buffer.from('dos\r\nunix\nold mac\rend'), 'quoted-printable'],
  ['long.txt', Buffer.from(`${'a long line of words '.repeat(10)}\r\nshort\r\n`), 'quoted-printable'],
  ['trailing.txt', Buffer.from('a line with trailing blanks  \r\nand a tab\t\r\n'), 'quoted-printable'],
  ['page.html', Buffer.from('<html><body><p>Hello</p></body></html>\r\n'), '7bit'],
  ['no-final-break.txt', Buffer.from('one\r\ntwo'), '7bit'],
  // 8-bit and valid UTF-8: labelled charset=utf-8 (below), then quoted-printable as mostly Latin text.
  ['utf8.txt', Buffer.from('Grüße aus Köln\n'), 'quoted-printable'],
  ['cyrillic.txt', Buffer.from('Привет из Москвы\n'), 'base64'],
  // 8-bit and not UTF-8 (Latin-1 here): its charset cannot be known, so no label, and not valid in the
  // US-ASCII a part without one is read in (RFC 2046 §4.1.2): kept as base64.
  ['latin1.txt', Buffer.from('Grüße aus Köln\n', 'latin1'), 'base64'],
  // A NUL is no text: base64, as a binary type.
  ['nul.txt', Buffer.from('a\0b\r\n'), 'base64'],
  ['report.pdf', Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n', 'latin1'), 'base64'],
  ['data.json', Buffer.from('{"a":1}\n'), 'base64'],
];

test('text attachments go as 7bit or quoted-printable, decode to the exact bytes sent, and the DKIM signature verifies', async (t) => {
  const id = await send(rig, {
    toAddress: 'alice@inbox.test',
    fromAddress: 'hello@sender.test',
    text: 'See attached',
    attachments: attachments.map(([name, content]) => ({ name, content: content.toString('base64') })),
  });
  assert.equal(await waitForFinal(rig, id), 'delivered');
  const raw = rig.sink.messages.find((m) => m.rcptTo[0] === 'alice@inbox.test')!.raw;

  const parsed = await simpleParser(raw);
  for (const [name, content, transferEncoding] of attachments) {
    const part = parsed.attachments.find((a) => a.filename === name);
    assert.ok(part, `${name} is an attachment`);
    assert.equal(part.headers.get('content-transfer-encoding'), transferEncoding, name);
    assert.ok(part.content.equals(content), `${name} decodes to ${JSON.stringify(part.content.toString('latin1'))}, sent ${JSON.stringify(content.toString('latin1'))}`);
  }
  for (const line of raw.toString('latin1').split('\r\n')) assert.ok(line.length <= 998, `a line of ${line.length} characters`);
  const contentTypeOf = (name: string) => parsed.attachments.find((a) => a.filename === name)!.headers.get('content-type') as { value: string; params: Record<string, string> };
  assert.deepEqual(contentTypeOf('utf8.txt'), { value: 'text/plain', params: { charset: 'utf-8', name: 'utf8.txt' } });
  assert.equal(contentTypeOf('cyrillic.txt').params.charset, 'utf-8');
  assert.equal(contentTypeOf('latin1.txt').params.charset, undefined);
  assert.equal(contentTypeOf('notes.txt').params.charset, undefined, 'ASCII text needs no label');

  const results = await verifyDkim(raw, rig.dns.address);
  assert.equal(results[0]?.status.result, 'pass', JSON.stringify(results[0]?.status));
  const pythonVerdict = verifyWithDkimpy(raw, `v=DKIM1; k=rsa; p=${publicKey}`);
  if (pythonVerdict !== undefined) assert.equal(pythonVerdict, true, 'dkimpy verifies the signature');
  else if (process.env.CI === 'true') assert.fail('python3-dkim is required in CI (apt-get install -y python3-dkim)');
  else t.diagnostic('python3-dkim not installed: second verifier skipped');
});
