// A large scheduled send coming due: 50,000 scheduled emails moved to the delivery queue by the scheduler
// job, 500 per write. Before 2026-11-23 each write ran on the event loop's connection; now it is a write
// procedure on the writer thread. Reported: the event loop's longest stall (the time any API request
// could have waited behind a write) and the whole release, for both.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { openDatabase, type DatabaseHandle } from '../src/db/client.js';
import { migrateDatabase } from '../src/db/migrate.js';
import { createWriteQueue, type WriteQueue } from '../src/db/write-queue.js';
import { createWriterThread } from '../src/db/writer-thread.js';
import { createReleaseScheduledProcedure } from '../src/emails/release-scheduled.js';
import { releaseScheduledBatch } from '../src/emails/service.js';
import { systemClock } from '../src/lib/clock.js';
import { newId } from '../src/lib/ids.js';
import { silentLogger } from '../src/lib/logger.js';
import { bindProcedures } from '../src/write-procedures.js';
import type { AcceptArgs } from '../src/emails/accept-procedure.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const emails = Number(process.env.BENCH_SCHEDULED_EMAILS ?? 50_000);
const scheduledAt = 2_000_000_000_000;

/** `emails` scheduled emails (as the send API accepts them), all due at `scheduledAt`. */
async function scheduleEmails(writes: WriteQueue): Promise<void> {
  for (let done = 0; done < emails; done += 500) {
    const batch: AcceptArgs['emails'] = Array.from({ length: Math.min(500, emails - done) }, (_, i) => ({
      email: {
        id: newId(systemClock),
        projectId: 'p',
        status: 'scheduled',
        toAddress: `user${done + i}@example.com`,
        fromAddress: 'news@sender.test',
        fromName: 'News',
        replyToAddress: null,
        replyToName: null,
        subject: 'Our spring newsletter',
        templateId: null,
        templateName: null,
        templateProps: null,
        automationId: null,
        messengerId: null,
        contentKind: 'html',
        html: `<p>${'Spring is here. '.repeat(40)}</p>`,
        text: null,
        headers: null,
        isOpenTracked: 1,
        scheduledAt,
        createdAt: Date.now(),
      },
      attachments: [],
      eventId: newId(systemClock),
    }));
    await writes.call('emails.accept', { projectId: 'p', emails: batch, nowMs: Date.now(), batch: true });
  }
}

/** Runs `release` to the end under an event-loop delay histogram; the whole time and the longest stall. */
async function measure(release: () => Promise<number>): Promise<{ totalMs: number; maxStallMs: number; released: number }> {
  const delay: IntervalHistogram = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const started = performance.now();
  let released = 0;
  for (;;) {
    const count = await release();
    released += count;
    if (count < releaseScheduledBatch) break;
  }
  const totalMs = performance.now() - started;
  delay.disable();
  return { totalMs, maxStallMs: delay.max / 1e6, released };
}

export async function benchScheduledRelease(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-release-'));
  const handle: DatabaseHandle = openDatabase({ path: join(dir, 'bench.sqlite'), synchronous: 'FULL' });
  migrateDatabase(handle.db);
  handle.sqlite.prepare("insert into projects (id, name, created_at, updated_at) values ('p', 'p', 0, 0)").run();
  const writer = createWriterThread(handle.sqlite, silentLogger);
  const writes = createWriteQueue(handle.sqlite, silentLogger, { procedures: bindProcedures(handle.sqlite), writer });
  const eventIds = () => Array.from({ length: releaseScheduledBatch }, () => newId(systemClock));
  try {
    await scheduleEmails(writes);
    await writes.drain();
    // Before: the same batch of 500 as a write on the event loop's connection.
    const releaseHere = createReleaseScheduledProcedure(handle.sqlite);
    const before = await measure(() => writes.run(() => releaseHere({ nowMs: scheduledAt, eventIds: eventIds() })));
    handle.sqlite.exec("delete from delivery_jobs; delete from email_events where type = 'queued'; update emails set status = 'scheduled'");

    for (let waited = 0; writer && !writer.ready && waited < 20_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20));
    const after = await measure(() => writes.call('emails.release-scheduled', { nowMs: scheduledAt, eventIds: eventIds() }));
    if (before.released !== emails || after.released !== emails) throw new Error(`released ${before.released} / ${after.released} of ${emails}`);
    const round = (ms: number) => Math.round(ms * 10) / 10;
    return [
      { name: `${emails} due scheduled emails, batches of ${releaseScheduledBatch} on the main connection: longest event-loop stall`, value: round(before.maxStallMs), unit: 'ms' },
      { name: `the same on the main connection: whole release`, value: Math.round(before.totalMs), unit: 'ms' },
      { name: `as a write procedure on the writer thread: longest event-loop stall`, value: round(after.maxStallMs), unit: 'ms' },
      { name: `as a write procedure on the writer thread: whole release`, value: Math.round(after.totalMs), unit: 'ms' },
    ];
  } finally {
    await writes.close();
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchScheduledRelease()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
