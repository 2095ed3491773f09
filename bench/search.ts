// p50/p95 latency of POST /v1/email/search queries over 1,000,000 email records of one project, measured
// at the service (query + presentation; HTTP adds the same constant as any route). Seeded with one
// direct SQL transaction.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createAppliance } from '../src/appliance.js';
import { loadConfig } from '../src/config/load.js';
import { searchEmailsSchema } from '../src/emails/schemas.js';
import { silentLogger } from '../src/lib/logger.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const total = Number(process.env.BENCH_SEARCH_ROWS ?? 1_000_000);
const statuses = ['delivered', 'delivered', 'delivered', 'open', 'queued', 'bounce', 'scheduled'];

function seed(sqlite: import('better-sqlite3').Database, projectId: string): void {
  const insert = sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, from_name, subject, template_id, template_name, template_props,
      content_kind, html, text, is_open_tracked, scheduled_at, created_at, updated_at)
     values (?, ?, ?, ?, 'app@sender.test', ?, ?, ?, ?, ?, ?, ?, 'Thanks', 1, null, ?, ?)`,
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
        second * 1000,
        second * 1000,
      );
    }
  })();
  sqlite.exec('analyze');
}

export async function benchSearch(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-search-'));
  const config = loadConfig({
    argv: [],
    cwd: dir,
    env: { POSTINO_STORAGE_DATA_DIR: dir, POSTINO_LOG_LEVEL: 'silent', POSTINO_AUTH_API_KEY: 'pst_bench_search_key_0123456789abcdefghijkl' },
  });
  const appliance = createAppliance({ config, log: silentLogger });
  const { sqlite } = appliance.context.database;
  const projectId = appliance.defaultProjectId;
  const seedStarted = performance.now();
  seed(sqlite, projectId);
  const seedSeconds = (performance.now() - seedStarted) / 1000;

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
    'subject exact': { query: { subject: `Order ${total - 5} confirmation` } },
  };
  const all: number[] = [];
  const results: BenchResult[] = [];
  const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
  for (const [name, body] of Object.entries(queries)) {
    const input = searchEmailsSchema.parse(body);
    const times: number[] = [];
    for (let i = 0; i < 60; i++) {
      const started = performance.now();
      appliance.context.emails.search(projectId, input);
      if (i >= 10) times.push(performance.now() - started); // first runs warm caches
    }
    all.push(...times);
    results.push({ name: `${name} p95`, value: Math.round(percentile(times, 95) * 100) / 100, unit: 'ms' });
  }
  // A rare text match scans the project's rows: reported on its own, outside the mix.
  const rare = searchEmailsSchema.parse({ query: { search: 'no-such-text' } });
  const rareStarted = performance.now();
  appliance.context.emails.search(projectId, rare);
  const rareMs = performance.now() - rareStarted;

  await appliance.stop();
  rmSync(dir, { recursive: true, force: true });
  return [
    { name: `seed ${total} emails (one transaction)`, value: Math.round(seedSeconds * 10) / 10, unit: 's' },
    { name: `search mix over ${total} emails p50`, value: Math.round(percentile(all, 50) * 100) / 100, unit: 'ms' },
    { name: `search mix over ${total} emails p95`, value: Math.round(percentile(all, 95) * 100) / 100, unit: 'ms' },
    ...results,
    { name: 'search text with no match (full scan, single run)', value: Math.round(rareMs), unit: 'ms' },
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchSearch()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
