import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createReleaseScheduledProcedure } from '../../src/emails/release-scheduled.js';
import { createEmailsRepo } from '../../src/emails/repo.js';
import { createEmailsService, idempotencyPruneBatch, idempotencyTtlMs, releaseScheduledBatch } from '../../src/emails/service.js';
import { ManualClock } from '../../src/lib/clock.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { holdFdatasync } from '../helpers/held-fdatasync.js';
import { sampleLogoBase64 } from '../render/fixtures.js';
import { baseEmail, emailRow, insertTemplate } from './helpers.js';

let app: TestAppliance;
const clock = new ManualClock('2026-03-01T10:00:00.000Z');
const sql = (query: string, ...args: unknown[]) => app.appliance.context.database.sqlite.prepare(query).all(...args) as any[];

before(async () => {
  // DNS on a closed port: the delivery worker (another feature) defers every job, so records keep their status.
  app = await startAppliance({ clock, env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_SENDING_CLICK_TRACKING: 'true', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
});
after(() => app?.stop());

describe('accepting', () => {
  test('an accepted email is stored with its event and delivery job before the answer', async () => {
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, toAddress: 'Bob@Example.ORG', headers: { 'X-Tag': 'a' } });
    assert.deepEqual(Object.keys(res.body).sort(), ['id', 'status']);
    assert.equal(res.body.status, 'queued');
    const row = emailRow(app, res.body.id)!;
    assert.equal(row.status, 'queued');
    assert.equal(row.text, 'Hi there');
    assert.deepEqual(JSON.parse(row.headers), { 'X-Tag': 'a' });
    assert.deepEqual(sql('select type from email_events where email_id = ?', res.body.id), [{ type: 'queued' }]);
    const [job] = sql('select * from delivery_jobs where email_id = ?', res.body.id);
    assert.equal(job.recipient_domain, 'example.org');
    // The worker may already have claimed it; queued_at is what accept wrote.
    assert.equal(job.queued_at, clock.nowMs());
  });

  test('a template is rendered at accept time into subject, html and text; charts become cid attachments', async () => {
    insertTemplate(app, { name: 'Order', subject: 'Order {orderId}', content: [{ type: 'text', text: 'Thanks {name}!' }] });
    const res = await app.api('POST', '/v1/email/send', { toAddress: 'c@example.com', fromAddress: 'shop@sender.test', templateName: 'Order', templateProps: { orderId: '42', name: 'Cy' } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const row = emailRow(app, res.body.id)!;
    assert.equal(row.subject, 'Order 42');
    assert.match(row.html, /Thanks Cy!/);
    assert.match(row.text, /Thanks Cy!/);
    assert.equal(row.template_name, 'Order');
    assert.equal(row.content_kind, 'template');
  });

  test('a template send with a blank subject keeps the template\'s subject; a given one replaces it', async () => {
    const created = await app.api('POST', '/v1/templates', { name: 'Subject rule', subject: 'Welcome {name}', content: [{ type: 'text', text: 'Hi {name}' }] });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const sendWith = async (subject: string) => {
      const sent = await app.api('POST', '/v1/email/send', { toAddress: 'subject@example.com', fromAddress: 'app@sender.test', templateId: created.body.data.id, templateProps: { name: 'Ada' }, subject });
      assert.equal(sent.status, 200, JSON.stringify(sent.body));
      return emailRow(app, sent.body.id)!.subject;
    };
    assert.equal(await sendWith(''), 'Welcome Ada');
    assert.equal(await sendWith('   '), 'Welcome Ada');
    assert.equal(await sendWith('Your order, {name}'), 'Your order, Ada');
  });

  test('PHP clients: an item written as [] in an iterated array of templateProps is an empty object in the preview as in the send, so the preview shows the rows delivered', async () => {
    const created = await app.api('POST', '/v1/templates', { name: 'PHP rows', subject: 'Rows', content: [{ type: 'text', text: 'Row {name}', iterationKey: 'rows' }] });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const templateProps = { rows: [{ name: 'a' }, []] };
    const sent = await app.api('POST', '/v1/email/send', { toAddress: 'php@example.com', fromAddress: 'app@sender.test', templateId: created.body.data.id, templateProps });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    const delivered = emailRow(app, sent.body.id)!.text;
    assert.equal(delivered, 'Row a\n\nRow name\n');
    const saved = await app.api('POST', `/v1/templates/${created.body.data.id}/preview`, { templateProps });
    assert.equal(saved.status, 200, JSON.stringify(saved.body));
    assert.equal(saved.body.text, delivered);
    const unsaved = await app.api('POST', '/v1/templates/preview', { subject: 'Rows', content: created.body.data.content, templateProps });
    assert.equal(unsaved.status, 200, JSON.stringify(unsaved.body));
    assert.equal(unsaved.body.text, delivered);
  });

  test('markdown without a subject, in the body or its front matter, is refused like html or text', async () => {
    const res = await app.api('POST', '/v1/email/send', { toAddress: 'c@example.com', fromAddress: 'a@sender.test', markdown: '# Hi' });
    assert.equal(res.status, 400);
    assert.equal(res.body.errorCode, 'parameters-invalid');
    assert.match(res.body.developerMessage, /^subject: is required with markdown content/);
    const batch = await app.api('POST', '/v1/email/send', [{ ...baseEmail }, { toAddress: 'c@example.com', fromAddress: 'a@sender.test', markdown: '# Hi' }]);
    assert.match(batch.body.developerMessage, /^batch item 1: subject: is required/);
    const inBody = await app.api('POST', '/v1/email/send', { toAddress: 'c@example.com', fromAddress: 'a@sender.test', subject: 'Hi', markdown: '# Hi' });
    assert.equal(inBody.status, 200);
  });

  test('markdown is rendered with the project design; front matter may carry the subject', async () => {
    const res = await app.api('POST', '/v1/email/send', { toAddress: 'c@example.com', fromAddress: 'a@sender.test', markdown: '---\nsubject: Hello {name}\n---\n# Hi **{name}**' , templateProps: { name: 'Dee' } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const row = emailRow(app, res.body.id)!;
    assert.equal(row.subject, 'Hello Dee');
    assert.match(row.html, /<strong[^>]*>Dee<\/strong>/);
  });

  test('number and boolean props are rendered as their text, shown as sent, and found by search', async () => {
    const res = await app.api('POST', '/v1/email/send', { toAddress: 'n@example.com', fromAddress: 'a@sender.test', subject: 'Total {total}', markdown: 'Trial: {isTrial}, seats {seats}', templateProps: { total: 42.5, isTrial: false, seats: 3 } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const row = emailRow(app, res.body.id)!;
    assert.equal(row.subject, 'Total 42.5');
    assert.match(row.html, /Trial: false, seats 3/);
    const email = (await app.api('GET', `/v1/email/${res.body.id}`)).body.email;
    assert.deepEqual(email.templateProps, [{ keyName: 'total', value: 42.5 }, { keyName: 'isTrial', value: false }, { keyName: 'seats', value: 3 }]);
    const found = await app.api('POST', '/v1/email/search', { query: { templateProps: { seats: 3, isTrial: false } } });
    assert.deepEqual(found.body.data.map((e: any) => e.id), [res.body.id]);
    const asText = await app.api('POST', '/v1/email/search', { query: { templateProps: { seats: '3', isTrial: 'false', total: '42.5' } } });
    assert.deepEqual(asText.body.data.map((e: any) => e.id), [res.body.id]);
    // Numbers JavaScript and SQLite write differently as text (1e+21 / 1.0e+21) are compared as numbers.
    const far = await app.api('POST', '/v1/email/send', { toAddress: 'far@example.com', fromAddress: 'a@sender.test', subject: 'Far {big} {tiny}', markdown: 'x', templateProps: { big: 1e21, tiny: 5e-7 } });
    assert.equal(emailRow(app, far.body.id)!.subject, 'Far 1e+21 5e-7');
    const byNumber = await app.api('POST', '/v1/email/search', { query: { templateProps: { big: 1e21, tiny: 5e-7 } } });
    assert.deepEqual(byNumber.body.data.map((e: any) => e.id), [far.body.id]);
    const isTrue = await app.api('POST', '/v1/email/search', { query: { templateProps: { isTrial: 0 } } });
    assert.deepEqual(isTrue.body.data, [], 'a number does not find a boolean');
  });

  test('a linked project uses its parent template by id, not by name', async () => {
    const id = insertTemplate(app, { name: 'Parent only', subject: 'P', content: [{ type: 'text', text: 'p' }] });
    const child = await app.api('POST', '/v1/project', { name: 'Child' });
    const key = child.body.apiKey;
    const byId = await app.api('POST', '/v1/email/send', { toAddress: 'c@example.com', fromAddress: 'a@sender.test', templateId: id }, { key });
    assert.equal(byId.status, 200, JSON.stringify(byId.body));
    const byName = await app.api('POST', '/v1/email/send', { toAddress: 'c@example.com', fromAddress: 'a@sender.test', templateName: 'Parent only' }, { key });
    assert.equal(byName.body.errorCode, 'template-not-found');
  });

  test('a suppressed recipient is recorded as suppressed and not queued; the answer keeps the compatible status and says suppressed beside it', async () => {
    sql("insert into suppressions (project_id, email_address, reason, created_at) values (?, 'gone@example.com', 'bounce', 0) returning 1", app.appliance.defaultProjectId);
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, toAddress: 'Gone@example.com' });
    assert.deepEqual(res.body, { id: res.body.id, status: 'queued', suppressed: true });
    assert.equal((await app.api('GET', `/v1/email/${res.body.id}`)).body.email.status, 'suppressed');
    const batch = await app.api('POST', '/v1/email/send', [{ ...baseEmail, toAddress: 'kept@example.com' }, { ...baseEmail, toAddress: 'gone@example.com' }]);
    assert.deepEqual(batch.body.map((item: { status: string; suppressed?: boolean }) => [item.status, item.suppressed]), [['queued', undefined], ['queued', true]]);
    const legacy = await app.api('POST', '/v1/mail/send', { ...baseEmail, toAddress: 'gone@example.com' });
    assert.equal(legacy.body.suppressed, true);
    assert.equal(legacy.body.status, 'queued');
    assert.equal(sql('select * from delivery_jobs where email_id = ?', res.body.id).length, 0);
    assert.deepEqual(sql('select type from email_events where email_id = ?', res.body.id), [{ type: 'suppressed' }]);
  });
});

describe('batch and legacy', () => {
  test('a batch answers {id, status} per item in input order', async () => {
    const items = [0, 1, 2].map((i) => ({ ...baseEmail, toAddress: `b${i}@example.com` }));
    items[2] = { ...items[2], scheduledAt: '2026-03-02T00:00:00Z' } as never;
    const res = await app.api('POST', '/v1/email/send', items);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.map((r: any) => r.status), ['queued', 'queued', 'scheduled']);
    assert.deepEqual(res.body.map((r: any) => emailRow(app, r.id)!.to_address), ['b0@example.com', 'b1@example.com', 'b2@example.com']);
  });

  test('one invalid item fails the whole batch and the message names its index', async () => {
    const before = sql('select count(*) as n from emails')[0].n;
    const res = await app.api('POST', '/v1/email/send', [baseEmail, { ...baseEmail, toAddress: 'nope' }]);
    assert.equal(res.body.errorCode, 'to-address-invalid');
    assert.match(res.body.developerMessage, /batch item 1/);
    const res2 = await app.api('POST', '/v1/email/send', [baseEmail, baseEmail, { ...baseEmail, subject: 5 }]);
    assert.equal(res2.body.errorCode, 'parameters-invalid');
    assert.match(res2.body.developerMessage, /batch item 2/);
    assert.equal(sql('select count(*) as n from emails')[0].n, before);
  });

  test('a batch holds 1 to 50 emails', async () => {
    const fifty = await app.api('POST', '/v1/email/send', Array.from({ length: 50 }, () => baseEmail));
    assert.equal(fifty.body.length, 50);
    const more = await app.api('POST', '/v1/email/send', Array.from({ length: 51 }, () => baseEmail));
    assert.equal(more.body.errorCode, 'parameters-invalid');
    const none = await app.api('POST', '/v1/email/send', []);
    assert.equal(none.body.errorCode, 'parameters-invalid');
  });

  test('a batch renders its items in turns of the event loop, and one too slow to render as a whole is refused', async () => {
    const ctx = app.appliance.context;
    const order: string[] = [];
    // The service as the appliance builds it, with the batch limits shortened and each render noted.
    const projects = { findProject: (id: string) => (order.push('render'), ctx.projects.findProject(id)) };
    const items = Array.from({ length: 3 }, (_, i) => ({ toAddress: `turn${i}@example.com`, fromAddress: 'a@sender.test', subject: 'Turns', markdown: `# Hi ${i}` }));
    const inTurns = createEmailsService({ ...ctx, projects, batchRender: { turnMs: 0, totalMs: 60_000 } });
    setImmediate(() => order.push('other work'));
    assert.equal((await inTurns.sendBatch(app.appliance.defaultProjectId, items)).length, 3);
    assert.deepEqual(order.slice(0, 3), ['render', 'other work', 'render'], 'the event loop turned between two renders');

    const heavy = Array.from({ length: 50 }, (_, i) => ({ ...items[0], toAddress: `slow${i}@example.com`, markdown: `# Hi\n\n\`\`\`js\nconst x${i} = [${'1, '.repeat(200)}];\n\`\`\`` }));
    const bounded = createEmailsService({ ...ctx, batchRender: { turnMs: 50, totalMs: 1 } });
    await assert.rejects(bounded.sendBatch(app.appliance.defaultProjectId, heavy), /batch item \d+: the batch takes more than 0\.001 s to render: send fewer emails per request, or a lighter template\./);
    assert.equal(sql(`select count(*) as n from emails where to_address like 'slow%'`)[0].n, 0, 'nothing of a refused batch is stored');

    // Other work holding the event loop between its turns (a busy server) is not the batch's render time.
    const patient = createEmailsService({ ...ctx, batchRender: { turnMs: 0, totalMs: 200 } });
    const busy = () => {
      const until = performance.now() + 150;
      while (performance.now() < until);
    };
    const light = items.map((item, i) => ({ ...item, toAddress: `busy${i}@example.com` }));
    setImmediate(busy);
    setImmediate(() => setImmediate(busy));
    assert.equal((await patient.sendBatch(app.appliance.defaultProjectId, light)).length, 3, '300 ms of other work, a few ms of rendering: accepted');
  });

  test('what accepts hold rendered is bounded: a request rendering past its share is refused, and accepts past the room wait their turn', async () => {
    const ctx = app.appliance.context;
    const projectId = app.appliance.defaultProjectId;
    const order: string[] = [];
    const projects = { findProject: (id: string) => (order.push('render'), ctx.projects.findProject(id)) };
    const writes = Object.assign(Object.create(ctx.writes), { call: (name: string, args: unknown) => (order.push('commit'), ctx.writes.call(name as never, args as never)) });
    const item = (label: string) => ({ toAddress: `${label}@example.com`, fromAddress: 'a@sender.test', subject: 'Room', markdown: `# Hi\n\n${'A line of the letter. '.repeat(50)}` });
    const [probe] = await ctx.emails.sendBatch(projectId, [item('room-probe')]);
    const size = sql('select length(html) + length(text) as n from emails where id = ?', probe!.id)[0].n as number;

    // A request's emails together: two fit, the third passes the request's share.
    const shared = createEmailsService({ ...ctx, renderRoom: { emailChars: 4 * size, requestChars: Math.floor(2.5 * size), roomChars: 100 * size } });
    await assert.rejects(shared.sendBatch(projectId, ['share0', 'share1', 'share2'].map(item)), /batch item 2: the emails of this request render to more than [\d,]+ characters of html and text in all: send fewer per request\./);
    assert.equal(sql(`select count(*) as n from emails where to_address like 'share%'`)[0].n, 0, 'nothing of a refused batch is stored');
    assert.equal((await shared.sendBatch(projectId, ['share3', 'share4'].map(item))).length, 2);

    // Room for one worst case: the second accept renders once the first has committed.
    const roomy = createEmailsService({ ...ctx, projects, writes, renderRoom: { emailChars: 4 * size, requestChars: 8 * size, roomChars: 1_000_000_000 } });
    await Promise.all([roomy.send(projectId, item('roomy0')), roomy.send(projectId, item('roomy1'))]);
    assert.deepEqual(order.splice(0), ['render', 'render', 'commit', 'commit']);
    const narrow = createEmailsService({ ...ctx, projects, writes, renderRoom: { emailChars: 4 * size, requestChars: 8 * size, roomChars: 4 * size } });
    await Promise.all([narrow.send(projectId, item('narrow0')), narrow.send(projectId, item('narrow1'))]);
    assert.deepEqual(order.splice(0), ['render', 'commit', 'render', 'commit']);
    assert.equal(sql(`select count(*) as n from emails where to_address like 'narrow%'`)[0].n, 2);
  });

  test('a batch that renders in turns gets its ids when it commits: a client polling for newer emails (paginationCursorPrev) misses none of it', async () => {
    const ctx = app.appliance.context;
    const projectId = app.appliance.defaultProjectId;
    const newestBefore: string = sql('select id from emails order by id desc limit 1')[0]?.id ?? '';
    let single: Promise<{ id: string }> | undefined;
    // A single email accepted while the batch renders (between two of its turns), as on a busy server.
    const projects = {
      findProject: (id: string) => {
        single ??= ctx.emails.send(projectId, { ...baseEmail, toAddress: 'meanwhile@example.com' });
        return ctx.projects.findProject(id);
      },
    };
    const inTurns = createEmailsService({ ...ctx, projects, batchRender: { turnMs: 0, totalMs: 60_000 } });
    const items = Array.from({ length: 3 }, (_, i) => ({ toAddress: `polled${i}@example.com`, fromAddress: 'a@sender.test', subject: 'Polled', markdown: `# Hi ${i}` }));
    const batch = await inTurns.sendBatch(projectId, items);
    const meanwhile = await single!;
    // Committed before the batch, so a client may have seen it (and kept it as its newest) before the batch was there.
    const committed = sql('select id from emails where id > ? order by rowid', newestBefore).map((row) => row.id);
    assert.equal(committed[0], meanwhile.id, 'the single email commits first');
    const newer = await app.api('POST', '/v1/email/search', { limit: 100, paginationCursorPrev: meanwhile.id });
    assert.deepEqual(
      newer.body.data.map((e: { id: string }) => e.id).sort(),
      batch.map((r) => r.id).sort(),
      'emails committed after the one a client saw as newest are newer than it',
    );
    assert.deepEqual(committed, [...committed].sort(), 'ids sort in commit order');
  });

  test('legacy /v1/mail/send: string props only, fromName 1–100 ASCII, open tracking off by default', async () => {
    const legacy = { toAddress: 'l@example.com', fromAddress: 'a@sender.test', subject: 'L', html: '<p>legacy</p>' };
    const ok = await app.api('POST', '/v1/mail/send', { ...legacy, fromName: 'x'.repeat(100) });
    assert.equal(ok.body.status, 'queued');
    const row = emailRow(app, ok.body.id)!;
    assert.equal(row.is_open_tracked, 0);
    assert.equal(row.html, '<p>legacy</p>');
    assert.equal((await app.api('POST', '/v1/mail/send', { ...legacy, fromName: 'x'.repeat(101) })).body.errorCode, 'parameters-invalid');
    assert.equal((await app.api('POST', '/v1/mail/send', { ...legacy, fromName: 'Zoë' })).body.errorCode, 'parameters-invalid');
    assert.equal((await app.api('POST', '/v1/mail/send', { ...legacy, toAddress: 'x' })).body.errorCode, 'to-address-invalid');
    insertTemplate(app, { name: 'Legacy', subject: 'L {a}', content: [{ type: 'text', text: '{a}' }] });
    const t = { toAddress: 'l@example.com', fromAddress: 'a@sender.test', templateName: 'Legacy' };
    assert.equal((await app.api('POST', '/v1/mail/send', { ...t, templateProps: { a: 'b' } })).status, 200);
    assert.equal((await app.api('POST', '/v1/mail/send', { ...t, templateProps: { a: [1] } })).body.errorCode, 'parameters-invalid');
    assert.equal((await app.api('POST', '/v1/mail/send', { ...t, html: '<p>x</p>' })).body.errorCode, 'parameters-invalid');
    assert.equal((await app.api('POST', '/v1/mail/send', { toAddress: 'l@example.com', fromAddress: 'a@sender.test' })).body.errorCode, 'parameters-invalid');
    // §4.1 gives subject no rule (§4.2 requires it): text or html without one goes out with an empty subject.
    const noSubject = await app.api('POST', '/v1/mail/send', { toAddress: 'l@example.com', fromAddress: 'a@sender.test', text: 'no subject' });
    assert.equal(noSubject.status, 200, JSON.stringify(noSubject.body));
    assert.equal(emailRow(app, noSubject.body.id)!.subject, '');
    // Fields only the modern send takes are refused by name: ignored, scheduledAt would send at once.
    const scheduled = await app.api('POST', '/v1/mail/send', { ...legacy, scheduledAt: '2999-01-01T00:00:00Z', attachments: [] });
    assert.equal(scheduled.body.errorCode, 'parameters-invalid');
    assert.equal(scheduled.body.developerMessage, 'scheduledAt, attachments: not supported by POST /v1/mail/send; use POST /v1/email/send.');
  });
});

describe('scheduling and deletion', () => {
  test('the scheduler job queues due scheduled emails, not earlier', async () => {
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, scheduledAt: '2026-03-01T11:00:00Z' });
    assert.equal(res.body.status, 'scheduled');
    assert.equal(sql('select * from delivery_jobs where email_id = ?', res.body.id).length, 0);
    await app.appliance.context.emails.releaseScheduled(new Date('2026-03-01T10:59:59Z'));
    assert.equal(emailRow(app, res.body.id)!.status, 'scheduled');
    await app.appliance.context.emails.releaseScheduled(new Date('2026-03-01T11:00:00Z'));
    assert.equal(emailRow(app, res.body.id)!.status, 'queued');
    assert.equal(sql('select * from delivery_jobs where email_id = ?', res.body.id).length, 1);
    assert.deepEqual(sql('select type from email_events where email_id = ? order by time', res.body.id).map((e) => e.type), ['scheduled', 'queued']);
    assert.deepEqual((await app.api('DELETE', `/v1/email/${res.body.id}`)).body, { deleted: false });
  });

  test('a scheduledAt without an offset is UTC, whatever the host time zone', async (t) => {
    const zone = process.env.TZ;
    process.env.TZ = 'America/New_York';
    t.after(() => (zone === undefined ? delete process.env.TZ : (process.env.TZ = zone)));
    const res = await app.api('POST', '/v1/email/send', { ...baseEmail, scheduledAt: '2026-03-01T12:00:00' });
    assert.equal(res.body.status, 'scheduled');
    assert.equal(emailRow(app, res.body.id)!.scheduled_at, Date.parse('2026-03-01T12:00:00Z'));
  });

  test('due scheduled emails are released a batch per write, each exactly once, with event ids from the caller', async () => {
    const scheduledAt = '2026-05-01T00:00:00Z';
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) {
      const res = await app.api('POST', '/v1/email/send', Array.from({ length: 50 }, () => ({ ...baseEmail, scheduledAt })));
      ids.push(...res.body.map((r: { id: string }) => r.id));
    }
    const dueAt = Date.parse(scheduledAt);
    const due = sql(`select count(*) as n from emails where status = 'scheduled' and scheduled_at <= ?`, dueAt)[0].n;
    assert.ok(due >= ids.length);

    // One write releases at most one email per id it is given, and the events carry those ids.
    const eventIds = ['a', 'b', 'c'].map((c) => c.repeat(24));
    assert.equal(createReleaseScheduledProcedure(app.appliance.context.database.sqlite)({ nowMs: dueAt, eventIds }), 3);
    assert.deepEqual(sql(`select id from email_events where id in (?, ?, ?) and type = 'queued' order by id`, ...eventIds).map((r) => r.id), eventIds);

    // The job goes on, a batch per write, until nothing is due; a second run finds nothing.
    assert.ok(due - 3 > releaseScheduledBatch, 'more than one batch is due');
    assert.equal(await app.appliance.context.emails.releaseScheduled(new Date(dueAt)), due - 3);
    assert.equal(await app.appliance.context.emails.releaseScheduled(new Date(dueAt)), 0);
    const marks = ids.map((id) => `'${id}'`).join(',');
    assert.equal(sql(`select count(*) as n from emails where id in (${marks}) and status = 'queued'`)[0].n, ids.length);
    assert.equal(sql(`select count(*) as n from email_events where email_id in (${marks}) and type = 'queued'`)[0].n, ids.length);
    assert.equal(sql(`select count(*) as n from delivery_jobs where email_id in (${marks})`)[0].n, ids.length);
  });

  test('the due scan reads only scheduled rows (a partial index), never the whole table', () => {
    const plan = sql("explain query plan select id, project_id, to_address from emails where status = 'scheduled' and scheduled_at <= ? order by scheduled_at limit ?", Date.now(), 100)
      .map((row) => row.detail)
      .join('\n');
    assert.match(plan, /USING INDEX emails_scheduled_due_idx \(scheduled_at<\?\)/, plan);
    const indexed = sql("select count(*) as n from emails indexed by emails_scheduled_due_idx where status = 'scheduled'")[0].n;
    assert.equal(indexed, sql("select count(*) as n from emails where status = 'scheduled'")[0].n);
  });

  test('DELETE removes a scheduled email; a queued or unknown one answers deleted: false', async () => {
    const scheduled = await app.api('POST', '/v1/email/send', { ...baseEmail, scheduledAt: '2026-04-01T00:00:00Z' });
    assert.deepEqual((await app.api('DELETE', `/v1/email/${scheduled.body.id}`)).body, { deleted: true });
    assert.deepEqual((await app.api('GET', `/v1/email/${scheduled.body.id}`)).body, { email: null });
    assert.deepEqual((await app.api('DELETE', `/v1/email/${scheduled.body.id}`)).body, { deleted: false });
    const queued = await app.api('POST', '/v1/email/send', baseEmail);
    assert.deepEqual((await app.api('DELETE', `/v1/email/${queued.body.id}`)).body, { deleted: false });
    assert.equal(emailRow(app, queued.body.id)!.status, 'queued');
  });
});

