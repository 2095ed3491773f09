// Measures what synchronous=FULL costs: committed single-row writes per second, one transaction each,
// with FULL and NORMAL, and the same writes through the group-commit WriteQueue.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { openDatabase, writeTransaction } from '../src/db/client.js';
import { createWriteQueue } from '../src/db/write-queue.js';
import { silentLogger } from '../src/lib/logger.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const rows = 3000;

function open(synchronous: 'FULL' | 'NORMAL') {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-storage-'));
  const handle = openDatabase({ path: join(dir, 'bench.sqlite'), synchronous });
  handle.sqlite.exec('create table t (id integer primary key, payload text not null)');
  return { handle, cleanup: () => (handle.close(), rmSync(dir, { recursive: true, force: true })) };
}

function singleCommits(synchronous: 'FULL' | 'NORMAL'): number {
  const { handle, cleanup } = open(synchronous);
  const insert = handle.sqlite.prepare('insert into t (payload) values (?)');
  const started = performance.now();
  for (let i = 0; i < rows; i++) writeTransaction(handle.sqlite, () => insert.run('x'.repeat(200)));
  const seconds = (performance.now() - started) / 1000;
  cleanup();
  return rows / seconds;
}

async function groupCommits(): Promise<number> {
  const { handle, cleanup } = open('FULL');
  const insert = handle.sqlite.prepare('insert into t (payload) values (?)');
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  const started = performance.now();
  // 50 concurrent writers, like 50 HTTP connections each waiting for its commit.
  await Promise.all(
    Array.from({ length: 50 }, async () => {
      for (let i = 0; i < rows / 50; i++) await queue.run(() => insert.run('x'.repeat(200)));
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  cleanup();
  return rows / seconds;
}

export async function benchStorage(): Promise<BenchResult[]> {
  const full = singleCommits('FULL');
  const normal = singleCommits('NORMAL');
  const grouped = await groupCommits();
  return [
    { name: 'SQLite commit, 1 row/transaction, synchronous=FULL', value: Math.round(full), unit: 'commits/s' },
    { name: 'SQLite commit, 1 row/transaction, synchronous=NORMAL', value: Math.round(normal), unit: 'commits/s' },
    { name: 'Cost of FULL per commit', value: Math.round((1000 / full - 1000 / normal) * 1000) / 1000, unit: 'ms' },
    { name: 'Group commit (WriteQueue, 50 writers), synchronous=FULL', value: Math.round(grouped), unit: 'writes/s' },
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const r of await benchStorage()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
