import { sql } from 'drizzle-orm';
import { sqliteTable, text, integer, index, blob, primaryKey } from 'drizzle-orm/sqlite-core';
import type { HeaderRecipients } from '../../emails/header-recipients.js';
import { projects } from './projects.js';

export const emailStatuses = ['queued', 'scheduled', 'delivered', 'open', 'bounce', 'complaint', 'error', 'suppressed'] as const;
export type EmailStatus = (typeof emailStatuses)[number];

/**
 * One email record per recipient (§2.5). Holds everything delivery needs so that the delivery worker
 * composes the message from stored data only.
 */
export const emails = sqliteTable(
  'emails',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    status: text('status', { enum: emailStatuses }).notNull(),
    toAddress: text('to_address').notNull(),
    fromAddress: text('from_address').notNull(),
    fromName: text('from_name'),
    replyToAddress: text('reply_to_address'),
    replyToName: text('reply_to_name'),
    subject: text('subject').notNull(),
    templateId: text('template_id'),
    templateName: text('template_name'),
    templateProps: text('template_props', { mode: 'json' }).$type<Record<string, unknown>>(),
    automationId: text('automation_id'),
    messengerId: text('messenger_id'),
    /** What the body was made from: template | markdown | html | text. */
    contentKind: text('content_kind').notNull(),
    /** Rendered or supplied bodies, stored at accept time so delivery never depends on a later template edit. */
    html: text('html'),
    text: text('text'),
    /** Snapshot used when rendering is deferred to delivery (template content + design at accept time). */
    renderSnapshot: text('render_snapshot', { mode: 'json' }).$type<unknown>(),
    headers: text('headers', { mode: 'json' }).$type<Record<string, string>>(),
    isOpenTracked: integer('is_open_tracked', { mode: 'boolean' }).notNull(),
    scheduledAt: integer('scheduled_at'),
    messageId: text('message_id'),
    /** A submitted message's own To/Cc lists, shown in every copy (emails/header-recipients.ts); null: To is the recipient. */
    headerRecipients: text('header_recipients', { mode: 'json' }).$type<HeaderRecipients>(),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [
    index('emails_project_id_idx').on(t.projectId, t.id),
    // Addresses are compared without case (a toAddress search for Ann@Example.com finds ann@example.com,
    // as the suppression list and the text search do): the index holds them in that order (migration 0021).
    index('emails_project_to_nocase_idx').on(t.projectId, sql`${t.toAddress} collate nocase`, t.id),
    index('emails_project_status_idx').on(t.projectId, t.status, t.id),
    // Only scheduled rows: queued and delivered emails (nearly all) cost this index nothing on insert or status change.
    index('emails_scheduled_due_idx').on(t.scheduledAt).where(sql`status = 'scheduled'`),
    // The senders of a project's scheduled emails, for a domain's delete (domains/repo.ts): without it
    // every scheduled row was read (130-190 ms for 143,000 on the event loop).
    index('emails_scheduled_sender_idx').on(t.projectId, t.fromAddress).where(sql`status = 'scheduled'`),
    // Search filters (§4.3) that would otherwise scan a project's rows when they match rarely. Partial:
    // an email without the field pays nothing for the index. Address, name and subject filters use the
    // emails_fts trigram index instead (migration 0007).
    index('emails_project_template_id_idx').on(t.projectId, t.templateId, t.id).where(sql`template_id is not null`),
    index('emails_project_template_name_idx').on(t.projectId, t.templateName, t.id).where(sql`template_name is not null`),
    index('emails_project_automation_idx').on(t.projectId, t.automationId, t.id).where(sql`automation_id is not null`),
    index('emails_project_messenger_idx').on(t.projectId, t.messengerId, t.id).where(sql`messenger_id is not null`),
    // A broadcast's stats count its emails by status (messenger/repo.ts): an index-only count, where the
    // index above read each of 100,000 rows for its status (~110 ms a draft, for every draft of a list).
    index('emails_messenger_status_idx').on(t.messengerId, t.status).where(sql`messenger_id is not null`),
    index('emails_project_scheduled_at_id_idx').on(t.projectId, t.scheduledAt, t.id).where(sql`scheduled_at is not null`),
    // A wide scheduledAt range (a day) matches too many rows to sort for a page: walking scheduled
    // emails newest first and testing scheduled_at in the index stops after a page (search.ts).
    index('emails_project_id_scheduled_at_idx').on(t.projectId, t.id, t.scheduledAt).where(sql`scheduled_at is not null`),
  ],
);

