import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import Database from 'better-sqlite3';
import { writeTransaction } from '../../src/db/client.js';
import { systemClock } from '../../src/lib/clock.js';
import { newId } from '../../src/lib/ids.js';
import { createPurgeProjectRowsProcedure } from '../../src/projects/purge.js';
import { recordWebhookEvent } from '../../src/webhooks/outbox.js';
import { sampleLogoBase64 } from '../render/fixtures.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer } from '../helpers/dns-server.js';
import { waitUntil } from '../helpers/wait-until.js';

let app: TestAppliance;
before(async () => {
  app = await startAppliance();
});
after(() => app.stop());

test('auth matrix (spec §5): required, invalid, failed, and success', async () => {
  const cases: [Record<string, string>, number, string | undefined][] = [
    [{}, 401, 'authentication-required'],
    [{ authorization: '' }, 401, 'authentication-required'],
    [{ authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }, 401, 'authentication-invalid'],
    [{ authorization: app.apiKey }, 401, 'authentication-invalid'],
    [{ authorization: 'Bearer' }, 401, 'authentication-invalid'],
    [{ authorization: 'Bearer pst_not_a_real_key' }, 401, 'authentication-failed'],
    [{ authorization: `Bearer ${app.apiKey}` }, 200, undefined],
    [{ authorization: `bearer ${app.apiKey}` }, 200, undefined],
  ];
  for (const [headers, status, code] of cases) {
    const res = await app.api('GET', '/v1/project', undefined, { key: null, headers });
    assert.equal(res.status, status, JSON.stringify(headers));
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    if (code) {
      assert.equal(res.body.errorCode, code);
      assert.equal(typeof res.body.developerMessage, 'string');
      assert.equal(typeof res.body.moreInfo, 'string');
    }
  }
});

test('every 401 names the scheme in WWW-Authenticate (RFC 9110 §15.5.2 requires it), with RFC 6750\'s error for a malformed header or an unknown key', async () => {
  const challengeFor = async (headers: Record<string, string>, path = '/v1/project') =>
    (await app.api('GET', path, undefined, { key: null, headers })).headers.get('www-authenticate');
  // Before, no 401 of the API carried the header.
  assert.equal(await challengeFor({}), 'Bearer realm="postino"');
  assert.equal(await challengeFor({ authorization: 'Basic YTpi' }), 'Bearer realm="postino", error="invalid_request"');
  assert.equal(await challengeFor({ authorization: 'Bearer pst_not_a_real_key' }), 'Bearer realm="postino", error="invalid_token"');
  // A send refused for its key gets it too; answers that are not 401 do not.
  const send = await app.api('POST', '/v1/email/send', {}, { key: 'pst_not_a_real_key' });
  assert.equal(send.status, 401);
  assert.equal(send.headers.get('www-authenticate'), 'Bearer realm="postino", error="invalid_token"');
  assert.equal((await app.api('GET', '/v1/project')).headers.get('www-authenticate'), null);
  assert.equal((await app.api('GET', '/v1/nothing-here')).headers.get('www-authenticate'), null);
});

test('a revoked key fails like an unknown one', async () => {
  const created = app.appliance.context.projects.createKey(app.appliance.defaultProjectId, 'temp');
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: created.key })).status, 200);
  assert.equal(app.appliance.context.projects.revokeKey(created.id), true);
  const res = await app.api('GET', '/v1/project', undefined, { key: created.key });
  assert.equal(res.status, 401);
  assert.equal(res.body.errorCode, 'authentication-failed');
});

test('a key revoked through another connection (the operator CLI) fails at the next request', async () => {
  // The appliance remembers authenticated keys; a commit by any other connection must make it forget.
  const created = app.appliance.context.projects.createKey(app.appliance.defaultProjectId, 'remembered');
  for (let i = 0; i < 3; i++) assert.equal((await app.api('GET', '/v1/project', undefined, { key: created.key })).status, 200);
  const other = new Database(join(app.dataDir, 'postino.sqlite'));
  try {
    other.prepare('update api_keys set revoked_at = ? where id = ?').run(Date.now(), created.id);
  } finally {
    other.close();
  }
  const res = await app.api('GET', '/v1/project', undefined, { key: created.key });
  assert.equal(res.status, 401);
  assert.equal(res.body.errorCode, 'authentication-failed');
  assert.equal((await app.api('GET', '/v1/project')).status, 200, 'other keys still work after the cache is dropped');
});

