import { monotonicMs } from '../lib/clock.js';

/**
 * Caches positive lookups briefly: at 1,000 messages/s the same few domains would be resolved constantly.
 * A lookup in flight is shared by everyone who asks meanwhile, whatever the TTL (with the cache off, a
 * backlog for a domain whose DNS hangs started a lookup per message, each holding a slot); an answer
 * is kept `ttlMs` after it came (0: not kept).
 */
export function createTtlCache<T extends { kind: string }>(ttlMs: number) {
  const entries = new Map<string, { at: number; value: Promise<T>; settled: boolean }>();
  return {
    get(key: string, load: () => Promise<T>): Promise<T> {
      const now = monotonicMs();
      const hit = entries.get(key);
      if (hit && (!hit.settled || now - hit.at < ttlMs)) return hit.value;
      const entry = { at: now, value: load(), settled: false };
      entries.set(key, entry);
      // Only answers worth repeating stay cached; failures are looked up again next time.
      void entry.value.then((v) => {
        entry.settled = true;
        entry.at = monotonicMs();
        const failed = v.kind === 'defer' || (v.kind === 'none' && (v as unknown as { temporary: boolean }).temporary);
        if ((failed || ttlMs === 0) && entries.get(key) === entry) entries.delete(key);
      });
      if (entries.size > 10_000) entries.delete(entries.keys().next().value!);
      return entry.value;
    },
  };
}
