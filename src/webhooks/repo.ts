import { and, asc, desc, eq, inArray, isNull, lt, lte, or, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { webhookAttempts, webhookDeliveries, webhookEndpoints, webhookEvents } from '../db/schema/webhooks.js';

export type EndpointRow = typeof webhookEndpoints.$inferSelect;
export type DeliveryRow = typeof webhookDeliveries.$inferSelect;
export type AttemptRow = typeof webhookAttempts.$inferSelect;

export interface ClaimedDelivery {
  delivery: DeliveryRow;
  event: { id: string; type: string; data: Record<string, unknown>; createdAt: number };
  endpoint: { id: string; url: string; secret: string };
}

/** Synchronous drizzle queries for endpoints, deliveries and attempts (DESIGN convention 6). */
export function createWebhooksRepo(db: Db) {
  return {
    listEndpoints: (projectId: string): EndpointRow[] =>
      db.select().from(webhookEndpoints).where(eq(webhookEndpoints.projectId, projectId)).orderBy(asc(webhookEndpoints.id)).all(),

    getEndpoint: (projectId: string, id: string): EndpointRow | undefined =>
      db.select().from(webhookEndpoints).where(and(eq(webhookEndpoints.projectId, projectId), eq(webhookEndpoints.id, id))).get(),

    findConfigEndpoint: (projectId: string): EndpointRow | undefined =>
      db.select().from(webhookEndpoints).where(and(eq(webhookEndpoints.projectId, projectId), eq(webhookEndpoints.source, 'config'))).get(),

    insertEndpoint: (row: typeof webhookEndpoints.$inferInsert): void => {
      db.insert(webhookEndpoints).values(row).run();
    },

    updateEndpoint: (id: string, patch: Partial<typeof webhookEndpoints.$inferInsert>): void => {
      db.update(webhookEndpoints).set(patch).where(eq(webhookEndpoints.id, id)).run();
    },

    deleteEndpoint: (id: string): void => {
      db.delete(webhookEndpoints).where(eq(webhookEndpoints.id, id)).run();
    },

    /**
     * Deletes up to `limit` events older than `beforeId` (ids are time-ordered) that have no pending
     * delivery; their deliveries and attempts go with them (ON DELETE CASCADE). Returns how many.
     */
    pruneFinishedEvents: (beforeId: string, limit: number): number =>
      db.run(sql`delete from webhook_events where id in (
        select e.id from webhook_events e
         where e.id < ${beforeId}
           and not exists (select 1 from webhook_deliveries d where d.event_id = e.id and d.status = 'pending')
         order by e.id limit ${limit})`).changes,

    /** Due pending rows whose lease (if any) has expired, oldest first. Call inside a write transaction. */
    selectDue: (nowMs: number, limit: number): DeliveryRow[] =>
      db
        .select()
        .from(webhookDeliveries)
        .where(
          and(
            eq(webhookDeliveries.status, 'pending'),
            lte(webhookDeliveries.nextAttemptAt, nowMs),
            or(isNull(webhookDeliveries.leaseUntil), lt(webhookDeliveries.leaseUntil, nowMs)),
          ),
        )
        .orderBy(asc(webhookDeliveries.nextAttemptAt))
        .limit(limit)
        .all(),

    lease: (ids: string[], leaseUntil: number): void => {
      if (ids.length > 0) db.update(webhookDeliveries).set({ leaseUntil }).where(inArray(webhookDeliveries.id, ids)).run();
    },

    eventsByIds: (ids: string[]) =>
      ids.length === 0 ? [] : db.select().from(webhookEvents).where(inArray(webhookEvents.id, ids)).all(),

    endpointsByIds: (ids: string[]) =>
      ids.length === 0 ? [] : db.select().from(webhookEndpoints).where(inArray(webhookEndpoints.id, ids)).all(),

    insertAttempt: (row: typeof webhookAttempts.$inferInsert): void => {
      db.insert(webhookAttempts).values(row).run();
    },

    updateDelivery: (id: string, patch: Partial<typeof webhookDeliveries.$inferInsert>): void => {
      db.update(webhookDeliveries).set(patch).where(eq(webhookDeliveries.id, id)).run();
    },

    insertDelivery: (row: typeof webhookDeliveries.$inferInsert): void => {
      db.insert(webhookDeliveries).values(row).run();
    },

    getDelivery: (projectId: string, id: string): DeliveryRow | undefined =>
      db.select().from(webhookDeliveries).where(and(eq(webhookDeliveries.projectId, projectId), eq(webhookDeliveries.id, id))).get(),

    getEvent: (id: string) => db.select().from(webhookEvents).where(eq(webhookEvents.id, id)).get(),

    /** Newest first; `beforeId` pages backwards (ids are time-ordered). */
    listDeliveries: (endpointId: string, limit: number, beforeId?: string): DeliveryRow[] =>
      db
        .select()
        .from(webhookDeliveries)
        .where(and(eq(webhookDeliveries.endpointId, endpointId), beforeId ? lt(webhookDeliveries.id, beforeId) : undefined))
        .orderBy(desc(webhookDeliveries.id))
        .limit(limit)
        .all(),

    attemptsOf: (deliveryIds: string[]): AttemptRow[] =>
      deliveryIds.length === 0
        ? []
        : db.select().from(webhookAttempts).where(inArray(webhookAttempts.deliveryId, deliveryIds)).orderBy(asc(webhookAttempts.attemptedAt), asc(webhookAttempts.id)).all(),
  };
}

export type WebhooksRepo = ReturnType<typeof createWebhooksRepo>;
