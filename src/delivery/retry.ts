/**
 * The retry schedule is data (`delivery.retry_schedule`): the delay before attempt n+1 is entry n, the last
 * entry repeats, and a message still deferred `give_up_after` after it was queued bounces.
 */
export interface RetryPolicy {
  schedule: readonly number[];
  giveUpAfterMs: number;
}

export type RetryDecision = { kind: 'retry'; atMs: number } | { kind: 'give-up' };

/**
 * Attempts a message gets before it can be given up, however old it is. Mail held without attempts (a
 * paused project, a destination's cool-down) can pass the deadline before its first try; its first
 * 4xx (greylisting answers every first contact so) must not then bounce it and suppress a working address.
 */
export const minAttemptsBeforeGiveUp = 2;
/** The delays in force: an empty delivery.retry_schedule retries every 5 minutes. */
export function effectiveSchedule(schedule: readonly number[]): readonly number[] {
  return schedule.length > 0 ? schedule : [300_000];
}

/** `attempts` counts attempts made so far, including the one that just deferred. */
export function decideRetry(policy: RetryPolicy, attempts: number, queuedAtMs: number, nowMs: number, minDelayMs = 0): RetryDecision {
  const schedule = effectiveSchedule(policy.schedule);
  const delay = Math.max(schedule[Math.min(Math.max(attempts, 1), schedule.length) - 1], minDelayMs);
  const atMs = nowMs + delay;
  // A message that has not had its minimum attempts yet is retried after its full delay, wherever the
  // deadline is: capped at a deadline a few seconds away, its second try came before a greylisting server
  // would take it, and bounced, while the same message first tried just after the deadline got the delay.
  if (attempts < minAttemptsBeforeGiveUp) return { kind: 'retry', atMs };
  const deadline = queuedAtMs + policy.giveUpAfterMs;
  if (nowMs >= deadline) return { kind: 'give-up' };
  // Do not schedule an attempt past the deadline: the last try happens at the deadline at the latest.
  return { kind: 'retry', atMs: Math.min(atMs, deadline) };
}
