/**
 * Caps concurrent connections per destination domain (receivers throttle senders that open too many)
 * and backs off after 421 / 4.7.x: while a domain is cooling down only one delivery at a time goes to it.
 */
export interface DomainLimiter {
  acquire(domain: string): Promise<() => void>;
  throttle(domain: string, untilMs: number): void;
  isThrottled(domain: string, nowMs: number): boolean;
}

interface Slot {
  active: number;
  waiting: (() => void)[];
  throttledUntil: number;
}

export function createDomainLimiter(cap: number, nowMs: () => number): DomainLimiter {
  const slots = new Map<string, Slot>();
  const limitOf = (slot: Slot) => (slot.throttledUntil > nowMs() ? 1 : cap);

  const release = (domain: string, slot: Slot) => {
    slot.active--;
    while (slot.waiting.length > 0 && slot.active < limitOf(slot)) {
      slot.active++;
      slot.waiting.shift()!();
    }
    if (slot.active === 0 && slot.waiting.length === 0 && slot.throttledUntil <= nowMs()) slots.delete(domain);
  };

  return {
    acquire(domain) {
      let slot = slots.get(domain);
      if (!slot) slots.set(domain, (slot = { active: 0, waiting: [], throttledUntil: 0 }));
      const s = slot;
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
    throttle(domain, untilMs) {
      let slot = slots.get(domain);
      if (!slot) slots.set(domain, (slot = { active: 0, waiting: [], throttledUntil: 0 }));
      slot.throttledUntil = Math.max(slot.throttledUntil, untilMs);
    },
    isThrottled(domain, now) {
      return (slots.get(domain)?.throttledUntil ?? 0) > now;
    },
  };
}
