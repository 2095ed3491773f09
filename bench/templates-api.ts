// Templates service without HTTP: how fast a send resolves its template (`findForSend` by id and by
// name, on the send hot path), how fast a list page of 100 is built, and create throughput (content
// normalised; one create at a time through the group commit, so one synchronous=FULL commit each).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { openDatabase } from '../src/db/client.js';
import { migrateDatabase } from '../src/db/migrate.js';
import { createWriteQueue } from '../src/db/write-queue.js';
import { systemClock } from '../src/lib/clock.js';
import { silentLogger } from '../src/lib/logger.js';
import { createProjectsRepo } from '../src/projects/repo.js';
import { createProjectsService } from '../src/projects/service.js';
import { galleryTemplates } from '../src/templates/gallery.js';
import { createTemplatesRepo } from '../src/templates/repo.js';
import { createTemplatesService } from '../src/templates/service.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

/** Calls per second of `fn`, awaited when it returns a promise (synchronous calls stay a plain loop). */
async function perSecond(iterations: number, fn: (i: number) => unknown): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < iterations; i++) {
    const result = fn(i);
    if (result instanceof Promise) await result;
  }
  return Math.round(iterations / ((performance.now() - started) / 1000));
}

export async function benchTemplatesApi(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-templates-'));
  const handle = openDatabase({ path: join(dir, 'bench.sqlite'), synchronous: 'FULL' });
  migrateDatabase(handle.db);
  const writes = createWriteQueue(handle.sqlite, silentLogger);
  try {
    const deps = { sqlite: handle.sqlite, writes, clock: systemClock, log: silentLogger };
    const projects = createProjectsService({ ...deps, repo: createProjectsRepo(handle.db, handle.sqlite) });
    const { projectId } = projects.ensureDefaultProject('');
    const templates = createTemplatesService({ ...deps, repo: createTemplatesRepo(handle.db), findProject: projects.findProject });

    const receipt = galleryTemplates.find((t) => /receipt/i.test(t.slug)) ?? galleryTemplates[0];
    const created: { id: string; name: string }[] = [];
    const creates = await perSecond(1000, async (i) => {
      const { data } = await templates.create(projectId, { ...receipt, name: `receipt-${i}` } as never);
      created.push({ id: data.id, name: data.name });
    });
    const byId = await perSecond(20_000, (i) => templates.findForSend(projectId, { id: created[i % created.length].id }));
    const byName = await perSecond(20_000, (i) => templates.findForSend(projectId, { name: created[i % created.length].name }));
    const listPages = await perSecond(500, () => templates.list(projectId, { limit: 100, includeContent: false }));
    const listPagesWithContent = await perSecond(200, () => templates.list(projectId, { limit: 100, includeContent: true }));
    return [
      { name: 'create (receipt gallery template, one at a time through the group commit: an fsync each)', value: creates, unit: 'creates/s' },
      { name: 'findForSend by id', value: byId, unit: 'lookups/s' },
      { name: 'findForSend by name', value: byName, unit: 'lookups/s' },
      { name: 'list page of 100 (no content)', value: listPages, unit: 'pages/s' },
      { name: 'list page of 100 (includeContent=true)', value: listPagesWithContent, unit: 'pages/s' },
    ];
  } finally {
    await writes.close();
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const r of await benchTemplatesApi()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
