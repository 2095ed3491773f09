// The writer thread's transaction alone: CPU per accepted email of the `emails.accept` write procedure in
// batches of 30 on a file database (synchronous=NORMAL, as on the thread), with a savepoint per write
// (commitBatch) and without (commitReplayableBatch, what the thread runs). Alternating, so the VM's drift
// touches both alike. The html send bench's email, attachments none.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { commitBatch, commitReplayableBatch } from '../src/db/batch-transaction.js';
import { openDatabase } from '../src/db/client.js';
import { migrateDatabase } from '../src/db/migrate.js';
import type { AcceptArgs } from '../src/emails/accept-procedure.js';
import { bindProcedures } from '../src/write-procedures.js';

export interface BenchResult {
  name: string;
  value: number | string;
  unit: string;
}

const batches = 500;
const batchSize = 30;
const rounds = 6;
const html = `<html><body>${'<p>Thanks for your order.</p>'.repeat(40)}</body></html>`;

type Commit = typeof commitBatch;

function openWriterConnection(dir: string): Database.Database {
  const path = join(dir, 'writer.sqlite');
  const handle = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(handle.db);
  handle.sqlite.prepare("insert into projects (id, name, created_at, updated_at) values ('p1', 'Bench', 0, 0)").run();
  handle.close();
  // The writer thread's pragmas (db/writer-worker.ts); the bench checkpoints itself between rounds.
  const sqlite = new Database(path);
  for (const pragma of ['foreign_keys = ON', 'synchronous = NORMAL', 'temp_store = MEMORY', 'wal_autocheckpoint = 0']) sqlite.pragma(pragma);
  return sqlite;
}

function acceptArgs(n: number): AcceptArgs {
  const id = n.toString(16).padStart(24, '0');
  return {
    projectId: 'p1',
    nowMs: Date.now(),
    batch: false,
    emails: [
      {
        email: {
          id, projectId: 'p1', status: 'queued', toAddress: 'ann@example.com', fromAddress: 'app@sender.test', fromName: null, replyToAddress: null,
          replyToName: null, subject: 'Your receipt', templateId: null, templateName: null, templateProps: null, automationId: null, messengerId: null,
          contentKind: 'html', html, text: 'Thanks for your order.', headers: null, isOpenTracked: 1, scheduledAt: null, createdAt: Date.now(),
        },
        attachments: [],
        eventId: `e${id.slice(1)}`,
      },
    ],
  };
}

/** CPU µs per accepted email over `batches` transactions of `batchSize`. */
function measure(sqlite: Database.Database, commit: Commit, firstId: number): number {
  const run = bindProcedures(sqlite);
  let next = firstId;
  const before = process.cpuUsage();
  for (let b = 0; b < batches; b++) {
    const writes = Array.from({ length: batchSize }, () => {
      const args = acceptArgs(next++);
      return () => run('emails.accept', args);
    });
    commit(sqlite, writes, (error) => {
      throw error;
    });
    if (b % 200 === 199) sqlite.pragma('wal_checkpoint(RESTART)');
  }
  const used = process.cpuUsage(before);
  return (used.user + used.system) / (batches * batchSize);
}

export async function benchWriterBatch(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-writer-batch-'));
  const sqlite = openWriterConnection(dir);
  try {
    const perRound = { savepoints: [] as number[], replayable: [] as number[] };
    let firstId = 1;
    // Warm-up (JIT, page cache), not counted.
    for (const commit of [commitBatch, commitReplayableBatch]) {
      measure(sqlite, commit, firstId);
      firstId += batches * batchSize;
    }
    for (let round = 0; round < rounds; round++) {
      for (const kind of round % 2 === 0 ? (['savepoints', 'replayable'] as const) : (['replayable', 'savepoints'] as const)) {
        perRound[kind].push(measure(sqlite, kind === 'savepoints' ? commitBatch : commitReplayableBatch, firstId));
        firstId += batches * batchSize;
      }
    }
    const format = (values: number[]) => values.map((v) => v.toFixed(1)).join(' / ');
    const median = (values: number[]) => Math.round([...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] * 10) / 10;
    return [
      { name: `emails.accept, ${batchSize} per transaction, a savepoint per write (commitBatch), median of ${rounds}`, value: median(perRound.savepoints), unit: 'µs CPU per email' },
      { name: `emails.accept, ${batchSize} per transaction, no savepoints unless replayed (commitReplayableBatch), median of ${rounds}`, value: median(perRound.replayable), unit: 'µs CPU per email' },
      { name: 'the same, each round (savepoints | replayable)', value: `${format(perRound.savepoints)} | ${format(perRound.replayable)}`, unit: 'µs' },
    ];
  } finally {
    sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchWriterBatch()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
