import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { candidateDomains } from '../../src/domains/domain-name.js';
import type { AppError } from '../../src/lib/errors.js';
import { searchEmails } from '../../src/emails/search.js';
import { acceptArgs } from '../helpers/accept-args.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { publishRecords } from '../domains/helpers.js';
import { baseEmail, emailRow, insertTemplate } from './helpers.js';

let app: TestAppliance;
const ids: string[] = [];

before(async () => {
  app = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
  insertTemplate(app, { id: 'cccccccccccccccccccccccc', name: 'Receipt', subject: 'Receipt {n}', content: [{ type: 'text', text: 'r' }] });
  for (let i = 0; i < 25; i++) {
    const body =
      i % 5 === 0
        ? { toAddress: `t${i}@example.com`, fromAddress: 'shop@sender.test', templateId: 'cccccccccccccccccccccccc', templateProps: { n: String(i), tier: i < 10 ? 'gold' : 'basic' } }
        : { ...baseEmail, toAddress: `u${i}@example.com`, fromName: i % 2 ? 'Odd Sender' : 'Even Sender', subject: `Subject number ${i}`, ...(i === 7 ? { scheduledAt: '2999-05-04T03:02:01.000Z' } : {}) };
    ids.push((await app.api('POST', '/v1/email/send', body)).body.id);
  }
});
after(() => app?.stop());

