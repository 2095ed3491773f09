import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { systemClock } from '../../src/lib/clock.js';
import { createLogger } from '../../src/lib/logger.js';
import { createScheduler } from '../../src/scheduler/index.js';

/**
 * node-cron's timers and the clock it reads are mocked (node:test mock timers), so the scheduler meets the
 * end of daylight saving time without waiting for it: Berlin's clocks go back from 03:00 CEST to 02:00 CET
 * on 25 October 2026 at 01:00 UTC, and 02:00–03:00 local time happens twice.
 */
test('scheduler: jobs keep their pace when the host time zone leaves daylight saving time, through both 02:00 hours', async (t) => {
  const zone = process.env.TZ;
  process.env.TZ = 'Europe/Berlin';
  t.after(() => (zone === undefined ? delete process.env.TZ : (process.env.TZ = zone)));
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: Date.parse('2026-10-24T23:59:00Z') });
  const runsAt: string[] = [];
  const log = createLogger({ level: 'error', write: () => {} });
  const scheduler = createScheduler([{ name: 'emails.release-scheduled', schedule: '*/5 * * * * *', run: (now) => void runsAt.push(now.toISOString()) }], { clock: systemClock, log });
  scheduler.start();
  await tickSeconds(t, 64 * 60);
  await scheduler.stop();
  // 00:00–00:02 UTC is 02:00–02:02 CEST, the first of the two 02:00 hours: every 5 s, as on any other day.
  const inTheRepeatedHour = runsAt.filter((at) => at >= '2026-10-25T00:00:00.000Z' && at < '2026-10-25T00:02:00.000Z');
  assert.equal(inTheRepeatedHour.length, 24, `runs: ${runsAt.join(' ')}`);
  // 01:00–01:02 UTC is 02:00–02:02 CET, the second of them: node-cron's runner read it as the first and ran nothing until 02:00 UTC.
  const inItsSecondOccurrence = runsAt.filter((at) => at >= '2026-10-25T01:00:00.000Z' && at < '2026-10-25T01:02:00.000Z');
  assert.equal(inItsSecondOccurrence.length, 24, `runs: ${runsAt.slice(-40).join(' ')}`);
  assert.equal(runsAt.length, 64 * 12, 'every 5 s throughout');
});

/**
 * A host suspended for a night, or a clock set forward (a Raspberry Pi without a battery-backed clock boots
 * at its last shutdown time, then NTP steps it): node-cron reports every tick of every job that did not
 * happen, and the every-second text indexing alone wrote 28,800 warnings for 8 hours.
 */
test('scheduler: ticks missed while the clock jumped forward are one warning per job, with how many and since when', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: Date.parse('2026-05-01T20:00:00Z') });
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'info', write: (line) => lines.push(JSON.parse(line)) });
  let runs = 0;
  const scheduler = createScheduler([{ name: 'emails.index-fts', schedule: '* * * * * *', run: () => void runs++ }], { clock: systemClock, log });
  scheduler.start();
  await tickSeconds(t, 5);
  t.mock.timers.setTime(Date.now() + 8 * 3_600_000);
  await tickSeconds(t, 5);
  await new Promise((resolve) => setImmediate(resolve));
  await scheduler.stop();
  assert.equal(runs, 10, 'every second before the jump and after it');
  assert.equal(lines.length, 1, `${lines.length} lines, the first: ${JSON.stringify(lines[0])}`);
  assert.deepEqual(lines[0], {
    time: lines[0].time,
    level: 'warn',
    msg: 'scheduler ticks missed: the clock jumped forward or the process was stalled or suspended',
    job: 'emails.index-fts',
    missed: 28_800,
    from: '2026-05-01T20:00:06.000Z',
    to: '2026-05-02T04:00:05.000Z',
  });
});

/**
 * A board without a battery-backed clock boots in 1970, then NTP steps it to now. node-cron's runner walked
 * every slot it had missed, one by one on the event loop (~6 s per day of an every-second job: days for
 * this step, the API and SMTP frozen meanwhile); the job now runs once and goes on at its pace.
 */