describe('idempotency', () => {
  test('a retry is answered only once the first request\'s commit is on disk, not as soon as it is visible', async (t) => {
    // The writer thread's commit is visible before the write queue's WAL sync is done; a retry answered
    // from the stored key in between would acknowledge an email a power cut could still take away.
    // fdatasync is swapped for one the test holds.
    const { releaseAll: release, restore } = await holdFdatasync();
    t.after(restore);
    const headers = { 'idempotency-key': 'durable-before-answer' };
    let firstAnswered = false;
    const first = app.api('POST', '/v1/email/send', baseEmail, { headers }).then((res) => ((firstAnswered = true), res));
    for (let waited = 0; sql(`select count(*) as n from idempotency_keys where key = 'durable-before-answer'`)[0].n === 0; waited += 5) {
      assert.ok(waited < 10_000, 'the first request never committed');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    let retryAnswered = false;
    const retry = app.api('POST', '/v1/email/send', baseEmail, { headers }).then((res) => ((retryAnswered = true), res));
    // A conflict tells of the first request too: not before it is durable either.
    let conflictAnswered = false;
    const conflict = app.api('POST', '/v1/email/send', { ...baseEmail, subject: 'another body' }, { headers }).then((res) => ((conflictAnswered = true), res));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(firstAnswered, false, 'the first request waits for its sync');
    assert.equal(retryAnswered, false, 'so does its retry, although the key is already visible');
    assert.equal(conflictAnswered, false, 'and a request with another body under the key');
    release();
    const [a, b, c] = await Promise.all([first, retry, conflict]);
    assert.equal(a.status, 200);
    assert.deepEqual(b.body, a.body);
    assert.equal(c.status, 409);
  });

  test('a retry with the same key returns the first answer; another body is a conflict; keys expire after 24 h', async () => {
    const headers = { 'idempotency-key': 'order-77' };
    const first = await app.api('POST', '/v1/email/send', baseEmail, { headers });
    const again = await app.api('POST', '/v1/email/send', baseEmail, { headers });
    assert.deepEqual(again.body, first.body);
    // The same fields in another order are the same request.
    const reordered = Object.fromEntries(Object.entries(baseEmail).reverse());
    assert.deepEqual((await app.api('POST', '/v1/email/send', reordered, { headers })).body, first.body);
    assert.equal(sql('select count(*) as n from emails where id = ?', first.body.id)[0].n, 1);
    // The endpoint counts, not how its path is written.
    assert.deepEqual((await app.api('POST', '/v1/email/send/', baseEmail, { headers })).body, first.body);
    const legacy = await app.api('POST', '/v1/mail/send', baseEmail, { headers });
    assert.equal(legacy.status, 409);
    assert.match(legacy.body.developerMessage, /already used with another request \(a different body, or the other send endpoint\)/);
    const other = await app.api('POST', '/v1/email/send', { ...baseEmail, subject: 'Other' }, { headers });
    assert.equal(other.status, 409);
    assert.equal(other.body.errorCode, 'conflict');
    const concurrent = await Promise.all([1, 2, 3].map(() => app.api('POST', '/v1/email/send', baseEmail, { headers: { 'idempotency-key': 'race' } })));
    assert.equal(new Set(concurrent.map((r) => r.body.id)).size, 1);
    clock.advance(24 * 3600_000 + 1);
    const later = await app.api('POST', '/v1/email/send', baseEmail, { headers });
    assert.notEqual(later.body.id, first.body.id);
    const batch = await app.api('POST', '/v1/email/send', [baseEmail], { headers: { 'idempotency-key': 'b' } });
    assert.deepEqual((await app.api('POST', '/v1/email/send', [baseEmail], { headers: { 'idempotency-key': 'b' } })).body, batch.body);
    // A key stored by an earlier version hashed the body as sent; its retry still gets the stored answer.
    const asSent = createHash('sha256').update(`/v1/email/send\n${JSON.stringify(baseEmail)}`).digest('base64url');
    const { sqlite } = app.appliance.context.database;
    sqlite.prepare(`insert into idempotency_keys (project_id, key, request_hash, response, created_at) values (?, 'before-upgrade', ?, '{"id":"0123456789abcdef01234567","status":"queued"}', ?)`).run(app.appliance.defaultProjectId, asSent, clock.nowMs());
    const retried = await app.api('POST', '/v1/email/send', baseEmail, { headers: { 'idempotency-key': 'before-upgrade' } });
    assert.deepEqual(retried.body, { id: '0123456789abcdef01234567', status: 'queued' });
  });

  test('keys are per project: a linked project using the parent\'s key gets its own email, and neither is a conflict for the other', async () => {
    // Guards the project scoping of the key lookup: without it a linked project's send would be answered
    // with the parent's email id (its own email never stored), and reusing a key across projects would be a 409.
    const linked = await app.api('POST', '/v1/project', { name: 'Idempotency neighbour' });
    assert.equal(linked.status, 200, JSON.stringify(linked.body));
    const key: string = linked.body.apiKey;
    const headers = { 'idempotency-key': 'shared-order-1' };
    const parent = await app.api('POST', '/v1/email/send', baseEmail, { headers });
    const child = await app.api('POST', '/v1/email/send', baseEmail, { headers, key });
    assert.equal(parent.status, 200, JSON.stringify(parent.body));
    assert.equal(child.status, 200, JSON.stringify(child.body));
    assert.notEqual(child.body.id, parent.body.id, "the linked project is not answered with the parent's email");
    assert.equal((await app.api('GET', `/v1/email/${child.body.id}`, undefined, { key })).body.email?.id, child.body.id, 'its own email is stored');
    // Used first by the linked project, then by the parent with another body: two keys, no conflict.
    const childFirst = await app.api('POST', '/v1/email/send', { ...baseEmail, subject: 'Child first' }, { headers: { 'idempotency-key': 'shared-order-2' }, key });
    const parentOther = await app.api('POST', '/v1/email/send', { ...baseEmail, subject: 'Parent later' }, { headers: { 'idempotency-key': 'shared-order-2' } });
    assert.equal(childFirst.status, 200, JSON.stringify(childFirst.body));
    assert.equal(parentOther.status, 200, JSON.stringify(parentOther.body));
    assert.notEqual(parentOther.body.id, childFirst.body.id);
  });

  test('a retried scheduled send gets its first answer after its scheduledAt has passed, not a refusal of the past date', async () => {
    const headers = { 'idempotency-key': 'scheduled-retry' };
    const scheduled = { ...baseEmail, scheduledAt: new Date(clock.nowMs() + 60_000).toISOString() };
    const first = await app.api('POST', '/v1/email/send', scheduled, { headers });
    assert.equal(first.body.status, 'scheduled', JSON.stringify(first.body));
    clock.advance(120_000);
    // Without the key the date is refused now; with it, the client's retry learns its email was accepted.
    assert.equal((await app.api('POST', '/v1/email/send', scheduled)).status, 400);
    const retry = await app.api('POST', '/v1/email/send', scheduled, { headers });
    assert.deepEqual([retry.status, retry.body], [200, first.body]);
  });

  test('the hourly prune deletes expired keys a batch per write, oldest first, and keeps the fresh ones', async () => {
    const { sqlite } = app.appliance.context.database;
    const projectId = app.appliance.defaultProjectId;
    sqlite.exec('delete from idempotency_keys');
    const insert = sqlite.prepare(`insert into idempotency_keys (project_id, key, request_hash, response, created_at) values (?, ?, 'h', '{"id":"x","status":"queued"}', ?)`);
    const expiredAt = clock.nowMs() - idempotencyTtlMs - 1;
    sqlite.transaction(() => {
      for (let i = 0; i < 2500; i++) insert.run(projectId, `old-${i}`, expiredAt - i);
      for (let i = 0; i < 3; i++) insert.run(projectId, `fresh-${i}`, clock.nowMs());
    })();
    // One write deletes at most its batch, oldest first.
    const deleted = createEmailsRepo(sqlite).pruneIdempotencyKeys(clock.nowMs() - idempotencyTtlMs, idempotencyPruneBatch);
    assert.equal(deleted, idempotencyPruneBatch);
    assert.equal(sql(`select count(*) as n from idempotency_keys where key = 'old-2499'`)[0].n, 0, 'the oldest went first');
    // The job goes on until none is left.
    assert.equal(await app.appliance.context.emails.pruneIdempotencyKeys(clock.now()), 2500 - idempotencyPruneBatch);
    assert.deepEqual(sql('select key from idempotency_keys order by key').map((r) => r.key), ['fresh-0', 'fresh-1', 'fresh-2']);
  });
});

describe('email by id', () => {
  test('GET answers the email with events, attachments (signed fileUrl) and a signed htmlReferenceUrl', async () => {
    const res = await app.api('POST', '/v1/email/send', {
      ...baseEmail,
      html: '<html><body><a href="https://example.com/a?x=1&amp;y=2">go</a></body></html>',
      fromName: 'App',
      templateProps: { plan: 'pro' },
      attachments: [{ name: 'note.txt', content: Buffer.from('hello file').toString('base64') }],
    });
    const { email } = (await app.api('GET', `/v1/email/${res.body.id}`)).body;
    assert.equal(email.id, res.body.id);
    assert.equal(email.status, 'queued');
    assert.equal(email.text, true);
    assert.equal(email.isOpenTracked, true);
    assert.equal(email.createdAt, clock.now().toISOString());
    assert.deepEqual(email.templateProps, [{ keyName: 'plan', value: 'pro' }]);
    assert.equal(email.events[0].type, 'queued');
    assert.equal(email.events[0].time, clock.now().toISOString());
    assert.equal(email.attachments[0].name, 'note.txt');
    const file = await fetch(email.attachments[0].fileUrl);
    assert.equal(await file.text(), 'hello file');
    const head = await fetch(email.attachments[0].fileUrl, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-type'), file.headers.get('content-type'));
    assert.equal(head.headers.get('content-length'), '10', 'HEAD tells the size');
    assert.equal(file.headers.get('content-length'), '10');
    assert.equal(await head.text(), '');
    const htmlResponse = await fetch(email.htmlReferenceUrl);
    const policy = htmlResponse.headers.get('content-security-policy') ?? '';
    assert.match(policy, /^sandbox[ ;]/, 'sender html runs no scripts on the API origin');
    assert.doesNotMatch(policy.split(';')[0], /allow-(scripts|same-origin|forms)/);
    assert.equal(htmlResponse.headers.get('x-content-type-options'), 'nosniff');
    const html = await htmlResponse.text();
    assert.equal(html, '<html><body><a href="https://example.com/a?x=1&amp;y=2">go</a></body></html>', 'as sent by the client, without tracking');
    const forged = await fetch(email.htmlReferenceUrl.replace(/.$/, (c: string) => (c === 'A' ? 'B' : 'A')));
    assert.equal(forged.status, 404);
    clock.advance(2 * 3600_000);
    assert.equal((await fetch(email.attachments[0].fileUrl)).status, 404);
  });

  test('attachment downloads carry any name: an ASCII filename and the exact one in filename* (RFC 6266)', async () => {
    // (A name with a lone UTF-16 surrogate is refused: validation.test.ts.)
    const names = ['名前.pdf', 'Zoë 😀.txt', 'a\u0001b.txt', 'quote"back\\slash 100%.txt', 'résumé.pdf'];
    const res = await app.api('POST', '/v1/email/send', {
      ...baseEmail,
      text: 'files',
      attachments: names.map((name) => ({ name, content: Buffer.from(`content of ${name}`).toString('base64') })),
    });
    assert.equal(res.status, 200);
    const { email } = (await app.api('GET', `/v1/email/${res.body.id}`)).body;
    for (const [i, attachment] of (email.attachments as { name: string; fileUrl: string }[]).entries()) {
      const file = await fetch(attachment.fileUrl);
      assert.equal(file.status, 200, attachment.name);
      assert.equal(await file.text(), `content of ${names[i]}`);
      const disposition = file.headers.get('content-disposition')!;
      const [, fallback, encoded] = /^attachment; filename="([\x20-\x7e]*)"; filename\*=UTF-8''([A-Za-z0-9!#$&+\-.^_`|~%]+)$/.exec(disposition) ?? [];
      assert.ok(encoded, disposition);
      assert.doesNotMatch(fallback, /["\\]/);
      assert.equal(decodeURIComponent(encoded), names[i]);
    }
  });

  test('another project cannot read the email', async () => {
    const res = await app.api('POST', '/v1/email/send', baseEmail);
    const child = await app.api('POST', '/v1/project', { name: 'Other' });
    assert.deepEqual((await app.api('GET', `/v1/email/${res.body.id}`, undefined, { key: child.body.apiKey })).body, { email: null });
  });
});

// Open and click tracking: tracking.test.ts (applied at composition, checked on the captured message).

test("a template's inline images (the project logo) are not listed as the email's attachments, and the html reference shows them", async () => {
  const own = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
  try {
    const logo = sampleLogoBase64();
    assert.equal((await own.api('PATCH', '/v1/project', { emailTemplateDesign: { logo: { file: logo } } })).status, 200);
    const sent = await own.api('POST', '/v1/email/send', { ...baseEmail, text: undefined, markdown: '# Hi' });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    const { email } = (await own.api('GET', `/v1/email/${sent.body.id}`)).body;
    assert.equal(email.attachments, null, 'the sender attached nothing');
    const html = await (await fetch(email.htmlReferenceUrl)).text();
    assert.doesNotMatch(html, /cid:/, 'no part a browser cannot resolve');
    const image = /<img[^>]+src="([^"]+\/v1\/email-files\/[^"]+)"/.exec(html);
    assert.ok(image, 'the logo points at its signed link');
    const served = await fetch(image[1].replace(/&amp;/g, '&'));
    assert.equal(served.status, 200);
    assert.deepEqual(Buffer.from(await served.arrayBuffer()), Buffer.from(logo.replace(/^data:[^,]*,/, ''), 'base64'));
  } finally {
    await own.stop();
  }
});
