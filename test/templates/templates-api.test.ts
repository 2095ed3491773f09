import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../../src/lib/clock.js';
import { startAppliance, type ApiResponse, type TestAppliance } from '../helpers/appliance.js';

let app: TestAppliance;
const clock = new ManualClock('2026-03-01T10:00:00.000Z');
before(async () => {
  app = await startAppliance({ clock });
});
after(() => app.stop());

let seq = 0;
const uniqueName = (prefix = 'tpl') => `${prefix}-${++seq}`;

function assertError(res: ApiResponse, status: number, code: string, messagePart?: string | RegExp) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.errorCode, code, JSON.stringify(res.body));
  assert.equal(typeof res.body.developerMessage, 'string');
  assert.equal(typeof res.body.moreInfo, 'string');
  if (typeof messagePart === 'string') assert.ok(res.body.developerMessage.includes(messagePart), res.body.developerMessage);
  else if (messagePart) assert.match(res.body.developerMessage, messagePart);
}

async function createTemplate(body: Record<string, unknown>, key?: string) {
  const res = await app.api('POST', '/v1/templates', { subject: 'Hello', ...body }, key ? { key } : undefined);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.data;
}

async function createLinkedProject(name: string): Promise<string> {
  const res = await app.api('POST', '/v1/project', { name });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.apiKey;
}

/** Every id in a content tree, box columns included. */
function collectIds(nodes: any[]): string[] {
  return nodes.flatMap((node) => [node.id, ...(node.columns ?? []).flatMap((column: any) => collectIds(column.elements ?? []))]);
}

describe('create and retrieve', () => {
  test('create answers {data} with every field, version 2 and ISO timestamps; retrieve shows the same', async () => {
    const body = {
      name: uniqueName('welcome'),
      subject: 'Welcome, {name}',
      content: [{ type: 'text', text: 'Hi **{name}**' }],
      emailText: 'Hi {name}',
      preheader: 'Glad you are here',
      sampleProps: { name: 'Ada', series: [1, 2, 3], items: [{ title: 'x' }] },
      layoutId: 'default',
    };
    const res = await app.api('POST', '/v1/templates', body);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const data = res.body.data;
    assert.match(data.id, /^[0-9a-f]{24}$/);
    assert.equal(data.name, body.name);
    assert.equal(data.subject, body.subject);
    assert.equal(data.emailText, body.emailText);
    assert.equal(data.preheader, body.preheader);
    assert.deepEqual(data.sampleProps, body.sampleProps);
    assert.equal(data.layoutId, 'default');
    assert.equal(data.version, 2);
    assert.equal(data.content.length, 1);
    assert.equal(data.content[0].type, 'text');
    assert.equal(data.content[0].text, 'Hi **{name}**');
    assert.equal(typeof data.content[0].id, 'string');
    assert.equal(data.createdAt, clock.now().toISOString(), 'ISO 8601 from the injected clock');
    assert.equal(data.updatedAt, data.createdAt);

    const got = await app.api('GET', `/v1/templates/${data.id}`);
    assert.equal(got.status, 200);
    assert.deepEqual(got.body.data, data);
  });

  test('optional fields default to null and content to []', async () => {
    const data = await createTemplate({ name: uniqueName() });
    assert.deepEqual(data.content, []);
    assert.equal(data.emailText, null);
    assert.equal(data.preheader, null);
    assert.equal(data.sampleProps, null);
    assert.equal(data.layoutId, null);
  });

  test('missing body, missing name, missing subject → 400 parameters-invalid naming the field', async () => {
    assertError(await app.api('POST', '/v1/templates'), 400, 'parameters-invalid');
    assertError(await app.api('POST', '/v1/templates', { subject: 's' }), 400, 'parameters-invalid', 'name');
    assertError(await app.api('POST', '/v1/templates', { name: uniqueName() }), 400, 'parameters-invalid', 'subject');
    assertError(await app.api('POST', '/v1/templates', '{"name":'), 400, 'parameters-invalid');
  });

  test('unknown id, malformed id → 404 not-found', async () => {
    assertError(await app.api('GET', '/v1/templates/0123456789abcdef01234567'), 404, 'not-found');
    assertError(await app.api('GET', '/v1/templates/not-an-id'), 404, 'not-found');
  });

  test('requires an API key', async () => {
    assertError(await app.api('GET', '/v1/templates', undefined, { key: null }), 401, 'authentication-required');
  });
});

