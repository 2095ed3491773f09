import type { Sqlite } from './client.js';

/**
 * Rows that nearly every request of a kind reads (the API key's project, the sender's verified domain, a
 * send's template), kept in memory until the database changes. A kept row must never outlive a change,
 * whoever made it: SQLite's `data_version` moves when another connection commits (the writer thread, the
 * operator CLI) and `total_changes()` when this connection writes. One statement reads both, once per
 * event-loop turn (a read transaction: two fcntl calls), and any move empties every cache of the
 * connection. Under a send load the writer thread commits every turn, so the first request of a turn
 * reads and the others of that turn are answered from memory.
 *
 * A commit of another connection is seen from the next turn on; the write queue and writeTransaction
 * report the commits of this one as they happen (readCachesStale), so a request that follows a change
 * made through the API always sees it.
 */
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

/** This connection just committed: every cache of it reads again (the write queue and writeTransaction call this). */
export function readCachesStale(sqlite: Sqlite): void {
  watches.get(sqlite)?.changed();
}

interface ChangeWatch {
  /** A number that grows whenever the database changed since the previous turn's check. */
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
  const state = sqlite.prepare("select (select data_version from pragma_data_version) || ':' || total_changes()").pluck();
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
      generation++;
    },
  };
}