test('projects are isolated: each key sees and changes only its own project', async () => {
  const linked = await app.api('POST', '/v1/project', { name: 'Client A' });
  assert.equal(linked.status, 200);
  assert.match(linked.body.apiKey, /^pst_/);
  assert.equal(linked.body.created.apiKey, linked.body.apiKey);
  assert.equal(linked.body.created.parentProjectId, app.appliance.defaultProjectId);
  const childKey: string = linked.body.apiKey;

  const own = await app.api('GET', '/v1/project', undefined, { key: childKey });
  assert.equal(own.body.id, linked.body.id);
  assert.equal(own.body.name, 'Client A');

  await app.api('PATCH', '/v1/project', { name: 'Client A renamed' }, { key: childKey });
  assert.equal((await app.api('GET', '/v1/project')).body.name, 'Default project', 'parent untouched');

  // A sibling cannot delete another linked project (to it the id does not exist: {deleted: false}, as
  // every DELETE answers for an unknown id); the parent can delete its child by id.
  const sibling = await app.api('POST', '/v1/project', { name: 'Client B' });
  const denied = await app.api('DELETE', '/v1/project', { id: linked.body.id }, { key: sibling.body.apiKey });
  assert.equal(denied.status, 200);
  assert.deepEqual(denied.body, { deleted: false });
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: childKey })).status, 200, 'its key still works');
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: 'ffffffffffffffffffffffff' })).body, { deleted: false });
  const deleted = await app.api('DELETE', '/v1/project', { id: linked.body.id });
  assert.deepEqual(deleted.body, { deleted: true });
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: childKey })).body.errorCode, 'authentication-failed');

  // `?id=` given twice is refused: read as no id at all, it used to delete the caller's own project.
  const twice = await app.api('DELETE', '/v1/project?id=ffffffffffffffffffffffff&id=ffffffffffffffffffffffff', undefined, { key: sibling.body.apiKey });
  assert.equal(twice.status, 400);
  assert.equal(twice.body.errorCode, 'parameters-invalid');
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: sibling.body.apiKey })).status, 200, 'the caller is still there');
  assert.deepEqual((await app.api('DELETE', '/v1/project?id=ffffffffffffffffffffffff', undefined, { key: sibling.body.apiKey })).body, { deleted: false });

  // A body naming its target under another name (`projectId`, as email records call it) is refused: read
  // as no id at all, the caller's own project was deleted, with everything in it.
  for (const body of [{ projectId: 'ffffffffffffffffffffffff' }, { ID: 'ffffffffffffffffffffffff' }]) {
    const misnamed = await app.api('DELETE', '/v1/project', body, { key: sibling.body.apiKey });
    assert.equal(misnamed.status, 400, JSON.stringify(body));
    assert.equal(misnamed.body.errorCode, 'parameters-invalid');
    assert.equal((await app.api('GET', '/v1/project', undefined, { key: sibling.body.apiKey })).status, 200, 'the caller is still there');
  }
  // The project as read, sent back whole, names its id: the other fields are ignored, as on PATCH.
  const asRead = (await app.api('GET', '/v1/project', undefined, { key: sibling.body.apiKey })).body;
  assert.deepEqual((await app.api('DELETE', '/v1/project', { ...asRead, id: 'ffffffffffffffffffffffff' }, { key: sibling.body.apiKey })).body, { deleted: false });

  // A linked project can delete itself; the top-level project cannot.
  assert.deepEqual((await app.api('DELETE', '/v1/project', undefined, { key: sibling.body.apiKey })).body, { deleted: true });
  const top = await app.api('DELETE', '/v1/project');
  assert.equal(top.status, 409);
  assert.equal(top.body.errorCode, 'conflict');
});

test('a linked project with linked projects of its own is not deleted (409): the cascade would take theirs too', async () => {
  const child = await app.api('POST', '/v1/project', { name: 'Agency' });
  const grandchild = await app.api('POST', '/v1/project', { name: 'Agency client' }, { key: child.body.apiKey });
  assert.equal(grandchild.status, 200);
  const refused = await app.api('DELETE', '/v1/project', undefined, { key: child.body.apiKey });
  assert.equal(refused.status, 409);
  assert.equal(refused.body.errorCode, 'conflict');
  assert.equal(refused.body.developerMessage, `This project has 1 linked project(s) of its own; delete them first (DELETE /v1/project with {"id": ...}): ${grandchild.body.id}.`, 'named: its parent has no other way to learn the id');
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: child.body.apiKey })).status, 200, 'its keys still work');
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: grandchild.body.apiKey })).body.name, 'Agency client');

  assert.deepEqual((await app.api('DELETE', '/v1/project', undefined, { key: grandchild.body.apiKey })).body, { deleted: true });
  assert.deepEqual((await app.api('DELETE', '/v1/project', undefined, { key: child.body.apiKey })).body, { deleted: true });
});

test("a project deletes linked projects anywhere below it: a tenant that linked one of its own stays deletable by its parent; a sibling still cannot", async () => {
  const tenant = await app.api('POST', '/v1/project', { name: 'Tenant' });
  const own = await app.api('POST', '/v1/project', { name: "Tenant's own" }, { key: tenant.body.apiKey });
  const deeper = await app.api('POST', '/v1/project', { name: "Tenant's own's own" }, { key: own.body.apiKey });
  const sibling = await app.api('POST', '/v1/project', { name: 'Sibling' });
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: deeper.body.id }, { key: sibling.body.apiKey })).body, { deleted: false });
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: deeper.body.id }, { key: deeper.body.apiKey })).body, { deleted: true }, 'itself');
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: own.body.id })).body, { deleted: true }, 'a grandchild, by the top-level project');
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: own.body.apiKey })).body.errorCode, 'authentication-failed');
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: tenant.body.id })).body, { deleted: true });
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: sibling.body.id })).body, { deleted: true });
});

test('a project has at most 1,000 linked projects at once (409 past them)', async () => {
  const agency = await app.api('POST', '/v1/project', { name: 'Agency of many' });
  const insert = app.appliance.context.database.sqlite.prepare(`insert into projects (id, parent_id, name, created_at, updated_at) values (?, ?, ?, 0, 0)`);
  for (let i = 0; i < 999; i++) insert.run(`lnk${String(i).padStart(21, '0')}`, agency.body.id, `client ${i}`);
  const last = await app.api('POST', '/v1/project', { name: 'client 999' }, { key: agency.body.apiKey });
  assert.equal(last.status, 200, JSON.stringify(last.body));
  const refused = await app.api('POST', '/v1/project', { name: 'client 1000' }, { key: agency.body.apiKey });
  assert.equal(refused.status, 409);
  assert.equal(refused.body.developerMessage, 'A project has at most 1000 linked projects; it has 1000. Delete some first.');
  app.appliance.context.database.sqlite.prepare(`delete from projects where parent_id = ?`).run(agency.body.id);
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: agency.body.id })).body, { deleted: true });
});

