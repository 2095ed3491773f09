import type { Statement } from 'better-sqlite3';
import type { Sqlite } from './client.js';

/**
 * Statements prepared once per connection and SQL text: `sqlite.prepare()` (and `sqlite.pragma()`,
 * which prepares too) compiles the SQL on every call, a cost that shows on hot paths (the group
 * commit's savepoints, search's few filter shapes). Bounded: a connection that prepares many distinct
 * texts starts over at 500.
 */
const statements = new WeakMap<Sqlite, Map<string, Statement<unknown[]>>>();

export function cachedStatement(sqlite: Sqlite, sql: string): Statement<unknown[]> {
  let cache = statements.get(sqlite);
  if (!cache) statements.set(sqlite, (cache = new Map()));
  let statement = cache.get(sql);
  if (!statement) {
    if (cache.size > 500) cache.clear();
    statement = sqlite.prepare(sql);
    cache.set(sql, statement);
  }
  return statement;
}
