import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { buildJobs } from '../../src/appliance.js';
import { catchUpEmailIndex, readFtsWatermark } from '../../src/emails/fts-indexer.js';
import { baseEmail } from './helpers.js';

// emails_fts is filled by fts-indexer.ts, not in the send transaction. Search must be exact before and
// after the indexer runs, and updates/deletes of rows on either side of the watermark must leave the
// external-content index consistent (an FTS5 'delete' of a never-indexed row corrupts it).
let app: TestAppliance;

before(async () => {
  app = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9', POSTINO_LOG_LEVEL: 'warn' } });
});
after(() => app?.stop());

const sqlite = () => app.appliance.context.database.sqlite;

async function send(subjects: string[]): Promise<string[]> {
  const res = await app.api('POST', '/v1/email/send', subjects.map((subject) => ({ ...baseEmail, subject })));
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.map((r: { id: string }) => r.id);
}

async function searchIds(query: object): Promise<string[]> {
  const res = await app.api('POST', '/v1/email/search', { query, limit: 100 });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.data.map((e: { id: string }) => e.id);
}

function rowidOf(id: string): number {
  return (sqlite().prepare('select rowid as r from emails where id = ?').get(id) as { r: number }).r;
}

function indexedRowids(term: string): number[] {
  return (sqlite().prepare('select rowid as r from emails_fts where emails_fts match ? order by rowid').all(`"${term}"`) as { r: number }[]).map((r) => r.r);
}

/** Throws (SQLITE_CORRUPT_VTAB) when the index and the emails rows disagree; valid only when fully indexed. */
function checkIndexMatchesEmails(): void {
  sqlite().prepare(`insert into emails_fts(emails_fts, rank) values ('integrity-check', 1)`).run();
}

const indexAll = () => catchUpEmailIndex(app.appliance.context.writes);

test('a just-sent email is found by text search before and after the indexer ran', async () => {
  const [id] = await send(['Zebracorn quarterly report']);
  assert.ok(readFtsWatermark(sqlite()) < rowidOf(id), 'the send itself does not index');
  assert.deepEqual(indexedRowids('zebracorn'), []);
  assert.deepEqual(await searchIds({ search: 'zebracorn' }), [id]);
  assert.deepEqual(await searchIds({ subject: 'Zebracorn quarterly report' }), [id]);

  assert.ok((await indexAll()) >= 1);
  assert.ok(readFtsWatermark(sqlite()) >= rowidOf(id));
  assert.deepEqual(indexedRowids('zebracorn'), [rowidOf(id)]);
  assert.deepEqual(await searchIds({ search: 'ZEBRACORN' }), [id]);
  assert.deepEqual(await searchIds({ search: 'zebracornx' }), []);
  checkIndexMatchesEmails();
});

test('indexed and not-yet-indexed matches are merged, newest first', async () => {
  const [older] = await send(['Okapilight one']);
  await indexAll();
  const [newer] = await send(['Okapilight two']);
  assert.deepEqual(await searchIds({ search: 'okapilight' }), [newer, older]);
  await indexAll();
  assert.deepEqual(await searchIds({ search: 'okapilight' }), [newer, older]);
});

test('update and delete of rows not indexed yet keep the index consistent and results exact', async () => {
  const [kept, changed, removed] = await send(['Quokkabeam kept', 'Quokkabeam changed', 'Quokkabeam removed']);
  sqlite().prepare('update emails set subject = ? where id = ?').run('Narwhalite renamed', changed);
  sqlite().prepare('delete from emails where id = ?').run(removed);
  assert.deepEqual(await searchIds({ search: 'quokkabeam' }), [kept]);
  assert.deepEqual(await searchIds({ search: 'narwhalite' }), [changed]);

  await indexAll();
  checkIndexMatchesEmails();
  assert.deepEqual(indexedRowids('quokkabeam'), [rowidOf(kept)]);
  assert.deepEqual(await searchIds({ search: 'quokkabeam' }), [kept]);
  assert.deepEqual(await searchIds({ search: 'narwhalite' }), [changed]);
});

test('update and delete of indexed rows keep the index consistent and results exact', async () => {
  const [kept, changed, removed] = await send(['Axolotlish kept', 'Axolotlish changed', 'Axolotlish removed']);
  await indexAll();
  sqlite().prepare('update emails set subject = ? where id = ?').run('Pangolinux renamed', changed);
  sqlite().prepare('delete from emails where id = ?').run(removed);
  checkIndexMatchesEmails();
  assert.deepEqual(indexedRowids('axolotlish'), [rowidOf(kept)]);
  assert.deepEqual(await searchIds({ search: 'axolotlish' }), [kept]);
  assert.deepEqual(await searchIds({ search: 'pangolinux' }), [changed]);
});

test('a rowid reused at or below the watermark (newest row deleted) is indexed and found', async () => {
  const [victim] = await send(['Tapirglow victim']);
  await indexAll();
  const reusable = rowidOf(victim);
  sqlite().prepare('delete from emails where id = ?').run(victim);
  const [reborn] = await send(['Tapirglow reborn']);
  assert.equal(rowidOf(reborn), reusable, 'SQLite reuses the rowid of the deleted newest row');
  assert.ok(rowidOf(reborn) <= readFtsWatermark(sqlite()));
  checkIndexMatchesEmails();
  assert.deepEqual(await searchIds({ search: 'tapirglow' }), [reborn]);
  assert.deepEqual(await searchIds({ search: 'reborn' }), [reborn]);
});

test('the scheduler job indexes a trickle of mail every 10 s and a full batch at once; search stays exact meanwhile', async () => {
  await indexAll();
  const job = buildJobs(app.appliance.context).find((candidate) => candidate.name === 'emails.index-fts')!;
  const t0 = Date.parse('2026-06-01T00:00:00Z');
  const [first] = await send(['Pacedtrickle one']);
  assert.equal(await job.run(new Date(t0)), 1, 'its first run indexes what is pending');

  const [second] = await send(['Pacedtrickle two']);
  assert.equal(await job.run(new Date(t0 + 1_000)), 0, 'one email a second later waits');
  assert.ok(readFtsWatermark(sqlite()) < rowidOf(second));
  assert.deepEqual(await searchIds({ search: 'pacedtrickle' }), [second, first]);
  assert.equal(await job.run(new Date(t0 + 9_999)), 0);
  assert.equal(await job.run(new Date(t0 + 10_000)), 1, 'indexed 10 s after the last run');
  assert.ok(readFtsWatermark(sqlite()) >= rowidOf(second));

  for (let i = 0; i < 20; i++) await send(Array.from({ length: 50 }, (_, j) => `Pacedbatch ${i}-${j}`));
  assert.equal(await job.run(new Date(t0 + 11_000)), 1000, 'a full batch is indexed at once');
  assert.equal(await job.run(new Date(t0 + 12_000)), 0, 'nothing pending');
  assert.equal((await searchIds({ search: 'pacedbatch 7-3' })).length, 11, '7-3 and 7-30 … 7-39');
  assert.equal((await searchIds({ subject: 'Pacedbatch 7-3' })).length, 1);
  checkIndexMatchesEmails();
});
