// The hourly prune of expired idempotency keys, 100,000 of them: one DELETE on the event loop's
// connection (as before 2026-11-23) against the scheduler job, which deletes 500 at a time as a write
// procedure on the writer thread. Reported: how long the event loop was held, and the whole prune.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { openDatabase, writeTransaction, type DatabaseHandle } from '../src/db/client.js';
import { migrateDatabase } from '../src/db/migrate.js';
import { createWriteQueue } from '../src/db/write-queue.js';
import { createWriterThread } from '../src/db/writer-thread.js';
import { idempotencyPruneBatch } from '../src/emails/service.js';
import { silentLogger } from '../src/lib/logger.js';
import { bindProcedures } from '../src/write-procedures.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const keys = Number(process.env.BENCH_IDEMPOTENCY_KEYS ?? 100_000);

function fillExpiredKeys(handle: DatabaseHandle): void {
  const insert = handle.sqlite.prepare(
    `insert into idempotency_keys (project_id, key, request_hash, response, created_at) values ('p', ?, ?, '{"id":"0123456789abcdef01234567","status":"queued"}', ?)`,
  );
  // Keys are what clients send: random, so their primary-key index is touched all over.
  writeTransaction(handle.sqlite, () => {
    for (let i = 0; i < keys; i++) insert.run(`order-${Math.random().toString(36).slice(2)}`, 'x'.repeat(43), 1_000 + i);
  });
}

export async function benchIdempotencyPrune(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-prune-'));
  const handle = openDatabase({ path: join(dir, 'bench.sqlite'), synchronous: 'FULL' });
  migrateDatabase(handle.db);
  handle.sqlite.prepare("insert into projects (id, name, created_at, updated_at) values ('p', 'p', 0, 0)").run();
  const writer = createWriterThread(handle.sqlite, silentLogger);
  const writes = createWriteQueue(handle.sqlite, silentLogger, { procedures: bindProcedures(handle.sqlite), writer });
  try {
    fillExpiredKeys(handle);
    let started = performance.now();
    writeTransaction(handle.sqlite, () => handle.sqlite.prepare('delete from idempotency_keys where created_at < ?').run(Date.now()));
    const oneStatementMs = performance.now() - started;

    fillExpiredKeys(handle);
    await writes.call('emails.prune-idempotency-keys', { beforeMs: 0, limit: 1 }); // starts the writer thread
    for (let waited = 0; writer && !writer.ready && waited < 20_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20));
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    started = performance.now();
    for (;;) {
      const count = await writes.call('emails.prune-idempotency-keys', { beforeMs: Date.now(), limit: idempotencyPruneBatch });
      if (count < idempotencyPruneBatch) break;
    }
    const batchedMs = performance.now() - started;
    delay.disable();
    return [
      { name: `one DELETE of ${keys} expired keys on the main connection: event loop held`, value: Math.round(oneStatementMs), unit: 'ms' },
      { name: `batches of ${idempotencyPruneBatch} on the writer thread: whole prune`, value: Math.round(batchedMs), unit: 'ms' },
      { name: `batches of ${idempotencyPruneBatch} on the writer thread: event-loop delay max`, value: Math.round((delay.max / 1e6) * 10) / 10, unit: 'ms' },
    ];
  } finally {
    await writes.close();
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchIdempotencyPrune()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
