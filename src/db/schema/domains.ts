import { sql } from 'drizzle-orm';
import { sqliteTable, text, integer, uniqueIndex, primaryKey, index } from 'drizzle-orm/sqlite-core';
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
  (t) => [
    uniqueIndex('domains_project_domain_idx').on(t.projectId, t.domain),
    // Whether any project sends from a name, whichever project (bounces/service.ts: postmaster at the
    // domains this host serves, asked at every such RCPT of the public inbound listener): without them
    // each RCPT read every domain row, DKIM keys and all (1,000 domains: ~9 ms of the event loop).
    index('domains_domain_lower_idx').on(sql`lower(${t.domain})`),
    index('domains_mail_from_domain_lower_idx').on(sql`lower(${t.mailFromDomain})`),
    // The re-check job's due domains (domains/repo.ts listDueForCheck): a range per status, holding only
    // those due, where reading every row to compare its last check took ~30 ms a minute for 1,000 domains.
    index('domains_status_checked_idx').on(t.status, t.lastCheckedAt),
  ],
);

/**
 * The DKIM key of a deleted domain that could sign, kept so mail accepted under it and still queued
 * (waiting on a retry) goes out signed as it would have, instead of unsigned. Delivery looks here only
 * when no domain of the project covers the sender, and only for mail queued before `retiredAt`. Pruned
 * once that mail is past `delivery.give_up_after`.
 */
export const retiredSigningKeys = sqliteTable(
  'retired_signing_keys',
  {
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    domain: text('domain').notNull(),
    selector: text('selector').notNull(),
    privateKey: text('private_key').notNull(),
    mailFromDomain: text('mail_from_domain').notNull(),
    retiredAt: integer('retired_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.projectId, t.domain, t.selector] }), index('retired_signing_keys_retired_at_idx').on(t.retiredAt)],
);