describe('limits (spec §8): one accepted and one refused case per rule', () => {
  const cases: { field: string; ok: unknown; bad: unknown; path: string }[] = [
    { field: 'subject', ok: 's'.repeat(1000), bad: 's'.repeat(1001), path: 'subject' },
    { field: 'preheader', ok: 'p'.repeat(200), bad: 'p'.repeat(201), path: 'preheader' },
    { field: 'layoutId', ok: 'l'.repeat(20), bad: 'l'.repeat(21), path: 'layoutId' },
    { field: 'emailText', ok: 'e'.repeat(1024 * 1024), bad: 'e'.repeat(1024 * 1024 + 1), path: 'emailText' },
    // 1 MB counts bytes: 350000 three-byte characters are 1,050,000 bytes.
    { field: 'emailText', ok: '€'.repeat(349_525), bad: '€'.repeat(350_000), path: 'emailText' },
    { field: 'sampleProps', ok: { s: 'x', n: [0, 1.5, 3], o: [{ a: 1 }], empty: [] }, bad: { n: [1, -2] }, path: 'sampleProps.n' },
    { field: 'sampleProps', ok: null, bad: { flag: true }, path: 'sampleProps.flag' },
    { field: 'sampleProps', ok: { s: 'x' }, bad: { mixed: [1, { a: 1 }] }, path: 'sampleProps.mixed' },
    { field: 'sampleProps', ok: { s: 'x' }, bad: 'not an object', path: 'sampleProps' },
    { field: 'content', ok: [], bad: { type: 'text' }, path: 'content' },
  ];
  for (const { field, ok, bad, path } of cases) {
    test(`${field}: ${JSON.stringify(bad).slice(0, 40)} refused at ${path}`, async () => {
      const accepted = await app.api('POST', '/v1/templates', { name: uniqueName(), subject: 'x', [field]: ok });
      assert.equal(accepted.status, 200, JSON.stringify(accepted.body).slice(0, 300));
      assert.deepEqual(accepted.body.data[field], ok);
      const refused = await app.api('POST', '/v1/templates', { name: uniqueName(), subject: 'x', [field]: bad });
      assertError(refused, 400, 'parameters-invalid', `${path}:`);
    });
  }

  test('name: 200 characters accepted (emoji count as one), 201 refused, empty refused', async () => {
    const name200 = '😀'.repeat(200);
    assert.equal((await createTemplate({ name: name200 })).name, name200);
    assertError(await app.api('POST', '/v1/templates', { name: 'n'.repeat(201), subject: 'x' }), 400, 'parameters-invalid', 'name:');
    assertError(await app.api('POST', '/v1/templates', { name: '', subject: 'x' }), 400, 'parameters-invalid', 'name:');
  });

  test('name is unique per project: a duplicate create → 403 resource-duplicate; case and whitespace differ', async () => {
    const name = uniqueName('Receipt');
    await createTemplate({ name });
    assertError(await app.api('POST', '/v1/templates', { name, subject: 'x' }), 403, 'resource-duplicate', name);
    // Names are case and whitespace sensitive (spec §4.1), so these are different names.
    await createTemplate({ name: name.toLowerCase() });
    await createTemplate({ name: `${name} ` });
  });

  test('the same name in another project is fine', async () => {
    const name = uniqueName('shared-name');
    await createTemplate({ name });
    const otherKey = await createLinkedProject('Name test');
    await createTemplate({ name }, otherKey);
  });

  test('version is read-only: a client-sent version is ignored and 2 is answered', async () => {
    const data = await createTemplate({ name: uniqueName(), version: 7 });
    assert.equal(data.version, 2);
  });

  test('PHP clients: an empty map json_encoded as [] is an empty object in sampleProps and preview props, as in send', async () => {
    const data = await createTemplate({ name: uniqueName('php'), subject: 'Hi {name}', sampleProps: [] });
    assert.deepEqual(data.sampleProps, {});
    const withItems = await createTemplate({ name: uniqueName('php'), sampleProps: { rows: [{ a: 'x' }, []] } });
    assert.deepEqual(withItems.sampleProps, { rows: [{ a: 'x' }, {}] });
    const patched = await app.api('PATCH', `/v1/templates/${withItems.id}`, { sampleProps: [] });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.deepEqual(patched.body.data.sampleProps, {});
    // A preview called with no arguments sends the body `[]`; `'templateProps' => []` arrives as `[]`.
    for (const body of [[], { templateProps: [] }]) {
      const preview = await app.api('POST', `/v1/templates/${data.id}/preview`, body);
      assert.equal(preview.status, 200, JSON.stringify(preview.body));
      assert.equal(preview.body.subject, 'Hi name');
    }
    const unsaved = await app.api('POST', '/v1/templates/preview', { subject: 'Hi {name}', templateProps: [] });
    assert.equal(unsaved.status, 200, JSON.stringify(unsaved.body));
    // Other arrays are still refused.
    assertError(await app.api('POST', '/v1/templates', { name: uniqueName(), subject: 'x', sampleProps: ['a'] }), 400, 'parameters-invalid', 'sampleProps');
    assertError(await app.api('POST', `/v1/templates/${data.id}/preview`, { templateProps: [1] }), 400, 'parameters-invalid', 'templateProps');
  });

  test('a __proto__ key in sampleProps or preview templateProps is refused, not silently dropped (as in send)', async () => {
    // A JSON text, not an object literal: `{ __proto__: … }` in JS sets the prototype instead of a key.
    const body = `{"name": "${uniqueName('proto')}", "subject": "x", "sampleProps": {"__proto__": "x", "a": "b"}}`;
    assertError(await app.api('POST', '/v1/templates', body), 400, 'parameters-invalid', 'sampleProps.__proto__');
    const data = await createTemplate({ name: uniqueName('proto'), sampleProps: { a: 'b' } });
    assertError(await app.api('PATCH', `/v1/templates/${data.id}`, '{"sampleProps": {"__proto__": "x"}}'), 400, 'parameters-invalid', 'sampleProps.__proto__');
    assertError(await app.api('POST', `/v1/templates/${data.id}/preview`, '{"templateProps": {"__proto__": "x"}}'), 400, 'parameters-invalid', 'templateProps.__proto__');
    assertError(await app.api('POST', '/v1/templates/preview', '{"subject": "s", "templateProps": {"__proto__": "x"}}'), 400, 'parameters-invalid', 'templateProps.__proto__');
    const got = await app.api('GET', `/v1/templates/${data.id}`);
    assert.deepEqual(got.body.data.sampleProps, { a: 'b' });
  });
});

