import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { apiKeys, projects } from '../db/schema/index.js';

export type ProjectRow = typeof projects.$inferSelect;
export type ApiKeyRow = typeof apiKeys.$inferSelect;

/** Synchronous drizzle queries for projects and their API keys (DESIGN convention 6). */
export function createProjectsRepo(db: Db) {
  // The two queries every request runs are prepared once: building drizzle SQL per call costs ~100 µs.
  const byId = db.select().from(projects).where(eq(projects.id, sql.placeholder('id'))).prepare();
  const activeKeyByHash = db
    .select({ key: apiKeys, project: { id: projects.id, parentId: projects.parentId } })
    .from(apiKeys)
    .innerJoin(projects, eq(projects.id, apiKeys.projectId))
    .where(and(eq(apiKeys.keyHash, sql.placeholder('hash')), isNull(apiKeys.revokedAt)))
    .prepare();
  return {
    findById: (id: string): ProjectRow | undefined => byId.get({ id }),
    findDefault: (): ProjectRow | undefined => db.select().from(projects).where(eq(projects.isDefault, true)).get(),
    listAll: (): ProjectRow[] => db.select().from(projects).orderBy(projects.id).all(),
    insert: (row: typeof projects.$inferInsert) => db.insert(projects).values(row).run(),
    update: (id: string, patch: Partial<typeof projects.$inferInsert>) => db.update(projects).set(patch).where(eq(projects.id, id)).run(),
    delete: (id: string) => db.delete(projects).where(eq(projects.id, id)).run(),

    /** The key row with its project, when the key exists and is not revoked. */
    findActiveKeyByHash: (keyHash: string) => activeKeyByHash.get({ hash: keyHash }),
    findKeyByHash: (keyHash: string): ApiKeyRow | undefined => db.select().from(apiKeys).where(eq(apiKeys.keyHash, keyHash)).get(),
    insertKey: (row: typeof apiKeys.$inferInsert) => db.insert(apiKeys).values(row).run(),
    listKeys: (projectId?: string): ApiKeyRow[] =>
      db
        .select()
        .from(apiKeys)
        .where(projectId ? eq(apiKeys.projectId, projectId) : undefined)
        .orderBy(apiKeys.id)
        .all(),
    revokeKey: (id: string, at: number) =>
      db
        .update(apiKeys)
        .set({ revokedAt: at })
        .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
        .run().changes,
  };
}

export type ProjectsRepo = ReturnType<typeof createProjectsRepo>;