export const emailAttachments = sqliteTable(
  'email_attachments',
  {
    id: text('id').primaryKey(),
    emailId: text('email_id')
      .notNull()
      .references(() => emails.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    contentType: text('content_type').notNull(),
    size: integer('size').notNull(),
    content: blob('content', { mode: 'buffer' }).notNull(),
    /** Set for inline images (charts, logos) that the html references as `cid:<contentId>`. */
    contentId: text('content_id'),
  },
  (t) => [index('email_attachments_email_idx').on(t.emailId)],
);

/**
 * Everything that happened to an email: attempts, deliveries, opens, clicks, bounces. Read only per
 * email, in time order: the primary key is that order and the table is WITHOUT ROWID (migration 0014),
 * so an event is one B-tree insert, not three (rowid table, id index, email index).
 */
export const emailEvents = sqliteTable(
  'email_events',
  {
    id: text('id').notNull(),
    emailId: text('email_id')
      .notNull()
      .references(() => emails.id, { onDelete: 'cascade' }),
    type: text('type').notNull(),
    time: integer('time').notNull(),
    ipAddress: text('ip_address'),
    userAgent: text('user_agent'),
    data: text('data', { mode: 'json' }).$type<Record<string, unknown>>(),
  },
  (t) => [primaryKey({ columns: [t.emailId, t.time, t.id] })],
);

/**
 * The outbound queue: one row per email waiting for an attempt. Claimed rows carry a lease so a crash
 * never strands them; the row is deleted when the email reaches a final state. WITHOUT ROWID (migration
 * 0014; drizzle's schema cannot say so): small rows keyed by email id, one B-tree fewer per email.
 */
export const deliveryJobs = sqliteTable(
  'delivery_jobs',
  {
    emailId: text('email_id')
      .primaryKey()
      .references(() => emails.id, { onDelete: 'cascade' }),
    projectId: text('project_id').notNull(),
    recipientDomain: text('recipient_domain').notNull(),
    nextAttemptAt: integer('next_attempt_at').notNull(),
    attempts: integer('attempts').notNull().default(0),
    leaseUntil: integer('lease_until'),
    queuedAt: integer('queued_at').notNull(),
    /**
     * Queued with others in one request (a batch, a multi-recipient submission) or released by a schedule:
     * a newsletter, not the password reset sent on its own. Its own claim lane (delivery/repo.ts claimDue).
     */
    bulk: integer('bulk', { mode: 'boolean' }).notNull().default(false),
  },
  (t) => [
    // Due jobs lane by lane (a project's single sends, its bulk mail), so claims take from every lane in turn.
    index('delivery_jobs_lane_due_idx').on(t.projectId, t.bulk, t.nextAttemptAt),
    // A destination with room takes back the messages it put back (delivery/service.ts pullForward): only
    // never-attempted jobs, so only they are in these indexes. With every job in them, a take-back read all
    // the deferred retries due before the put-back messages (50-90 ms for 100,000, at every session end).
    index('delivery_jobs_put_back_idx').on(t.recipientDomain, t.nextAttemptAt).where(sql`attempts = 0`),
    index('delivery_jobs_put_back_any_idx').on(t.nextAttemptAt).where(sql`attempts = 0`),
  ],
);

/** Addresses a project must not send to again (hard bounces, complaints, manual entries). */
export const suppressions = sqliteTable(
  'suppressions',
  {
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    emailAddress: text('email_address').notNull(),
    reason: text('reason').notNull(),
    detail: text('detail'),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.projectId, t.emailAddress] }),
    // The list is newest first, keyset-paged: without it every page sorted all of a project's suppressions
    // (45-64 ms a page for 143,000), and the list only grows.
    index('suppressions_project_created_idx').on(t.projectId, t.createdAt, t.emailAddress),
  ],
);
