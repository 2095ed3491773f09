import { sqliteTable, text, integer, index, primaryKey } from 'drizzle-orm/sqlite-core';
import { projects } from './projects.js';

export const draftStatuses = ['draft', 'queued', 'scheduled', 'processing', 'DONE'] as const;
export type DraftStatus = (typeof draftStatuses)[number];
export const draftContentTypes = ['with-layout', 'no-layout', 'template'] as const;
export type DraftContentType = (typeof draftContentTypes)[number];

/** The recipients of a broadcast (spec §2.10): the contact query's filters (contacts/query.ts), subscribed contacts only. */
export interface DraftRecipients {
  contactId?: string[];
  groupId?: string[];
  filter?: { match: 'all' | 'any'; rules: { field: string; operator: string; value?: unknown }[] };
  match?: 'all' | 'any';
  isSubscribed?: true;
}

/**
 * Messenger drafts (spec §2.10, §3.2, §4.7): broadcasts to a segment of contacts. A queued draft is
 * expanded into one email per recipient by the scheduler (messenger/service.ts), a batch per write:
 * `expandedThrough` is the last contact id of the last committed batch, written in the same transaction
 * as that batch's emails, so an expansion interrupted by a crash resumes where it stopped.
 */
export const messengerDrafts = sqliteTable(
  'messenger_drafts',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    subject: text('subject').notNull(),
    fromName: text('from_name'),
    fromAddress: text('from_address'),
    html: text('html'),
    richTextValue: text('rich_text_value', { mode: 'json' }).$type<Record<string, unknown>>(),
    templateId: text('template_id'),
    templateProps: text('template_props', { mode: 'json' }).$type<Record<string, unknown>>(),
    recipients: text('recipients', { mode: 'json' }).$type<DraftRecipients>().notNull(),
    scheduledAt: integer('scheduled_at'),
    isTimezoneScheduled: integer('is_timezone_scheduled', { mode: 'boolean' }).notNull(),
    contentType: text('content_type', { enum: draftContentTypes }).notNull(),
    status: text('status', { enum: draftStatuses }).notNull(),
    /** When the scheduler may take a queued draft; for a scheduled one, when its last recipient's email is due. */
    dueAt: integer('due_at'),
    expandedThrough: text('expanded_through'),
    /** Recipients who unsubscribed through this broadcast's link (spec §2.10 stats `unsubscribedTotal`). */
    unsubscribedTotal: integer('unsubscribed_total').notNull().default(0),
    /** Why the last expansion attempt stopped (a sending pause, a deleted sender domain); null once it goes on. */
    lastError: text('last_error'),
    /**
     * Deleted by its project, its scheduled emails still being removed (in batches, so sends interleave):
     * gone from the API, and none of those emails is released (emails/repo.ts dueScheduled).
     */
    deleting: integer('deleting', { mode: 'boolean' }).notNull().default(false),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [index('messenger_drafts_project_idx').on(t.projectId, t.id), index('messenger_drafts_due_idx').on(t.status, t.dueAt)],
);

/**
 * The contacts who unsubscribed through a broadcast's link: `unsubscribedTotal` counts each once, though
 * a contact subscribed again (through the API) may use the same link again.
 */
export const messengerUnsubscribes = sqliteTable(
  'messenger_unsubscribes',
  {
    draftId: text('draft_id')
      .notNull()
      .references(() => messengerDrafts.id, { onDelete: 'cascade' }),
    contactId: text('contact_id').notNull(),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.draftId, t.contactId] })],
);
