import { throttleCooldownMs, type BackoffPolicy } from './backoff.js';

/**
 * Caps concurrent connections per destination domain (receivers throttle senders that open too many)
 * and backs off after 421 / 4.7.x: a throttled destination gets no new attempts until its cool-down ends
 * (exponential, capped: backoff.ts), then one delivery at a time until one succeeds, which resets it.
 */
export interface DomainLimiter {
  acquire(domain: string): Promise<() => void>;
  /** Records a throttle reply; returns the end of the destination's cool-down. */
  recordThrottle(domain: string): number;
  /** Records a delivery: the destination is healthy again (full concurrency, no cool-down). */
  recordSuccess(domain: string): void;
  /** End of the destination's cool-down, or 0 when it may be tried now. */
  cooldownUntil(domain: string): number;
  /** Consecutive throttle replies of a destination (0 = healthy). */
  throttleLevel(domain: string): number;
}

interface Slot {
  active: number;
  waiting: (() => void)[];
  throttleLevel: number;
  throttledUntil: number;
}

export function createDomainLimiter(cap: number, nowMs: () => number, backoff: BackoffPolicy = { baseMs: 60_000, maxMs: 3_600_000 }): DomainLimiter {
  const slots = new Map<string, Slot>();
  // While a destination is recovering from throttling, one delivery at a time probes it.
  const limitOf = (slot: Slot) => (slot.throttleLevel > 0 ? 1 : cap);
  const slotOf = (domain: string) => {
    let slot = slots.get(domain);
    if (!slot) slots.set(domain, (slot = { active: 0, waiting: [], throttleLevel: 0, throttledUntil: 0 }));
    return slot;
  };

  const wake = (slot: Slot) => {
    while (slot.waiting.length > 0 && slot.active < limitOf(slot)) {
      slot.active++;
      slot.waiting.shift()!();
    }
  };

  const release = (domain: string, slot: Slot) => {
    slot.active--;
    wake(slot);
    if (slot.active === 0 && slot.waiting.length === 0 && slot.throttleLevel === 0) slots.delete(domain);
  };

  return {
    acquire(domain) {
      const s = slotOf(domain);
      let released = false;
      const done = () => {
        if (released) return;
        released = true;
        release(domain, s);
      };
      if (s.active < limitOf(s)) {
        s.active++;
        return Promise.resolve(done);
      }
      return new Promise((resolve) => s.waiting.push(() => resolve(done)));
    },
    recordThrottle(domain) {
      const slot = slotOf(domain);
      slot.throttleLevel++;
      slot.throttledUntil = Math.max(slot.throttledUntil, nowMs() + throttleCooldownMs(backoff, slot.throttleLevel));
      return slot.throttledUntil;
    },
    recordSuccess(domain) {
      const slot = slots.get(domain);
      if (!slot || slot.throttleLevel === 0) return;
      slot.throttleLevel = 0;
      slot.throttledUntil = 0;
      wake(slot);
    },
    cooldownUntil(domain) {
      const until = slots.get(domain)?.throttledUntil ?? 0;
      return until > nowMs() ? until : 0;
    },
    throttleLevel(domain) {
      return slots.get(domain)?.throttleLevel ?? 0;
    },
  };
}
