import cron, { type ScheduledTask } from 'node-cron';
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
 * Schedules are read in UTC, never in the host's zone: every job is an interval (every 5 s, every minute,
 * hourly), and node-cron reads a local time that happens twice (the hour the clocks go back) as its
 * second occurrence, so in the first one every job waited an hour: scheduled emails went out an hour
 * late, domains and text search were not looked after.
 */
const cronTimezone = 'UTC';

export function createScheduler(jobs: Job[], deps: { clock: Clock; log: Logger; stopWaitMs?: number }): Scheduler {
  const tasks: ScheduledTask[] = [];
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

  const noteMissedTick = missedTicksSummary(deps.log);
  /** Jobs with a run under way: a slow run is skipped, not stacked, also across a re-arm of the tasks. */
  const running = new Set<string>();
  let stopWatchingClock = () => {};
  /** Between start() and stop(): whether a re-arm after a clock step should schedule the tasks again. */
  let armed = false;

  const tick = (job: Job) => {
    if (running.has(job.name)) return deps.log.debug('job still running; tick skipped', { job: job.name });
    running.add(job.name);
    return track(job.name, runJob(job).finally(() => running.delete(job.name)));
  };

  const scheduleAll = () => {
    for (const job of jobs) {
      // unref: the scheduler never keeps the process alive.
      const task = cron.schedule(job.schedule, () => tick(job), {
        name: job.name,
        unref: true,
        timezone: cronTimezone,
        logger: cronLogger(deps.log, job.name),
      });
      // Listened to, node-cron no longer logs each missed tick itself.
      task.on('execution:missed', (context) => noteMissedTick(job.name, context.date));
      tasks.push(task);
    }
  };

  const destroyAll = async () => {
    for (const task of tasks.splice(0)) await task.destroy();
  };

  return {
    get state() {
      return state;
    },
    jobNames: jobs.map((job) => job.name),
    start() {
      abandoned = false; // a later failure is a real one again
      scheduleAll();
      stopWatchingClock = watchClockSteppingBack(() => deps.clock.nowMs(), (byMs) => {
        deps.log.warn('the clock went back: scheduler timers re-armed', { bySeconds: Math.round(byMs / 1000) });
        void destroyAll().then(() => {
          if (armed) scheduleAll();
        });
      });
      armed = true;
      state = 'running';
    },
    async stop() {
      armed = false;
      stopWatchingClock();
      await destroyAll();
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
 * node-cron reports every tick that did not happen on time, one by one, all at once when it notices: after
 * a host suspended for a night, or a clock stepped forward (a board without a battery-backed clock boots
 * at its last shutdown time, then NTP corrects it), that was a warning per second of the gap for the
 * every-second job alone (28,800 for 8 hours). The ticks one notice reports are one warning per job:
 * how many, from when to when. Jobs read the time when they run, so nothing is lost with them.
 */
function missedTicksSummary(log: Logger): (job: string, at: Date) => void {
  const bursts = new Map<string, { missed: number; from: Date; to: Date }>();
  const flush = () => {
    for (const [job, { missed, from, to }] of bursts) {
      log.warn('scheduler ticks missed: the clock jumped forward or the process was stalled or suspended', { job, missed, from: from.toISOString(), to: to.toISOString() });
    }
    bursts.clear();
  };
  return (job, at) => {
    // node-cron reports one notice's missed ticks in the same turn of the event loop.
    if (bursts.size === 0) setImmediate(flush);
    const burst = bursts.get(job);
    if (burst) {
      burst.missed++;
      burst.to = at;
    } else bursts.set(job, { missed: 1, from: at, to: at });
  };
}

/**
 * node-cron's own messages go to our JSON log, not to the console in its coloured format (which breaks
 * log collectors). Missed ticks are summarized (missedTicksSummary); anything else it reports keeps its level.
 */
function cronLogger(log: Logger, job: string) {
  const at = (level: 'debug' | 'error') => (message: string | Error, error?: Error) =>
    typeof message === 'string' ? log[level](message, error ? { job, error } : { job }) : log[level]('node-cron', { job, error: message });
  return {
    debug: at('debug'),
    error: at('error'),
    info: (message: string) => log.info(message, { job }),
    warn: (message: string) => log.warn(message, { job }),
  };
}
