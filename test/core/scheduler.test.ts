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
