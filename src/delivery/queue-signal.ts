import type { Db } from '../db/client.js';

/**
 * The send path calls `notifyDeliveryQueued(db)` after committing new `delivery_jobs` rows so the worker
 * starts at once instead of at its next poll. Keyed by the db handle so several appliances in one test
 * process do not wake each other.
 */
const listeners = new WeakMap<Db, Set<() => void>>();

export function onDeliveryQueued(db: Db, wake: () => void): () => void {
  let set = listeners.get(db);
  if (!set) listeners.set(db, (set = new Set()));
  set.add(wake);
  return () => set.delete(wake);
}

export function notifyDeliveryQueued(db: Db): void {
  const set = listeners.get(db);
  if (!set) return;
  for (const wake of set) wake();
}
