import assert from 'node:assert/strict';
import { test } from 'node:test';
import { systemClock } from '../../src/lib/clock.js';
import { createLogger } from '../../src/lib/logger.js';
import { createScheduler } from '../../src/scheduler/index.js';

test('scheduler: a tick skipped while the job still runs goes to the JSON log at debug, nothing to the console', async (t) => {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) });
  const consoleLines: unknown[][] = [];
  for (const method of ['info', 'warn', 'error', 'debug', 'log'] as const) {
    t.mock.method(console, method, (...args: unknown[]) => consoleLines.push(args));
  }
  let runs = 0;
  let release!: () => void;
  const slow = new Promise<void>((resolve) => (release = resolve));
  const scheduler = createScheduler([{ name: 'slow', schedule: '* * * * * *', run: () => (runs++, slow) }], { clock: systemClock, log });
  scheduler.start();
  // The first tick starts the run; at least one more tick finds it still going.
  await waitFor(() => lines.some((line) => line.msg === 'job still running; tick skipped'), 5000);
  release();
  await scheduler.stop();
  assert.equal(runs, 1);
  assert.deepEqual(consoleLines, []);
  const skipped = lines.find((line) => line.msg === 'job still running; tick skipped')!;
  assert.equal(skipped.level, 'debug');
  assert.equal(skipped.job, 'slow');
});

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('scheduler: stop waits for a run under way only so long; a run that never ends is left behind, said at warn', { timeout: 10_000 }, async () => {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) });
  let fail!: (error: Error) => void;
  const endless = new Promise<void>((_, reject) => (fail = reject));
  const scheduler = createScheduler([{ name: 'reverify', schedule: '0 0 1 1 *', run: () => endless }], { clock: systemClock, log, stopWaitMs: 200 });
  scheduler.start();
  void scheduler.runNow('reverify');
  const started = Date.now();
  await scheduler.stop();
  assert.ok(Date.now() - started < 2_000, 'stop() returned although the run goes on');
  const warned = lines.find((line) => line.msg === 'stopping without waiting for scheduler jobs still running; they run again after the next start');
  assert.deepEqual(warned?.jobs, ['reverify']);
  // The run failing afterwards (its database closed under it) is expected: debug, not an error.
  fail(new Error('The database connection is not open'));
  await waitFor(() => lines.some((line) => line.msg === 'job cut short by the stop'), 2000);
  assert.ok(!lines.some((line) => line.msg === 'job failed'));
});

test('scheduler: after a stop that left a run behind, a new start logs failing runs as errors again', { timeout: 10_000 }, async () => {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) });
  let calls = 0;
  const run = () => (calls++ === 0 ? new Promise<void>(() => {}) : Promise.reject(new Error('boom')));
  const scheduler = createScheduler([{ name: 'reverify', schedule: '0 0 1 1 *', run }], { clock: systemClock, log, stopWaitMs: 100 });
  scheduler.start();
  void scheduler.runNow('reverify');
  await scheduler.stop();
  scheduler.start();
  await scheduler.runNow('reverify');
  await scheduler.stop();
  assert.ok(lines.some((line) => line.msg === 'job failed'), 'logged as an error');
  assert.ok(!lines.some((line) => line.msg === 'job cut short by the stop'));
});

test('scheduler: a run refused by a full disk is not logged as an error each time (the text index job runs every second)', async () => {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) });
  const full = () => Promise.reject(Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' }));
  const broken = () => Promise.reject(new Error('a bug'));
  const scheduler = createScheduler(
    [
      { name: 'index', schedule: '0 0 1 1 *', run: full },
      { name: 'broken', schedule: '0 0 1 1 *', run: broken },
    ],
    { clock: systemClock, log },
  );
  for (let i = 0; i < 3; i++) await scheduler.runNow('index');
  await scheduler.runNow('broken');
  // The full disk is said once per episode where writes are refused (db/storage-health.ts) and on /healthz.
  assert.deepEqual(
    lines.filter((line) => line.level === 'error').map((line) => line.job),
    ['broken'],
  );
  assert.equal(lines.filter((line) => line.job === 'index' && line.level === 'debug').length, 3);
});