test('linked projects go at most 8 levels deep (409 at the last level)', async () => {
  const chain: { id: string; apiKey: string }[] = [];
  for (let level = 1; level <= 8; level++) {
    const created = await app.api('POST', '/v1/project', { name: `Level ${level}` }, { key: chain.at(-1)?.apiKey });
    assert.equal(created.status, 200, `level ${level}: ${JSON.stringify(created.body)}`);
    chain.push(created.body);
  }
  const refused = await app.api('POST', '/v1/project', { name: 'Level 9' }, { key: chain.at(-1)!.apiKey });
  assert.equal(refused.status, 409);
  assert.match(refused.body.developerMessage, /^Linked projects go at most 8 levels below a top-level project/);
  for (const project of chain.reverse()) assert.deepEqual((await app.api('DELETE', '/v1/project', { id: project.id })).body, { deleted: true });
});

test('a linked project asked for by a request authenticated just before its parent\'s deletion began is refused, not made and cascaded away', async () => {
  const parent = await app.api('POST', '/v1/project', { name: 'Leaving agency' });
  const { projects, database } = app.appliance.context;
  // What the deletion's first write leaves (keys revoked, the mark) while a request it let in goes on.
  database.sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${parent.body.id}`);
  // Refused as its sends are (409 conflict): the request was let in, its project is what went.
  await assert.rejects(projects.createLinkedProject(parent.body.id, { name: 'Too late' }), (error: { code?: string }) => error.code === 'conflict');
  assert.equal(database.sqlite.prepare('select count(*) from projects where parent_id = ?').pluck().get(parent.body.id), 0);
  database.sqlite.prepare(`delete from settings where key = ?`).run(`deleting:${parent.body.id}`);
});

test("deleting a linked project removes its rows a batch per write, keeps every other project's, and its key stops working", async () => {
  const linked = await app.api('POST', '/v1/project', { name: 'Big client' });
  const projectId: string = linked.body.id;
  const { sqlite } = app.appliance.context.database;
  const count = (table: string, project: string) => sqlite.prepare(`select count(*) from ${table} where project_id = ?`).pluck().get(project) as number;
  const insertEmail = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, text, is_open_tracked, created_at, updated_at) values (?, ?, 'delivered', ?, 'app@sender.test', 'Hi', 'text', 'Hello', 0, 0, 0)`,
  );
  const insertEvent = sqlite.prepare(`insert into email_events (id, email_id, type, time) values (?, ?, 'delivered', 0)`);
  const insertWebhookEvent = sqlite.prepare(`insert into webhook_events (id, project_id, type, data, created_at) values (?, ?, 'email.delivered', '{}', 0)`);
  const insertKey = sqlite.prepare(`insert into idempotency_keys (project_id, key, request_hash, response, created_at) values (?, ?, 'h', '{}', 0)`);
  const fill = (project: string, emails: number) => {
    for (let i = 0; i < emails; i++) {
      const id = newId(systemClock);
      insertEmail.run(id, project, `u${i}@example.com`);
      insertEvent.run(newId(systemClock), id);
      insertWebhookEvent.run(newId(systemClock), project);
      insertKey.run(project, `k-${id}`);
    }
  };
  const insertRetiredKey = sqlite.prepare(`insert into retired_signing_keys (project_id, domain, selector, private_key, mail_from_domain, retired_at) values (?, 'sender.test', 's1', 'pem', 'bounce.sender.test', 0)`);
  sqlite.transaction(() => {
    fill(projectId, 1_200);
    fill(app.appliance.defaultProjectId, 3);
    insertRetiredKey.run(projectId);
  })();
  const eventsOfProject = (project: string) => sqlite.prepare('select count(*) from email_events e join emails m on m.id = e.email_id where m.project_id = ?').pluck().get(project);
  const otherEmails = count('emails', app.appliance.defaultProjectId);
  const otherEvents = eventsOfProject(app.appliance.defaultProjectId);

  // One write of the purge deletes at most its batch, from the largest table first.
  const purge = createPurgeProjectRowsProcedure(sqlite);
  assert.equal(sqlite.transaction(() => purge({ projectId, limit: 500, maxBytes: 8 * 1024 * 1024 }))(), 500);
  assert.equal(count('emails', projectId), 700);
  assert.equal(count('webhook_events', projectId), 1_200);

  assert.deepEqual((await app.api('DELETE', '/v1/project', undefined, { key: linked.body.apiKey })).body, { deleted: true });
  assert.equal((await app.api('GET', '/v1/project', undefined, { key: linked.body.apiKey })).body.errorCode, 'authentication-failed');
  for (const table of ['emails', 'webhook_events', 'idempotency_keys', 'api_keys', 'retired_signing_keys']) assert.equal(count(table, projectId), 0, table);
  assert.equal(sqlite.prepare('select count(*) from projects where id = ?').pluck().get(projectId), 0);
  assert.equal(count('emails', app.appliance.defaultProjectId), otherEmails, "the other project's emails stay");
  assert.equal(eventsOfProject(app.appliance.defaultProjectId), otherEvents);
  assert.equal(sqlite.prepare("select count(*) from email_events where email_id not in (select id from emails)").pluck().get(), 0, 'events went with their emails');
});

