/**
 * Time is a port (DESIGN convention 4): services read the injected clock so tests can move time by hand.
 * This is the only module allowed to read the wall clock.
 */
export interface Clock {
  now(): Date;
  /** Milliseconds since the epoch; cheaper than `now()` on hot paths. */
  nowMs(): number;
}

export const systemClock: Clock = {
  now: () => new Date(),
  nowMs: () => Date.now(),
};

/** A clock that only moves when told to; for tests and simulations. */
export class ManualClock implements Clock {
  private ms: number;

  constructor(start: Date | string | number = '2026-01-01T00:00:00.000Z') {
    this.ms = new Date(start).getTime();
  }

  now(): Date {
    return new Date(this.ms);
  }

  nowMs(): number {
    return this.ms;
  }

  advance(ms: number): void {
    this.ms += ms;
  }

  set(to: Date | string | number): void {
    this.ms = new Date(to).getTime();
  }
}

/** Monotonic milliseconds for measuring durations (not wall time). */
export function monotonicMs(): number {
  return performance.now();
}
