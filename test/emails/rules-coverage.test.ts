import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { simpleParser } from 'mailparser';
import { catchUpEmailIndex, readFtsWatermark } from '../../src/emails/fts-indexer.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { publishRecords } from '../domains/helpers.js';
import { baseEmail, emailRow, insertTemplate } from './helpers.js';

// Send-API rules that validation.test.ts, tracking.test.ts and search.test.ts leave out. Capture mode
// keeps each message as it would leave, so the default tracking behaviour can be read off the wire.
let app: TestAppliance;
const templateId = 'dddddddddddddddddddddddd';

before(async () => {
  app = await startAppliance({
    env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9', POSTINO_DELIVERY_MODE: 'capture', POSTINO_LOG_LEVEL: 'warn' },
  });
  insertTemplate(app, { id: templateId, name: 'Coverage', subject: 'Hi {name}', content: [{ type: 'text', text: 'Hello {name}' }] });
});
after(() => app?.stop());

async function sendOk(fields: Record<string, unknown>, path = '/v1/email/send'): Promise<string> {
  const res = await app.api('POST', path, { ...baseEmail, ...fields });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.match(res.body.id, /^[0-9a-f]{24}$/);
  return res.body.id;
}

/** A refusal in the compatible shape, whose message names `field`. */
function assertRefused(res: { status: number; body: any }, status: number, code: string, field: RegExp): void {
  assert.equal(res.status, status, JSON.stringify(res.body).slice(0, 300));
  assert.equal(res.body.errorCode, code, JSON.stringify(res.body).slice(0, 300));
  assert.equal(typeof res.body.developerMessage, 'string');
  assert.match(res.body.developerMessage, field);
  assert.equal(res.body.moreInfo, `docs/errors.md#${code}`);
}

/** The message as delivered (captured), once delivery has run. */
async function captured(id: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await app.api('GET', `/v1/captured/${id}`);
    if (res.status === 200) return simpleParser(Buffer.from(res.body as string));
    if (Date.now() > deadline) assert.fail(`no captured message for ${id}: ${JSON.stringify(res.body)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('click tracking is off unless enabled', () => {
  test('default config: the sent html keeps its links (the open pixel still goes in)', async () => {
    assert.equal(app.config.sending.click_tracking, false, 'the default is off');
    const given = '<html><body><p>Hi</p><a href="https://example.com/keep/path">one</a> <a href="https://example.com/q?a=1&amp;b=2">two</a></body></html>';
    const id = await sendOk({ text: undefined, html: given });
    const html = String((await captured(id)).html);
    assert.match(html, /<a href="https:\/\/example\.com\/keep\/path">one<\/a>/);
    assert.match(html, /<a href="https:\/\/example\.com\/q\?a=1&amp;b=2">two<\/a>/);
    assert.doesNotMatch(html, /\/t\/c\//, 'no link goes through the click redirect');
    assert.match(html, /<img src="http:\/\/127\.0\.0\.1:\d+\/t\/o\/[^"]+"/, 'the tracker ran: the open pixel is there');
    assert.equal(emailRow(app, id)!.html, given);
  });
});

describe('custom headers: names the appliance writes are refused, case-insensitively', () => {
  test('X-Custom is accepted, stored and sent', async () => {
    const id = await sendOk({ headers: { 'X-Custom': 'kept' } });
    assert.deepEqual(JSON.parse(emailRow(app, id)!.headers), { 'X-Custom': 'kept' });
    assert.equal((await captured(id)).headers.get('x-custom'), 'kept');
  });

  for (const name of ['From', 'from', 'To', 'TO', 'Message-ID', 'message-id', 'Authentication-Results', 'ARC-Seal', 'Received-SPF', 'Resent-From']) {
    test(`${name} is refused`, async () => {
      const res = await app.api('POST', '/v1/email/send', { ...baseEmail, headers: { 'X-Custom': 'fine', [name]: 'evil@example.com' } });
      assertRefused(res, 400, 'parameters-invalid', new RegExp(`headers\\.${name}: header ${name} is set by the appliance`));
    });
  }

  test('one name given twice in different cases is refused (both would be written, one unsigned)', async () => {
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, headers: { 'List-Unsubscribe': '<https://example.com/1>', 'list-unsubscribe': '<https://evil.example/2>' } });
    assertRefused(res, 400, 'parameters-invalid', /headers\.list-unsubscribe: names the same header as List-Unsubscribe \(header names ignore case\)/);
    await sendOk({ headers: { 'List-Unsubscribe': '<https://example.com/1>', 'X-List-Unsubscribe': '<https://example.com/2>' } });
  });

  test('List-* and message-id fields: a quote stays literal; a non-ASCII character is refused (it cannot be MIME-encoded there)', async () => {
    const listId = '"Customers of Example" <news.example.com>';
    const unsubscribe = `<https://example.com/u?n="x"&t=${'a'.repeat(80)}>, <mailto:unsub@example.com?subject=unsubscribe>`;
    const id = await sendOk({ headers: { 'List-ID': listId, 'List-Unsubscribe': unsubscribe, 'In-Reply-To': '<a@example.com>' } });
    const message = await captured(id);
    assert.equal(message.headerLines.find((h) => h.key === 'list-id')?.line, `List-ID: ${listId}`, 'written literally');
    assert.match(message.headerLines.find((h) => h.key === 'list-unsubscribe')!.line, /^List-Unsubscribe:\s+<https:\/\/example\.com\/u\?n="x"&t=a+>,\s+<mailto:unsub@example\.com\?subject=unsubscribe>$/);
    const list = message.headers.get('list') as any;
    assert.equal(list?.unsubscribe?.mail, 'unsub@example.com?subject=unsubscribe', 'list headers a reader can use');
    assert.deepEqual(list?.id, { name: 'Customers of Example', id: 'news.example.com' });
    for (const [name, value] of [['List-Unsubscribe', '<https://example.com/abmelden?name=Jürgen>'], ['List-ID', 'Kunden für <news.example.com>'], ['In-Reply-To', '<ü@example.com>']]) {
      const res = await app.api('POST', '/v1/email/send', { ...baseEmail, headers: { [name]: value } });
      assertRefused(res, 400, 'parameters-invalid', new RegExp(`headers\\.${name}: header ${name} must be printable ASCII`));
    }
    // Elsewhere non-ASCII is fine: an unstructured value becomes encoded-words.
    const other = await sendOk({ headers: { 'X-Greeting': 'Grüße' } });
    assert.equal((await captured(other)).headers.get('x-greeting'), '=?UTF-8?Q?Gr=C3=BC=C3=9Fe?=');
  });

  test('a run of more than 70 spaces or tabs is refused (folding would leave lines of whitespace only)', async () => {
    await sendOk({ headers: { 'X-Gap': `a${' '.repeat(70)}b` } });
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, headers: { 'X-Gap': `a${'\t'.repeat(71)}b` } });
    assertRefused(res, 400, 'parameters-invalid', /headers\.X-Gap: header value must not have more than 70 spaces or tabs in a row/);
  });
});