describe('update (PATCH)', () => {
  test('only provided fields change; null clears a nullable field; updatedAt moves', async () => {
    const created = await createTemplate({
      name: uniqueName('patch'),
      subject: 'Old subject',
      content: [{ type: 'text', text: 'body' }],
      emailText: 'plain',
      preheader: 'pre',
      sampleProps: { a: 'b' },
      layoutId: 'lay',
    });
    clock.advance(60_000);
    const res = await app.api('PATCH', `/v1/templates/${created.id}`, { subject: 'New subject', preheader: null });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const data = res.body.data;
    assert.equal(data.subject, 'New subject');
    assert.equal(data.preheader, null);
    assert.equal(Date.parse(data.updatedAt) - Date.parse(created.updatedAt), 60_000);
    for (const field of ['id', 'name', 'content', 'emailText', 'sampleProps', 'layoutId', 'createdAt', 'version']) {
      assert.deepEqual(data[field], created[field], field);
    }
    const again = await app.api('GET', `/v1/templates/${created.id}`);
    assert.deepEqual(again.body.data, data);
  });

  test('content is re-validated and ids re-assigned on update', async () => {
    const created = await createTemplate({ name: uniqueName() });
    const res = await app.api('PATCH', `/v1/templates/${created.id}`, {
      content: [
        { id: 'same', type: 'text', text: 'a' },
        { id: 'same', type: 'divider' },
      ],
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const ids = collectIds(res.body.data.content);
    assert.equal(new Set(ids).size, 2);
    assert.equal(ids[0], 'same');
    assertError(await app.api('PATCH', `/v1/templates/${created.id}`, { content: [{ type: 'button', label: 'x' }] }), 400, 'parameters-invalid', 'content[0].url');
  });

  test('an empty patch and a bad field are refused', async () => {
    const created = await createTemplate({ name: uniqueName() });
    assertError(await app.api('PATCH', `/v1/templates/${created.id}`, {}), 400, 'parameters-invalid', 'at least one');
    assertError(await app.api('PATCH', `/v1/templates/${created.id}`, { subject: 's'.repeat(1001) }), 400, 'parameters-invalid', 'subject:');
    // null counts as not sent (docs/errors.md): a patch of nulls alone changes nothing.
    assertError(await app.api('PATCH', `/v1/templates/${created.id}`, { name: null }), 400, 'parameters-invalid', 'at least one');
    assertError(await app.api('PATCH', `/v1/templates/${created.id}`, { name: ' ' }), 400, 'parameters-invalid', 'name:');
  });

  test('renaming to an existing name → 403 resource-duplicate; renaming to its own name or a free one works', async () => {
    const a = await createTemplate({ name: uniqueName('a') });
    const b = await createTemplate({ name: uniqueName('b') });
    assertError(await app.api('PATCH', `/v1/templates/${b.id}`, { name: a.name }), 403, 'resource-duplicate');
    assert.equal((await app.api('PATCH', `/v1/templates/${b.id}`, { name: b.name })).status, 200);
    const free = uniqueName('free');
    const renamed = await app.api('PATCH', `/v1/templates/${b.id}`, { name: free });
    assert.equal(renamed.status, 200);
    assert.equal(renamed.body.data.name, free);
  });

  test('unknown id → 404 not-found', async () => {
    assertError(await app.api('PATCH', '/v1/templates/0123456789abcdef01234567', { subject: 'x' }), 404, 'not-found');
  });
});

describe('delete', () => {
  test('DELETE answers {deleted: true} once, then {deleted: false}; the template is gone', async () => {
    const created = await createTemplate({ name: uniqueName('del') });
    const first = await app.api('DELETE', `/v1/templates/${created.id}`);
    assert.equal(first.status, 200);
    assert.match(first.headers.get('content-type') ?? '', /application\/json/);
    assert.deepEqual(first.body, { deleted: true });
    assert.deepEqual((await app.api('DELETE', `/v1/templates/${created.id}`)).body, { deleted: false });
    assertError(await app.api('GET', `/v1/templates/${created.id}`), 404, 'not-found');
    // The name is free again.
    await createTemplate({ name: created.name });
  });
});

describe('content normalization', () => {
  test('ids are generated when missing or duplicated, nested box columns included', async () => {
    const data = await createTemplate({
      name: uniqueName('ids'),
      content: [
        { type: 'text', text: 'no id' },
        { id: 'dup', type: 'text', text: 'first dup' },
        { id: 'dup', type: 'divider' },
        {
          id: 'box-1',
          type: 'box',
          columns: [
            { width: '50%', elements: [{ id: 'dup', type: 'text', text: 'nested dup' }, { type: 'divider' }] },
            { elements: [{ id: 'box-1', type: 'button', label: 'Go', url: 'https://example.com' }, { id: 'keep', type: 'text', text: 'k' }] },
          ],
        },
      ],
    });
    const ids = collectIds(data.content);
    assert.equal(ids.length, 8);
    assert.ok(ids.every((id) => typeof id === 'string' && id.length > 0), JSON.stringify(ids));
    assert.equal(new Set(ids).size, ids.length, `ids are unique: ${JSON.stringify(ids)}`);
    // The first holder of an id keeps it.
    assert.equal(data.content[1].id, 'dup');
    assert.equal(data.content[3].id, 'box-1');
    assert.equal(data.content[3].columns[1].elements[1].id, 'keep');
    // Other fields survive normalization.
    assert.equal(data.content[3].columns[0].width, '50%');
    assert.equal(data.content[3].columns[1].elements[0].url, 'https://example.com');
  });

  test('validation errors name the path of the bad node field', async () => {
    const content = [
      { type: 'text', text: 'a' },
      { type: 'divider' },
      { type: 'text', text: 'b' },
      { type: 'box', columns: [{ elements: [{ type: 'text', text: 'ok' }, { type: 'button', label: 'Go', url: 42 }] }] },
    ];
    const res = await app.api('POST', '/v1/templates', { name: uniqueName(), subject: 'x', content });
    assertError(res, 400, 'parameters-invalid', 'content[3].columns[0].elements[1].url');
  });

  test('an unknown node type is refused at its path', async () => {
    const res = await app.api('POST', '/v1/templates', { name: uniqueName(), subject: 'x', content: [{ type: 'text', text: 'a' }, { type: 'marquee' }] });
    assertError(res, 400, 'parameters-invalid', 'content[1]');
  });
});

describe('list', () => {
  test('pages over more than 100 templates newest first with cursors, limit and includeContent', async () => {
    const key = await createLinkedProject('Paging');
    const names: string[] = [];
    for (let i = 0; i < 130; i++) {
      const name = `page-${String(i).padStart(3, '0')}`;
      names.push(name);
      await createTemplate({ name, content: [{ type: 'text', text: `n${i}` }] }, key);
    }
    const newestFirst = [...names].reverse();

    const first = await app.api('GET', '/v1/templates', undefined, { key });
    assert.equal(first.status, 200);
    assert.equal(first.body.data.length, 100, 'default limit is 100');
    assert.equal(first.body.hasMore, true);
    assert.deepEqual(
      first.body.data.map((t: any) => t.name),
      newestFirst.slice(0, 100),
    );
    assert.equal(first.body.paginationCursorNext, first.body.data[99].id);
    assert.ok(first.body.data.every((t: any) => !('content' in t) && t.version === 2), 'content omitted by default');

    const second = await app.api('GET', `/v1/templates?paginationCursorNext=${first.body.paginationCursorNext}`, undefined, { key });
    assert.deepEqual(
      second.body.data.map((t: any) => t.name),
      newestFirst.slice(100),
    );
    assert.equal(second.body.hasMore, false);
    // The last page's cursor leads to an empty page, as the spec ends a listing (null only there).
    assert.equal(second.body.paginationCursorNext, second.body.data.at(-1).id);
    const past = await app.api('GET', `/v1/templates?paginationCursorNext=${second.body.paginationCursorNext}`, undefined, { key });
    assert.deepEqual(past.body, { data: [], hasMore: false, paginationCursorNext: null });

    // A small limit walks the same order page by page.
    const walked: string[] = [];
    let cursor = '';
    for (let pages = 0; pages < 20; pages++) {
      // Any case: Python's requests writes True.
      const res = await app.api('GET', `/v1/templates?limit=30&includeContent=True&paginationCursorNext=${cursor}`, undefined, { key });
      assert.equal(res.status, 200);
      assert.ok(res.body.data.length <= 30);
      for (const t of res.body.data) {
        assert.ok(Array.isArray(t.content), 'includeContent=true returns content');
        walked.push(t.name);
      }
      if (!res.body.hasMore) break;
      cursor = res.body.paginationCursorNext;
    }
    assert.deepEqual(walked, newestFirst);

    const limitEdge = await app.api('GET', '/v1/templates?limit=100&includeContent=false', undefined, { key });
    assert.equal(limitEdge.body.data.length, 100);
    assert.ok(!('content' in limitEdge.body.data[0]));
    const exact = await app.api('GET', '/v1/templates?limit=130', undefined, { key });
    assertError(exact, 400, 'parameters-invalid', 'limit');
  });

  test('empty query string and an empty project work', async () => {
    const key = await createLinkedProject('Empty');
    const res = await app.api('GET', '/v1/templates?', undefined, { key });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, { data: [], hasMore: false, paginationCursorNext: null });
  });

  test('bad list parameters → 400 parameters-invalid naming the parameter', async () => {
    for (const [query, field] of [
      ['limit=0', 'limit'],
      ['limit=101', 'limit'],
      ['limit=abc', 'limit'],
      ['limit=2.5', 'limit'],
      ['includeContent=maybe', 'includeContent'],
      ['paginationCursorNext=xyz', 'paginationCursorNext'],
    ]) {
      assertError(await app.api('GET', `/v1/templates?${query}`), 400, 'parameters-invalid', `${field}:`);
    }
    assert.equal((await app.api('GET', '/v1/templates?limit=1')).status, 200);
  });
});

describe('projects', () => {
  test('isolation: another project’s template answers exactly like a missing one', async () => {
    const keyA = await createLinkedProject('Iso A');
    const keyB = await createLinkedProject('Iso B');
    const a = await createTemplate({ name: uniqueName('iso') }, keyA);
    const missing = '0123456789abcdef01234567';
    for (const key of [keyB, app.apiKey]) {
      // The parent does not see its child's templates either: sharing goes parent → child only.
      const got = await app.api('GET', `/v1/templates/${a.id}`, undefined, { key });
      const none = await app.api('GET', `/v1/templates/${missing}`, undefined, { key });
      assertError(got, 404, 'not-found');
      assert.equal(got.body.developerMessage.replace(a.id, 'ID'), none.body.developerMessage.replace(missing, 'ID'));
      assertError(await app.api('PATCH', `/v1/templates/${a.id}`, { subject: 'hijack' }, { key }), 404, 'not-found');
      assertError(await app.api('POST', `/v1/templates/${a.id}/preview`, {}, { key }), 404, 'not-found');
      assert.deepEqual((await app.api('DELETE', `/v1/templates/${a.id}`, undefined, { key })).body, { deleted: false });
      const listed = await app.api('GET', '/v1/templates?limit=100', undefined, { key });
      assert.ok(!listed.body.data.some((t: any) => t.id === a.id));
    }
    const still = await app.api('GET', `/v1/templates/${a.id}`, undefined, { key: keyA });
    assert.equal(still.body.data.subject, 'Hello');
  });

  test('a linked project reads and previews its parent’s templates by id only, and cannot change them', async () => {
    const parent = await createTemplate({ name: uniqueName('parent'), subject: 'From parent {x}', content: [{ type: 'text', text: 'Parent body' }] });
    const childKey = await createLinkedProject('Child');
    const got = await app.api('GET', `/v1/templates/${parent.id}`, undefined, { key: childKey });
    assert.equal(got.status, 200);
    assert.deepEqual(got.body.data, parent);
    const preview = await app.api('POST', `/v1/templates/${parent.id}/preview`, { templateProps: { x: 'X' } }, { key: childKey });
    assert.equal(preview.status, 200, JSON.stringify(preview.body));
    assert.equal(preview.body.subject, 'From parent X');

    const listed = await app.api('GET', '/v1/templates', undefined, { key: childKey });
    assert.ok(!listed.body.data.some((t: any) => t.id === parent.id), 'not in the child list');
    assertError(await app.api('PATCH', `/v1/templates/${parent.id}`, { subject: 'x' }, { key: childKey }), 404, 'not-found');
    assert.deepEqual((await app.api('DELETE', `/v1/templates/${parent.id}`, undefined, { key: childKey })).body, { deleted: false });
    // The child can reuse the parent's name for its own template.
    await createTemplate({ name: parent.name }, childKey);
  });

  test('findForSend: own by id or name, parent by id only, otherwise template-not-found', async () => {
    const service = app.appliance.context.templates;
    const parentProjectId = app.appliance.defaultProjectId;
    const parent = await createTemplate({ name: uniqueName('send-parent') });
    const childKey = await createLinkedProject('Sender');
    const own = await createTemplate({ name: uniqueName('send-own') }, childKey);
    const childProjectId = (await app.api('GET', '/v1/project', undefined, { key: childKey })).body.id;

    assert.equal(service.findForSend(childProjectId, { id: own.id }).id, own.id);
    assert.equal(service.findForSend(childProjectId, { name: own.name }).id, own.id);
    assert.equal(service.findForSend(childProjectId, { id: parent.id }).id, parent.id);
    assert.equal(service.findForSend(parentProjectId, { name: parent.name }).id, parent.id);
    const refusals: [string, { id?: string; name?: string }][] = [
      [childProjectId, { name: parent.name }],
      [parentProjectId, { id: own.id }],
      [parentProjectId, { name: own.name }],
      [childProjectId, { name: ` ${own.name}` }],
      [childProjectId, { id: 'nope' }],
      [childProjectId, {}],
    ];
    for (const [projectId, ref] of refusals) {
      assert.throws(() => service.findForSend(projectId, ref), (error: any) => error.code === 'template-not-found', JSON.stringify(ref));
    }
  });
});
