// Deleting a linked project that holds 100,000 emails (each with an event, in the text index): how long
// the DELETE takes and how long the event loop was held meanwhile. Its rows go in batches on the writer
// thread; before 2026-11-23 one cascading transaction on the event loop's connection did it all.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { systemClock } from '../src/lib/clock.js';
import { newId } from '../src/lib/ids.js';
import { startAppliance } from '../test/helpers/appliance.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const emails = Number(process.env.BENCH_PROJECT_EMAILS ?? 100_000);

export async function benchProjectDelete(): Promise<BenchResult[]> {
  const app = await startAppliance({ env: { POSTINO_LOG_LEVEL: 'silent' } });
  try {
    const linked = await app.api('POST', '/v1/project', { name: 'Linked' });
    const { sqlite } = app.appliance.context.database;
    const insertEmail = sqlite.prepare(
      `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, html, is_open_tracked, created_at, updated_at) values (?, ?, 'delivered', ?, 'app@sender.test', 'Receipt', 'html', ?, 1, 0, 0)`,
    );
    const insertEvent = sqlite.prepare(`insert into email_events (id, email_id, type, time) values (?, ?, 'delivered', 0)`);
    sqlite.transaction(() => {
      for (let i = 0; i < emails; i++) {
        const id = newId(systemClock);
        insertEmail.run(id, linked.body.id, `u${i}@example.com`, '<p>hello</p>'.repeat(50));
        insertEvent.run(newId(systemClock), id);
      }
    })();
    await app.appliance.context.writes.call('emails.index-fts', { limit: emails });
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    const started = performance.now();
    const deleted = await app.api('DELETE', '/v1/project', undefined, { key: linked.body.apiKey });
    const tookMs = performance.now() - started;
    delay.disable();
    if (deleted.status !== 200) throw new Error(`delete answered ${deleted.status}: ${JSON.stringify(deleted.body)}`);
    return [
      { name: `DELETE /v1/project with ${emails} emails`, value: Math.round(tookMs), unit: 'ms' },
      { name: 'event-loop delay max meanwhile', value: Math.round((delay.max / 1e6) * 10) / 10, unit: 'ms' },
    ];
  } finally {
    await app.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchProjectDelete()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
