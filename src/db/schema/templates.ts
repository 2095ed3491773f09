import { sqliteTable, text, integer, index, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { projects } from './projects.js';

export const templates = sqliteTable(
  'templates',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    subject: text('subject').notNull(),
    content: text('content', { mode: 'json' }).$type<unknown[]>().notNull(),
    emailText: text('email_text'),
    preheader: text('preheader'),
    sampleProps: text('sample_props', { mode: 'json' }).$type<Record<string, unknown> | null>(),
    layoutId: text('layout_id'),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [uniqueIndex('templates_project_name_idx').on(t.projectId, t.name), index('templates_project_id_idx').on(t.projectId, t.id)],
);
