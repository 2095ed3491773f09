import { sqliteTable, text, integer, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { projects } from './projects.js';

/** A sending domain with its own DKIM key pair. The private key never leaves the database. */
export const domains = sqliteTable(
  'domains',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    domain: text('domain').notNull(),
    status: text('status', { enum: ['pending', 'success', 'failed'] }).notNull(),
    dkimSelector: text('dkim_selector').notNull(),
    dkimPrivateKey: text('dkim_private_key').notNull(),
    /** Base64 DER of the public key, as published in the `p=` tag. */
    dkimPublicKey: text('dkim_public_key').notNull(),
    dkimVerified: integer('dkim_verified', { mode: 'boolean' }).notNull().default(false),
    mailFromDomain: text('mail_from_domain').notNull(),
    mailFromStatus: text('mail_from_status', { enum: ['pending', 'success', 'failed'] }).notNull(),
    /** Per-record verification results from the last check (extension field in the API). */
    verification: text('verification', { mode: 'json' }).$type<unknown>(),
    lastCheckedAt: integer('last_checked_at'),
    verifiedAt: integer('verified_at'),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [uniqueIndex('domains_project_domain_idx').on(t.projectId, t.domain)],
);
