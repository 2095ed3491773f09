import { sqliteTable, text, integer, index, uniqueIndex, blob } from 'drizzle-orm/sqlite-core';
import { projects } from './projects.js';

export const routeResponseModes = ['accept', 'reject-temp', 'reject-perm'] as const;
export type RouteResponseMode = (typeof routeResponseModes)[number];

/**
 * Inbound routes (spec §2.7, §4.9): which recipients the inbound SMTP listener takes, and how it answers.
 * A (domain, localPart) pair routes to one project, whichever project created it: the listener is one.
 */
export const inboundRoutes = sqliteTable(
  'inbound_routes',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    /** Lowercased, in A-labels. */
    domain: text('domain').notNull(),
    /** Lowercased; `*` is the catch-all. */
    localPart: text('local_part').notNull(),
    responseMode: text('response_mode', { enum: routeResponseModes }).notNull(),
    isEnabled: integer('is_enabled', { mode: 'boolean' }).notNull(),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (t) => [uniqueIndex('inbound_routes_address_idx').on(t.domain, t.localPart), index('inbound_routes_project_idx').on(t.projectId, t.id)],
);

/**
 * A received message's bytes and bodies, stored once however many recipients it had: one row per
 * recipient held a copy each, and one 2 MB message to 100 routed addresses wrote 400 MB. Deleted with
 * the last received email that names it (trigger `received_emails_message_gc`, migration 0034).
 */
export const receivedMessages = sqliteTable('received_messages', {
  id: text('id').primaryKey(),
  raw: blob('raw', { mode: 'buffer' }).notNull(),
  text: text('text').notNull(),
  html: text('html'),
  /**
   * The message's headers and attachment list, once for all its recipients (migration 0035): copied into
   * each received email, a 20 MB message to 100 recipients wrote 5 GB. Null in messages stored before:
   * their received emails hold their own (`receivedEmails.headers`, `.attachments`).
   */
  headers: text('headers', { mode: 'json' }).$type<Record<string, string | string[]>>(),
  attachments: text('attachments', { mode: 'json' }).$type<ReceivedAttachment[]>(),
});

export interface ReceivedAttachment {
  name: string;
  contentType: string;
  size: number;
}

/**
 * Received emails (spec §2.8): what a route accepted, parsed once at arrival, one per recipient; the
 * raw message for `rawEmailUrl` and the bodies are its `messageId`'s. `inboundRouteId` has no foreign
 * key: deleting a route leaves its emails (spec §3.4).
 */
export const receivedEmails = sqliteTable(
  'received_emails',
  {
    id: text('id').primaryKey(),
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    inboundRouteId: text('inbound_route_id').notNull(),
    destination: text('destination').notNull(),
    subject: text('subject').notNull(),
    /** `{from, to, cc, replyTo}` as the API shows them. */
    addresses: text('addresses', { mode: 'json' }).$type<ReceivedAddresses>().notNull(),
    messageId: text('message_id')
      .notNull()
      .references(() => receivedMessages.id),
    attachments: text('attachments', { mode: 'json' }).$type<ReceivedAttachment[]>().notNull(),
    headers: text('headers', { mode: 'json' }).$type<Record<string, string | string[]>>().notNull(),
    auth: text('auth', { mode: 'json' }).$type<Record<string, unknown>>().notNull(),
    spam: text('spam', { mode: 'json' }).$type<SpamVerdict>().notNull(),
    envelope: text('envelope', { mode: 'json' }).$type<Record<string, unknown>>().notNull(),
    receivedAt: integer('received_at').notNull(),
  },
  (t) => [index('received_emails_project_idx').on(t.projectId, t.id), index('received_emails_message_idx').on(t.messageId)],
);

export interface ReceivedAddress {
  email: string;
  name: string | null;
}

export interface ReceivedAddresses {
  from: ReceivedAddress;
  to: ReceivedAddress[];
  cc: ReceivedAddress[];
  replyTo: ReceivedAddress[];
  /** Set when a list had more addresses than are kept (inbound/receive.ts addressesKept); the raw message has them all. */
  addressesTruncated?: true;
}

export interface SpamVerdict {
  score: number;
  threshold: number;
  isSpam: boolean;
  action: string;
  symbols: string[];
}
