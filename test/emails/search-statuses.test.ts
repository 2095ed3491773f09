import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { searchEmailsSchema } from '../../src/emails/schemas.js';
import { searchEmails } from '../../src/emails/search.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';

// Several statuses are searched one branch per status (search.ts `branchesOf`): each reads its own
// (project_id, status, id) range newest first. These cases check that paging both ways returns exactly
// what a plain filter would, and that rare statuses do not walk the project's emails.
let app: TestAppliance;
const statusOf = (i: number) => (i % 97 === 0 ? 'complaint' : i % 41 === 0 ? 'bounce' : i % 13 === 0 ? 'error' : i % 2 === 0 ? 'delivered' : 'open');
const ids: { id: string; status: string }[] = [];

before(async () => {
  app = await startAppliance({ env: { POSTINO_SCHEDULER_ENABLED: 'false', POSTINO_LOG_LEVEL: 'warn' } });
  const { sqlite } = app.appliance.context.database;
  const insert = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
     values (?, ?, ?, ?, 'app@sender.test', 'Hi', 'text', 0, ?, ?)`,
  );
  sqlite.transaction(() => {
    for (let i = 0; i < 3000; i++) {
      const id = (0x61000000 + i).toString(16).padStart(8, '0') + 'cd'.repeat(5) + i.toString(16).padStart(6, '0');
      insert.run(id, app.appliance.defaultProjectId, statusOf(i), `user${i}@example.com`, i, i);
      ids.push({ id, status: statusOf(i) });
    }
  })();
  sqlite.prepare('analyze').run();
});
after(() => app?.stop());

const search = async (body: object) => {
  const res = await app.api('POST', '/v1/email/search', body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body as { data: { id: string; status: string }[]; hasMore: boolean; hasPrev: boolean; paginationCursorNext: string; paginationCursorPrev: string };
};

test('several statuses page forward and back through exactly the matching emails, newest first', async () => {
  const statuses = ['complaint', 'bounce', 'error'];
  const expected = ids.filter((e) => statuses.includes(e.status)).map((e) => e.id).reverse();
  assert.ok(expected.length > 250 && expected.length < 400);
  const forward: string[][] = [];
  let page = await search({ query: { status: statuses }, limit: 37 });
  assert.equal(page.hasPrev, false);
  for (;;) {
    forward.push(page.data.map((e) => e.id));
    assert.ok(page.data.every((e) => statuses.includes(e.status)));
    if (!page.hasMore) break;
    page = await search({ query: { status: statuses }, limit: 37, paginationCursorNext: page.paginationCursorNext });
    assert.equal(page.hasPrev, true);
  }
  assert.deepEqual(forward.flat(), expected);
  // And back from the last page to the first, page by page.
  const backward: string[][] = [forward[forward.length - 1]];
  let back = page;
  while (back.hasPrev) {
    back = await search({ query: { status: statuses }, limit: 37, paginationCursorPrev: back.paginationCursorPrev });
    backward.unshift(back.data.map((e) => e.id));
  }
  assert.deepEqual(backward.flat(), expected);
  // A status given twice counts once; a status array of one is the plain filter.
  assert.deepEqual((await search({ query: { status: ['bounce', 'bounce'] }, limit: 100 })).data.map((e) => e.id), ids.filter((e) => e.status === 'bounce').map((e) => e.id).reverse());
});

test('several statuses whose matches are all in one of them: each full page says hasMore, and paging reaches every match both ways', async () => {
  // Guards the extra row each branch reads: with only `limit` rows per branch, a union whose other branches
  // are empty never holds limit + 1, so hasMore (and hasPrev on the way back) would end paging after one page.
  const statuses = ['bounce', 'queued']; // no email of the fixture is queued
  const expected = ids.filter((e) => e.status === 'bounce').map((e) => e.id).reverse();
  assert.ok(expected.length > 40 && expected.length < 100);
  const forward: string[][] = [];
  let page = await search({ query: { status: statuses }, limit: 20 });
  assert.equal(page.hasMore, true, 'more bounces than one page');
  for (;;) {
    forward.push(page.data.map((e) => e.id));
    if (!page.hasMore) break;
    assert.equal(page.data.length, 20);
    page = await search({ query: { status: statuses }, limit: 20, paginationCursorNext: page.paginationCursorNext });
  }
  assert.deepEqual(forward.flat(), expected);
  const backward: string[][] = [forward[forward.length - 1]];
  let back = page;
  while (back.hasPrev) {
    back = await search({ query: { status: statuses }, limit: 20, paginationCursorPrev: back.paginationCursorPrev });
    backward.unshift(back.data.map((e) => e.id));
  }
  assert.deepEqual(backward.flat(), expected);
});

test('an empty status list matches no email (a UI with no status ticked), where it matched them all', async () => {
  const none = await search({ query: { status: [] } });
  assert.deepEqual([none.data.length, none.hasMore], [0, false]);
  assert.equal((await search({ query: {}, limit: 1 })).data.length, 1);
});

test('rare statuses are read from the status index, never by walking every email of the project', () => {
  const sqlite = app.appliance.context.database.sqlite;
  const seen: string[] = [];
  const capturing = new Proxy(sqlite, {
    get: (target, key) => (key === 'prepare' ? (sql: string) => (seen.push(sql), target.prepare(sql)) : Reflect.get(target, key)),
  });
  const input = searchEmailsSchema.parse({ query: { status: ['complaint', 'bounce'] }, limit: 5, paginationCursorNext: ids[2000].id });
  const page = searchEmails(capturing, app.appliance.defaultProjectId, input, (row) => row.id);
  assert.equal(page.data.length, 5);
  assert.ok(seen.length >= 2, 'the page and its probe');
  for (const sql of seen) {
    const parameters = Array((sql.match(/\?/g) ?? []).length).fill('x');
    const plan = (sqlite.prepare(`explain query plan ${sql}`).all(...parameters) as { detail: string }[]).map((row) => row.detail);
    assert.ok(!plan.some((detail) => /emails USING (COVERING )?INDEX emails_project_id_idx|^SCAN emails\b/.test(detail)), `no walk of the project:\n${sql}\n${plan.join('\n')}`);
  }
});
