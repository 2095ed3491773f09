import { and, asc, desc, eq, inArray, isNotNull, isNull, lt, lte, or, sql } from 'drizzle-orm';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import type { Db, Sqlite } from '../db/client.js';
import { setPlaceholder } from '../db/set-placeholder.js';
import { projectNotDeleting } from '../projects/repo.js';
import { webhookAttempts, webhookDeliveries, webhookEndpoints, webhookEvents } from '../db/schema/webhooks.js';

import type { PendingWebhookCounts } from './metrics.js';

export type EndpointRow = typeof webhookEndpoints.$inferSelect;
export type DeliveryRow = typeof webhookDeliveries.$inferSelect;
export type AttemptRow = typeof webhookAttempts.$inferSelect;

export interface ClaimedDelivery {
  delivery: DeliveryRow;
  /** The lease this claim set: the delivery is this attempt's to update only while it still holds it. */
  leaseUntil: number;
  event: { id: string; type: string; data: Record<string, unknown>; createdAt: number };
  endpoint: { id: string; url: string; secret: string };
}

export interface AttemptOutcome {
  status: 'delivered' | 'pending' | 'failed';
  attempts: number;
  nextAttemptAt: number | null;
  lastStatusCode: number | null;
  lastError: string | null;
  updatedAt: number;
}

