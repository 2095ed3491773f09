import type { Sqlite } from '../db/client.js';
import type { AuthenticatedProject } from '../http/router.js';

/**
 * API keys that authenticated recently, so a request skips hashing the key and looking it up (about a
 * tenth of an accepted send's event-loop time). A remembered key must stop working the moment it is
 * revoked, also by the operator CLI, which writes through its own connection: SQLite's
 * `PRAGMA data_version` changes whenever another connection commits, and then everything is forgotten
 * (checked once per event-loop turn).
 * Changes made through this connection call `forget()` themselves. Only successes are remembered, so the
 * size is bounded by the keys in use (and capped).
 */
export interface AuthCache {
  /** The remembered project of `key`, else `find()`'s answer (remembered when it is a project). */
  lookup(key: string, find: () => AuthenticatedProject | undefined): AuthenticatedProject | undefined;
  forget(): void;
}

export function createAuthCache(sqlite: Sqlite, maxEntries = 1000): AuthCache {
  const dataVersion = sqlite.prepare('PRAGMA data_version').pluck();
  const entries = new Map<string, AuthenticatedProject>();
  let seenVersion: unknown;
  // The pragma opens a read transaction (two fcntl lock calls, ~15 µs here): it is asked once per
  // event-loop turn, so requests handled in the same turn as a revocation's commit count as earlier.
  let checkedThisTurn = false;
  const checkVersion = () => {
    if (checkedThisTurn) return;
    checkedThisTurn = true;
    setImmediate(() => (checkedThisTurn = false));
    const version = dataVersion.get();
    if (version !== seenVersion) {
      entries.clear();
      seenVersion = version;
    }
  };
  return {
    lookup(key, find) {
      // Checked before find(): a revocation committed after this check shows up as a new version next turn.
      checkVersion();
      const remembered = entries.get(key);
      if (remembered) return remembered;
      const found = find();
      if (found) {
        if (entries.size >= maxEntries) entries.clear();
        entries.set(key, found);
      }
      return found;
    },
    forget() {
      entries.clear();
    },
  };
}
