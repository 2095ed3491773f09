import { and, count, desc, eq, isNotNull, lt, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { contactProperties, contacts } from '../db/schema/index.js';

export type ContactRow = typeof contacts.$inferSelect;
export type NewContactRow = typeof contacts.$inferInsert;
export type ContactPatch = Partial<Omit<NewContactRow, 'id' | 'projectId' | 'createdAt'>>;

/** Synchronous drizzle queries for contacts (DESIGN convention 6); every query is scoped by project. */
export function createContactsRepo(db: Db) {
  const byEmailKey = db
    .select()
    .from(contacts)
    .where(and(eq(contacts.projectId, sql.placeholder('projectId')), eq(contacts.emailKey, sql.placeholder('emailKey'))))
    .prepare();
  const byIdentifier = db
    .select()
    .from(contacts)
    .where(and(eq(contacts.projectId, sql.placeholder('projectId')), eq(contacts.identifier, sql.placeholder('identifier'))))
    .prepare();
  return {
    findByEmailKey: (projectId: string, emailKey: string): ContactRow | undefined => byEmailKey.get({ projectId, emailKey }),

    findByIdentifier: (projectId: string, identifier: string): ContactRow | undefined => byIdentifier.get({ projectId, identifier }),

    insert: (row: NewContactRow) => db.insert(contacts).values(row).run(),

    update: (id: string, patch: ContactPatch) => db.update(contacts).set(patch).where(eq(contacts.id, id)).run(),

    deleteByEmailKey: (projectId: string, emailKey: string): boolean =>
      db
        .delete(contacts)
        .where(and(eq(contacts.projectId, projectId), eq(contacts.emailKey, emailKey)))
        .run().changes > 0,

    /** Newest first: ids are time-ordered, so `id < cursor` is the next page (index project_id, id). */
    listPage: (projectId: string, before: string | undefined, limit: number): ContactRow[] =>
      db
        .select()
        .from(contacts)
        .where(and(eq(contacts.projectId, projectId), before ? lt(contacts.id, before) : undefined))
        .orderBy(desc(contacts.id))
        .limit(limit)
        .all(),

    /** A page of the contacts matching `condition` (contacts/query.ts), newest first. */
    queryPage: (projectId: string, condition: SQL | undefined, offset: number, limit: number): ContactRow[] =>
      db
        .select()
        .from(contacts)
        .where(and(eq(contacts.projectId, projectId), condition))
        .orderBy(desc(contacts.id))
        .limit(limit)
        .offset(offset)
        .all(),

    countMatching: (projectId: string, condition: SQL | undefined): number =>
      db
        .select({ total: count() })
        .from(contacts)
        .where(and(eq(contacts.projectId, projectId), condition))
        .get()!.total,

    /** The time zones the project's contacts have, each once. */
    timeZones: (projectId: string): string[] =>
      db
        .selectDistinct({ timezone: contacts.timezone })
        .from(contacts)
        .where(and(eq(contacts.projectId, projectId), isNotNull(contacts.timezone)))
        .all()
        .map((row) => row.timezone!),

    /** keyName → data type of every custom property the project has used. */
    propertyTypes: (projectId: string): Map<string, 'string' | 'number'> =>
      new Map(
        db
          .select({ keyName: contactProperties.keyName, dataType: contactProperties.dataType })
          .from(contactProperties)
          .where(eq(contactProperties.projectId, projectId))
          .all()
          .map((row) => [row.keyName, row.dataType]),
      ),

    addPropertyType: (projectId: string, keyName: string, dataType: 'string' | 'number', createdAt: number) =>
      db.insert(contactProperties).values({ projectId, keyName, dataType, createdAt }).onConflictDoNothing().run(),
  };
}

export type ContactsRepo = ReturnType<typeof createContactsRepo>;
