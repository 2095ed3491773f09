import { and, eq, sql } from 'drizzle-orm';
import { createWakeSignal } from '../db/wake-signal.js';
import type { Db } from '../db/client.js';
import { webhookDeliveries, webhookEndpoints, webhookEvents } from '../db/schema/webhooks.js';
import type { Clock } from '../lib/clock.js';
import { newId } from '../lib/ids.js';

/** Event types the appliance emits (COMPAT.md "Webhooks"); endpoints subscribe to a subset or to all. */
export const webhookEventTypes = [
  'email.delivered',
  'email.bounce',
  'email.open',
  'email.complaint',
  'email.received',
  'domain.verified',
  'domain.failed',
  'contact.unsubscribed',
] as const;
export type WebhookEventType = (typeof webhookEventTypes)[number];

export interface WebhookEventInput {
  projectId: string;
  type: string;
  data: Record<string, unknown>;
}

/** Dispatchers subscribe here to be woken right after a commit instead of waiting for their next poll. */
const eventRecorded = createWakeSignal();

export const onWebhookEventRecorded = eventRecorded.on;

/**
 * Writes one outbox event plus one pending delivery per matching enabled endpoint. Synchronous on
 * purpose: callers run it INSIDE the write transaction of their state change (DESIGN convention 6), so
 * the event commits or rolls back with it. Endpoints are resolved now, so a later endpoint edit does
 * not change where an already-recorded event goes. With no matching endpoint nothing is written (the
 * outbox is for delivery, not an event log; events before an endpoint existed are not replayed to it).
 * Returns the event id, or undefined when nothing subscribed.
 */
export function recordWebhookEvent(db: Db, clock: Clock, event: WebhookEventInput): string | undefined {
  const statements = statementsOf(db);
  const endpoints = statements.enabledEndpoints
    .all({ projectId: event.projectId })
    .filter((endpoint) => subscribes(endpoint.events, event.type));
  if (endpoints.length === 0) return undefined;

  const now = clock.nowMs();
  const eventId = newId(clock);
  statements.event.run({ id: eventId, projectId: event.projectId, type: event.type, data: event.data, createdAt: now });
  for (const endpoint of endpoints) {
    statements.delivery.run({ id: newId(clock), eventId, endpointId: endpoint.id, projectId: event.projectId, createdAt: now });
  }
  scheduleWake(db);
  return eventId;
}

/**
 * The outbox's statements, prepared once per database: every delivered or opened email looks up the
 * endpoints, and building the inserts with drizzle each time cost ~200 µs apiece.
 */
const outboxStatements = new WeakMap<Db, ReturnType<typeof prepareOutboxStatements>>();

function statementsOf(db: Db) {
  let statements = outboxStatements.get(db);
  if (!statements) outboxStatements.set(db, (statements = prepareOutboxStatements(db)));
  return statements;
}

function prepareOutboxStatements(db: Db) {
  const createdAt = sql.placeholder('createdAt');
  return {
    enabledEndpoints: db
      .select({ id: webhookEndpoints.id, events: webhookEndpoints.events })
      .from(webhookEndpoints)
      .where(and(eq(webhookEndpoints.projectId, sql.placeholder('projectId')), eq(webhookEndpoints.enabled, true)))
      .prepare(),
    event: db
      .insert(webhookEvents)
      .values({ id: sql.placeholder('id'), projectId: sql.placeholder('projectId'), type: sql.placeholder('type'), data: sql.placeholder('data'), createdAt })
      .prepare(),
    delivery: db
      .insert(webhookDeliveries)
      .values({
        id: sql.placeholder('id'),
        eventId: sql.placeholder('eventId'),
        endpointId: sql.placeholder('endpointId'),
        projectId: sql.placeholder('projectId'),
        status: 'pending',
        nextAttemptAt: createdAt,
        createdAt,
        updatedAt: createdAt,
      })
      .prepare(),
  };
}

export function subscribes(events: string[] | null, type: string): boolean {
  return events === null || events.length === 0 || events.includes('*') || events.includes(type);
}

function scheduleWake(db: Db): void {
  // setImmediate runs after the caller's synchronous transaction has committed (or rolled back).
  setImmediate(() => eventRecorded.notify(db));
}
