// p50/p95 latency of POST /v1/email/search queries over 1,000,000 email records of one project, measured
// at the service (query + presentation; HTTP adds the same constant as any route). Seeded with one
// direct SQL transaction.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createAppliance } from '../src/appliance.js';
import { loadConfig } from '../src/config/load.js';
import { catchUpEmailIndex } from '../src/emails/fts-indexer.js';
import { searchEmailsSchema } from '../src/emails/schemas.js';
import { silentLogger } from '../src/lib/logger.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const total = Number(process.env.BENCH_SEARCH_ROWS ?? 1_000_000);
const statuses = ['delivered', 'delivered', 'delivered', 'open', 'queued', 'bounce', 'scheduled'];

const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const ms = (value: number) => Math.round(value * 100) / 100;

function seed(sqlite: import('better-sqlite3').Database, projectId: string): void {
  const insert = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, from_name, subject, template_id, template_name, template_props,
      content_kind, html, text, is_open_tracked, scheduled_at, created_at, updated_at)
     values (?, ?, ?, ?, 'app@sender.test', ?, ?, ?, ?, ?, ?, ?, 'Thanks', 1, ?, ?, ?)`,
  );
  const start = Math.floor(Date.UTC(2025, 0, 1) / 1000);
  sqlite.transaction(() => {
    for (let i = 0; i < total; i++) {
      const second = start + Math.floor(i / 10);
      const id = second.toString(16).padStart(8, '0') + 'abcdef0123' + (i % 0x1000000).toString(16).padStart(6, '0');
      const template = i % 3 === 0;
      insert.run(
        id,
        projectId,
        statuses[i % statuses.length],
        `user${i % 200_000}@example${i % 50}.com`,
        i % 2 ? 'Acme Billing' : 'Acme Support',
        `Order ${i} confirmation`,
        template ? 'aaaaaaaaaaaaaaaaaaaaaaaa' : null,
        template ? 'Receipt' : null,
        template ? JSON.stringify({ plan: i % 4 === 0 ? 'pro' : 'basic', orderId: String(i) }) : null,
        template ? 'template' : 'html',
        '<p>x</p>',
        statuses[i % statuses.length] === 'scheduled' ? (second + 86_400) * 1000 : null,
        second * 1000,
        second * 1000,
      );
    }
  })();
  // No ANALYZE: the appliance never runs it, so the bench must not either. An ANALYZE taken here, before
  // the trigram index existed, recorded emails_fts_data as 2 rows; the planner then ran FTS5's segment
  // deletes as full scans of the index, and every merge took seconds (docs/benchmarks.md).
}

/**
 * Commits of `perWrite` new emails to the trigram index of the seeded table, as the scheduler makes them,
 * in ms each. The rows are removed afterwards (their index entries with them) and the watermark put
 * back on the seeded table's newest row, so a kept BENCH_SEARCH_DIR stays as seeded.
 */
async function measureIndexWrites(sqlite: import('better-sqlite3').Database, writes: import('../src/db/write-queue.js').WriteQueue, writesCount: number, perWrite: number): Promise<number[]> {
  const columns = 'project_id, status, to_address, from_address, from_name, subject, content_kind, html, text, is_open_tracked, created_at, updated_at';
  const newest = sqlite.prepare('select max(rowid) from emails').pluck().get() as number;
  sqlite.prepare(`insert into emails (id, ${columns}) select 'zz' || rowid, ${columns} from emails where rowid <= ? order by rowid`).run(writesCount * perWrite);
  const times: number[] = [];
  try {
    for (let i = 0; i < writesCount; i++) {
      const started = performance.now();
      const indexed = await writes.call('emails.index-fts', { limit: perWrite });
      if (indexed !== perWrite) throw new Error(`indexed ${indexed} emails, expected ${perWrite}`);
      times.push(performance.now() - started);
    }
  } finally {
    sqlite.prepare('delete from emails where rowid > ?').run(newest);
    sqlite.prepare('update emails_fts_watermark set last_rowid = ? where id = 1').run(newest);
  }
  return times;
}

export async function benchSearch(): Promise<BenchResult[]> {
  // BENCH_SEARCH_DIR keeps the seeded data directory for repeated runs (seeding 1M rows takes minutes).
  const kept = process.env.BENCH_SEARCH_DIR;
  const dir = kept ?? mkdtempSync(join(tmpdir(), 'postino-bench-search-'));
  const config = loadConfig({
    argv: [],
    cwd: dir,
    env: { POSTINO_STORAGE_DATA_DIR: dir, POSTINO_LOG_LEVEL: 'silent', POSTINO_AUTH_API_KEY: 'pst_bench_search_key_0123456789abcdefghijkl' },
  });
  const appliance = createAppliance({ config, log: silentLogger });
  const { sqlite } = appliance.context.database;
  const projectId = appliance.defaultProjectId;
  const seedStarted = performance.now();
  const existing = sqlite.prepare('select count(*) from emails where project_id = ?').pluck().get(projectId) as number;
  if (existing !== total) {
    sqlite.prepare('delete from emails').run();
    sqlite.prepare("insert into emails_fts(emails_fts) values ('delete-all')").run();
    sqlite.prepare('update emails_fts_watermark set last_rowid = 0').run();
    seed(sqlite, projectId);
  }
  const seedSeconds = (performance.now() - seedStarted) / 1000;
  // The scheduler's job (emails.index-fts), run to the end before measuring: a running appliance keeps
  // the trigram index caught up within a second of each accept. A kept directory is already indexed.
  const indexStarted = performance.now();
  const indexed = await catchUpEmailIndex(appliance.context.writes);
  const indexSeconds = (performance.now() - indexStarted) / 1000;
  const smallIndexWrites = await measureIndexWrites(sqlite, appliance.context.writes, 300, 10);
  const fullIndexWrites = await measureIndexWrites(sqlite, appliance.context.writes, 20, 1000);

  const middle = (sqlite.prepare('select id from emails order by id limit 1 offset ?').pluck().get(Math.floor(total / 2)) as string) ?? undefined;
  const queries: Record<string, unknown> = {
    'list newest': {},
    'list limit 100': { limit: 100 },
    'next page (cursor mid-table)': { paginationCursorNext: middle },
    'prev page (cursor mid-table)': { paginationCursorPrev: middle },
    toAddress: { query: { toAddress: 'user4242@example42.com' } },
    'status array': { query: { status: ['bounce', 'open'] } },
    'fromName + templateName': { query: { fromName: 'Acme Billing', templateName: 'Receipt' } },
    templateProps: { query: { templateProps: { plan: 'pro' } } },
    'search text (common)': { query: { search: 'example7.com' } },
    'search text (rare)': { query: { search: `user${total % 200_000 - 7}@example` } },
    'search text (no match)': { query: { search: 'no-such-text' } },
    'subject exact': { query: { subject: `Order ${total - 5} confirmation` } },
    'subject exact (no match)': { query: { subject: 'Never sent' } },
    'fromAddress (no match)': { query: { fromAddress: 'other@sender.test' } },
    'fromName (common)': { query: { fromName: 'Acme Support' } },
    templateId: { query: { templateId: 'aaaaaaaaaaaaaaaaaaaaaaaa' } },
    'templateName (no match)': { query: { templateName: 'Invoice' } },
    'automationId (no match)': { query: { automationId: 'auto_1' } },
    'messengerId (no match)': { query: { messengerId: 'msg_1' } },
    'scheduledAt day': { query: { scheduledAt: '2025-01-02' } },
    'status + search': { query: { status: 'bounce', search: 'user42' } },
  };
  const all: number[] = [];
  const results: BenchResult[] = [];
  for (const [name, body] of Object.entries(queries)) {
    const input = searchEmailsSchema.parse(body);
    const times: number[] = [];
    for (let i = 0; i < 60; i++) {
      const started = performance.now();
      await appliance.context.emails.search(projectId, input);
      if (i >= 10) times.push(performance.now() - started); // first runs warm caches
    }
    all.push(...times);
    results.push({ name: `${name} p95`, value: ms(percentile(times, 95)), unit: 'ms' });
  }
  // Short text (< 3 characters) cannot use the trigram index and scans: reported on its own, outside the mix.
  const short = searchEmailsSchema.parse({ query: { search: 'zq' } });
  const shortStarted = performance.now();
  await appliance.context.emails.search(projectId, short);
  const shortMs = performance.now() - shortStarted;

  await appliance.stop();
  if (!kept) rmSync(dir, { recursive: true, force: true });
  return [
    { name: `seed ${total} emails (one transaction${existing === total ? ': reused BENCH_SEARCH_DIR, not seeded' : ''})`, value: Math.round(seedSeconds * 10) / 10, unit: 's' },
    { name: `index ${indexed} emails for text search (the scheduler's catch-up, 1,000 per write)`, value: Math.round(indexSeconds * 10) / 10, unit: 's' },
    ...indexWriteResults(smallIndexWrites, 10),
    ...indexWriteResults(fullIndexWrites, 1000),
    { name: `search mix over ${total} emails p50`, value: ms(percentile(all, 50)), unit: 'ms' },
    { name: `search mix over ${total} emails p95`, value: ms(percentile(all, 95)), unit: 'ms' },
    ...results,
    { name: 'search text of 2 characters with no match (no trigram: full scan, single run)', value: Math.round(shortMs), unit: 'ms' },
  ];
}

function indexWriteResults(times: number[], perWrite: number): BenchResult[] {
  const what = `text-index write of ${perWrite} new emails on top of ${total} (${times.length} writes)`;
  return [
    { name: `${what} p50`, value: ms(percentile(times, 50)), unit: 'ms' },
    { name: `${what} max`, value: ms(Math.max(...times)), unit: 'ms' },
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchSearch()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
