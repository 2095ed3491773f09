// Contacts service without HTTP, over 100,000 contacts of one project (BENCH_CONTACTS to change it):
// create-or-update throughput (1,000 in flight, so they share group commits as concurrent requests do),
// find by address, list pages, and the query engine's latency (count + one page) for typical filters.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createContactsRepo } from '../src/contacts/repo.js';
import { queryContactsSchema } from '../src/contacts/schemas.js';
import { createContactsService } from '../src/contacts/service.js';
import { openDatabase } from '../src/db/client.js';
import { migrateDatabase } from '../src/db/migrate.js';
import { createWriteQueue } from '../src/db/write-queue.js';
import { systemClock } from '../src/lib/clock.js';
import { silentLogger } from '../src/lib/logger.js';
import { createProjectsRepo } from '../src/projects/repo.js';
import { createProjectsService } from '../src/projects/service.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const contactCount = Number(process.env.BENCH_CONTACTS ?? 100_000);
const plans = ['free', 'basic', 'pro', 'team'];
const cities = ['Brno', 'Prague', 'Berlin', 'Lisbon', 'Austin', 'Osaka'];

/** Median milliseconds of `runs` calls. */
function medianMs(runs: number, fn: () => unknown): number {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    fn();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return Math.round(times[Math.floor(times.length / 2)] * 100) / 100;
}

export async function benchContacts(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-contacts-'));
  const handle = openDatabase({ path: join(dir, 'bench.sqlite'), synchronous: 'FULL' });
  migrateDatabase(handle.db);
  const writes = createWriteQueue(handle.sqlite, silentLogger);
  try {
    const projects = createProjectsService({ sqlite: handle.sqlite, writes, clock: systemClock, log: silentLogger, repo: createProjectsRepo(handle.db, handle.sqlite) });
    const { projectId } = projects.ensureDefaultProject('');
    const contacts = createContactsService({ db: handle.db, repo: createContactsRepo(handle.db), writes, clock: systemClock });

    const started = performance.now();
    for (let next = 0; next < contactCount; ) {
      const inFlight: Promise<unknown>[] = [];
      for (const end = Math.min(contactCount, next + 1_000); next < end; next++) {
        inFlight.push(
          contacts.upsert(projectId, {
            emailAddress: `person${next}@example${next % 50}.com`,
            identifier: `user-${next}`,
            customProps: { plan: plans[next % plans.length], seats: next % 100, city: cities[next % cities.length] },
            groups: next % 10 === 0 ? ['vip'] : ['newsletter'],
          }),
        );
      }
      await Promise.all(inFlight);
    }
    const upserts = Math.round(contactCount / ((performance.now() - started) / 1000));

    const query = (body: unknown) => () => contacts.query(projectId, queryContactsSchema.parse(body));
    const deepCursor = contacts.list(projectId, { limit: 100, paginationCursorNext: undefined });
    let cursor = deepCursor.paginationCursorNext ?? undefined;
    for (let page = 0; page < Math.min(500, contactCount / 200) && cursor; page++) cursor = contacts.list(projectId, { limit: 100, paginationCursorNext: cursor }).paginationCursorNext ?? undefined;
    const n = contactCount;
    return [
      { name: `create (${n.toLocaleString('en')} new contacts, 1,000 in flight, synchronous=FULL)`, value: upserts, unit: 'contacts/s' },
      { name: 'find by address', value: medianMs(2_000, () => contacts.find(projectId, `Person${n >> 1}@example${(n >> 1) % 50}.com`)) * 1000, unit: 'µs median' },
      { name: 'list: first page of 100', value: medianMs(50, () => contacts.list(projectId, { limit: 100, paginationCursorNext: undefined })), unit: 'ms median' },
      { name: `list: a page of 100 deep in the list`, value: medianMs(50, () => contacts.list(projectId, { limit: 100, paginationCursorNext: cursor })), unit: 'ms median' },
      { name: `query: no filter (count of all ${n.toLocaleString('en')} + first page of 20)`, value: medianMs(20, query({})), unit: 'ms median' },
      { name: 'query: search "example7" (part of the address)', value: medianMs(20, query({ search: 'example7' })), unit: 'ms median' },
      { name: 'query: groupId vip', value: medianMs(20, query({ groupId: 'vip' })), unit: 'ms median' },
      { name: 'query: customProps.plan equals pro and customProps.seats gte 50', value: medianMs(20, query({ filter: { rules: [{ field: 'customProps.plan', value: 'pro' }, { field: 'customProps.seats', operator: 'gte', value: 50 }] } })), unit: 'ms median' },
      { name: 'query: rule customProps.city includes "ra", offset 1000', value: medianMs(20, query({ filter: { rules: [{ field: 'customProps.city', operator: 'includes', value: 'ra' }] }, offset: 1_000 })), unit: 'ms median' },
    ];
  } finally {
    await writes.close();
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const r of await benchContacts()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
