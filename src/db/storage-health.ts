import { isStorageFull } from '../lib/errors.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { Outcome } from './batch-transaction.js';

/**
 * Whether writes find room. The write queue shows it every batch's outcomes; `/healthz` reports the
 * state as its `storage` component (503 while `full`), so a monitor learns of a full disk from the
 * appliance before the users do. `full` lasts a minute past the last write refused for lack of space
 * (SQLITE_FULL, ENOSPC): on a full disk small writes that fit in existing pages still succeed, and
 * "full until the next success" would flap between 503 and 200.
 */
export interface StorageHealth {
  readonly state: 'up' | 'full';
  observe(outcomes: Outcome[]): void;
}

export const storageFullHoldMs = 60_000;

export function createStorageHealth(log: Logger, clock: Clock): StorageHealth {
  let lastRefusedAt: number | undefined;
  const full = () => lastRefusedAt !== undefined && clock.nowMs() - lastRefusedAt < storageFullHoldMs;
  return {
    get state() {
      return full() ? 'full' : 'up';
    },
    observe(outcomes) {
      if (outcomes.some((outcome) => !outcome.ok && isStorageFull(outcome.error))) {
        if (!full()) log.error('storage full: writes are refused until there is room on the data directory');
        lastRefusedAt = clock.nowMs();
      } else if (lastRefusedAt !== undefined && !full() && outcomes.some((outcome) => outcome.ok)) {
        log.info('storage: writes commit again');
        lastRefusedAt = undefined;
      }
    },
  };
}