test('concurrent deletes of one linked project (its own key and its parent\'s) answer {deleted: true} once', async () => {
  for (let round = 0; round < 10; round++) {
    const linked = await app.api('POST', '/v1/project', { name: `Twice deleted ${round}` });
    // A few rows, so the purge takes more than the first write and the deletes overlap.
    await app.api('POST', '/v1/email/send', Array.from({ length: 20 }, () => ({ toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Hi', text: 'x' })), { key: linked.body.apiKey });
    const answers = await Promise.all([
      app.api('DELETE', '/v1/project', undefined, { key: linked.body.apiKey }),
      app.api('DELETE', '/v1/project', { id: linked.body.id }),
      app.api('DELETE', '/v1/project', { id: linked.body.id }),
    ]);
    for (const answer of answers) assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answers.filter((answer) => answer.body.deleted === true).length, 1, JSON.stringify(answers.map((answer) => answer.body)));
    assert.equal(app.appliance.context.database.sqlite.prepare('select count(*) from projects where id = ?').pluck().get(linked.body.id), 0, 'gone once every answer is in');
  }
});

test('PATCH /v1/project validates and stores the email design', async () => {
  const design = { colors: { highlight: '#ff6600', isDarkModeEnabled: true }, font: { name: 'Inter' }, unsubscribeText: 'Bye' };
  const res = await app.api('PATCH', '/v1/project', { emailTemplateDesign: design });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body.emailTemplateDesign, design);
  const partial = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { footerTextTransactional: 'ACME Inc.' } });
  assert.equal(partial.body.emailTemplateDesign.footerTextTransactional, 'ACME Inc.');
  assert.equal(partial.body.emailTemplateDesign.font.name, 'Inter', 'fields not sent are kept');

  const bad = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { colors: { highlight: 'orange' } } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.errorCode, 'parameters-invalid');
  assert.match(bad.body.developerMessage, /emailTemplateDesign\.colors\.highlight/);
  const empty = await app.api('PATCH', '/v1/project', {});
  assert.equal(empty.status, 400);
  // The font name ends up in CSS: nothing that could close a declaration, an attribute or a tag.
  const injected = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { font: { name: 'a,b"><script>alert(1)</script>' } } });
  assert.equal(injected.status, 400);
  assert.match(injected.body.developerMessage, /emailTemplateDesign\.font\.name/);
  assert.equal((await app.api('PATCH', '/v1/project', { emailTemplateDesign: { font: { name: "Inter, 'Segoe UI', sans-serif" } } })).status, 200);
});

test("the design's language (an extension) is the emails' lang; a value that is no language tag is refused", async () => {
  const preview = async () => (await app.api('POST', '/v1/templates/preview', { subject: 'Hallo', content: [{ type: 'text', text: 'Vielen Dank für Ihre Anmeldung' }] })).body.html as string;
  assert.match(await preview(), /<html lang="en" dir="ltr"/, 'without one, as always');
  assert.equal((await app.api('PATCH', '/v1/project', { emailTemplateDesign: { language: 'de-CH' } })).status, 200);
  assert.match(await preview(), /<html lang="de-CH" dir="ltr"/);
  const bad = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { language: 'de"><script>' } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.errorCode, 'parameters-invalid');
  assert.match(bad.body.developerMessage, /emailTemplateDesign\.language: must be a BCP 47 language tag/);
  assert.equal((await app.api('PATCH', '/v1/project', { emailTemplateDesign: { language: null } })).status, 200);
  assert.match(await preview(), /<html lang="en" dir="ltr"/, 'null clears it');
});