describe('replyToName with a replyToAddress has at least 1 character', () => {
  test('1 character accepted; empty refused', async () => {
    const id = await sendOk({ replyToAddress: 'r@example.com', replyToName: 'A' });
    assert.equal(emailRow(app, id)!.reply_to_name, 'A');
    assert.equal(emailRow(app, id)!.reply_to_address, 'r@example.com');
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, replyToAddress: 'r@example.com', replyToName: '' });
    assertRefused(res, 400, 'parameters-invalid', /replyToName: must have at least 1 character/);
  });
});

describe('html cannot be combined with a template', () => {
  test('html alone and a template alone are accepted', async () => {
    const html = await sendOk({ text: undefined, html: '<p>x</p>' });
    assert.equal(emailRow(app, html)!.content_kind, 'html');
    const byId = await sendOk({ text: undefined, subject: undefined, templateId, templateProps: { name: 'Ann' } });
    assert.equal(emailRow(app, byId)!.template_name, 'Coverage');
  });

  for (const template of [{ templateId }, { templateName: 'Coverage' }]) {
    test(`html with ${Object.keys(template)[0]} is refused`, async () => {
      const res = await app.api('POST', '/v1/email/send', { ...baseEmail, text: undefined, ...template, html: '<p>x</p>' });
      assertRefused(res, 400, 'parameters-invalid', /html: cannot be used together with a template/);
    });
  }
});

