import { sqliteTable, text, integer, index, uniqueIndex, primaryKey } from 'drizzle-orm/sqlite-core';
import { projects } from './projects.js';

/** A custom property's value as stored: the value and when it was last set (spec §2.9 `customProps` items). */
export interface StoredContactProp {
  value: string | number;
  updatedAt: number;
}

/**
 * Contact profiles (spec §2.9, §4.5). Custom properties and group ids live as JSON on the row: a contact
 * is read and written whole, and the query engine (contacts/query.ts) filters them with json_extract and
 * json_each, so one table serves create-or-update, find, list and query.
 */
export const contacts = sqliteTable(
  'contacts',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    /** As the client wrote it (trimmed, domain in A-labels). */
    emailAddress: text('email_address').notNull(),
    /** Lowercased `emailAddress`: one contact per address whatever its case, and case-insensitive lookups. */
    emailKey: text('email_key').notNull(),
    identifier: text('identifier'),
    isSubscribed: integer('is_subscribed', { mode: 'boolean' }).notNull(),
    subscribedAt: integer('subscribed_at'),
    unsubscribedAt: integer('unsubscribed_at'),
    timezone: text('timezone'),
    sourceType: text('source_type').notNull(),
    note: text('note'),
    groups: text('groups', { mode: 'json' }).$type<string[]>().notNull(),
    customProps: text('custom_props', { mode: 'json' }).$type<Record<string, StoredContactProp>>().notNull(),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [
    uniqueIndex('contacts_project_email_idx').on(t.projectId, t.emailKey),
    // SQLite lets many rows hold a NULL identifier under a unique index: only set identifiers are unique.
    uniqueIndex('contacts_project_identifier_idx').on(t.projectId, t.identifier),
    // Lists and queries are newest first, and ids are time-ordered.
    index('contacts_project_id_idx').on(t.projectId, t.id),
  ],
);

/**
 * The data type of each custom property a project has used (spec §4.5: a value must match its property's
 * type). The first value set fixes it; the spec does not show how properties are defined otherwise.
 */
export const contactProperties = sqliteTable(
  'contact_properties',
  {
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    keyName: text('key_name').notNull(),
    dataType: text('data_type', { enum: ['string', 'number'] }).notNull(),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.projectId, t.keyName] })],
);
