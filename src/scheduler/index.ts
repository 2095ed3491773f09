import cron from 'node-cron';
import type { Clock } from '../lib/clock.js';
import { isStorageBusy, isStorageFull, isStorageStopped } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { waitAtMost } from '../lib/wait-at-most.js';

/**
 * A job is a plain function of (now) so tests call it directly with a manual clock; node-cron only
 * decides when production calls it. Jobs must be idempotent: a run may repeat after a crash.
 */
export interface Job {
  name: string;
  /** Cron expression with seconds, e.g. `*\/5 * * * * *` for every five seconds. */
  schedule: string;
  run(now: Date): unknown | Promise<unknown>;
}

export interface Scheduler {
  start(): void;
  stop(): Promise<void>;
  /** Runs one job now, by name (operator CLI, tests). */
  runNow(name: string): Promise<unknown>;
  readonly state: 'stopped' | 'running';
  readonly jobNames: string[];
}

/**
 * How long stop() waits for runs under way. A run can outlast any shutdown budget (re-verifying domains
 * while DNS does not answer: ~13 s a domain), and the process has 10 s to stop (main.ts); jobs are
 * idempotent, so one cut short is simply run again after the next start.
 */
const stopWaitMs = 2_000;

/**
 * When each job runs is node-cron's reading of its expression, in UTC (every job is an interval: every
 * 5 s, every minute, hourly; a local time that happens twice made every job wait an hour). The timers
 * are the scheduler's own, on the monotonic clock: node-cron's runner had two faults no option avoids.
 * It reads "now" with a local-time setter, so in the hour the clocks go back it took the second
 * occurrence for the first and every job waited the hour out (emails scheduled in it went out up to an
 * hour late); and after the clock stepped forward it walked every slot it missed, one by one, on the
 * event loop (~6 s per day of the every-second job: a step of a week held the API and SMTP a minute).
 */
const cronTimezone = 'UTC';
/** A timer firing this much before its slot is on time (timers and the wall clock differ by a few ms). */
const earlyToleranceMs = 1_000;
/** setTimeout's longest delay is ~24.8 days; a later slot is waited for a day at a time. */
const maxDelayMs = 86_400_000;

