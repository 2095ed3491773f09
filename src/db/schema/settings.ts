import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Appliance-wide values created once, such as the secret that signs tracking and download URLs. */
export const settings = sqliteTable('settings', {
  key: text('key').primaryKey(),
  value: text('value').notNull(),
});

/**
 * One row (id 1) whose value rises with every change to a table the in-memory read caches keep rows of
 * (db/read-cache.ts `cachedTables`), whoever makes it: the triggers of migration 0023 raise it in the
 * changing transaction, so the appliance, its writer thread, the operator CLI and a sqlite3 shell all do.
 */
export const cacheGeneration = sqliteTable('cache_generation', {
  id: integer('id').primaryKey(),
  value: integer('value').notNull(),
});
