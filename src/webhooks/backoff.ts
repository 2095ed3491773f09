/**
 * Delay before retry number `attempt` (1 = after the first failure): base · 2^(attempt-1) with ±20%
 * jitter (downward only at the cap), so a receiver that failed for everyone is not hit by a synchronized
 * herd, and never more than `maxMs` (`webhooks.retry_max`, "the longest delay between two attempts"). `random` is injected (0..1)
 * so tests are deterministic.
 */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const exponential = Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(attempt - 1, 30)));
  // Spread evenly between 80 % and 120 %, the top cut at maxMs: clamping the jittered value instead put
  // half of the capped retries on exactly maxMs, a herd again.
  const lowest = exponential * 0.8;
  const highest = Math.min(maxMs, exponential * 1.2);
  return Math.max(1, Math.round(lowest + (highest - lowest) * random()));
}

/**
 * The retry verdict: the next attempt time, capped at the deadline, or give up once an attempt at or past
 * the deadline has failed, but never after the first attempt. Giving up as soon as the next try would fall
 * past the deadline failed a delivery up to `retry_max` before `give_up_after` (17 h into 24 with a 12 h
 * retry_max): a receiver back in between never got the event, though it was "retried this long". The last
 * try is at the deadline, as mail's is (delivery/retry.ts). An event whose first attempt comes late (the
 * appliance was stopped for a day, its receiver restarting with it) gets one retry, as mail gets its
 * second attempt: one failure at start-up was final, until someone replayed it.
 */
export function planRetry(
  input: { attempt: number; nowMs: number; firstQueuedAtMs: number; retryAfterMs?: number },
  policy: { baseMs: number; maxMs: number; giveUpAfterMs: number },
  random?: () => number,
): { action: 'retry'; nextAttemptAt: number } | { action: 'give-up' } {
  // A receiver's Retry-After is honoured (Standard Webhooks, "Delivery success and failure"), but never
  // past retry_max: one answer must not park a delivery for days.
  const askedMs = Math.min(input.retryAfterMs ?? 0, policy.maxMs);
  const next = input.nowMs + Math.max(askedMs, retryDelayMs(input.attempt, policy.baseMs, policy.maxMs, random));
  if (input.attempt < 2) return { action: 'retry', nextAttemptAt: next };
  const deadline = input.firstQueuedAtMs + policy.giveUpAfterMs;
  if (input.nowMs >= deadline) return { action: 'give-up' };
  return { action: 'retry', nextAttemptAt: Math.min(next, deadline) };
}

/**
 * A Retry-After value (RFC 9110 §10.2.3) as a delay from `nowMs`: delay-seconds, or an HTTP-date. Anything
 * else (or a time already past) asks for no particular delay.
 */
export function parseRetryAfterMs(value: string | undefined, nowMs: number): number | undefined {
  const text = value?.trim();
  if (!text) return undefined;
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isFinite(at) && at > nowMs ? at - nowMs : undefined;
}