test('PATCH /v1/project takes back the project a client read, with unknown fields ignored as elsewhere; misspelt design keys are refused', async () => {
  const read = await app.api('GET', '/v1/project');
  const renamed = await app.api('PATCH', '/v1/project', { ...read.body, name: 'Renamed by round trip', someFutureField: true });
  assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
  assert.equal(renamed.body.name, 'Renamed by round trip');
  assert.equal(renamed.body.id, read.body.id);
  const onlyUnknown = await app.api('PATCH', '/v1/project', { id: read.body.id });
  assert.equal(onlyUnknown.status, 400, 'nothing to change is still refused');
  const misspelt = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { colours: { highlight: '#123456' } } });
  assert.equal(misspelt.status, 400);
  assert.match(misspelt.body.developerMessage, /colours/);
  const linked = await app.api('POST', '/v1/project', { name: 'Linked with extras', emailTemplateDesign: null });
  assert.equal(linked.status, 200, JSON.stringify(linked.body));
  const linkedKey = linked.body.apiKey as string;
  const res = await fetch(`${app.baseUrl}/v1/project`, { method: 'DELETE', headers: { authorization: `Bearer ${linkedKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ id: linked.body.id ?? linked.body.created?.id, note: 'cleanup' }) });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { deleted: true });
  await app.api('PATCH', '/v1/project', { name: read.body.name });
});

test("PATCH /v1/project merges the design's groups field by field, and refuses a logo file that is not an image", async () => {
  const logo = sampleLogoBase64();
  await app.api('PATCH', '/v1/project', { emailTemplateDesign: { colors: { highlight: '#111111', isDarkModeEnabled: true }, logo: { sizeWidth: 120, href: 'https://brand.example' } } });
  const merged = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { colors: { isDarkModeEnabled: false }, logo: { file: logo } } });
  assert.equal(merged.status, 200);
  assert.deepEqual(merged.body.emailTemplateDesign.colors, { highlight: '#111111', isDarkModeEnabled: false });
  assert.deepEqual(merged.body.emailTemplateDesign.logo, { sizeWidth: 120, href: 'https://brand.example', file: logo });
  // null clears one field, or a whole group.
  const cleared = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { logo: { href: null }, colors: null } });
  assert.deepEqual(cleared.body.emailTemplateDesign.logo, { sizeWidth: 120, href: null, file: logo });
  assert.equal(cleared.body.emailTemplateDesign.colors, null);

  for (const file of ['!!!notbase64"><script>x</script>', Buffer.from('plain text, not an image').toString('base64')]) {
    const refused = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { logo: { file } } });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.errorCode, 'parameters-invalid');
    assert.match(refused.body.developerMessage, /emailTemplateDesign\.logo\.file: must be a base64 PNG, JPEG, GIF, WebP or SVG image/);
  }
  assert.equal((await app.api('PATCH', '/v1/project', { emailTemplateDesign: { logo: { file: `data:image/png;base64,${logo}` } } })).status, 200);
  await app.api('PATCH', '/v1/project', { emailTemplateDesign: null });
});

test("PATCH /v1/project takes the official SDKs' README example, whose logo is an SVG, and previews show it", async () => {
  // Verbatim from the project.update example of the Node, Python and Ruby SDK READMEs (COMPAT.md "Project design").
  const svgLogo =
    'PHN2ZyBjbGlwLXJ1bGU9ImV2ZW5vZGQiIGZpbGwtcnVsZT0iZXZlbm9kZCIgc3Ryb2tlLWxpbmVqb2luPSJyb3VuZCIgc3Ryb2tlLW1pdGVybGltaXQ9IjIiIHZpZXdCb3g9IjAgMCAyNCAyNCIgeG1sbnM9Imh0dHA6Ly93d3cudzMub3JnLzIwMDAvc3ZnIj48cGF0aCBkPSJtMTIgNS43MmMtMi42MjQtNC41MTctMTAtMy4xOTgtMTAgMi40NjEgMCAzLjcyNSA0LjM0NSA3LjcyNyA5LjMwMyAxMi41NC4xOTQuMTg5LjQ0Ni4yODMuNjk3LjI4M3MuNTAzLS4wOTQuNjk3LS4yODNjNC45NzctNC44MzEgOS4zMDMtOC44MTQgOS4zMDMtMTIuNTQgMC01LjY3OC03LjM5Ni02Ljk0NC0xMC0yLjQ2MXoiIGZpbGwtcnVsZT0ibm9uemVybyIvPjwvc3ZnPg==';
  const design = {
    logo: { sizeWidth: 50, href: 'https://example.com', file: svgLogo },
    font: { name: 'Acme' },
    colors: { highlight: '#0000FF', isDarkModeEnabled: true },
    unsubscribeText: 'Darse de baja',
    footerTextTransactional: "You're receiving these emails because you registered for Acme Inc.",
  };
  const updated = await app.api('PATCH', '/v1/project', { name: 'New name', emailTemplateDesign: design });
  assert.equal(updated.status, 200, JSON.stringify(updated.body));
  assert.deepEqual(updated.body.emailTemplateDesign.logo, design.logo);
  const preview = await app.api('POST', '/v1/templates/preview', { subject: 'Hi', content: [{ type: 'text', text: 'Hello' }] });
  assert.equal(preview.status, 200);
  assert.match(preview.body.html, /<img src="data:image\/svg\+xml;base64,[^"]+" alt="Logo" width="50"/);
  // An SVG carrying script stays refused: shown only as an image it could not run, but a mail client may
  // offer the part to be opened on its own.
  for (const svg of ['<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', '<svg><script>alert(1)</script></svg>']) {
    const refused = await app.api('PATCH', '/v1/project', { emailTemplateDesign: { logo: { file: Buffer.from(svg).toString('base64') } } });
    assert.equal(refused.status, 400, svg);
  }
  await app.api('PATCH', '/v1/project', { name: 'Default project', emailTemplateDesign: null });
});

test('a changed auth.api_key replaces the key configured before; other keys stay', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-rotate-'));
  const first = 'pst_first_configured_key_0123456789abcdef';
  const second = 'pst_second_configured_key_0123456789abcde';
  const one = await startAppliance({ dataDir, keepDataDir: true, env: { POSTINO_AUTH_API_KEY: first } });
  const extra = one.appliance.context.projects.createKey(one.appliance.defaultProjectId, 'ci').key;
  await one.stop();

  const two = await startAppliance({ dataDir, keepDataDir: true, env: { POSTINO_AUTH_API_KEY: second } });
  try {
    assert.equal((await two.api('GET', '/v1/project', undefined, { key: second })).status, 200);
    assert.equal((await two.api('GET', '/v1/project', undefined, { key: first })).body.errorCode, 'authentication-failed');
    assert.equal((await two.api('GET', '/v1/project', undefined, { key: extra })).status, 200, 'a key made with the CLI stays');
    assert.ok(two.logs.some((line) => line.includes('auth.api_key changed: the key configured before is revoked')));
  } finally {
    await two.stop();
  }
  // Configuring the first key again is refused: it was revoked.
  await assert.rejects(startAppliance({ dataDir, env: { POSTINO_AUTH_API_KEY: first } }), /auth\.api_key was revoked on \d{4}-\d\d-\d\d \(.*configure the current key/);
});

test('a key made with the CLI and then also put in auth.api_key stays when auth.api_key is removed or changed: only a key the config created is revoked', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-adopted-'));
  const configured = 'pst_config_created_key_0123456789abcdefgh';
  const later = 'pst_later_configured_key_0123456789abcdef';
  const startWith = (key: string) => startAppliance({ dataDir, keepDataDir: true, env: { POSTINO_AUTH_API_KEY: key } });
  const works = async (app: TestAppliance, key: string) => (await app.api('GET', '/v1/project', undefined, { key })).status === 200;

  const one = await startWith(configured);
  // What `keys create` does; the operator then puts that key in the config, for their clients have it.
  const cliKey = one.appliance.context.projects.createKey(one.appliance.defaultProjectId, 'ci').key;
  await one.stop();

  const adopted = await startWith(cliKey);
  try {
    assert.equal(await works(adopted, cliKey), true);
    assert.equal(await works(adopted, configured), false, 'the key the config created before is replaced');
  } finally {
    await adopted.stop();
  }

  const removed = await startWith('');
  try {
    assert.equal(await works(removed, cliKey), true, 'removed from the config, the CLI key stays');
    assert.equal(removed.appliance.generatedApiKey, undefined, 'a key is left: none is generated');
  } finally {
    await removed.stop();
  }

  const changed = await startWith(later);
  try {
    assert.equal(await works(changed, later), true);
    assert.equal(await works(changed, cliKey), true, 'another key configured, the CLI key stays');
  } finally {
    await changed.stop();
  }
  // The config's own key is still the config's: changed again, it goes.
  const again = await startWith(cliKey);
  try {
    assert.equal(await works(again, later), false, 'the key the config created is revoked when it changes');
    assert.equal(await works(again, cliKey), true);
  } finally {
    await again.stop();
  }
});

test('a linked project deletion cut short by a crash finishes at the next start', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-resume-'));
  const first = await startAppliance({ dataDir, keepDataDir: true });
  const linked = await first.api('POST', '/v1/project', { name: 'Half deleted' });
  const projectId: string = linked.body.id;
  const sqlite = first.appliance.context.database.sqlite;
  const insertEmail = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, text, is_open_tracked, created_at, updated_at) values (?, ?, 'delivered', 'u@example.com', 'app@sender.test', 'Hi', 'text', 'Hello', 0, 0, 0)`,
  );
  sqlite.transaction(() => {
    for (let i = 0; i < 1_200; i++) insertEmail.run(newId(systemClock), projectId);
  })();
  // What the first write of DELETE /v1/project leaves when the process dies right after it.
  sqlite.prepare('update api_keys set revoked_at = 1 where project_id = ?').run(projectId);
  sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${projectId}`);
  await first.stop();

  const second = await startAppliance({ dataDir });
  try {
    const db = second.appliance.context.database.sqlite;
    await waitUntil(() => db.prepare('select count(*) from projects where id = ?').pluck().get(projectId) === 0, 'the project deleted');
    assert.equal(db.prepare('select count(*) from emails where project_id = ?').pluck().get(projectId), 0);
    assert.equal(db.prepare(`select count(*) from settings where key like 'deleting:%'`).pluck().get(), 0);
    assert.ok(second.logs.some((line) => line.includes('resuming interrupted project deletions')));
  } finally {
    await second.stop();
  }
});

test('a request whose project is deleted while its body is still on the way gets 409 conflict, not a 500', async () => {
  const app = await startAppliance();
  try {
    const linked = await app.api('POST', '/v1/project', { name: 'Leaving' });
    const key: string = linked.body.apiKey;
    const body = JSON.stringify({ emailAddress: 'late@example.com', reason: 'manual' });
    const { port } = new URL(app.baseUrl);
    const answer = new Promise<{ status: number; body: any }>((resolve, reject) => {
      const request = httpRequest(
        { host: '127.0.0.1', port, method: 'POST', path: '/v1/suppressions', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        (response) => {
          let text = '';
          response.on('data', (chunk) => (text += chunk));
          response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) }));
        },
      );
      request.on('error', reject);
      // Authenticated on its headers; the project goes before the rest of the body arrives.
      request.write(body.slice(0, 10));
      setTimeout(async () => {
        assert.deepEqual((await app.api('DELETE', '/v1/project', undefined, { key })).body, { deleted: true });
        request.end(body.slice(10));
      }, 100);
    });
    const { status, body: reply } = await answer;
    assert.equal(status, 409, JSON.stringify(reply));
    assert.equal(reply.errorCode, 'conflict');
    assert.match(reply.developerMessage, /was deleted while it ran; nothing was stored/);
    assert.ok(!app.logs.some((line) => line.includes('unhandled error')), 'no error logged as a bug');
  } finally {
    await app.stop();
  }
});

test('a send that reaches its commit while its project is being deleted is refused (409), not answered queued and then purged', async () => {
  const sandbox = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
  try {
    const linked = await sandbox.api('POST', '/v1/project', { name: 'Being deleted' });
    const projectId: string = linked.body.id;
    const { sqlite } = sandbox.appliance.context.database;
    // What the deletion's first write leaves while its purge runs (seconds, for a large project), as a
    // request authenticated just before it sees it: the mark, with the key still valid to that request.
    sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${projectId}`);
    const res = await sandbox.api('POST', '/v1/email/send', { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Hi', text: 'x' }, { key: linked.body.apiKey });
    assert.equal(res.status, 409, JSON.stringify(res.body));
    assert.equal(res.body.errorCode, 'conflict');
    assert.match(res.body.developerMessage, /nothing was stored/);
    assert.equal(sqlite.prepare('select count(*) from emails where project_id = ?').pluck().get(projectId), 0, 'nothing stored');
  } finally {
    await sandbox.stop();
  }
});