describe('legacy POST /v1/mail/send checks the sender domain', () => {
  let dns: TestDnsServer;
  let strict: TestAppliance;
  before(async () => {
    dns = await startDnsServer();
    strict = await startAppliance({ env: { POSTINO_DNS_SERVERS: dns.address, POSTINO_DOMAINS_MAIL_HOSTNAME: 'mx.postino.test', POSTINO_LOG_LEVEL: 'warn' } });
  });
  after(async () => {
    await strict?.stop();
    await dns?.stop();
  });

  test('a verified domain is accepted; an unverified one is refused with from-address-unverified', async () => {
    assert.equal(strict.config.sending.require_verified_domain, true);
    const domain = (await strict.api('POST', '/v1/domains', { domain: 'legacy.example.net' })).body;
    publishRecords(dns, domain.dns);
    const verified = await strict.api('POST', `/v1/domains/${domain.id}/verify`);
    assert.equal(verified.body.status, 'success', JSON.stringify(verified.body));

    const ok = await strict.api('POST', '/v1/mail/send', { ...baseEmail, fromAddress: 'hello@legacy.example.net' });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.match(ok.body.id, /^[0-9a-f]{24}$/);
    const refused = await strict.api('POST', '/v1/mail/send', { ...baseEmail, fromAddress: 'hello@unverified.example.net' });
    assertRefused(refused, 400, 'from-address-unverified', /fromAddress hello@unverified\.example\.net/);
  });
});

describe('request body limit (http.body_limit_bytes, 10 MB by default) on a batch', () => {
  // Items that are valid on their own: only the size of the whole body is wrong.
  const item = (i: number, htmlChars: number) => ({ ...baseEmail, toAddress: `batch${i}@example.com`, text: undefined, html: `<p>${'b'.repeat(htmlChars)}</p>` });

  test('a ~1 MB batch is accepted', async () => {
    const body = JSON.stringify(Array.from({ length: 4 }, (_, i) => item(i, 250_000)));
    assert.ok(body.length > 1_000_000 && body.length < 1_100_000);
    const res = await app.api('POST', '/v1/email/send', body);
    assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
    assert.equal(res.body.length, 4);
    assert.equal(emailRow(app, res.body[3].id)!.to_address, 'batch3@example.com');
  });

  test('a batch over 10 MB answers 413 payload-too-large in the compatible shape', async () => {
    const body = JSON.stringify(Array.from({ length: 11 }, (_, i) => item(i, 1_000_000)));
    assert.ok(body.length > 10_485_760);
    const res = await app.api('POST', '/v1/email/send', body);
    assertRefused(res, 413, 'payload-too-large', /limit of 10485760 bytes/);
    assert.deepEqual(Object.keys(res.body).sort(), ['developerMessage', 'errorCode', 'moreInfo']);
    const stored = app.appliance.context.database.sqlite.prepare("select count(*) as n from emails where to_address like 'batch%@example.com'").get() as { n: number };
    assert.equal(stored.n, 4, 'only the accepted batch was stored');
    assert.equal((await app.api('GET', '/healthz', undefined, { key: null })).status, 200);
  });
});

describe('free-text search matches fromAddress and fromName', () => {
  const sqlite = () => app.appliance.context.database.sqlite;
  const searchIds = async (search: string): Promise<string[]> => {
    const res = await app.api('POST', '/v1/email/search', { limit: 100, query: { search } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body.data.map((e: { id: string }) => e.id);
  };
  const rowidOf = (id: string) => (sqlite().prepare('select rowid as r from emails where id = ?').get(id) as { r: number }).r;

  test('before and after the deferred indexer ran; case-insensitive; no match for other text', async () => {
    const byAddress = await sendOk({ fromAddress: 'billing@xylophonic.test', fromName: 'Plain Name', subject: 'Invoice' });
    const byName = await sendOk({ fromName: 'Wombatina Frost', subject: 'Newsletter' });
    assert.ok(readFtsWatermark(sqlite()) < rowidOf(byName), 'not indexed yet');

    const expectations = async () => {
      assert.deepEqual(await searchIds('xylophonic'), [byAddress]);
      assert.deepEqual(await searchIds('BILLING@XYLOPHONIC.TEST'), [byAddress]);
      assert.deepEqual(await searchIds('wombatina'), [byName]);
      assert.deepEqual(await searchIds('Wombatina Frost'), [byName]);
      assert.deepEqual(await searchIds('xylophonicz'), []);
      assert.deepEqual(await searchIds('wombatina frosty'), []);
    };
    await expectations();

    await catchUpEmailIndex(app.appliance.context.writes);
    assert.ok(readFtsWatermark(sqlite()) >= rowidOf(byName), 'indexed now');
    const indexed = (term: string) => (sqlite().prepare('select rowid as r from emails_fts where emails_fts match ?').all(`"${term}"`) as { r: number }[]).map((r) => r.r);
    assert.deepEqual(indexed('xylophonic'), [rowidOf(byAddress)]);
    assert.deepEqual(indexed('wombatina'), [rowidOf(byName)]);
    await expectations();
  });
});