const search = async (body: unknown, qs = '') => {
  const res = await app.api('POST', `/v1/email/search${qs}`, body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
};

describe('search', () => {
  test('lists newest first, 20 by default, with the compatible shape', async () => {
    const page = await search({});
    assert.equal(page.data.length, 20);
    assert.equal(page.data[0].id, ids[24]);
    assert.equal(page.hasMore, true);
    assert.equal(page.hasPrev, false);
    assert.equal(page.paginationCursorNext, ids[5]);
    assert.equal(page.data[0].text, true);
    assert.equal(page.data[0].events, undefined);
  });

  test('a templateProps filter keyed __proto__ is refused, not dropped into a search that matches every email', async () => {
    // JSON.parse makes `__proto__` an own key; a plain record cannot hold it, so it vanished from the
    // filter and the search answered all 25 emails for a prop no email can have (the send refuses it).
    const filter = JSON.parse('{"query": {"templateProps": {"__proto__": "gold"}}}');
    const refused = await app.api('POST', '/v1/email/search', filter);
    assert.equal(refused.status, 400, JSON.stringify(refused.body).slice(0, 300));
    assert.equal(refused.body.developerMessage, 'Invalid body. query.templateProps.__proto__: is not accepted as a key');
  });

  test('limit is 1 to 100', async () => {
    assert.equal((await search({ limit: 1 })).data.length, 1);
    assert.equal((await search({ limit: 100 })).data.length, 25);
    for (const limit of [0, 101, 'x', 1.5, true, ['5', '6']]) {
      const refused = await app.api('POST', '/v1/email/search', { limit });
      assert.equal(refused.body.errorCode, 'parameters-invalid', JSON.stringify(limit));
      assert.match(refused.body.developerMessage, /limit: must be a whole number from 1 to 100/);
    }
    // Two checks failing on one value say it once.
    assert.equal((await app.api('POST', '/v1/email/search', { limit: 1e308 })).body.developerMessage, 'Invalid body. limit: must be a whole number from 1 to 100');
    assert.equal(
      (await app.api('POST', '/v1/email/search', { query: { templateProps: { n: null } } })).body.developerMessage,
      'Invalid body. query.templateProps.n: must be a string, a number or a boolean',
    );
    // null or empty is the default; digits from the query string are a number; a repeated parameter is refused.
    assert.equal((await search({ limit: null })).data.length, 20);
    assert.equal((await search({}, '?limit=')).data.length, 20);
    assert.equal((await search({}, '?limit=3')).data.length, 3);
    assert.equal((await app.api('POST', '/v1/email/search?limit=5&limit=6', {})).status, 400);
    // A filter the search does not know is refused, not ignored: ignored, a misspelt one matched every email.
    const misspelt = await app.api('POST', '/v1/email/search', { query: { toaddress: 'nobody@example.com' } });
    assert.equal(misspelt.status, 400);
    assert.equal(misspelt.body.errorCode, 'parameters-invalid');
    assert.equal(
      misspelt.body.developerMessage,
      'Invalid body. query: "toaddress" is not a filter; the filters are search, toAddress, fromName, fromAddress, subject, templateName, templateId, automationId, messengerId, status, scheduledAt, templateProps',
    );
    assert.match((await app.api('POST', '/v1/email/search', { query: { to: 'a@b.c', cc: 'd@e.f' } })).body.developerMessage, /query: "to", "cc" are not filters; /);
    // Sent as null, an unknown filter is not sent, as every optional field is.
    assert.equal((await app.api('POST', '/v1/email/search', { query: { toaddress: null } })).status, 200);
    // A filter beside query instead of in it: ignored, as other unknown top-level fields are, it widened the
    // search to every email of the project. Other unknown top-level fields are still ignored.
    const beside = await app.api('POST', '/v1/email/search', { status: 'scheduled', query: { subject: 'x' } });
    assert.equal(beside.status, 400);
    assert.equal(beside.body.errorCode, 'parameters-invalid');
    assert.equal(beside.body.developerMessage, 'Invalid body. status: is a filter: put it inside query');
    assert.equal((await app.api('POST', '/v1/email/search', { includeEvents: true })).status, 200);
    // The two cursors ask for opposite pages: both is refused, not one silently dropped.
    const both = await app.api('POST', '/v1/email/search', { paginationCursorNext: 'a'.repeat(24), paginationCursorPrev: 'b'.repeat(24) });
    assert.equal(both.status, 400);
    assert.match(both.body.developerMessage, /paginationCursorPrev: give one cursor/);
    // A bad value in the query string is named there: it was "Invalid body. limit: …" for a body without one.
    const fromQuery = await app.api('POST', '/v1/email/search?limit=abc', {});
    assert.equal(fromQuery.body.errorCode, 'parameters-invalid');
    assert.equal(fromQuery.body.developerMessage, 'Invalid query. limit: must be a whole number from 1 to 100');
    assert.match((await app.api('POST', '/v1/email/search?paginationCursorNext=a&paginationCursorNext=b')).body.developerMessage, /^Invalid query\. paginationCursorNext: /);
    // The body wins over the query string, a bad query value it replaces included.
    assert.equal((await search({ limit: 2 }, '?limit=abc')).data.length, 2);
  });

  test('cursors page both ways, also from the query string; empty data past the end', async () => {
    const first = await search({ limit: 10 });
    const second = await search({ limit: 10, paginationCursorNext: first.paginationCursorNext });
    assert.deepEqual(second.data.map((e: any) => e.id), ids.slice(5, 15).reverse());
    assert.equal(second.hasPrev, true);
    assert.equal(second.hasMore, true);
    const third = await search({}, `?limit=10&paginationCursorNext=${second.paginationCursorNext}`);
    assert.deepEqual(third.data.map((e: any) => e.id), ids.slice(0, 5).reverse());
    assert.equal(third.hasMore, false);
    const back = await search({ limit: 10, paginationCursorPrev: third.paginationCursorPrev });
    assert.deepEqual(back.data.map((e: any) => e.id), second.data.map((e: any) => e.id));
    assert.equal(back.hasPrev, true);
    assert.equal(back.hasMore, true);
    const top = await search({ limit: 10, paginationCursorPrev: back.paginationCursorPrev });
    assert.deepEqual(top.data.map((e: any) => e.id), first.data.map((e: any) => e.id));
    assert.equal(top.hasPrev, false);
    const past = await search({ paginationCursorNext: ids[0] });
    assert.deepEqual(past.data, []);
    assert.equal(past.hasMore, false);
    // Past the end, the way back still leads to the last page, the cursor's own email included.
    assert.equal(past.hasPrev, true);
    const lastPage = await search({ limit: 5, paginationCursorPrev: past.paginationCursorPrev });
    assert.deepEqual(lastPage.data.map((e: any) => e.id), ids.slice(0, 5).reverse());
    assert.equal(lastPage.hasMore, false);
    // Before the newest, likewise forward.
    const beyond = await search({ paginationCursorPrev: ids[24] });
    assert.deepEqual(beyond.data, []);
    assert.equal(beyond.hasPrev, false);
    assert.equal(beyond.hasMore, true);
    const newest = await search({ limit: 3, paginationCursorNext: beyond.paginationCursorNext });
    assert.deepEqual(newest.data.map((e: any) => e.id), ids.slice(22, 25).reverse());
    // A filter that matches nothing: nothing either way.
    const none = await search({ paginationCursorNext: ids[10], query: { toAddress: 'nobody@example.com' } });
    assert.deepEqual([none.hasPrev, none.hasMore, none.paginationCursorPrev, none.paginationCursorNext], [false, false, null, null]);
    assert.equal((await app.api('POST', '/v1/email/search', { paginationCursorNext: 'nope' })).body.errorCode, 'parameters-invalid');
  });

  test('past the end of a filter whose only match is the cursor\'s own email, the way back leads to that email', async () => {
    // Guards the empty page's hasPrev probe including the cursor's row: a client that read the one match and
    // continued from it must still be able to page back to it (no newer match exists to make it true anyway).
    const only = await search({ query: { toAddress: 'u24@example.com' } });
    assert.deepEqual(only.data.map((e: any) => e.id), [ids[24]]);
    const past = await search({ query: { toAddress: 'u24@example.com' }, paginationCursorNext: only.paginationCursorNext });
    assert.deepEqual(past.data, []);
    assert.equal(past.hasMore, false);
    assert.equal(past.hasPrev, true);
    const back = await search({ query: { toAddress: 'u24@example.com' }, paginationCursorPrev: past.paginationCursorPrev });
    assert.deepEqual(back.data.map((e: any) => e.id), [ids[24]]);
  });

  const count = async (query: unknown) => (await search({ limit: 100, query })).data.length;

  test('every query field filters', async () => {
    assert.equal(await count({ toAddress: 'u3@example.com' }), 1);
    assert.equal(await count({ fromName: 'Odd Sender' }), 10);
    assert.equal(await count({ fromAddress: 'shop@sender.test' }), 5);
    // Addresses match without case, as the suppression list compares them; names and subjects exactly.
    assert.equal(await count({ toAddress: 'U3@Example.COM' }), 1);
    assert.equal(await count({ fromAddress: 'Shop@Sender.TEST' }), 5);
    assert.equal(await count({ toAddress: 'u3@example.co' }), 0);
    assert.equal(await count({ fromName: 'odd sender' }), 0);
    assert.equal(await count({ subject: 'Subject number 3' }), 1);
    assert.equal(await count({ templateName: 'Receipt' }), 5);
    assert.equal(await count({ templateId: 'cccccccccccccccccccccccc' }), 5);
    assert.equal(await count({ automationId: 'none' }), 0);
    assert.equal(await count({ messengerId: 'none' }), 0);
    assert.equal(await count({ status: 'scheduled' }), 1);
    assert.equal(await count({ status: ['scheduled', 'queued'] }), 25);
    assert.equal(await count({ scheduledAt: '2999-05-04T03:02:01.000Z' }), 1);
    assert.equal(await count({ scheduledAt: '2999-05-04' }), 1);
    assert.equal(await count({ templateProps: { tier: 'gold' } }), 2);
    assert.equal(await count({ templateProps: { tier: 'gold', n: '5' } }), 1);
    assert.equal(await count({ templateProps: { tier: 'gold', n: 5 } }), 1, 'a number in the query matches the stored text');
    assert.equal(await count({ search: 'number 1' }), 9);
    assert.equal(await count({ search: 'U2@EXAMPLE' }), 1);
    assert.equal(await count({ search: '100%' }), 0);
    assert.equal(await count({ fromName: 'Odd Sender', subject: 'Subject number 3' }), 1);
    const [hit] = (await search({ query: { templateProps: { tier: 'gold', n: '5' } } })).data;
    assert.deepEqual(hit.templateProps, [{ keyName: 'n', value: '5' }, { keyName: 'tier', value: 'gold' }]);
    assert.equal((await app.api('POST', '/v1/email/search', { query: { status: 5 } })).body.errorCode, 'parameters-invalid');
    // A typo'd status would look like an empty result: refused, naming the statuses there are.
    const typo = await app.api('POST', '/v1/email/search', { query: { status: ['delivered', 'bounced'] } });
    assert.equal(typo.status, 400);
    assert.match(typo.body.developerMessage, /each one of queued, scheduled, delivered, open, bounce, complaint, error, suppressed/);
  });

  test('a scheduledAt date-time without an offset means UTC, as when sending, whatever the host\'s time zone', async () => {
    assert.equal(await count({ scheduledAt: '2999-05-04T03:02:01' }), 1);
    // The same instant in the other forms RFC 3339 and ISO 8601 allow.
    for (const same of ['2999-05-04 03:02:01Z', '2999-05-04t03:02:01z', '2999-05-04T04:02:01+01', '2999-05-04T04:02:01+0100']) assert.equal(await count({ scheduledAt: same }), 1, same);
    // The search itself, in this thread, on a host in another zone (the worker thread keeps its own).
    const zone = process.env.TZ;
    process.env.TZ = 'America/New_York';
    try {
      const page = searchEmails(app.appliance.context.database.sqlite, app.appliance.defaultProjectId, { limit: 20, query: { scheduledAt: '2999-05-04T03:02:01' } }, (row) => row.id);
      assert.deepEqual(page.data, [ids[7]]);
    } finally {
      if (zone === undefined) delete process.env.TZ;
      else process.env.TZ = zone;
    }
  });

  test('a filter sent as null is a filter not sent', async () => {
    assert.equal(await count({ toAddress: null, status: null, scheduledAt: null, templateProps: null, search: null }), 25);
    assert.equal(await count({ toAddress: 'u3@example.com', fromName: null }), 1);
  });

  test('an empty JSON array where an object goes is an empty object (PHP writes [] for both): the PHP SDK\'s search() without arguments', async () => {
    const all = await app.api('POST', '/v1/email/search', []);
    assert.equal(all.status, 200, JSON.stringify(all.body));
    assert.equal(all.body.data.length, 20);
    assert.equal(await count([]), 25, "query: []");
    assert.equal(await count({ templateProps: [] }), 25, "query: {templateProps: []}, from ['templateProps' => $props] with none");
    assert.equal((await app.api('POST', '/v1/email/search', { query: { templateProps: ['x'] } })).status, 400);
    const nonEmpty = await app.api('POST', '/v1/email/search', [{ query: {} }]);
    assert.equal(nonEmpty.status, 400);
    assert.equal((await app.api('POST', '/v1/email/search', { query: ['x'] })).status, 400);
  });

  test('another project sees none of these', async () => {
    const child = await app.api('POST', '/v1/project', { name: 'Other' });
    assert.equal((await app.api('POST', '/v1/email/search', {}, { key: child.body.apiKey })).body.data.length, 0);
  });

  test('text filters stay exact through the trigram index: query syntax, case, deletes', async () => {
    const subject = 'Say "hi" AND NOT {x} : *';
    const sent = await app.api('POST', '/v1/email/send', { ...baseEmail, toAddress: 'quoted@example.com', subject, scheduledAt: '2999-01-01T00:00:00Z' });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    assert.equal(await count({ search: '"hi" AND NOT {x}' }), 1);
    assert.equal(await count({ subject }), 1);
    assert.equal(await count({ subject: subject.toUpperCase() }), 0, 'exact filters stay case-sensitive');
    assert.equal(await count({ search: 'SAY "HI"' }), 1, 'search stays case-insensitive');
    assert.equal((await app.api('DELETE', `/v1/email/${sent.body.id}`)).body.deleted, true);
    assert.equal(await count({ search: '"hi" AND NOT {x}' }), 0);
    assert.equal(await count({ subject }), 0);
  });

  test('an empty text is no text, in search as in GET', async () => {
    const sent = await app.api('POST', '/v1/email/send', { ...baseEmail, toAddress: 'no-text@example.com', html: '<p>x</p>', text: '', scheduledAt: '2999-01-01T00:00:00Z' });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    assert.equal((await app.api('GET', `/v1/email/${sent.body.id}`)).body.email.text, false);
    assert.equal((await search({ query: { toAddress: 'no-text@example.com' } })).data[0].text, false);
    assert.equal((await app.api('DELETE', `/v1/email/${sent.body.id}`)).body.deleted, true);
  });
});

describe('official Node SDK (sidemail) against the appliance', () => {
  test('sendEmail, sendMail, the error path and the contacts methods work unchanged', async () => {
    const require = createRequire(import.meta.url);
    const sidemail = require('sidemail')({ apiKey: app.apiKey, host: app.baseUrl });
    const sent = await sidemail.sendEmail({ ...baseEmail, toAddress: 'sdk@example.com' });
    assert.equal(sent.status, 'queued');
    const legacy = await sidemail.sendMail({ ...baseEmail, toAddress: 'sdk2@example.com' });
    assert.match(legacy.id, /^[0-9a-f]{24}$/);
    await assert.rejects(sidemail.sendEmail({ ...baseEmail, toAddress: 'bad' }), (error: any) => {
      assert.equal(error.errorCode, 'to-address-invalid');
      return true;
    });
    const found = await sidemail.performApiRequest(`email/${sent.id}`, null, { method: 'GET' });
    assert.equal(found.email.toAddress, 'sdk@example.com');
    const listed = await sidemail.performApiRequest('email/search', { query: { toAddress: 'sdk@example.com' } });
    assert.deepEqual(listed.data.map((e: any) => e.id), [sent.id]);
    const scheduled = await sidemail.sendEmail({ ...baseEmail, scheduledAt: '2999-01-01T00:00:00Z' });
    assert.deepEqual(await sidemail.performApiRequest(`email/${scheduled.id}`, null, { method: 'DELETE' }), { deleted: true });
    // Contacts, as the SDK's README shows them (it does not encode the address in the path).
    const created = await sidemail.contacts.createOrUpdate({ emailAddress: 'sdk+c@example.com', identifier: 'sdk-1', customProps: { name: 'Sdk User' } });
    assert.deepEqual(created, { status: 'created' });
    assert.deepEqual(await sidemail.contacts.createOrUpdate({ emailAddress: 'sdk+c@example.com', customProps: { name: 'Sdk' } }), { status: 'updated' });
    const contact = (await sidemail.contacts.find({ emailAddress: 'sdk+c@example.com' })).contact;
    assert.deepEqual([contact.emailAddress, contact.identifier, contact.customProps.map((p: any) => [p.keyName, p.value])], ['sdk+c@example.com', 'sdk-1', [['name', 'Sdk']]]);
    const contactList = await sidemail.contacts.list();
    assert.deepEqual([contactList.data.map((c: any) => c.emailAddress), contactList.hasMore], [['sdk+c@example.com'], false]);
    assert.deepEqual((await sidemail.contacts.list({ paginationCursorNext: contact.id })).data, []);
    // Paging as the spec ends a listing, until `data` is empty: the SDK drops a null cursor, so a last page
    // without one sent this loop back to the first page for ever.
    const pagedContacts: string[] = [];
    for (let page = await sidemail.contacts.list(), calls = 1; page.data.length > 0; page = await sidemail.contacts.list({ paginationCursorNext: page.paginationCursorNext }), calls++) {
      assert.ok(calls < 5, 'the pages end');
      pagedContacts.push(...page.data.map((c: any) => c.emailAddress));
    }
    assert.deepEqual(pagedContacts, ['sdk+c@example.com']);
    assert.deepEqual(await sidemail.contacts.delete({ emailAddress: 'sdk+c@example.com' }), { deleted: true });
    assert.deepEqual(await sidemail.contacts.find({ emailAddress: 'sdk+c@example.com' }), { contact: null });
    await assert.rejects(sidemail.contacts.createOrUpdate({ emailAddress: 'nope' }), (error: any) => {
      assert.equal(error.errorCode, 'parameters-invalid');
      return true;
    });
  });
});

describe('verified sending domain', () => {
  let dns: TestDnsServer;
  let strict: TestAppliance;
  before(async () => {
    dns = await startDnsServer();
    strict = await startAppliance({ env: { POSTINO_DNS_SERVERS: dns.address, POSTINO_DOMAINS_MAIL_HOSTNAME: 'mx.postino.test' } });
  });
  after(async () => {
    await strict?.stop();
    await dns?.stop();
  });

  test('fromAddress on a domain verified through DNS is accepted; before verification it is refused', async () => {
    const domain = (await strict.api('POST', '/v1/domains', { domain: 'verified.example.net' })).body;
    const body = { ...baseEmail, fromAddress: 'hello@verified.example.net' };
    assert.equal((await strict.api('POST', '/v1/email/send', body)).body.errorCode, 'from-address-unverified');
    publishRecords(dns, domain.dns);
    const verified = await strict.api('POST', `/v1/domains/${domain.id}/verify`);
    assert.equal(verified.body.status, 'success', JSON.stringify(verified.body));
    const res = await strict.api('POST', '/v1/email/send', body);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.status, 'queued');
    assert.equal((await strict.api('POST', '/v1/email/send', { ...body, fromAddress: 'hello@other.example.net' })).body.errorCode, 'from-address-unverified');
  });

  test('a scheduled email commits only while its sending domain is still verified (a delete between check and commit)', async () => {
    const { writes, clock } = strict.appliance.context;
    const projectId = strict.appliance.defaultProjectId;
    const scheduled = (domain: string) => {
      const args = acceptArgs(clock, projectId, 'to@example.org');
      const [item] = args.emails;
      item.email = { ...item.email, status: 'scheduled', fromAddress: `news@${domain}`, scheduledAt: clock.nowMs() + 3_600_000 };
      item.senderDomains = candidateDomains(domain);
      return { args, id: item.email.id };
    };
    const kept = scheduled('mail.verified.example.net');
    assert.deepEqual(await writes.call('emails.accept', kept.args), [{ id: kept.id, status: 'scheduled' }], 'its parent domain is verified');

    const domain = (await strict.api('POST', '/v1/domains', { domain: 'going.example.net' })).body;
    publishRecords(dns, domain.dns);
    assert.equal((await strict.api('POST', `/v1/domains/${domain.id}/verify`)).body.status, 'success');
    // Checked by the send (verified), then deleted before the send's write: nothing scheduled yet, so the delete goes through.
    const late = scheduled('going.example.net');
    assert.deepEqual((await strict.api('DELETE', `/v1/domains/${domain.id}`)).body, { deleted: true });
    await assert.rejects(writes.call('emails.accept', late.args), (error: AppError) => error.code === 'from-address-unverified');
    assert.equal(emailRow(strict, late.id), undefined, 'nothing stored');
  });

  /** Runs `send` with the domain deleted after the send's checks, just before its write commits. */
  async function deletingDomainBeforeCommit<T>(domainId: string, send: () => Promise<T>): Promise<T> {
    const { writes } = strict.appliance.context;
    const call = writes.call;
    writes.call = (async (name: string, args: unknown) => {
      if (name === 'emails.accept') {
        writes.call = call;
        assert.deepEqual((await strict.api('DELETE', `/v1/domains/${domainId}`)).body, { deleted: true });
      }
      return call.call(writes, name as never, args as never);
    }) as typeof writes.call;
    try {
      return await send();
    } finally {
      writes.call = call;
    }
  }

  test('a send whose sending domain is deleted between its check and its commit is refused, not queued to go out unsigned', async () => {
    const domain = (await strict.api('POST', '/v1/domains', { domain: 'leaving.example.net' })).body;
    publishRecords(dns, domain.dns);
    assert.equal((await strict.api('POST', `/v1/domains/${domain.id}/verify`)).body.status, 'success');
    // The delete lands while the send's write waits its turn (a batch rendering, a queue of writes).
    const sent = await deletingDomainBeforeCommit(domain.id, () => strict.api('POST', '/v1/email/send', { ...baseEmail, toAddress: 'late@example.org', fromAddress: 'app@leaving.example.net' }));
    assert.equal(sent.body.errorCode, 'from-address-unverified', JSON.stringify(sent.body));
  });

  test('a batch item whose sending domain is deleted between its check and its commit is named by its index', async () => {
    const staying = (await strict.api('POST', '/v1/domains', { domain: 'staying.example.net' })).body;
    const leaving = (await strict.api('POST', '/v1/domains', { domain: 'leaving-batch.example.net' })).body;
    for (const domain of [staying, leaving]) {
      publishRecords(dns, domain.dns);
      assert.equal((await strict.api('POST', `/v1/domains/${domain.id}/verify`)).body.status, 'success');
    }
    const sent = await deletingDomainBeforeCommit(leaving.id, () =>
      strict.api('POST', '/v1/email/send', [
        { ...baseEmail, toAddress: 'first@example.org', fromAddress: 'app@staying.example.net' },
        { ...baseEmail, toAddress: 'second@example.org', fromAddress: 'app@leaving-batch.example.net' },
      ]),
    );
    assert.equal(sent.status, 400, JSON.stringify(sent.body));
    assert.equal(sent.body.errorCode, 'from-address-unverified');
    // COMPAT.md "Email": one invalid item fails the whole batch, and the message names the item.
    assert.match(sent.body.developerMessage, /^batch item 1: fromAddress app@leaving-batch\.example\.net /);
  });
});

test('an address at an IDN domain is found by its Unicode form as by the A-label form stored (the one SMTP submission sends to)', async () => {
  const sent = await app.api('POST', '/v1/email/send', { ...baseEmail, toAddress: 'idn@xn--bcher-kva.example', scheduledAt: '2999-01-01T00:00:00Z' });
  try {
    for (const toAddress of ['idn@bücher.example', 'IDN@Bücher.Example', 'idn@xn--bcher-kva.example']) {
      assert.deepEqual((await search({ query: { toAddress } })).data.map((email: { id: string }) => email.id), [sent.body.id], toAddress);
    }
  } finally {
    assert.deepEqual((await app.api('DELETE', `/v1/email/${sent.body.id}`)).body, { deleted: true });
  }
});
