import { sqliteTable, text, integer, blob, index } from 'drizzle-orm/sqlite-core';
import { emails } from './emails.js';

/**
 * Capture mode (`delivery.mode = capture`): the complete signed message that would have been sent, for
 * CI pipelines and sandboxes that assert on what leaves the machine without anything leaving it.
 */
export const capturedMessages = sqliteTable(
  'captured_messages',
  {
    emailId: text('email_id')
      .primaryKey()
      .references(() => emails.id, { onDelete: 'cascade' }),
    projectId: text('project_id').notNull(),
    mailFrom: text('mail_from').notNull(),
    rcptTo: text('rcpt_to').notNull(),
    raw: blob('raw', { mode: 'buffer' }).notNull(),
    capturedAt: integer('captured_at').notNull(),
  },
  // captured_at is stored after the blob: without its own index, finding old rows would read every message.
  (t) => [index('captured_messages_project_idx').on(t.projectId, t.emailId), index('captured_messages_captured_at_idx').on(t.capturedAt)],
);
