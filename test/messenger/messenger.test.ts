import { sendTime } from '../../src/messenger/service.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { simpleParser } from 'mailparser';
import { ManualClock } from '../../src/lib/clock.js';
import { listUnsubscribeHeaders } from '../../src/messenger/service.js';
import { startAppliance, type ApiResponse, type TestAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';

/**
 * Messenger drafts (spec §2.10, §3.2, §4.7) through the real appliance in capture mode: the draft API,
 * the checks made when a draft is queued, the scheduler's expansion into one email per subscribed
 * recipient, timezone scheduling, stats, and the RFC 8058 unsubscribe link the emails carry.
 */
let app: TestAppliance;
const clock = new ManualClock('2026-05-31T12:00:00.000Z');

before(async () => {
  app = await startAppliance({ clock, env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test' } });
});
after(async () => {
  await app?.stop();
});

type Call = (method: string, path: string, body?: unknown) => Promise<ApiResponse>;

/** A fresh linked project and calls made with its key. */
async function project(): Promise<Call> {
  const created = await app.api('POST', '/v1/project', { name: `messenger ${Math.random()}` });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const key: string = created.body.apiKey;
  return (method, path, body) => app.api(method, path, body, { key });
}

function assertError(res: ApiResponse, status: number, code: string, message: RegExp) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.errorCode, code);
  assert.match(res.body.developerMessage, message);
}

async function addContacts(call: Call, contacts: Record<string, unknown>[]) {
  for (const contact of contacts) {
    const res = await call('POST', '/v1/contacts', contact);
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
}

/** An email's stored text part. */
function sqlText(emailId: string): string {
  return (app.appliance.context.database.sqlite.prepare('select text from emails where id = ?').get(emailId) as { text: string }).text;
}

async function emailsOf(call: Call, messengerId: string): Promise<any[]> {
  const res = await call('POST', '/v1/email/search', { query: { messengerId }, limit: 100 });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.data;
}

const runDue = () => app.appliance.context.messenger.runDue(new Date(clock.nowMs()));
const broadcast = { fromAddress: 'news@sender.test', fromName: 'Sender News', subject: 'May news', html: '<p>Hello readers</p>' };

describe('the draft API', () => {
  test('a draft is created with the defaults of spec §2.10, read back, listed and deleted', async () => {
    const call = await project();
    const created = await call('POST', '/v1/messenger', {});
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const draft = created.body;
    assert.match(draft.id, /^[0-9a-f]{24}$/);
    assert.deepEqual(
      { ...draft, id: undefined },
      {
        id: undefined,
        subject: 'Untitled draft',
        fromName: null,
        fromAddress: null,
        html: null,
        richTextValue: null,
        templateId: null,
        templateProps: null,
        recipients: {},
        scheduledAt: null,
        isTimezoneScheduled: false,
        contentType: 'with-layout',
        status: 'draft',
        createdAt: '2026-05-31T12:00:00.000Z',
        updatedAt: '2026-05-31T12:00:00.000Z',
        error: null,
      },
    );
    assert.equal('stats' in draft, false, 'stats are defined only once the draft is queued');
    assert.deepEqual((await call('GET', `/v1/messenger/${draft.id}`)).body, { data: draft });
    const other = await project();
    assertError(await other('GET', `/v1/messenger/${draft.id}`), 404, 'not-found', /not found/);
    assertError(await other('PATCH', `/v1/messenger/${draft.id}`, { subject: 'mine now' }), 404, 'not-found', /not found/);
    assert.deepEqual((await other('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: false }, "another project's draft is not there");

    const second = (await call('POST', '/v1/messenger', { ...broadcast, richTextValue: { type: 'doc', content: [] }, recipients: { groupId: 'news' } })).body;
    assert.deepEqual(second.recipients, { groupId: ['news'] });
    assert.deepEqual(second.richTextValue, { type: 'doc', content: [] });
    const list = (await call('GET', '/v1/messenger')).body;
    assert.deepEqual({ ids: list.data.map((d: any) => d.id), pageCount: list.pageCount, totalCount: list.totalCount }, { ids: [second.id, draft.id], pageCount: 1, totalCount: 2 });
    const page = (await call('GET', '/v1/messenger?offset=1&limit=1')).body;
    assert.deepEqual({ ids: page.data.map((d: any) => d.id), pageCount: page.pageCount, hasMore: page.hasMore }, { ids: [draft.id], pageCount: 2, hasMore: false });

    assert.deepEqual((await call('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: true });
    assert.deepEqual((await call('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: false });
    assertError(await call('GET', `/v1/messenger/${draft.id}`), 404, 'not-found', /not found/);
  });

  test('an update changes only what it sends and answers {}; the draft read back may be sent back whole', async () => {
    const call = await project();
    const draft = (await call('POST', '/v1/messenger', broadcast)).body;
    clock.advance(1000);
    const patched = await call('PATCH', `/v1/messenger/${draft.id}`, { subject: 'June news', fromName: null });
    assert.equal(patched.status, 200);
    assert.deepEqual(patched.body, {});
    const read = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
    assert.deepEqual([read.subject, read.fromName, read.html, read.updatedAt], ['June news', null, broadcast.html, '2026-05-31T12:00:01.000Z']);
    const resent = await call('PATCH', `/v1/messenger/${draft.id}`, { ...read, html: '<p>Changed</p>' });
    assert.equal(resent.status, 200, JSON.stringify(resent.body));
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.html, '<p>Changed</p>');
    assertError(await call('PATCH', '/v1/messenger/0123456789abcdef01234567', { subject: 'x' }), 404, 'not-found', /not found/);
  });

  test('bad fields are refused by name, and nothing is stored', async () => {
    const call = await project();
    const cases: [unknown, RegExp][] = [
      [{ subjct: 'typo' }, /"subjct" is not a draft field/],
      [{ status: 'DONE' }, /status: can be set to draft or queued/],
      [{ contentType: 'markdown' }, /contentType: must be one of with-layout, no-layout, template/],
      [{ fromAddress: 'not an address' }, /fromAddress: must be a valid ASCII email address/],
      [{ fromName: 'x'.repeat(100) }, /fromName: must have fewer than 100 characters/],
      [{ subject: 'x'.repeat(1001) }, /subject: must have at most 1000 characters/],
      [{ recipients: { isSubscribed: false } }, /recipients.isSubscribed: accepts only true/],
      [{ recipients: { segment: 'vip' } }, /"segment" is not a recipients field/],
      [{ scheduledAt: 'tomorrow' }, /scheduledAt: must be an ISO 8601 date/],
      [{ templateProps: { n: { deep: 5 } } }, /templateProps.n: must be a string, a number, true or false/],
      [{ isTimezoneScheduled: 'yes' }, /isTimezoneScheduled: must be true or false/],
    ];
    for (const [body, message] of cases) assertError(await call('POST', '/v1/messenger', body), 400, 'parameters-invalid', message);
    assert.equal((await call('GET', '/v1/messenger')).body.totalCount, 0);
  });

  test('queueing checks the sender, the content, the recipients and the time, and says which is missing', async () => {
    const call = await project();
    const draft = (await call('POST', '/v1/messenger', {})).body;
    const queue = (extra: Record<string, unknown>) => call('PATCH', `/v1/messenger/${draft.id}`, { ...extra, status: 'queued' });
    assertError(await queue({}), 400, 'parameters-invalid', /fromAddress: is required to queue a draft/);
    assertError(await queue({ fromAddress: 'a@sender.test' }), 400, 'parameters-invalid', /html: is required to queue a draft whose contentType is with-layout/);
    assertError(await queue({ fromAddress: 'a@sender.test', contentType: 'template' }), 400, 'parameters-invalid', /templateId: is required/);
    assertError(await queue({ fromAddress: 'a@sender.test', contentType: 'template', templateId: 'nope' }), 404, 'template-not-found', /nope/);
    assertError(await queue({ ...broadcast, recipients: { filter: { rules: [{ field: 'shoeSize', value: 4 }] } } }), 400, 'parameters-invalid', /"shoeSize" is not a contact field/);
    assertError(await queue({ ...broadcast, scheduledAt: '2026-05-31T11:00:00Z' }), 400, 'parameters-invalid', /scheduledAt: must be in the future/);
    assertError(await queue({ ...broadcast, isTimezoneScheduled: true }), 400, 'parameters-invalid', /scheduledAt: is required when isTimezoneScheduled/);
    assertError(await queue({ ...broadcast, isTimezoneScheduled: true, scheduledAt: '2026-05-30T23:00:00Z' }), 400, 'parameters-invalid', /passed in every time zone/);
    // None of the refused updates changed the draft.
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'draft');
    const queued = await queue(broadcast);
    assert.equal(queued.status, 200, JSON.stringify(queued.body));
    const read = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
    assert.equal(read.status, 'queued');
    assert.deepEqual(read.stats, { totalRecipients: 0, unsubscribedTotal: 0, deliveriesTotal: 0, complaintsTotal: 0, bouncesTotal: 0, uniqueOpensTotal: 0 });
    // spec §3.2: a queued draft is still editable; taken back to draft, it waits again.
    assert.equal((await call('PATCH', `/v1/messenger/${draft.id}`, { status: 'draft' })).status, 200);
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'draft');
  });

  test('a sender must be on a verified domain of the project unless the sandbox setting says otherwise', async () => {
    const strict = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'capture' } });
    try {
      const res = await strict.api('POST', '/v1/messenger', { ...broadcast, status: 'queued' });
      assertError(res, 400, 'from-address-unverified', /news@sender.test is not on a verified sending domain/);
      assert.equal((await strict.api('GET', '/v1/messenger')).body.totalCount, 0);
    } finally {
      await strict.stop();
    }
  });
});

describe('sending a broadcast', () => {
  test('a queued draft becomes one email per subscribed recipient, with a one-click unsubscribe link; then DONE and read-only', async () => {
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'ann@inbox.test', groups: ['news'] },
      { emailAddress: 'bob@inbox.test', groups: ['news', 'vip'] },
      { emailAddress: 'cyd@inbox.test', groups: ['news'], isSubscribed: false },
      { emailAddress: 'dee@inbox.test', groups: ['other'] },
    ]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, html: '<p>Hello readers</p><p><a id="own" href="{unsubscribeUrl}">leave</a></p>', recipients: { groupId: 'news' }, status: 'queued' })).body;
    assert.equal(draft.status, 'queued');
    assert.equal(await runDue(), 1);
    const read = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
    assert.equal(read.status, 'DONE');
    const emails = await emailsOf(call, draft.id);
    assert.deepEqual(emails.map((e) => e.toAddress).sort(), ['ann@inbox.test', 'bob@inbox.test']);
    for (const email of emails) assert.deepEqual([email.subject, email.fromName, email.fromAddress, email.messengerId], ['May news', 'Sender News', 'news@sender.test', draft.id]);

    await waitUntil(async () => (await emailsOf(call, draft.id)).every((e) => e.status === 'delivered'), 'the broadcast delivered (captured)');
    const raw = (await call('GET', `/v1/captured/${emails[0].id}`)).body as unknown;
    // Quoted-printable soft line breaks joined again, so the html reads as written.
    const message = String(raw).replace(/=\r\n/g, '');
    assert.match(message, /List-Unsubscribe:\s+<https:\/\/mail\.example\.test\/t\/u\/[\w.-]+>/);
    assert.match(message, /List-Unsubscribe-Post: List-Unsubscribe=One-Click/);
    const projectId = (await call('GET', '/v1/project')).body.id;
    const unfolded = message.replace(/\r\n[ \t]+/g, ' ');
    assert.match(unfolded, new RegExp(`^List-Id: <${projectId}\\.sender\\.test>\r$`, 'mi'));
    assert.match(unfolded, new RegExp(`^Feedback-ID: ${draft.id}:${projectId}:broadcast:postino\r$`, 'mi'));
    assert.match(message, /Hello readers/);
    assert.match(message, /Unsubscribe<\/a>/, 'the layout footer links to the unsubscribe page');
    const ownLink = /id=3D"own" href=3D"([^"]+)"/.exec(message)?.[1];
    const footerLink = /href=3D"([^"]+)"[^>]*>Unsubscribe<\/a>/.exec(message)?.[1];
    assert.ok(ownLink?.startsWith('https://mail.example.test/t/u/'), `{unsubscribeUrl} in the html: ${ownLink}`);
    assert.equal(ownLink, footerLink);
    // A text part beside the html (html-only bulk mail scores as spam), the body's and the footer's links in it.
    const parsed = await simpleParser(String(raw));
    assert.ok(parsed.html);
    assert.match(parsed.text ?? '', new RegExp(`^Hello readers\n\nleave \\(${ownLink!.replace(/[.?]/g, '\\$&')}\\)\n`, 'm'));
    assert.ok(parsed.text?.includes(`Unsubscribe (${ownLink})`), parsed.text);
    assert.doesNotMatch(parsed.text ?? '', /postino|[<>]/, 'no marker or markup left');
    const stats = (await call('GET', `/v1/messenger/${draft.id}`)).body.data.stats;
    assert.deepEqual(stats, { totalRecipients: 2, unsubscribedTotal: 0, deliveriesTotal: 2, complaintsTotal: 0, bouncesTotal: 0, uniqueOpensTotal: 0 });

    assertError(await call('PATCH', `/v1/messenger/${draft.id}`, { subject: 'again' }), 409, 'conflict', /is DONE: only draft and queued drafts can be changed/);
    assert.equal(await runDue(), 0, 'nothing left to do');
    assert.equal((await emailsOf(call, draft.id)).length, 2, 'no second copy');
  });

  test('mail leaving the machine (mx) with no http.public_url: a broadcast cannot be queued, since its unsubscribe links would point to 127.0.0.1; a draft can be written', async () => {
    const direct = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
    try {
      assert.ok(direct.logs.some((line) => line.includes('nothing is tracked and broadcasts cannot be queued')));
      const queued = await direct.api('POST', '/v1/messenger', { ...broadcast, status: 'queued' });
      assertError(queued, 409, 'conflict', /^Broadcasts need http\.public_url set to the address recipients reach the appliance at: their unsubscribe links would point to http:\/\/127\.0\.0\.1:\d+\.$/);
      assert.equal((await direct.api('POST', '/v1/messenger', broadcast)).status, 200);
    } finally {
      await direct.stop();
    }
  });

  test('one-click (List-Unsubscribe-Post) is claimed only for an https link, as RFC 8058 §3 requires: http.public_url unset gives an http one', () => {
    assert.deepEqual(listUnsubscribeHeaders('https://mail.example.test/t/u/x'), { 'List-Unsubscribe': '<https://mail.example.test/t/u/x>', 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' });
    assert.deepEqual(listUnsubscribeHeaders('http://127.0.0.1:8080/t/u/x'), { 'List-Unsubscribe': '<http://127.0.0.1:8080/t/u/x>' });
  });

  test('stats: an open counts once per email, and an email that was opened and then moved on still counts as opened', async () => {
    const call = await project();
    await addContacts(call, [{ emailAddress: 'ola@inbox.test' }, { emailAddress: 'pia@inbox.test' }, { emailAddress: 'quinn@inbox.test' }, { emailAddress: 'rae@inbox.test' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    await runDue();
    await waitUntil(async () => (await emailsOf(call, draft.id)).every((e) => e.status === 'delivered'), 'the broadcast delivered (captured)');
    const byAddress = Object.fromEntries((await emailsOf(call, draft.id)).map((e) => [e.toAddress, e.id]));
    const pixelOf = async (emailId: string) => {
      const raw = String((await call('GET', `/v1/captured/${emailId}`)).body).replace(/=\r\n/g, '');
      return /src=3D"https:\/\/mail\.example\.test(\/t\/o\/[^"]+)"/.exec(raw)![1];
    };
    for (const address of ['ola@inbox.test', 'ola@inbox.test', 'pia@inbox.test']) {
      assert.equal((await fetch(`${app.baseUrl}${await pixelOf(byAddress[address])}`)).status, 200);
    }
    // Later events (bounces.test.ts and delivery tests cover how they happen): pia, opened, reports spam;
    // quinn bounces late.
    const { sqlite } = app.appliance.context.database;
    sqlite.prepare(`update emails set status = 'complaint' where id = ?`).run(byAddress['pia@inbox.test']);
    sqlite.prepare(`update emails set status = 'bounce' where id = ?`).run(byAddress['quinn@inbox.test']);
    const stats = (await call('GET', `/v1/messenger/${draft.id}`)).body.data.stats;
    assert.deepEqual(stats, { totalRecipients: 4, unsubscribedTotal: 0, deliveriesTotal: 3, complaintsTotal: 1, bouncesTotal: 1, uniqueOpensTotal: 2 });
  });

  test('recipients matched by any of their filters are still subscribed ones only', async () => {
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'sam@inbox.test', groups: ['beta'] },
      { emailAddress: 'tia@inbox.test', groups: ['beta'], isSubscribed: false },
      { emailAddress: 'uma@inbox.test', customProps: { plan: 'pro' } },
      { emailAddress: 'vic@inbox.test', customProps: { plan: 'pro' }, isSubscribed: false },
      { emailAddress: 'wes@inbox.test' },
    ]);
    const recipients = { match: 'any', groupId: 'beta', filter: { rules: [{ field: 'customProps.plan', value: 'pro' }] } };
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, recipients, status: 'queued' })).body;
    await runDue();
    assert.deepEqual((await emailsOf(call, draft.id)).map((e) => e.toAddress).sort(), ['sam@inbox.test', 'uma@inbox.test']);
  });

  test("each email is personalised: the contact's own properties over the draft's templateProps, and emailAddress", async () => {
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'ann@inbox.test', customProps: { firstName: 'Ann <b>', seats: 5 } },
      { emailAddress: 'ben@inbox.test' },
    ]);
    const html = '<style>p{color:red}</style><p>Hi {firstName}, {seats} seats, sent to {emailAddress}.</p>';
    const template = (await call('POST', '/v1/templates', { name: 'Personal', subject: 'Seats for {firstName}', content: [{ type: 'text', text: 'Hello {firstName}' }] })).body.data;
    const drafts = {
      plain: { contentType: 'no-layout', html },
      layout: { contentType: 'with-layout', html },
      template: { contentType: 'template', templateId: template.id },
    };
    const htmlOf: Record<string, Record<string, string>> = {};
    const textOf: Record<string, Record<string, string>> = {};
    const subjectOf: Record<string, Record<string, string>> = {};
    for (const [kind, content] of Object.entries(drafts)) {
      const draft = (await call('POST', '/v1/messenger', { ...broadcast, subject: 'News for {firstName}', templateProps: { firstName: 'friend' }, ...content, status: 'queued' })).body;
      await runDue();
      for (const summary of await emailsOf(call, draft.id)) {
        const email = (await call('GET', `/v1/email/${summary.id}`)).body.email;
        (htmlOf[kind] ??= {})[email.toAddress] = await (await fetch(email.htmlReferenceUrl.replace('https://mail.example.test', app.baseUrl))).text();
        (subjectOf[kind] ??= {})[email.toAddress] = email.subject;
        (textOf[kind] ??= {})[email.toAddress] = sqlText(summary.id);
      }
    }
    for (const kind of ['plain', 'layout']) {
      // The text part is personalised as the html is (made once per run from the draft's html, props put in per recipient).
      assert.ok(textOf[kind]['ann@inbox.test'].includes('Hi Ann <b>, 5 seats, sent to ann@inbox.test.'), textOf[kind]['ann@inbox.test']);
      assert.ok(textOf[kind]['ben@inbox.test'].includes('Hi friend, {seats} seats, sent to ben@inbox.test.'), textOf[kind]['ben@inbox.test']);
      assert.doesNotMatch(textOf[kind]['ben@inbox.test'], /color:red/, 'no style in the text');
      assert.match(htmlOf[kind]['ann@inbox.test'], /<p>Hi Ann &lt;b&gt;, 5 seats, sent to ann@inbox\.test\.<\/p>/, kind);
      assert.match(htmlOf[kind]['ben@inbox.test'], /<p>Hi friend, \{seats\} seats, sent to ben@inbox\.test\.<\/p>/, `${kind}: the draft's default, an unknown name left as written`);
      assert.match(htmlOf[kind]['ben@inbox.test'], /<style>p\{color:red\}<\/style>/, `${kind}: the html's own braces untouched`);
      assert.deepEqual(subjectOf[kind], { 'ann@inbox.test': 'News for Ann <b>', 'ben@inbox.test': 'News for friend' }, kind);
    }
    assert.match(htmlOf.layout['ann@inbox.test'], /<title>News for Ann &lt;b&gt;<\/title>/, "the layout's title is the recipient's subject");
    assert.match(htmlOf.template['ann@inbox.test'], /Hello Ann &lt;b&gt;/);
    assert.match(htmlOf.template['ben@inbox.test'], /Hello friend/);
    assert.deepEqual(subjectOf.template, { 'ann@inbox.test': 'News for Ann <b>', 'ben@inbox.test': 'News for friend' });
  });

  test("no-layout html and template content; {unsubscribeUrl} is each recipient's own link", async () => {
    const call = await project();
    await addContacts(call, [{ emailAddress: 'eve@inbox.test' }, { emailAddress: 'fay@inbox.test' }]);
    const plain = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<p>Plain <a href="{unsubscribeUrl}">leave</a></p>', status: 'queued' })).body;
    const template = (
      await call('POST', '/v1/templates', { name: 'Digest', subject: 'Digest {week}', content: [{ type: 'text', text: 'Week {week}. [Leave]({unsubscribeUrl})' }] })
    ).body.data;
    assert.ok(template.id, JSON.stringify(template));
    const templated = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'template', templateId: template.id, templateProps: { week: '22' }, status: 'queued' })).body;
    await runDue();
    const plainEmails = await emailsOf(call, plain.id);
    const links = new Set<string>();
    for (const summary of plainEmails) {
      const email = (await call('GET', `/v1/email/${summary.id}`)).body.email;
      const html = await (await fetch(email.htmlReferenceUrl.replace('https://mail.example.test', app.baseUrl))).text();
      const link = /href="(https:\/\/mail\.example\.test\/t\/u\/[^"]+)"/.exec(html)?.[1];
      assert.ok(link, html);
      assert.doesNotMatch(html, /<table/, 'no layout around it');
      assert.equal(email.text, true, 'a text part too');
      assert.equal(sqlText(summary.id), `Plain leave (${link})`);
      links.add(link);
    }
    assert.equal(links.size, 2, 'each recipient has a link of their own');
    const templateEmails = await emailsOf(call, templated.id);
    assert.equal(templateEmails.length, 2);
    const email = (await call('GET', `/v1/email/${templateEmails[0].id}`)).body.email;
    assert.equal(email.templateId, template.id);
    const props = Object.fromEntries(email.templateProps.map((pair: { keyName: string; value: unknown }) => [pair.keyName, pair.value]));
    assert.equal(props.week, '22');
    assert.match(props.unsubscribeUrl, /^https:\/\/mail\.example\.test\/t\/u\//);
    assert.equal(email.subject, 'May news', "the draft's subject");
    const html = await (await fetch(email.htmlReferenceUrl.replace('https://mail.example.test', app.baseUrl))).text();
    assert.match(html, /Week 22\. <a href="https:\/\/mail\.example\.test\/t\/u\/[^"]+"[^>]*>Leave<\/a>/);

    // A draft whose subject was never set (spec §2.10's placeholder) takes the template's, personalised.
    const { subject: _unset, ...withoutSubject } = broadcast;
    const untitled = (await call('POST', '/v1/messenger', { ...withoutSubject, contentType: 'template', templateId: template.id, templateProps: { week: '23' }, status: 'queued' })).body;
    assert.equal(untitled.subject, 'Untitled draft');
    await runDue();
    const untitledEmails = await emailsOf(call, untitled.id);
    assert.equal(untitledEmails.length, 2);
    assert.deepEqual(new Set(untitledEmails.map((summary: { subject: string }) => summary.subject)), new Set(['Digest 23']));
  });

  test('a scheduled draft waits for its time', async () => {
    const call = await project();
    await addContacts(call, [{ emailAddress: 'gil@inbox.test' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-05-31T12:30:00Z', status: 'queued' })).body;
    await runDue();
    assert.equal((await emailsOf(call, draft.id)).length, 0);
    clock.set('2026-05-31T12:30:00.000Z');
    await runDue();
    assert.equal((await emailsOf(call, draft.id)).length, 1);
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'DONE');
  });

  test('scheduled by time zone, each recipient gets it at the local time; the draft is scheduled until the last one goes', async () => {
    clock.set('2026-06-01T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'tokyo@inbox.test', timezone: 'Asia/Tokyo' },
      { emailAddress: 'newyork@inbox.test', timezone: 'America/New_York' },
      { emailAddress: 'nozone@inbox.test' },
      // UTC+14: 09:00 there is the moment of the run, so it is sent at once, not scheduled.
      { emailAddress: 'kiritimati@inbox.test', timezone: 'Pacific/Kiritimati' },
    ]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-06-02T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    await runDue();
    assert.equal((await emailsOf(call, draft.id)).length, 0, 'not before the first zone reaches 9:00 (UTC+14)');
    clock.set('2026-06-01T19:00:00.000Z');
    await runDue();
    const emails = await emailsOf(call, draft.id);
    const now = emails.find((e) => e.toAddress === 'kiritimati@inbox.test');
    assert.ok(now && now.status !== 'scheduled' && (now.scheduledAt ?? null) === null, JSON.stringify(now));
    const sendTimes = Object.fromEntries(emails.filter((e) => e !== now).map((e) => [e.toAddress, [e.status, e.scheduledAt]]));
    assert.deepEqual(sendTimes, {
      'tokyo@inbox.test': ['scheduled', '2026-06-02T00:00:00.000Z'],
      'newyork@inbox.test': ['scheduled', '2026-06-02T13:00:00.000Z'],
      'nozone@inbox.test': ['scheduled', '2026-06-02T09:00:00.000Z'],
    });
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'scheduled');
    clock.set('2026-06-02T13:00:00.000Z');
    await app.appliance.context.emails.releaseScheduled(new Date(clock.nowMs()));
    await runDue();
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'DONE');
  });

  test("a zone this Node does not know (a database from a newer ICU) is no zone: the broadcast goes on, the contact's offset is null; a draft that throws waits a minute and holds up no other", async () => {
    clock.set('2026-06-01T12:00:00.000Z');
    const sqlite = app.appliance.context.database.sqlite;
    const call = await project();
    await addContacts(call, [{ emailAddress: 'mars@inbox.test', timezone: 'Europe/Prague' }]);
    sqlite.prepare(`update contacts set timezone = 'Mars/Olympus' where email_address = 'mars@inbox.test'`).run();
    const contact = (await call('GET', '/v1/contacts/mars@inbox.test')).body.contact;
    assert.deepEqual([contact.timezone, contact.timezoneUtcOffset], ['Mars/Olympus', null]);
    assert.equal((await call('GET', '/v1/contacts')).status, 200);
    const zoned = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-06-02T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    // Another project's draft, broken (its recipients rewritten by hand), first in line.
    const other = await project();
    await addContacts(other, [{ emailAddress: 'first@inbox.test' }]);
    const broken = (await other('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    sqlite.prepare(`update messenger_drafts set recipients = 'null' where id = ?`).run(broken.id);
    const later = await project();
    await addContacts(later, [{ emailAddress: 'later@inbox.test' }]);
    const fine = (await later('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    clock.set('2026-06-02T09:00:00.000Z');
    await runDue();
    assert.deepEqual((await emailsOf(call, zoned.id)).map((e) => [e.toAddress, e.scheduledAt ?? null]), [['mars@inbox.test', null]], 'sent at 09:00 UTC, as without a zone');
    assert.equal((await emailsOf(later, fine.id)).length, 1, 'the broadcast after the broken one went out');
    const failed = (await other('GET', `/v1/messenger/${broken.id}`)).body.data;
    assert.deepEqual([failed.status, failed.error], ['processing', 'An unexpected error stopped this broadcast (it is in the log); it is tried again in a minute.']);
    assert.ok(app.logs.some((line) => line.includes('"messenger broadcast failed"') && line.includes(broken.id)));
  });

  test('a write lock held by another process during an expansion is the storage state, not the broadcast\'s error: nothing recorded on the draft, it goes on once released', async () => {
    const call = await project();
    await addContacts(call, [{ emailAddress: 'locked@inbox.test' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    const sqlite = app.appliance.context.database.sqlite;
    // Claimed by an earlier run, as a draft a stop or a refusal left half-expanded is.
    sqlite.prepare(`update messenger_drafts set status = 'processing' where id = ?`).run(draft.id);
    const operator = new Database(sqlite.name);
    const logsBefore = app.logs.length;
    try {
      operator.prepare('BEGIN IMMEDIATE').run();
      await runDue();
      const waiting = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
      assert.deepEqual([waiting.status, waiting.error], ['processing', null]);
      assert.ok(!app.logs.slice(logsBefore).some((line) => /"level":"(error|warn)".*messenger broadcast/.test(line)), app.logs.slice(logsBefore).join('\n'));
    } finally {
      if (operator.inTransaction) operator.prepare('COMMIT').run();
      operator.close();
    }
    await runDue();
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'DONE');
    assert.equal((await emailsOf(call, draft.id)).length, 1);
  });

  test('a recipient whose local time is less than a minute ahead when the run reaches them is sent at once', async () => {
    clock.set('2026-01-14T12:00:00.000Z');
    const call = await project();
    // Chatham Islands in January: UTC+13:45, so 09:00 there is 19:15 UTC; the run comes at 19:14:30.
    await addContacts(call, [{ emailAddress: 'chatham@inbox.test', timezone: 'Pacific/Chatham' }, { emailAddress: 'utc@inbox.test' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-01-15T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    clock.set('2026-01-14T19:14:30.000Z');
    await runDue();
    const emails = Object.fromEntries((await emailsOf(call, draft.id)).map((e) => [e.toAddress, e.scheduledAt ?? null]));
    assert.deepEqual(emails, { 'chatham@inbox.test': null, 'utc@inbox.test': '2026-01-15T09:00:00.000Z' });
    // Its waiting email would be released by later tests' clocks.
    assert.deepEqual((await call('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: true });
  });

  test("a recipient whose local time passes while the batch waits to be rendered (the render room, the writer) is sent at once, not an error", async () => {
    clock.set('2026-01-16T12:00:00.000Z');
    const call = await project();
    // Chatham: 09:00 there is 19:15 UTC; the run comes at 19:13:30, 90 s before, and its batch waits 2 minutes.
    await addContacts(call, [{ emailAddress: 'late-chatham@inbox.test', timezone: 'Pacific/Chatham' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-01-17T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    clock.set('2026-01-16T19:13:30.000Z');
    const emails = app.appliance.context.emails;
    const original = emails.acceptBroadcast;
    emails.acceptBroadcast = (...args) => (clock.advance(120_000), original.apply(emails, args));
    try {
      await runDue();
    } finally {
      emails.acceptBroadcast = original;
    }
    const [email] = await emailsOf(call, draft.id);
    assert.deepEqual([email.toAddress, email.status === 'error', email.scheduledAt ?? null], ['late-chatham@inbox.test', false, null], JSON.stringify(email));
    assert.deepEqual((await call('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: true });
  });

  test("deleting a scheduled broadcast removes its emails still waiting for a recipient's time", async () => {
    clock.set('2026-06-10T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'hal@inbox.test', timezone: 'America/Los_Angeles' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-06-11T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    clock.set('2026-06-10T19:00:00.000Z');
    await runDue();
    assert.equal((await emailsOf(call, draft.id)).length, 1);
    assert.deepEqual((await call('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: true });
    assert.equal((await emailsOf(call, draft.id)).length, 0);
  });

  test('a deletion cut short (a crash after its first write): the draft is gone, its emails are never released, and the next run finishes it', async () => {
    clock.set('2026-06-12T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'ivy@inbox.test', timezone: 'America/Chicago' }, { emailAddress: 'jan@inbox.test', timezone: 'Europe/Berlin' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-06-13T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    clock.set('2026-06-12T19:00:00.000Z');
    await runDue();
    assert.deepEqual((await emailsOf(call, draft.id)).map((e) => e.status), ['scheduled', 'scheduled']);
    // What remove() writes first; the process then died before the batches.
    const { sqlite } = app.appliance.context.database;
    sqlite.prepare(`update messenger_drafts set deleting = 1 where id = ?`).run(draft.id);
    assertError(await call('GET', `/v1/messenger/${draft.id}`), 404, 'not-found', /not found/);
    assert.equal((await call('GET', '/v1/messenger')).body.totalCount, 0);
    assert.deepEqual((await call('DELETE', `/v1/messenger/${draft.id}`)).body, { deleted: false });

    clock.set('2026-06-13T15:00:00.000Z');
    assert.equal(await app.appliance.context.emails.releaseScheduled(new Date(clock.nowMs())), 0, 'none of its emails is released');
    assert.equal((await emailsOf(call, draft.id)).length, 2);
    await runDue();
    assert.equal((await emailsOf(call, draft.id)).length, 0);
    assert.equal(sqlite.prepare(`select count(*) from messenger_drafts where id = ?`).pluck().get(draft.id), 0);
  });

  test('an expansion that cannot go on keeps its draft processing and shows why (its template was deleted)', async () => {
    clock.set('2026-06-20T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'ida@inbox.test' }]);
    const template = (await call('POST', '/v1/templates', { name: 'Short lived', subject: 'Hi', content: [{ type: 'text', text: 'Hi' }] })).body.data;
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'template', templateId: template.id, status: 'queued' })).body;
    assert.equal((await call('DELETE', `/v1/templates/${template.id}`)).status, 200);
    await runDue();
    const stuck = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
    assert.equal(stuck.status, 'processing');
    assert.match(stuck.error, /template/i);
    assert.equal((await emailsOf(call, draft.id)).length, 0);
    assert.ok(app.logs.some((line) => line.includes('messenger broadcast stopped')));
  });
});

describe('unsubscribing', () => {
  async function sentLink(call: Call, address: string): Promise<{ draftId: string; link: string }> {
    await addContacts(call, [{ emailAddress: address }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<a href="{unsubscribeUrl}">x</a>', status: 'queued' })).body;
    await runDue();
    const [summary] = await emailsOf(call, draft.id);
    const email = (await call('GET', `/v1/email/${summary.id}`)).body.email;
    const html = await (await fetch(email.htmlReferenceUrl.replace('https://mail.example.test', app.baseUrl))).text();
    return { draftId: draft.id, link: /href="https:\/\/mail\.example\.test(\/t\/u\/[^"]+)"/.exec(html)![1] };
  }

  test('a one-click POST (RFC 8058) unsubscribes the contact, counts once for the broadcast and tells the webhooks once; GET only asks', async () => {
    const call = await project();
    const hook = await call('POST', '/v1/webhooks', { url: 'https://hooks.example.test/in', events: ['contact.unsubscribed'] });
    assert.equal(hook.status, 201, JSON.stringify(hook.body));
    const { draftId, link } = await sentLink(call, 'jo@inbox.test');
    const asked = await fetch(`${app.baseUrl}${link}`);
    assert.equal(asked.status, 200);
    assert.match(await asked.text(), /Stop these emails to <strong>jo@inbox.test<\/strong>\?/);
    assert.equal((await call('GET', '/v1/contacts/jo@inbox.test')).body.contact.isSubscribed, true, 'a GET (a link scanner) unsubscribes nobody');
    assert.match(asked.headers.get('content-security-policy')!, /default-src 'none'/);

    const oneClick = () =>
      fetch(`${app.baseUrl}${link}`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' });
    const first = await oneClick();
    assert.equal(first.status, 200);
    assert.match(await first.text(), /You are unsubscribed/);
    const contact = (await call('GET', '/v1/contacts/jo@inbox.test')).body.contact;
    assert.deepEqual([contact.isSubscribed, contact.unsubscribedAt], [false, '2026-06-20T12:00:00.000Z']);
    assert.equal((await oneClick()).status, 200);
    assert.equal((await call('GET', `/v1/messenger/${draftId}`)).body.data.stats.unsubscribedTotal, 1);
    const events = app.appliance.context.database.sqlite.prepare(`select type, data from webhook_events where project_id = ?`).all(contact.projectId) as { type: string; data: string }[];
    assert.deepEqual(
      events.map((event) => ({ type: event.type, data: JSON.parse(event.data) })),
      [{ type: 'contact.unsubscribed', data: { contactId: contact.id, emailAddress: 'jo@inbox.test', messengerId: draftId, unsubscribedAt: '2026-06-20T12:00:00.000Z' } }],
    );
    assert.match(await (await fetch(`${app.baseUrl}${link}`)).text(), /You are unsubscribed/);

    // The next broadcast leaves the contact out.
    const next = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    await runDue();
    assert.equal((await emailsOf(call, next.id)).length, 0);
  });

  test('a forged or cut link is a 404 page, and changes nothing', async () => {
    const call = await project();
    const { link } = await sentLink(call, 'kit@inbox.test');
    for (const bad of [`${link.slice(0, -2)}xx`, '/t/u/nonsense']) {
      const res = await fetch(`${app.baseUrl}${bad}`, { method: 'POST' });
      assert.equal(res.status, 404);
      assert.match(await res.text(), /This link is not valid/);
    }
    assert.equal((await call('GET', '/v1/contacts/kit@inbox.test')).body.contact.isSubscribed, true);
  });
});

describe('a broadcast meets edits, bad data and changing contacts', () => {
  /**
   * Holds the write of a draft's first batch until `release()`: the run is then provably in the middle
   * of that broadcast while the test changes things. The service calls `writes.call` on the shared queue.
   */
  function holdFirstBatchOf(draftId: string) {
    const writes = app.appliance.context.writes;
    const original = writes.call;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let reached!: () => void;
    const held = new Promise<void>((resolve) => (reached = resolve));
    let first = true;
    writes.call = (async (name: string, args: { draftId?: string }) => {
      if (name === 'messenger.expand' && args.draftId === draftId && first) {
        first = false;
        reached();
        await gate;
      }
      return original.call(writes, name as never, args as never);
    }) as typeof writes.call;
    return { held, release: () => (release(), (writes.call = original)) };
  }

  /** Records each committed broadcast batch (`messenger.expand`): where it went on from, through where, and how many emails. */
  function recordBatches() {
    const batches: { from: string | null; through: string; emails: number }[] = [];
    const writes = app.appliance.context.writes;
    const original = writes.call;
    writes.call = ((name: string, args: { from: string | null; through: string; accept: { emails: unknown[] } }) => {
      if (name === 'messenger.expand') batches.push({ from: args.from, through: args.through, emails: args.accept.emails.length });
      return original.call(writes, name as never, args as never);
    }) as typeof writes.call;
    return { batches, stop: () => void (writes.call = original) };
  }

  test('a draft changed while the run works on another is sent as it is when its turn comes (here: moved to tomorrow)', async () => {
    clock.set('2026-07-01T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'amy@inbox.test' }]);
    const first = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    clock.advance(1);
    const second = (await call('POST', '/v1/messenger', { ...broadcast, subject: 'Old subject', status: 'queued' })).body;
    const hold = holdFirstBatchOf(first.id);
    const run = runDue();
    await hold.held;
    const patched = await call('PATCH', `/v1/messenger/${second.id}`, { subject: 'New subject', scheduledAt: '2026-07-02T12:00:00Z' });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    hold.release();
    await run;
    assert.equal((await emailsOf(call, first.id)).length, 1);
    const later = (await call('GET', `/v1/messenger/${second.id}`)).body.data;
    assert.deepEqual([later.status, later.subject], ['queued', 'New subject']);
    assert.equal((await emailsOf(call, second.id)).length, 0, 'not sent before its new time');
    clock.set('2026-07-02T12:00:00.000Z');
    await runDue();
    assert.deepEqual((await emailsOf(call, second.id)).map((e) => e.subject), ['New subject']);
  });

  test('a recipient whose email cannot be rendered gets an error email saying why; the others get theirs', async () => {
    clock.set('2026-07-03T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'ok1@inbox.test', customProps: { firstName: 'Ola' } },
      // Twice in the subject, this name renders past the subject's 10,000 characters.
      { emailAddress: 'long@inbox.test', customProps: { firstName: 'x'.repeat(6_000) } },
      { emailAddress: 'ok2@inbox.test', customProps: { firstName: 'Pia' } },
    ]);
    const template = (await call('POST', '/v1/templates', { name: 'Greeting', subject: 'Hi', content: [{ type: 'text', text: 'Hello {firstName}' }] })).body.data;
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, subject: 'Hi {firstName} {firstName}', contentType: 'template', templateId: template.id, status: 'queued' })).body;
    await runDue();
    const read = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
    assert.deepEqual([read.status, read.error, read.stats.totalRecipients], ['DONE', null, 3]);
    const byAddress = Object.fromEntries((await emailsOf(call, draft.id)).map((e) => [e.toAddress, e]));
    assert.equal(byAddress['long@inbox.test'].status, 'error');
    assert.notEqual(byAddress['ok1@inbox.test'].status, 'error');
    assert.notEqual(byAddress['ok2@inbox.test'].status, 'error');
    const failed = (await call('GET', `/v1/email/${byAddress['long@inbox.test'].id}`)).body.email;
    assert.equal(failed.events[0].type, 'error');
    assert.match(failed.events[0].message, /subject renders to more than 10,000 characters/);
    assert.equal(failed.htmlReferenceUrl, undefined);

    // A with-layout email whose text the contact's property makes longer than a render may make.
    const html = `<p>${'{firstName} '.repeat(400)}</p>`;
    const wide = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'with-layout', html, status: 'queued' })).body;
    await runDue();
    const wideByAddress = Object.fromEntries((await emailsOf(call, wide.id)).map((e) => [e.toAddress, e]));
    assert.deepEqual(['long', 'ok1', 'ok2'].map((name) => wideByAddress[`${name}@inbox.test`].status === 'error'), [true, false, false]);
    const tooWide = (await call('GET', `/v1/email/${wideByAddress['long@inbox.test'].id}`)).body.email;
    assert.match(tooWide.events[0].message, /The rendered email's text is larger than 2,048,000 characters\./);
  });

  test("one contact's properties too large for its email (with-layout) make that recipient's email an error, not the whole broadcast's: it went on being tried every minute, and nobody got anything", async () => {
    clock.set('2026-07-04T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'small1@inbox.test', customProps: { big: 'small' } },
      { emailAddress: 'huge@inbox.test', customProps: { big: 'x'.repeat(10_000) } },
      { emailAddress: 'small2@inbox.test', customProps: { big: 'small' } },
    ]);
    // 700 × 10,000 characters: past the 6,144,000 an email may render to, for this contact only.
    const body = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'with-layout', html: `<p>${'{big} '.repeat(700)}</p>`, status: 'queued' })).body;
    // A subject of 200 × 10,000 characters for the same contact: past the 10,000 a subject may render to.
    const subject = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', subject: '{big}'.repeat(200), status: 'queued' })).body;
    await runDue();
    for (const [draft, why] of [[body, /The rendered email is larger than 6,144,000 characters\./], [subject, /The subject renders to more than 10,000 characters/]] as const) {
      const read = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
      assert.deepEqual([read.status, read.error, read.stats.totalRecipients], ['DONE', null, 3]);
      const byAddress = Object.fromEntries((await emailsOf(call, draft.id)).map((e) => [e.toAddress, e]));
      assert.deepEqual(['small1', 'huge', 'small2'].map((name) => byAddress[`${name}@inbox.test`].status === 'error'), [false, true, false]);
      const failed = (await call('GET', `/v1/email/${byAddress['huge@inbox.test'].id}`)).body.email;
      assert.match(failed.events[0].message, why);
      assert.ok(failed.subject.length <= 1_000, 'the error email keeps the draft\'s subject, not the rendered one');
    }
  });

  test('a no-layout broadcast whose html places no {unsubscribeUrl} gets a visible unsubscribe link at its end, in the html and the text', async () => {
    clock.set('2026-07-04T13:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'lea@inbox.test' }]);
    const bare = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<html><body><p>Just content</p></body></html>', status: 'queued' })).body;
    const placed = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<p>Hi <a href="{unsubscribeUrl}">leave</a></p>', status: 'queued' })).body;
    const ownList = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<p>Hi</p><a href="https://crm.example.test/optout">Unsubscribe here</a>', status: 'queued' })).body;
    // A {unsubscribeUrl} and a </body> in comments show nothing: the link is added after the comment.
    const commented = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<p>Hi</p><!-- <a href="{unsubscribeUrl}">x</a> </body> -->', status: 'queued' })).body;
    await runDue();
    const { sqlite } = app.appliance.context.database;
    const stored = (draftId: string) => sqlite.prepare('select html, text from emails where messenger_id = ?').get(draftId) as { html: string; text: string };
    const withFooter = stored(bare.id);
    assert.match(withFooter.html, /^<html><body><p>Just content<\/p><p [^>]*><a href="https:\/\/mail\.example\.test\/t\/u\/[^"]+"[^>]*>Unsubscribe<\/a><\/p><\/body><\/html>$/);
    assert.match(withFooter.text, /Unsubscribe.*https:\/\/mail\.example\.test\/t\/u\//s);
    const own = stored(placed.id);
    assert.doesNotMatch(own.html, />Unsubscribe</, 'a link of its own: nothing added');
    assert.match(own.html, /<a href="https:\/\/mail\.example\.test\/t\/u\/[^"]+">leave<\/a>/);
    assert.doesNotMatch(stored(ownList.id).html, /\/t\/u\//, 'an unsubscribe link to the sender\'s own list: nothing added');
    assert.match(stored(commented.id).html, /--><p [^>]*><a href="https:\/\/mail\.example\.test\/t\/u\/[^"]+"[^>]*>Unsubscribe<\/a><\/p>$/);
  });

  test('a draft whose expansion is refused is tried again a minute later, and other drafts go meanwhile', async () => {
    clock.set('2026-07-05T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'kim@inbox.test' }]);
    const template = (await call('POST', '/v1/templates', { name: 'Gone soon', subject: 'Hi', content: [{ type: 'text', text: 'Hi' }] })).body.data;
    const stuck = [];
    for (let i = 0; i < 10; i++) {
      stuck.push((await call('POST', '/v1/messenger', { ...broadcast, contentType: 'template', templateId: template.id, status: 'queued' })).body.id);
      clock.advance(1);
    }
    const waiting = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    assert.equal((await call('DELETE', `/v1/templates/${template.id}`)).status, 200);
    // Ten drafts a run, earliest due first: refused ones (these, and any other test's) wait their minute,
    // so the runs reach the draft queued after them. Retried at every run, they took every run for good.
    for (let i = 0; i < 3; i++) await runDue();
    for (const id of stuck) assert.match((await call('GET', `/v1/messenger/${id}`)).body.data.error, /template/i);
    assert.equal((await call('GET', `/v1/messenger/${waiting.id}`)).body.data.status, 'DONE', 'not held behind ten refused drafts');
    const { sqlite } = app.appliance.context.database;
    const dueAt = sqlite.prepare(`select distinct due_at from messenger_drafts where id in (${stuck.map(() => '?').join(',')})`).pluck().all(...stuck);
    assert.deepEqual(dueAt, [clock.nowMs() + 60_000], 'tried again a minute after the refusal');
    for (const id of stuck) assert.deepEqual((await call('DELETE', `/v1/messenger/${id}`)).body, { deleted: true });
  });

  test('a contact who unsubscribes, or is deleted, before their local time is left out of a timezone broadcast', async () => {
    clock.set('2026-07-10T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [
      { emailAddress: 'stays@inbox.test', timezone: 'America/New_York' },
      { emailAddress: 'leaves@inbox.test', timezone: 'America/New_York' },
      { emailAddress: 'deleted@inbox.test', timezone: 'America/New_York' },
    ]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, scheduledAt: '2026-07-11T09:00:00Z', isTimezoneScheduled: true, status: 'queued' })).body;
    clock.set('2026-07-10T19:00:00.000Z');
    await runDue();
    assert.deepEqual((await emailsOf(call, draft.id)).map((e) => e.status), ['scheduled', 'scheduled', 'scheduled']);
    assert.equal((await call('POST', '/v1/contacts', { emailAddress: 'leaves@inbox.test', isSubscribed: false })).status, 200);
    assert.equal((await call('DELETE', '/v1/contacts/deleted@inbox.test')).status, 200);
    clock.set('2026-07-11T13:00:00.000Z');
    await app.appliance.context.emails.releaseScheduled(new Date(clock.nowMs()));
    const byAddress = Object.fromEntries((await emailsOf(call, draft.id)).map((e) => [e.toAddress, e]));
    assert.equal(byAddress['stays@inbox.test'].status === 'suppressed', false);
    for (const address of ['leaves@inbox.test', 'deleted@inbox.test']) {
      assert.equal(byAddress[address].status, 'suppressed', address);
      const events = (await call('GET', `/v1/email/${byAddress[address].id}`)).body.email.events;
      assert.deepEqual(events.at(-1), { type: 'suppressed', time: '2026-07-11T13:00:00.000Z', reason: 'unsubscribed', detail: events.at(-1).detail });
    }
    await runDue();
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'DONE');
  });

  test('an address gets one email per broadcast, though its contact is deleted and added again (a new id) while the broadcast goes out', async () => {
    clock.set('2026-07-12T12:00:00.000Z');
    const call = await project();
    await addContacts(call, Array.from({ length: 101 }, (_, i) => ({ emailAddress: `reader${i}@inbox.test` })));
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    const hold = holdFirstBatchOf(draft.id);
    const run = runDue();
    await hold.held;
    assert.equal((await call('DELETE', '/v1/contacts/reader0@inbox.test')).status, 200);
    await addContacts(call, [{ emailAddress: 'Reader0@inbox.test' }]);
    hold.release();
    await run;
    const { sqlite } = app.appliance.context.database;
    assert.equal(sqlite.prepare(`select count(*) from emails where messenger_id = ? and lower(to_address) = 'reader0@inbox.test'`).pluck().get(draft.id), 1);
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.stats.totalRecipients, 101);
  });

  test('a contact added while a broadcast goes out, in a time zone no other contact has, is on the right side of its timezoneUtcOffset rule', async () => {
    clock.set('2026-07-13T12:00:00.000Z');
    const call = await project();
    await addContacts(call, Array.from({ length: 101 }, (_, i) => ({ emailAddress: `londoner${i}@inbox.test`, timezone: 'Europe/London' })));
    const recipients = { filter: { rules: [{ field: 'timezoneUtcOffset', operator: 'notEquals', value: 840 }] } };
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, recipients, status: 'queued' })).body;
    const hold = holdFirstBatchOf(draft.id);
    const run = runDue();
    await hold.held;
    // UTC+14: the rule leaves it out, as the contact query does.
    await addContacts(call, [{ emailAddress: 'kiritimati@inbox.test', timezone: 'Pacific/Kiritimati' }, { emailAddress: 'late-londoner@inbox.test', timezone: 'Europe/London' }]);
    const query = (await call('POST', '/v1/contacts/query', { ...recipients, limit: 100 })).body;
    hold.release();
    await run;
    const { sqlite } = app.appliance.context.database;
    const sentTo = sqlite.prepare(`select to_address from emails where messenger_id = ?`).pluck().all(draft.id) as string[];
    assert.equal(sentTo.includes('kiritimati@inbox.test'), false, 'left out, as its rule says');
    assert.equal(sentTo.includes('late-londoner@inbox.test'), true);
    assert.deepEqual([sentTo.length, query.totalCount], [102, 102]);
  });

  test('a contact not reached yet that moves to a time zone no other contact has is on the right side of the rule once a second has passed', async () => {
    clock.set('2026-07-14T12:00:00.000Z');
    const call = await project();
    await addContacts(call, Array.from({ length: 101 }, (_, i) => ({ emailAddress: `mover${i}@inbox.test`, timezone: 'Europe/London' })));
    const recipients = { filter: { rules: [{ field: 'timezoneUtcOffset', operator: 'notEquals', value: 840 }] } };
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, recipients, status: 'queued' })).body;
    const hold = holdFirstBatchOf(draft.id);
    const run = runDue();
    await hold.held;
    // The 101st (not in the held first batch of 100) moves to UTC+14; no contact is added.
    await addContacts(call, [{ emailAddress: 'mover100@inbox.test', timezone: 'Pacific/Kiritimati' }]);
    clock.set('2026-07-14T12:00:02.000Z');
    hold.release();
    await run;
    const sentTo = app.appliance.context.database.sqlite.prepare(`select to_address from emails where messenger_id = ?`).pluck().all(draft.id) as string[];
    assert.deepEqual([sentTo.length, sentTo.includes('mover100@inbox.test')], [100, false]);
  });

  test('recipients few and far between are read a window of contacts at a time, and each gets one email', async () => {
    clock.set('2026-07-15T12:00:00.000Z');
    const call = await project();
    const projectId: string = (await call('GET', '/v1/project')).body.id;
    // 5,000 contacts straight into the file; every 450th and a run of 150 are picked.
    const { sqlite } = app.appliance.context.database;
    const insert = sqlite.prepare(
      `insert into contacts (id, project_id, email_address, email_key, is_subscribed, subscribed_at, source_type, groups, custom_props, created_at, updated_at)
       values (?, ?, ?, ?, 1, 0, 'api', '[]', '{}', 0, 0)`,
    );
    const picked = (i: number) => i % 450 === 0 || (i >= 2_000 && i < 2_150);
    const ids: string[] = [];
    sqlite.transaction(() => {
      for (let i = 0; i < 5_000; i++) {
        const address = `${picked(i) ? 'picked' : 'reader'}${i}@inbox.test`;
        ids.push(`c${projectId.slice(-6)}${String(i).padStart(17, '0')}`);
        insert.run(ids[i], projectId, address, address);
      }
    })();
    const { batches, stop } = recordBatches();
    try {
      const recipients = { filter: { rules: [{ field: 'emailAddress', operator: 'includes', value: 'picked' }] } };
      const draft = (await call('POST', '/v1/messenger', { ...broadcast, recipients, status: 'queued' })).body;
      await runDue();
      const sentTo = sqlite.prepare(`select to_address from emails where messenger_id = ?`).pluck().all(draft.id) as string[];
      const expected = Array.from({ length: 5_000 }, (_, i) => i).filter(picked).map((i) => `picked${i}@inbox.test`);
      assert.deepEqual(sentTo.sort(), expected.sort());
      assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'DONE');
      // Each batch goes on from the one before, and no read looked at more than 2,000 contacts.
      const position = (id: string | null) => (id === null ? -1 : ids.indexOf(id));
      batches.forEach((batch, index) => {
        assert.equal(batch.from, index === 0 ? null : batches[index - 1].through);
        assert.ok(position(batch.through) - position(batch.from) <= 2_000, JSON.stringify({ index, from: position(batch.from), through: position(batch.through) }));
      });
    } finally {
      stop();
    }
  });

  test('a batch of large emails is cut where the emails service stops taking them (20,480,000 characters), and the broadcast goes on from there', async () => {
    clock.set('2026-07-16T12:00:00.000Z');
    const call = await project();
    await addContacts(call, Array.from({ length: 25 }, (_, i) => ({ emailAddress: `big${i}@inbox.test` })));
    const { batches, stop } = recordBatches();
    try {
      // ~980,000 characters of html, a text part as long: ~2 million characters an email.
      const html = `<p>${'A long letter. '.repeat(65_000)}</p>`;
      const draft = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'with-layout', html, status: 'queued' })).body;
      await runDue();
      const { sqlite } = app.appliance.context.database;
      const sentTo = sqlite.prepare(`select to_address from emails where messenger_id = ?`).pluck().all(draft.id) as string[];
      assert.deepEqual(sentTo.sort(), Array.from({ length: 25 }, (_, i) => `big${i}@inbox.test`).sort());
      assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.status, 'DONE');
      assert.ok(batches.length >= 3 && batches.every((batch) => batch.emails <= 10), JSON.stringify(batches.map((batch) => batch.emails)));
      batches.forEach((batch, index) => assert.equal(batch.from, index === 0 ? null : batches[index - 1]!.through));
    } finally {
      stop();
    }
  });

  test('an empty contactId or groupId list reaches no one', async () => {
    const call = await project();
    await addContacts(call, [{ emailAddress: 'nobody-asked@inbox.test' }]);
    for (const recipients of [{ contactId: [] }, { groupId: [] }]) {
      const draft = (await call('POST', '/v1/messenger', { ...broadcast, recipients, status: 'queued' })).body;
      await runDue();
      const read = (await call('GET', `/v1/messenger/${draft.id}`)).body.data;
      assert.deepEqual([read.status, read.stats.totalRecipients], ['DONE', 0], JSON.stringify(recipients));
    }
  });

  test('errors in recipients name the field as the client sent it, and contact ids are bounded', async () => {
    const call = await project();
    const rule = { filter: { rules: [{ field: 'bogus', value: 1 }] } };
    assertError(await call('POST', '/v1/messenger', { ...broadcast, recipients: rule, status: 'queued' }), 400, 'parameters-invalid', /recipients\.filter\.rules\[0\]\.field: "bogus" is not a contact field/);
    assertError(await call('POST', '/v1/messenger', { recipients: { contactId: 'x'.repeat(101) } }), 400, 'parameters-invalid', /recipients\.contactId: must have at most 100 characters/);
  });

  test('a template broadcast has the unsubscribe link in its footer; a bare {unsubscribeUrl} in the footer text is a link', async () => {
    const call = await project();
    await addContacts(call, [{ emailAddress: 'lee@inbox.test' }]);
    const template = (await call('POST', '/v1/templates', { name: 'No link', subject: 'Hi', content: [{ type: 'text', text: 'Plain news' }] })).body.data;
    const htmlOf = async (draftId: string) => {
      const [summary] = await emailsOf(call, draftId);
      const email = (await call('GET', `/v1/email/${summary.id}`)).body.email;
      return (await fetch(email.htmlReferenceUrl.replace('https://mail.example.test', app.baseUrl))).text();
    };
    const templated = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'template', templateId: template.id, status: 'queued' })).body;
    await runDue();
    assert.match(await htmlOf(templated.id), /Plain news[\s\S]*<a href="https:\/\/mail\.example\.test\/t\/u\/[^"]+"[^>]*>Unsubscribe<\/a>/);

    const design = await call('PATCH', '/v1/project', { emailTemplateDesign: { unsubscribeText: 'No more? Go to {unsubscribeUrl} now.' } });
    assert.equal(design.status, 200, JSON.stringify(design.body));
    const laidOut = (await call('POST', '/v1/messenger', { ...broadcast, status: 'queued' })).body;
    await runDue();
    assert.match(await htmlOf(laidOut.id), /No more\? Go to <a href="(https:\/\/mail\.example\.test\/t\/u\/[^"]+)"[^>]*>\1<\/a> now\./);
  });

  test('the link unsubscribes a contact deleted and added again since, and counts each contact once', async () => {
    clock.set('2026-07-15T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'max@inbox.test' }, { emailAddress: 'nia@inbox.test' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<a href="{unsubscribeUrl}">leave</a>', status: 'queued' })).body;
    await runDue();
    const linkOf: Record<string, string> = {};
    for (const summary of await emailsOf(call, draft.id)) {
      const email = (await call('GET', `/v1/email/${summary.id}`)).body.email;
      const html = await (await fetch(email.htmlReferenceUrl.replace('https://mail.example.test', app.baseUrl))).text();
      linkOf[summary.toAddress] = /href="https:\/\/mail\.example\.test(\/t\/u\/[^"]+)"/.exec(html)![1];
    }
    const unsubscribe = (address: string) => fetch(`${app.baseUrl}${linkOf[address]}`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' });

    assert.equal((await call('DELETE', '/v1/contacts/max@inbox.test')).status, 200);
    await addContacts(call, [{ emailAddress: 'max@inbox.test' }]);
    assert.match(await (await fetch(`${app.baseUrl}${linkOf['max@inbox.test']}`)).text(), /Stop these emails to <strong>max@inbox.test<\/strong>\?/, 'asks, for the new contact');
    assert.equal((await unsubscribe('max@inbox.test')).status, 200);
    assert.equal((await call('GET', '/v1/contacts/max@inbox.test')).body.contact.isSubscribed, false);

    assert.equal((await unsubscribe('nia@inbox.test')).status, 200);
    assert.equal((await call('POST', '/v1/contacts', { emailAddress: 'nia@inbox.test', isSubscribed: true })).status, 200);
    assert.equal((await unsubscribe('nia@inbox.test')).status, 200);
    assert.equal((await call('GET', '/v1/contacts/nia@inbox.test')).body.contact.isSubscribed, false);
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.stats.unsubscribedTotal, 2, 'max and nia, each once');

    // Unsubscribed, deleted and added again, then the same link once more: still once.
    assert.equal((await call('DELETE', '/v1/contacts/nia@inbox.test')).status, 200);
    await addContacts(call, [{ emailAddress: 'nia@inbox.test' }]);
    assert.equal((await unsubscribe('nia@inbox.test')).status, 200);
    assert.equal((await call('GET', '/v1/contacts/nia@inbox.test')).body.contact.isSubscribed, false);
    assert.equal((await call('GET', `/v1/messenger/${draft.id}`)).body.data.stats.unsubscribedTotal, 2, 'the recipient counted once, whatever its contact id now');
  });

  test('a contact moved to another address since (its identifier): the old email\'s link neither shows nor unsubscribes the new address', async () => {
    clock.set('2026-07-16T12:00:00.000Z');
    const call = await project();
    await addContacts(call, [{ emailAddress: 'old@inbox.test', identifier: 'user-7' }]);
    const draft = (await call('POST', '/v1/messenger', { ...broadcast, contentType: 'no-layout', html: '<a href="{unsubscribeUrl}">leave</a>', status: 'queued' })).body;
    await runDue();
    const [summary] = await emailsOf(call, draft.id);
    const { sqlite } = app.appliance.context.database;
    const html = (sqlite.prepare('select html from emails where id = ?').get(summary.id) as { html: string }).html;
    const path = /href="https:\/\/mail\.example\.test(\/t\/u\/[^"]+)"/.exec(html)![1];
    assert.equal((await call('POST', '/v1/contacts', { identifier: 'user-7', emailAddress: 'new-private@elsewhere.test' })).status, 200);
    const page = await (await fetch(`${app.baseUrl}${path}`)).text();
    assert.doesNotMatch(page, /new-private@elsewhere\.test/);
    assert.match(page, /Not on the list/, 'not "you are unsubscribed": nothing was');
    const posted = await fetch(`${app.baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' });
    assert.equal(posted.status, 200);
    assert.match(await posted.text(), /Not on the list/);
    assert.equal((await call('GET', '/v1/contacts/new-private@elsewhere.test')).body.contact.isSubscribed, true, 'the contact at its new address stays subscribed');
  });
});

test('a time-zone broadcast near 9999-12-31: a zone whose local time falls past it is sent at the last instant of year 9999, not at a date the send pipeline cannot read (it stayed scheduled for ever)', () => {
  const draft = { scheduledAt: Date.parse('9999-12-31T23:00:00.000Z'), isTimezoneScheduled: true } as Parameters<typeof sendTime>[0];
  const contact = (timezone: string) => ({ id: 'c', emailAddress: 'x@inbox.test', timezone, customProps: {} });
  const now = Date.parse('2026-06-01T00:00:00.000Z');
  assert.equal(sendTime(draft, contact('Asia/Tokyo'), now), '9999-12-31T14:00:00.000Z');
  assert.equal(sendTime(draft, contact('America/New_York'), now), '9999-12-31T23:59:59.999Z');
});