/** The tables a linked project's resources live in, with how many rows of the project each holds. */
function projectRows(sqlite: Database.Database, projectId: string) {
  const count = (table: string) => sqlite.prepare(`select count(*) from ${table} where project_id = ?`).pluck().get(projectId) as number;
  return {
    templates: count('templates'),
    domains: count('domains'),
    webhook_endpoints: count('webhook_endpoints'),
    webhook_deliveries: count('webhook_deliveries'),
    suppressions: count('suppressions'),
    contacts: count('contacts'),
    contact_properties: count('contact_properties'),
    messenger_drafts: count('messenger_drafts'),
    linked_projects: sqlite.prepare('select count(*) from projects where parent_id = ?').pluck().get(projectId) as number,
  };
}

/** Refused as a send of a project being deleted is: 409 conflict, the compatible error body, nothing stored. */
function assertRefusedAsDeleted(what: string, res: { status: number; body: any }) {
  assert.equal(res.status, 409, `${what}: ${JSON.stringify(res.body)}`);
  assert.deepEqual(Object.keys(res.body).sort(), ['developerMessage', 'errorCode', 'moreInfo'], what);
  assert.equal(res.body.errorCode, 'conflict', what);
  assert.match(res.body.developerMessage, /was deleted while it ran; nothing was stored/, what);
}