test('scheduler: a step forward of decades costs one run and one warning, not a walk through every missed tick', { timeout: 30_000 }, async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: Date.parse('1970-01-01T00:00:10Z') });
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'info', write: (line) => lines.push(JSON.parse(line)) });
  const runsAt: string[] = [];
  const scheduler = createScheduler([{ name: 'emails.index-fts', schedule: '* * * * * *', run: (now) => void runsAt.push(now.toISOString()) }], { clock: systemClock, log });
  scheduler.start();
  await tickSeconds(t, 3);
  t.mock.timers.setTime(Date.parse('2026-11-29T12:00:00Z'));
  await tickSeconds(t, 3);
  await scheduler.stop();
  assert.deepEqual(runsAt, [
    '1970-01-01T00:00:11.000Z', '1970-01-01T00:00:12.000Z', '1970-01-01T00:00:13.000Z',
    '2026-11-29T12:00:01.000Z', '2026-11-29T12:00:02.000Z', '2026-11-29T12:00:03.000Z',
  ]);
  assert.deepEqual(lines.map((line) => [line.msg, line.job, line.from]), [['scheduler ticks missed: the clock jumped forward or the process was stalled or suspended', 'emails.index-fts', '1970-01-01T00:00:14.000Z']]);
});

/** Moves the mocked timers and clock on a second at a time, letting the jobs they start run. */
async function tickSeconds(t: TestContext, seconds: number): Promise<void> {
  for (let second = 0; second < seconds; second++) {
    t.mock.timers.tick(1000);
    for (let turn = 0; turn < 20; turn++) await Promise.resolve();
  }
}

/** Lets real time pass while the mocked wall clock keeps up with it, 50 ms at a time. */
async function realSeconds(t: TestContext, seconds: number): Promise<void> {
  for (let step = 0; step < seconds * 20; step++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.mock.timers.tick(50);
  }
}

/**
 * NTP stepping back a clock that ran fast, or a VM restored from a snapshot: node-cron arms each task for
 * its next time on the wall clock and waited for the clock to catch up, so every job (scheduled emails,
 * broadcasts, pruning) stood still for as long as the step, without a word. Only the wall clock is mocked
 * here (timers run on the real, monotonic one, as in production; mocked timers follow the mocked clock
 * back), moved along with real time, then stepped back an hour.
 */
test('scheduler: after the clock steps back an hour, jobs keep running, and the log says why the timers were re-armed', async (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: Date.parse('2026-05-01T20:00:00.500Z') });
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'info', write: (line) => lines.push(JSON.parse(line)) });
  const runs: string[] = [];
  const scheduler = createScheduler([{ name: 'emails.index-fts', schedule: '* * * * * *', run: (now) => void runs.push(now.toISOString()) }], { clock: systemClock, log });
  scheduler.start();
  await realSeconds(t, 2.2);
  const before = runs.length;
  assert.ok(before >= 1, `${before} runs before the step`);
  t.mock.timers.setTime(Date.now() - 3_600_000);
  await realSeconds(t, 3.2);
  await scheduler.stop();
  const after = runs.slice(before);
  assert.ok(after.length >= 1, `no run in the 3 s after the step: ${JSON.stringify(lines)}`);
  assert.ok(after.every((at) => at.startsWith('2026-05-01T19:')), after.join());
  assert.deepEqual(
    lines.map((line) => [line.level, line.msg]),
    [['warn', 'the clock went back: scheduler timers re-armed']],
  );
  assert.ok(Math.abs(Number(lines[0].bySeconds) - 3600) <= 1, String(lines[0].bySeconds));
});

test('scheduler: a run still going when the clock steps back is not started again by the re-armed timers', async (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: Date.parse('2026-05-01T20:00:00.500Z') });
  const log = createLogger({ level: 'silent' });
  let started = 0;
  let running = 0;
  let most = 0;
  let release = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const scheduler = createScheduler(
    [{ name: 'slow', schedule: '* * * * * *', run: async () => {
      started++;
      most = Math.max(most, ++running);
      if (started === 1) await held;
      running--;
    } }],
    { clock: systemClock, log },
  );
  scheduler.start();
  await realSeconds(t, 1.6);
  assert.equal(started, 1, 'the first run started and is held');
  t.mock.timers.setTime(Date.now() - 3_600_000);
  await realSeconds(t, 2.6);
  assert.equal(started, 1, 'no second run while the first is still going, the timers re-armed meanwhile');
  release();
  await realSeconds(t, 2.2);
  await scheduler.stop();
  assert.ok(started >= 2, `${started} runs: the job goes on once the first run ends`);
  assert.equal(most, 1, 'never two at once');
});