/** Synchronous drizzle queries for endpoints, deliveries and attempts (DESIGN convention 6). */
export function createWebhooksRepo(db: Db) {
  let dispatchStatements: ReturnType<typeof prepareDispatchStatements> | undefined;
  const dispatch = () => (dispatchStatements ??= prepareDispatchStatements(db));
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
     * Each enabled endpoint's due deliveries (pending, lease expired if any), oldest first, at most
     * `limit` per endpoint. Call inside a write transaction. Only endpoints with due work are asked:
     * one query per enabled endpoint cost 6-8 ms per claim with 200 endpoints, on every poll.
     */
    selectDueByEndpoint(nowMs: number, limit: number): DeliveryRow[][] {
      const statements = dispatch();
      return statements.endpointsWithDueWork
        .all({ now: nowMs })
        .map(({ id }) => statements.selectDueFor.all({ endpointId: id, now: nowMs, limit }))
        .filter((due) => due.length > 0);
    },

    lease: (ids: string[], leaseUntil: number): void => {
      if (ids.length > 0) dispatch().lease.run({ ids: JSON.stringify(ids), leaseUntil });
    },

    eventsByIds: (ids: string[]) => (ids.length === 0 ? [] : dispatch().eventsByIds.all({ ids: JSON.stringify(ids) })),

    endpointsByIds: (ids: string[]) => (ids.length === 0 ? [] : dispatch().endpointsByIds.all({ ids: JSON.stringify(ids) })),

    /**
     * Whether an attempt still owns its delivery: `gone` once the endpoint was deleted (its deliveries go
     * with it) while the attempt was out; `lost` when its lease ran out (a clock jump, a stalled process)
     * and a later claim leased the delivery again, which now decides its status.
     */
    leaseState: (id: string, leaseUntil: number): 'held' | 'lost' | 'gone' => {
      const row = dispatch().leaseOf.get({ id });
      if (!row) return 'gone';
      return row.leaseUntil === leaseUntil ? 'held' : 'lost';
    },

    insertAttempt: (row: typeof webhookAttempts.$inferInsert): void => {
      dispatch().insertAttempt.run({ ...row, statusCode: row.statusCode ?? null, error: row.error ?? null });
    },

    /** An attempt's outcome: the lease ends and the delivery is delivered, pending a retry, or failed. */
    finishAttempt: (id: string, outcome: AttemptOutcome): void => {
      dispatch().finishAttempt.run({ id, ...outcome });
    },

    /** Ends a lease without an outcome (shutting down), unless another claim holds the delivery now. */
    releaseLease: (id: string, leaseUntil: number): void => {
      dispatch().releaseLease.run({ id, leaseUntil });
    },

    /** Ends every lease of a pending delivery (a dispatcher starting: none of them is in flight); answers how many. */
    releaseAllLeases: (): number => dispatch().releaseAllLeases.run().changes,

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

/** `id in (…)` for a JSON array of ids bound to the named placeholder: one statement for any count. */
const inJsonArray = (column: SQLiteColumn, name: string) => sql`${column} in (select value from json_each(${sql.placeholder(name)}))`;

/**
 * The dispatcher's statements, prepared once per repo: building a drizzle query costs ~200–450 µs per
 * call here, far more than SQLite's own work (~10 µs), and every webhook takes four or five of them
 * (bench/webhooks.ts).
 */
function prepareDispatchStatements(db: Db) {
  const { id, status, nextAttemptAt, leaseUntil } = webhookDeliveries;
  return {
    // Only enabled endpoints are claimed for: disabling a broken or compromised receiver stops its traffic
    // at once, pending retries included (they go again once it is enabled). Nor those of a project whose
    // deletion is under way (projects/service.ts marks it `deleting:<id>` with its keys' revocation): as
    // its mail, its webhooks stop at once, not once the purge, after all its emails, reaches them.
    endpointsWithDueWork: db
      .select({ id: webhookEndpoints.id })
      .from(webhookEndpoints)
      .where(
        and(
          eq(webhookEndpoints.enabled, true),
          projectNotDeleting(webhookEndpoints.projectId),
          sql`exists (select 1 from ${webhookDeliveries} where ${webhookDeliveries.endpointId} = ${webhookEndpoints.id} and ${status} = 'pending'
                and ${nextAttemptAt} <= ${sql.placeholder('now')} and (${leaseUntil} is null or ${leaseUntil} < ${sql.placeholder('now')}))`,
        ),
      )
      .prepare(),
    selectDueFor: db
      .select()
      .from(webhookDeliveries)
      .where(
        and(
          eq(webhookDeliveries.endpointId, sql.placeholder('endpointId')),
          eq(status, 'pending'),
          lte(nextAttemptAt, sql.placeholder('now')),
          or(isNull(leaseUntil), lt(leaseUntil, sql.placeholder('now'))),
        ),
      )
      .orderBy(asc(nextAttemptAt))
      .limit(sql.placeholder('limit'))
      .prepare(),
    lease: db.update(webhookDeliveries).set({ leaseUntil: setPlaceholder('leaseUntil') }).where(inJsonArray(id, 'ids')).prepare(),
    eventsByIds: db.select().from(webhookEvents).where(inJsonArray(webhookEvents.id, 'ids')).prepare(),
    endpointsByIds: db.select().from(webhookEndpoints).where(inJsonArray(webhookEndpoints.id, 'ids')).prepare(),
    leaseOf: db.select({ leaseUntil }).from(webhookDeliveries).where(eq(id, sql.placeholder('id'))).prepare(),
    insertAttempt: db
      .insert(webhookAttempts)
      .values({
        id: sql.placeholder('id'),
        deliveryId: sql.placeholder('deliveryId'),
        attemptedAt: sql.placeholder('attemptedAt'),
        statusCode: sql.placeholder('statusCode'),
        error: sql.placeholder('error'),
        durationMs: sql.placeholder('durationMs'),
      })
      .prepare(),
    finishAttempt: db
      .update(webhookDeliveries)
      .set({
        status: setPlaceholder('status'),
        attempts: setPlaceholder('attempts'),
        nextAttemptAt: setPlaceholder('nextAttemptAt'),
        leaseUntil: null,
        lastStatusCode: setPlaceholder('lastStatusCode'),
        lastError: setPlaceholder('lastError'),
        updatedAt: setPlaceholder('updatedAt'),
      })
      .where(eq(id, sql.placeholder('id')))
      .prepare(),
    releaseLease: db
      .update(webhookDeliveries)
      .set({ leaseUntil: null })
      .where(and(eq(id, sql.placeholder('id')), eq(leaseUntil, sql.placeholder('leaseUntil'))))
      .prepare(),
    // `status = 'pending'` first: the pending rows are a range of webhook_deliveries_due_idx, so a start
    // does not read the delivered ones (webhooks.retention keeps 30 days of them).
    releaseAllLeases: db
      .update(webhookDeliveries)
      .set({ leaseUntil: null })
      .where(and(eq(status, 'pending'), isNotNull(leaseUntil)))
      .prepare(),
  };
}

/**
 * Webhook deliveries still pending, for /metrics, those of disabled endpoints apart: the dispatcher does not
 * send them until their endpoint is enabled again (webhooks/repo.ts), so counted as pending they kept a
 * backlog alert firing for good. All pending: a count on webhook_deliveries_due_idx (status,
 * next_attempt_at); the disabled endpoints' (usually none) below.
 */
export function countPendingWebhooks(sqlite: Sqlite): PendingWebhookCounts {
  const pending = sqlite.prepare("select count(*) from webhook_deliveries where status = 'pending'").pluck();
  // Per disabled endpoint, a range of its pending deliveries in webhook_deliveries_endpoint_due_idx; asked
  // as `endpoint_id in (...)`, SQLite read every pending row's table entry through the status index.
  const paused = sqlite
    .prepare(
      `select coalesce(sum((select count(*) from webhook_deliveries d where d.endpoint_id = e.id and d.status = 'pending')), 0)
       from webhook_endpoints e where e.enabled = 0`,
    )
    .pluck();
  return {
    pending: () => (pending.get() as number) - (paused.get() as number),
    paused: () => paused.get() as number,
  };
}
