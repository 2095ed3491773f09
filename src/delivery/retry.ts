/**
 * The retry schedule is data (`delivery.retry_schedule`): the delay before attempt n+1 is entry n, the last
 * entry repeats, and a message still deferred `give_up_after` after it was queued bounces.
 */
export interface RetryPolicy {
  schedule: readonly number[];
  giveUpAfterMs: number;
}

export type RetryDecision = { kind: 'retry'; atMs: number } | { kind: 'give-up' };

/** `attempts` counts attempts made so far, including the one that just deferred. */
export function decideRetry(policy: RetryPolicy, attempts: number, queuedAtMs: number, nowMs: number, minDelayMs = 0): RetryDecision {
  const schedule = policy.schedule.length > 0 ? policy.schedule : [300_000];
  const delay = Math.max(schedule[Math.min(Math.max(attempts, 1), schedule.length) - 1], minDelayMs);
  const atMs = nowMs + delay;
  if (nowMs - queuedAtMs >= policy.giveUpAfterMs) return { kind: 'give-up' };
  // Do not schedule an attempt past the deadline: the last try happens at the deadline at the latest.
  return { kind: 'retry', atMs: Math.min(atMs, Math.max(queuedAtMs + policy.giveUpAfterMs, nowMs)) };
}
