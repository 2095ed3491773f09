import { sqliteTable, text, integer, primaryKey, index } from 'drizzle-orm/sqlite-core';
import { projects } from './projects.js';

/**
 * `Idempotency-Key` of send requests: a retried request with the same key returns the first answer for
 * 24 h. Written in the same transaction as the emails it created, so a key never outlives a rollback.
 */
export const idempotencyKeys = sqliteTable(
  'idempotency_keys',
  {
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    key: text('key').notNull(),
    /** sha256 of method, path and body: the same key with another request is refused. */
    requestHash: text('request_hash').notNull(),
    response: text('response', { mode: 'json' }).$type<unknown>().notNull(),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.projectId, t.key] }), index('idempotency_keys_created_idx').on(t.createdAt)],
);
