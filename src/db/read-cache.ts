import type { Sqlite } from './client.js';

/**
 * Rows that nearly every request of a kind reads (the API key's project, the sender's verified domain, a
 * send's template), kept in memory until one of their tables changes. A kept row must never outlive a
 * change, whoever made it. The tables a cache may keep rows of are `cachedTables`: triggers on each
 * (migration 0023) raise `cache_generation` in the changing transaction, from any connection (the writer
 * thread, the operator CLI, a sqlite3 shell). One statement reads it, once per event-loop turn (a read
 * transaction: two fcntl calls), and any move empties every cache of the connection.
 *
 * The counter, not SQLite's `data_version`: that moves with every commit of another connection, and under
 * a send load the writer thread commits accepted emails every turn, so every turn read the key, the
 * project and the domain again for nothing.
 *
 * A change committed by another connection is seen from the next turn on; the write queue and
 * writeTransaction report the commits of this one as they happen (readCachesStale: the counter is read
 * again at the next lookup), so a request that follows a change made through the API always sees it.
 */
export const cachedTables = ['api_keys', 'projects', 'domains', 'templates'] as const;

export interface ReadCache<V> {
  /** The kept value of `key`, else `read()`'s answer, kept unless undefined (a miss is read again). */
  get(key: string, read: () => V | undefined): V | undefined;
}

export function createReadCache<V>(sqlite: Sqlite, maxEntries = 1000): ReadCache<V> {
  const watch = changeWatchOf(sqlite);
  const entries = new Map<string, V>();
  let generation = -1;
  return {
    get(key, read) {
      const current = watch.generation();
      if (current !== generation) {
        entries.clear();
        generation = current;
      }
      const kept = entries.get(key);
      if (kept !== undefined) return kept;
      const found = read();
      if (found !== undefined) {
        if (entries.size >= maxEntries) entries.clear();
        entries.set(key, found);
      }
      return found;
    },
  };
}

/** This connection just committed: its caches check the counter again (the write queue and writeTransaction call this). */
export function readCachesStale(sqlite: Sqlite): void {
  watches.get(sqlite)?.changed();
}

interface ChangeWatch {
  /** A number that grows whenever a cached table changed since the previous check. */
  generation(): number;
  changed(): void;
}

const watches = new WeakMap<Sqlite, ChangeWatch>();

/** One watch per connection, so its caches share one check per turn. */
function changeWatchOf(sqlite: Sqlite): ChangeWatch {
  let watch = watches.get(sqlite);
  if (!watch) {
    watch = createChangeWatch(sqlite);
    watches.set(sqlite, watch);
  }
  return watch;
}

function createChangeWatch(sqlite: Sqlite): ChangeWatch {
  const state = sqlite.prepare('select value from cache_generation where id = 1').pluck();
  let seen: unknown;
  let generation = 0;
  let checkedThisTurn = false;
  return {
    generation() {
      if (checkedThisTurn) return generation;
      checkedThisTurn = true;
      setImmediate(() => (checkedThisTurn = false));
      const now = state.get();
      if (now !== seen) {
        seen = now;
        generation++;
      }
      return generation;
    },
    changed() {
      // Read the counter again at the next lookup: a commit of this connection that changed none of the
      // cached tables (delivery's outcomes, every turn while mail goes out) leaves the caches as they are.
      checkedThisTurn = false;
    },
  };
}
