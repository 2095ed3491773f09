import type { Db } from './client.js';

/**
 * A wake-up for work that follows a commit (new delivery jobs, new webhook events): whoever works on it
 * starts at once instead of at its next poll. Keyed by the database handle, so several appliances in one
 * test process do not wake each other.
 */
export function createWakeSignal() {
  const listeners = new WeakMap<Db, Set<() => void>>();
  return {
    /** Subscribes `wake`; returns the unsubscribe. */
    on(db: Db, wake: () => void): () => void {
      let set = listeners.get(db);
      if (!set) listeners.set(db, (set = new Set()));
      set.add(wake);
      return () => set.delete(wake);
    },
    /** Wakes every subscriber of `db`, now. */
    notify(db: Db): void {
      const set = listeners.get(db);
      if (!set) return;
      for (const wake of set) wake();
    },
  };
}