export function createScheduler(jobs: Job[], deps: { clock: Clock; log: Logger; stopWaitMs?: number }): Scheduler {
  const inFlight = new Map<Promise<unknown>, string>();
  let state: Scheduler['state'] = 'stopped';
  /** Runs still going when stop() gave up waiting: their later failures (a closed database) are expected. */
  let abandoned = false;

  for (const job of jobs) {
    if (!cron.validate(job.schedule)) throw new Error(`job ${job.name}: invalid cron expression "${job.schedule}"`);
  }

  const runJob = async (job: Job) => {
    const started = performance.now();
    try {
      const result = await job.run(deps.clock.now());
      deps.log.debug('job finished', { job: job.name, ms: Math.round(performance.now() - started) });
      return result;
    } catch (error) {
      if (abandoned) deps.log.debug('job cut short by the stop', { job: job.name, error });
      // Said once per episode where writes are refused (db/storage-health.ts), and on /healthz: an error
      // with its stack at every run (the text index job runs every second) filled the log of a full disk.
      else if (isStorageFull(error)) deps.log.debug('job refused: storage full', { job: job.name });
      else if (isStorageBusy(error)) deps.log.debug('job refused: another process holds the write lock', { job: job.name });
      else if (isStorageStopped(error)) deps.log.debug('job refused: the database stores nothing until a restart', { job: job.name });
      else deps.log.error('job failed', { job: job.name, error });
      return undefined;
    }
  };

  const track = (name: string, promise: Promise<unknown>) => {
    inFlight.set(promise, name);
    void promise.finally(() => inFlight.delete(promise));
    return promise;
  };

  /** Jobs with a run under way: a slow run is skipped, not stacked, also across a re-arm of the timers. */
  const running = new Set<string>();
  const timers = new Map<string, ReturnType<typeof setTimeout>>();
  let stopWatchingClock = () => {};
  // node-cron's tasks are never started: they only read the expressions (the timers are ours, see above).
  const matchers = new Map(jobs.map((job) => [job.name, cron.createTask(job.schedule, () => {}, { name: job.name, timezone: cronTimezone })]));
  // node-cron reckons the slots from the system clock; the timers from the injected one, the same clock in
  // production (systemClock). Tests that move a manual clock call the jobs themselves (runNow).
  const nowMs = () => deps.clock.nowMs();
  /** The job's next two slots, as node-cron reads its expression. */
  const upcoming = (job: Job) => matchers.get(job.name)!.getNextRuns(2).map((slot) => slot.getTime());

  const tick = (job: Job) => {
    if (running.has(job.name)) return deps.log.debug('job still running; tick skipped', { job: job.name });
    running.add(job.name);
    return track(job.name, runJob(job).finally(() => running.delete(job.name)));
  };

  /** Arms `job` for its first slot after `afterMs` (now, or a slot less than a second ahead of now). */
  const arm = (job: Job, afterMs: number) => {
    const [first, second] = upcoming(job) as [number, number];
    // A clock that is not the system one (a test's) may be past both: one period on, never a tight loop.
    const slotMs = [first, second].find((slot) => slot > afterMs) ?? afterMs + (second - first);
    const timer = setTimeout(() => fire(job, slotMs), Math.min(Math.max(0, slotMs - nowMs()), maxDelayMs));
    // unref: the scheduler never keeps the process alive.
    timer.unref();
    timers.set(job.name, timer);
  };

  const fire = (job: Job, slotMs: number) => {
    const firedMs = nowMs();
    // Early: a slot more than a day ahead, or the wall clock went back since the timer was set. Not a run:
    // armed again from now, so no job waits for the clock to catch up.
    if (firedMs < slotMs - earlyToleranceMs) return arm(job, firedMs);
    const [first, second] = upcoming(job) as [number, number];
    if (firedMs - slotMs >= second - first) noteMissedTicks(deps.log, job.name, slotMs, second - first, firedMs);
    void tick(job);
    arm(job, Math.max(firedMs, slotMs));
  };

  const armAll = () => {
    for (const job of jobs) arm(job, nowMs());
  };

  const disarmAll = () => {
    for (const timer of timers.values()) clearTimeout(timer);
    timers.clear();
  };

  return {
    get state() {
      return state;
    },
    jobNames: jobs.map((job) => job.name),
    start() {
      abandoned = false; // a later failure is a real one again
      armAll();
      stopWatchingClock = watchClockSteppingBack(nowMs, (byMs) => {
        deps.log.warn('the clock went back: scheduler timers re-armed', { bySeconds: Math.round(byMs / 1000) });
        disarmAll();
        armAll();
      });
      state = 'running';
    },
    async stop() {
      stopWatchingClock();
      disarmAll();
      const { done } = await waitAtMost(Promise.all([...inFlight.keys()]), deps.stopWaitMs ?? stopWaitMs);
      if (!done) {
        abandoned = true;
        deps.log.warn('stopping without waiting for scheduler jobs still running; they run again after the next start', { jobs: [...new Set(inFlight.values())] });
      }
      state = 'stopped';
    },
    runNow(name) {
      const job = jobs.find((candidate) => candidate.name === name);
      if (!job) return Promise.reject(new Error(`no job named ${name}`));
      return track(job.name, runJob(job));
    },
  };
}

/** How often the scheduler looks at the wall clock, on a timer that does not follow it. */
const clockCheckMs = 1_000;
/** A step back smaller than this only delays a tick or two; past it, every job would wait it out. */
const clockStepBackMs = 2_000;

/**
 * node-cron arms each task for its next time on the wall clock: after a step back (NTP correcting a clock
 * that ran fast, a VM restored from a snapshot) it waits for the clock to catch up, so every job (scheduled
 * emails, broadcasts, pruning) stood still for as long as the step, an hour for an hour, without a word.
 * Timers run on a monotonic clock: one that fires a second after the last finds the wall clock earlier
 * than that when it went back, and `onStep` re-arms the tasks from the new time.
 */
function watchClockSteppingBack(nowMs: () => number, onStep: (byMs: number) => void): () => void {
  let previous = nowMs();
  let timer: ReturnType<typeof setTimeout>;
  const check = () => {
    const now = nowMs();
    const back = previous + clockCheckMs - now;
    previous = now;
    if (back > clockStepBackMs) onStep(back);
    timer = setTimeout(check, clockCheckMs);
    timer.unref();
  };
  timer = setTimeout(check, clockCheckMs);
  timer.unref();
  return () => clearTimeout(timer);
}

/**
 * Ticks that did not happen on time: after a host suspended for a night, a clock stepped forward (a board
 * without a battery-backed clock boots at its last shutdown time, then NTP corrects it) or a stalled
 * process. One warning per job and episode (node-cron's runner wrote one per tick: 28,800 for 8 hours of
 * the every-second job): how many, from when to when. Jobs read the time when they run, so nothing is
 * lost with them: the job runs once now and goes on at its pace.
 */
function noteMissedTicks(log: Logger, job: string, slotMs: number, intervalMs: number, nowMs: number): void {
  const missed = Math.floor((nowMs - slotMs) / intervalMs);
  log.warn('scheduler ticks missed: the clock jumped forward or the process was stalled or suspended', {
    job,
    missed,
    from: new Date(slotMs).toISOString(),
    to: new Date(slotMs + (missed - 1) * intervalMs).toISOString(),
  });
}
