import { and, desc, eq, lt, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { templates } from '../db/schema/index.js';

export type TemplateRow = typeof templates.$inferSelect;
export type NewTemplateRow = typeof templates.$inferInsert;
export type TemplatePatch = Partial<Omit<NewTemplateRow, 'id' | 'projectId' | 'createdAt'>>;

/** Columns of a list page without content: listing 100 big templates should not read their bodies. */
const summaryColumns = {
  id: templates.id,
  projectId: templates.projectId,
  name: templates.name,
  subject: templates.subject,
  emailText: templates.emailText,
  preheader: templates.preheader,
  sampleProps: templates.sampleProps,
  layoutId: templates.layoutId,
  createdAt: templates.createdAt,
  updatedAt: templates.updatedAt,
};

export type TemplateSummaryRow = Omit<TemplateRow, 'content'> & { content?: unknown[] };

/** Synchronous drizzle queries for templates (DESIGN convention 6); every query is scoped by project. */
export function createTemplatesRepo(db: Db) {
  // Prepared once: send resolves its template on every request, and building the query costs more than running it.
  const byId = db
    .select()
    .from(templates)
    .where(and(eq(templates.projectId, sql.placeholder('projectId')), eq(templates.id, sql.placeholder('id'))))
    .prepare();
  const byName = db
    .select()
    .from(templates)
    .where(and(eq(templates.projectId, sql.placeholder('projectId')), eq(templates.name, sql.placeholder('name'))))
    .prepare();
  return {
    findById: (projectId: string, id: string): TemplateRow | undefined => byId.get({ projectId, id }),

    findByName: (projectId: string, name: string): TemplateRow | undefined => byName.get({ projectId, name }),

    /** Newest first: ids are time-ordered, so `id < cursor` is the next page (index project_id, id). */
    listPage: (projectId: string, opts: { before?: string; limit: number; includeContent: boolean }): TemplateSummaryRow[] => {
      const where = and(eq(templates.projectId, projectId), opts.before ? lt(templates.id, opts.before) : undefined);
      const query = opts.includeContent ? db.select().from(templates) : db.select(summaryColumns).from(templates);
      return query.where(where).orderBy(desc(templates.id)).limit(opts.limit).all();
    },

    insert: (row: NewTemplateRow) => db.insert(templates).values(row).run(),

    update: (projectId: string, id: string, patch: TemplatePatch) =>
      db
        .update(templates)
        .set(patch)
        .where(and(eq(templates.projectId, projectId), eq(templates.id, id)))
        .run().changes,

    delete: (projectId: string, id: string) =>
      db
        .delete(templates)
        .where(and(eq(templates.projectId, projectId), eq(templates.id, id)))
        .run().changes,
  };
}

export type TemplatesRepo = ReturnType<typeof createTemplatesRepo>;
