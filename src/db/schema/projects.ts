import { sqliteTable, text, integer, index } from 'drizzle-orm/sqlite-core';

/** A project owns everything: keys, domains, templates, emails. Linked projects have a parent. */
export const projects = sqliteTable(
  'projects',
  {
    id: text('id').primaryKey(),
    parentId: text('parent_id').references((): any => projects.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    isDefault: integer('is_default', { mode: 'boolean' }).notNull().default(false),
    /** JSON of `emailTemplateDesign` as the API shows it (COMPAT.md "Project design"). */
    emailTemplateDesign: text('email_template_design', { mode: 'json' }).$type<Record<string, unknown>>(),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [index('projects_parent_idx').on(t.parentId)],
);

/** API keys are stored as SHA-256 hashes only; the key itself is shown once, at creation. */
export const apiKeys = sqliteTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    keyHash: text('key_hash').notNull().unique(),
    /** First characters of the key, so operators can tell keys apart in listings. */
    keyPrefix: text('key_prefix').notNull(),
    createdAt: integer('created_at').notNull(),
    revokedAt: integer('revoked_at'),
  },
  (t) => [index('api_keys_project_idx').on(t.projectId)],
);
