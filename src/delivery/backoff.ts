/**
 * Per-destination back-off after 421 / 4.7.x (the receiver asks us to slow down): the n-th throttle reply
 * in a row holds the destination for `base · 2^(n-1)`, capped at `max`. A delivery resets the count.
 */
export interface BackoffPolicy {
  baseMs: number;
  maxMs: number;
}

/** `level` = consecutive throttle replies so far, including the one just received (1 = first). */
export function throttleCooldownMs(policy: BackoffPolicy, level: number): number {
  if (level <= 0 || policy.baseMs <= 0) return 0;
  // 2^exponent overflows nothing here: the exponent is clamped before the cap applies.
  const exponent = Math.min(level - 1, 40);
  return Math.min(policy.baseMs * 2 ** exponent, Math.max(policy.maxMs, policy.baseMs));
}
