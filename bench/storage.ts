// Measures what synchronous=FULL costs: committed single-row writes per second, one transaction each,
// with FULL and NORMAL, and the same writes through the group-commit WriteQueue; and what handing work
// to another thread costs the event loop on this machine (the WAL fsync goes through the libuv pool).
import { mkdtempSync, rmSync, stat } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { openDatabase, writeTransaction } from '../src/db/client.js';
import { createWriteQueue } from '../src/db/write-queue.js';
import { silentLogger } from '../src/lib/logger.js';
import { mainThreadCpuMs } from './lib/thread-cpu.js';

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

/** Main-thread CPU per libuv thread-pool round trip (fs.stat, no disk), one at a time, in µs. */
async function threadPoolRoundTrip(): Promise<number> {
  const calls = 5000;
  const before = mainThreadCpuMs();
  for (let i = 0; i < calls; i++) await new Promise((resolve, reject) => stat(tmpdir(), (error) => (error ? reject(error) : resolve(undefined))));
  return ((mainThreadCpuMs() - before) * 1000) / calls;
}

export async function benchStorage(): Promise<BenchResult[]> {
  const full = singleCommits('FULL');
  const normal = singleCommits('NORMAL');
  const grouped = await groupCommits();
  const roundTrip = await threadPoolRoundTrip();
  return [
    { name: 'Event-loop CPU per libuv thread-pool round trip (fs.stat, idle loop)', value: Math.round(roundTrip * 10) / 10, unit: 'µs' },
    { name: 'SQLite commit, 1 row/transaction, synchronous=FULL', value: Math.round(full), unit: 'commits/s' },
    { name: 'SQLite commit, 1 row/transaction, synchronous=NORMAL', value: Math.round(normal), unit: 'commits/s' },
    { name: 'Cost of FULL per commit', value: Math.round((1000 / full - 1000 / normal) * 1000) / 1000, unit: 'ms' },
    { name: 'Group commit (WriteQueue, 50 writers), synchronous=FULL', value: Math.round(grouped), unit: 'writes/s' },
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const r of await benchStorage()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
