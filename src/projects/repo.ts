import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Db, Sqlite } from '../db/client.js';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import { apiKeys, projects, settings } from '../db/schema/index.js';

/** The settings key that marks a linked project's deletion under way (read by the send and delivery paths too). */
export const deletingMark = (projectId: string) => `deleting:${projectId}`;

/** SQL: the project in `projectIdColumn` is not being deleted (its mark, above, absent), for queries of other modules' rows. */
export const projectNotDeleting = (projectIdColumn: SQLiteColumn) =>
  sql`not exists (select 1 from ${settings} where ${settings.key} = ${deletingMark('')} || ${projectIdColumn})`;

export type ProjectRow = typeof projects.$inferSelect;
export type ApiKeyRow = typeof apiKeys.$inferSelect;

/** Synchronous drizzle queries for projects and their API keys (DESIGN convention 6). */
export function createProjectsRepo(db: Db, sqlite: Sqlite) {
  // The queries every request runs are prepared once: building drizzle SQL per call costs ~100 µs. The
  // API-key lookup is plain SQL: drizzle's row mapping of the joined key row was ~25 µs per request.
  const byId = db.select().from(projects).where(eq(projects.id, sql.placeholder('id'))).prepare();
  const activeKeyByHash = sqlite.prepare<[string], { keyHash: string; id: string; parentId: string | null }>(
    `select k.key_hash as keyHash, p.id, p.parent_id as parentId
       from api_keys k join projects p on p.id = k.project_id
      where k.key_hash = ? and k.revoked_at is null`,
  );
  /** A boot-time settings row (the keys' bookkeeping below): its value, or undefined when there is none. */
  const settingValue = (key: string) => sqlite.prepare(`select value from settings where key = ?`).pluck().get(key) as string | undefined;
  /** Writes a settings row, or deletes it for undefined. */
  const putSetting = (key: string, value: string | undefined) =>
    value === undefined
      ? sqlite.prepare(`delete from settings where key = ?`).run(key)
      : sqlite.prepare(`insert into settings (key, value) values (?, ?) on conflict (key) do update set value = excluded.value`).run(key, value);
  return {
    findById: (id: string): ProjectRow | undefined => byId.get({ id }),
    findDefault: (): ProjectRow | undefined => db.select().from(projects).where(eq(projects.isDefault, true)).get(),
    listAll: (): ProjectRow[] => db.select().from(projects).orderBy(projects.id).all(),
    insert: (row: typeof projects.$inferInsert) => db.insert(projects).values(row).run(),
    update: (id: string, patch: Partial<typeof projects.$inferInsert>) => db.update(projects).set(patch).where(eq(projects.id, id)).run(),
    delete: (id: string) => db.delete(projects).where(eq(projects.id, id)).run(),
    countChildren: (id: string): number => sqlite.prepare('select count(*) from projects where parent_id = ?').pluck().get(id) as number,
    /** Ids of the project's linked projects, oldest first, up to `limit`. */
    childIds: (id: string, limit: number): string[] => sqlite.prepare('select id from projects where parent_id = ? order by id limit ?').pluck().all(id, limit) as string[],

    /** The key row with its project, when the key exists and is not revoked. */
    findActiveKeyByHash: (keyHash: string) => {
      const row = activeKeyByHash.get(keyHash);
      return row && { keyHash: row.keyHash, project: { id: row.id, parentId: row.parentId } };
    },
    findKeyByHash: (keyHash: string): ApiKeyRow | undefined => db.select().from(apiKeys).where(eq(apiKeys.keyHash, keyHash)).get(),
    insertKey: (row: typeof apiKeys.$inferInsert) => db.insert(apiKeys).values(row).run(),
    setKeyPrefix: (id: string, keyPrefix: string) => db.update(apiKeys).set({ keyPrefix }).where(eq(apiKeys.id, id)).run(),
    listKeys: (projectId?: string): ApiKeyRow[] =>
      db
        .select()
        .from(apiKeys)
        .where(projectId ? eq(apiKeys.projectId, projectId) : undefined)
        .orderBy(apiKeys.id)
        .all(),
    revokeProjectKeys: (projectId: string, at: number) =>
      db
        .update(apiKeys)
        .set({ revokedAt: at })
        .where(and(eq(apiKeys.projectId, projectId), isNull(apiKeys.revokedAt)))
        .run().changes,
    /** A linked project whose deletion is under way (settings row `deleting:<id>`). */
    markDeleting: (projectId: string, at: number) =>
      sqlite.prepare(`insert into settings (key, value) values (?, ?) on conflict (key) do nothing`).run(deletingMark(projectId), String(at)),
    isDeleting: (projectId: string): boolean => sqlite.prepare(`select 1 from settings where key = ?`).get(deletingMark(projectId)) !== undefined,
    unmarkDeleting: (projectId: string) => sqlite.prepare(`delete from settings where key = ?`).run(deletingMark(projectId)),
    listDeleting: (): string[] =>
      (sqlite.prepare(`select key from settings where key like 'deleting:%' order by value`).pluck().all() as string[]).map((key) => key.slice('deleting:'.length)),
    /** Hash of the key `auth.api_key` created and still configures (settings row), to retire it when the value changes. */
    configuredKeyHash: (): string | undefined => settingValue('auth.configured_key_hash'),
    clearConfiguredKeyHash: () => putSetting('auth.configured_key_hash', undefined),
    setConfiguredKeyHash: (hash: string) => putSetting('auth.configured_key_hash', hash),
    /** Hash of the key revoked because `auth.api_key` was removed (settings row), to restore it if it comes back. */
    removedConfiguredKeyHash: (): string | undefined => settingValue('auth.removed_key_hash'),
    setRemovedConfiguredKeyHash: (hash: string | undefined) => putSetting('auth.removed_key_hash', hash),
    /** Hash of a generated key not printed yet (settings row): written with the key, deleted once main printed it. */
    unshownKeyHash: (): string | undefined => settingValue('auth.unshown_key_hash'),
    setUnshownKeyHash: (hash: string | undefined) => putSetting('auth.unshown_key_hash', hash),
    restoreKeyByHash: (keyHash: string) => sqlite.prepare('update api_keys set revoked_at = null where key_hash = ? and revoked_at is not null').run(keyHash).changes,
    revokeKeyByHash: (keyHash: string, at: number) =>
      db
        .update(apiKeys)
        .set({ revokedAt: at })
        .where(and(eq(apiKeys.keyHash, keyHash), isNull(apiKeys.revokedAt)))
        .run().changes,
    revokeKey: (id: string, at: number) =>
      db
        .update(apiKeys)
        .set({ revokedAt: at })
        .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
        .run().changes,
  };
}

export type ProjectsRepo = ReturnType<typeof createProjectsRepo>;