test('every write of a project being deleted (templates, domains, webhooks, suppressions, contacts, messenger drafts, the project) is refused as its sends are: 409 conflict, nothing stored', async () => {
  const dns = await startDnsServer();
  const sandbox = await startAppliance({ env: { POSTINO_DNS_SERVERS: dns.address, POSTINO_DOMAINS_MAIL_HOSTNAME: 'mx.postino.test' } });
  try {
    const linked = await sandbox.api('POST', '/v1/project', { name: 'Being deleted' });
    const projectId: string = linked.body.id;
    const key: string = linked.body.apiKey;
    const call = (method: string, path: string, body?: unknown) => sandbox.api(method, path, body, { key });
    // What it had before its deletion began: the updates below need something to update.
    const template = (await call('POST', '/v1/templates', { name: 'Welcome', subject: 'Hi', content: [{ type: 'text', text: 'Hello' }] })).body.data;
    const domain = (await call('POST', '/v1/domains', { domain: 'leaving.test' })).body;
    const webhook = (await call('POST', '/v1/webhooks', { url: 'https://hooks.leaving.test/in' })).body;
    assert.equal((await call('POST', '/v1/contacts', { emailAddress: 'kept@example.com', customProps: { plan: 'pro' } })).status, 200);
    const draft = (await call('POST', '/v1/messenger', { subject: 'Kept' })).body;
    const { sqlite, db } = sandbox.appliance.context.database;
    writeTransaction(sqlite, () => recordWebhookEvent(db, sandbox.appliance.context.clock, { projectId, type: 'email.delivered', data: { id: 'e-before' } }));
    const deliveryId = sqlite.prepare('select id from webhook_deliveries where project_id = ?').pluck().get(projectId) as string;
    const before = projectRows(sqlite, projectId);
    assert.deepEqual(before, { templates: 1, domains: 1, webhook_endpoints: 1, webhook_deliveries: 1, suppressions: 0, contacts: 1, contact_properties: 1, messenger_drafts: 1, linked_projects: 0 });

    // What the deletion's first write leaves while its purge runs, as a request authenticated just before
    // it sees it: the mark, with the key still valid to that request.
    sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${projectId}`);
    const writes: [string, string, unknown?][] = [
      ['POST', '/v1/templates', { name: 'Too late', subject: 'Hi', content: [] }],
      ['PATCH', `/v1/templates/${template.id}`, { name: 'Renamed too late' }],
      ['POST', '/v1/domains', { domain: 'late.test' }],
      ['POST', `/v1/domains/${domain.id}/verify`],
      ['POST', '/v1/webhooks', { url: 'https://hooks.leaving.test/late' }],
      ['PATCH', `/v1/webhooks/${webhook.id}`, { url: 'https://hooks.leaving.test/moved' }],
      ['PUT', `/v1/webhooks/${webhook.id}`, { enabled: false }],
      ['POST', `/v1/webhooks/deliveries/${deliveryId}/replay`],
      ['POST', '/v1/suppressions', { emailAddress: 'late@example.com' }],
      ['POST', '/v1/contacts', { emailAddress: 'late@example.com', customProps: { late: 1 } }],
      ['POST', '/v1/contacts', { emailAddress: 'kept@example.com', customProps: { plan: 'basic' } }],
      ['POST', '/v1/messenger', { subject: 'Too late' }],
      ['PATCH', `/v1/messenger/${draft.id}`, { subject: 'Changed too late' }],
      ['PATCH', '/v1/project', { name: 'Renamed too late' }],
      ['POST', '/v1/project', { name: 'Linked too late' }],
    ];
    for (const [method, path, body] of writes) assertRefusedAsDeleted(`${method} ${path}`, await call(method, path, body));

    assert.deepEqual(projectRows(sqlite, projectId), before, 'nothing added');
    assert.equal(sqlite.prepare('select name from templates where id = ?').pluck().get(template.id), 'Welcome', 'nothing updated');
    assert.equal(sqlite.prepare('select subject from messenger_drafts where id = ?').pluck().get(draft.id), 'Kept');
    assert.equal(sqlite.prepare(`select json_extract(custom_props, '$.plan.value') from contacts where project_id = ?`).pluck().get(projectId), 'pro');
    assert.equal(sqlite.prepare('select url from webhook_endpoints where id = ?').pluck().get(webhook.id), 'https://hooks.leaving.test/in');
    assert.equal(sqlite.prepare('select last_checked_at from domains where id = ?').pluck().get(domain.id), domain.lastCheckedAt === null ? null : Date.parse(domain.lastCheckedAt));
    assert.equal(sqlite.prepare('select name from projects where id = ?').pluck().get(projectId), 'Being deleted');

    // The deletion goes on (as after a crash) and leaves nothing of the project.
    await sandbox.appliance.context.projects.resumeDeletions();
    assert.deepEqual(projectRows(sqlite, projectId), { templates: 0, domains: 0, webhook_endpoints: 0, webhook_deliveries: 0, suppressions: 0, contacts: 0, contact_properties: 0, messenger_drafts: 0, linked_projects: 0 });
    assert.equal(sqlite.prepare('select count(*) from projects where id = ?').pluck().get(projectId), 0);
  } finally {
    await sandbox.stop();
    await dns.stop();
  }
});

/**
 * A request whose headers (and so its key) were read, and whose body is held back until `finish()`: it
 * is authenticated before whatever happens meanwhile, and its write comes after.
 */
function startHeldRequest(baseUrl: string, key: string, method: string, path: string, body: unknown) {
  const text = JSON.stringify(body);
  const { port } = new URL(baseUrl);
  let request!: ReturnType<typeof httpRequest>;
  const answer = new Promise<{ status: number; body: any }>((resolve, reject) => {
    request = httpRequest(
      { host: '127.0.0.1', port, method, path, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) } },
      (response) => {
        let received = '';
        response.on('data', (chunk) => (received += chunk));
        response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(received) }));
      },
    );
    request.on('error', reject);
  });
  request.write(text.slice(0, 1));
  return {
    finish: () => {
      request.end(text.slice(1));
      return answer;
    },
  };
}

test('creates authenticated before a deletion began and committed while its purge runs are refused (409), not answered 201 and deleted with the project', async () => {
  const sandbox = await startAppliance();
  const { writes } = sandbox.appliance.context;
  const purgeRows = writes.call;
  let releasePurge: () => void = () => {};
  const purgeHeld = new Promise<void>((resolve) => (releasePurge = resolve));
  try {
    const linked = await sandbox.api('POST', '/v1/project', { name: 'Leaving' });
    const projectId: string = linked.body.id;
    const creates = {
      template: startHeldRequest(sandbox.baseUrl, linked.body.apiKey, 'POST', '/v1/templates', { name: 'Late', subject: 'Hi', content: [] }),
      domain: startHeldRequest(sandbox.baseUrl, linked.body.apiKey, 'POST', '/v1/domains', { domain: 'late.test' }),
      webhook: startHeldRequest(sandbox.baseUrl, linked.body.apiKey, 'POST', '/v1/webhooks', { url: 'https://hooks.late.test/in' }),
      suppression: startHeldRequest(sandbox.baseUrl, linked.body.apiKey, 'POST', '/v1/suppressions', { emailAddress: 'late@example.com' }),
      contact: startHeldRequest(sandbox.baseUrl, linked.body.apiKey, 'POST', '/v1/contacts', { emailAddress: 'late@example.com', customProps: { late: 1 } }),
      draft: startHeldRequest(sandbox.baseUrl, linked.body.apiKey, 'POST', '/v1/messenger', { subject: 'Late' }),
    };
    // The purge of a large project takes many writes; here it waits until the creates have answered.
    writes.call = (async (name: string, args: unknown) => {
      if (name === 'projects.purge-rows') await purgeHeld;
      return purgeRows.call(writes, name as never, args as never);
    }) as typeof writes.call;
    const { sqlite } = sandbox.appliance.context.database;
    const deleting = sandbox.api('DELETE', '/v1/project', undefined, { key: linked.body.apiKey });
    await waitUntil(() => sqlite.prepare('select 1 from settings where key = ?').pluck().get(`deleting:${projectId}`) !== undefined, 'the deletion under way');

    for (const [what, create] of Object.entries(creates)) assertRefusedAsDeleted(what, await create.finish());
    assert.deepEqual(projectRows(sqlite, projectId), { templates: 0, domains: 0, webhook_endpoints: 0, webhook_deliveries: 0, suppressions: 0, contacts: 0, contact_properties: 0, messenger_drafts: 0, linked_projects: 0 }, 'nothing stored');
    releasePurge();
    assert.deepEqual((await deleting).body, { deleted: true });
    assert.equal(sqlite.prepare('select count(*) from projects where id = ?').pluck().get(projectId), 0);
  } finally {
    writes.call = purgeRows;
    releasePurge();
    await sandbox.stop();
  }
});
