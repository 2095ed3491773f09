import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { searchEmailsSchema } from '../../src/emails/schemas.js';
import { searchEmails } from '../../src/emails/search.js';
import { baseEmail } from './helpers.js';

// search.ts changes strategy with the number of matches: past 2,000 a scheduledAt day is walked by
// index instead of sorted; past 250 text matches the candidate set is estimated and fetched whole (up
// to 10,000). These cases cross those lines, so every strategy must return exactly what a plain filter
// would, in order, across pages.
let app: TestAppliance;
const bigDay: string[] = [];
const smallDay: string[] = [];
const queuedPromo: string[] = [];

async function sendBatch(items: object[]): Promise<string[]> {
  const res = await app.api('POST', '/v1/email/send', items);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.map((r: { id: string }) => r.id);
}

before(async () => {
  app = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9', POSTINO_LOG_LEVEL: 'warn' } });
  for (let batch = 0; batch < 60; batch++) {
    const items = Array.from({ length: 50 }, (_, i) => {
      const n = batch * 50 + i;
      if (n % 7 === 0) return { kind: 'small', body: { ...baseEmail, toAddress: `s${n}@example.com`, subject: `Weekly promo ${n}`, scheduledAt: `2999-02-02T0${n % 10}:00:00Z` } };
      if (n % 7 === 1) return { kind: 'queued', body: { ...baseEmail, toAddress: `q${n}@example.com`, subject: `Weekly promo ${n}` } };
      return { kind: 'big', body: { ...baseEmail, toAddress: `b${n}@example.com`, subject: `Weekly promo ${n}`, scheduledAt: `2999-01-01T${String(n % 24).padStart(2, '0')}:00:00Z` } };
    });
    const ids = await sendBatch(items.map((item) => item.body));
    items.forEach((item, i) => (item.kind === 'big' ? bigDay : item.kind === 'small' ? smallDay : queuedPromo).push(ids[i]));
  }
  assert.ok(bigDay.length > 2000 && smallDay.length < 2000);
});
after(() => app?.stop());

/** Every id of a query, following paginationCursorNext with limit 100. */
async function allPages(query: object): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | undefined;
  for (;;) {
    const res = await app.api('POST', '/v1/email/search', { query, limit: 100, ...(cursor ? { paginationCursorNext: cursor } : {}) });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    out.push(...res.body.data.map((e: { id: string }) => e.id));
    if (!res.body.hasMore) return out;
    cursor = res.body.paginationCursorNext;
  }
}

test('a scheduledAt day with more than 2,000 emails pages through exactly those emails, newest first', async () => {
  assert.deepEqual(await allPages({ scheduledAt: '2999-01-01' }), [...bigDay].reverse());
});

test('a scheduledAt day with few emails returns exactly those', async () => {
  assert.deepEqual(await allPages({ scheduledAt: '2999-02-02' }), [...smallDay].reverse());
});

test('status + text with more than 2,000 text matches returns exactly the matching status', async () => {
  assert.deepEqual(await allPages({ status: 'queued', search: 'weekly promo' }), [...queuedPromo].reverse());
  const scheduled = new Set([...bigDay, ...smallDay]);
  const expected = [...bigDay, ...smallDay, ...queuedPromo].filter((id) => scheduled.has(id)).sort().reverse();
  assert.deepEqual(await allPages({ status: 'scheduled', search: 'WEEKLY PROMO' }), expected);
});

test('a rare text term is looked up through the trigram index, never by walking the table', () => {
  // searchEmails runs on the search worker's connection in the appliance; here it runs on a capturing
  // wrapper of the main connection (same file, same data) so the query it builds can be inspected.
  const sqlite = app.appliance.context.database.sqlite;
  const seen: string[] = [];
  const capturing = new Proxy(sqlite, {
    get: (target, key) => (key === 'prepare' ? (sql: string) => (seen.push(sql), target.prepare(sql)) : Reflect.get(target, key)),
  });
  const page = searchEmails(capturing, app.appliance.defaultProjectId, searchEmailsSchema.parse({ query: { search: 's777@example' } }), (row) => row.id);
  assert.deepEqual(page.data, [smallDay[111]]);
  const pick = seen.find((sql) => sql.includes('json_each'));
  assert.ok(pick, 'the search used the trigram candidates');
  const parameters = Array((pick.match(/\?/g) ?? []).length).fill(null);
  const plan = (sqlite.prepare(`explain query plan ${pick}`).all(...parameters) as { detail: string }[]).map((row) => row.detail);
  // Candidates are fetched by rowid; walking emails or one of its indexes would visit every email of the project.
  assert.ok(!plan.some((detail) => /^SCAN emails\b|emails USING (COVERING )?INDEX/.test(detail)), `candidates drive the query:\n${plan.join('\n')}`);
});
