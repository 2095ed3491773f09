import type { Sqlite } from '../db/client.js';
import type { CursorStep } from '../lib/batches.js';

/**
 * Write procedure (write-procedures.ts) of the retention job: looks at the next `limit` events after
 * `afterId` and older than `beforeId`, oldest first, and deletes those whose deliveries are all final,
 * with those deliveries and their attempts (the foreign keys cascade). An event with a delivery still
 * pending is kept; the next write starts after it. Each write looks at `limit` events, not `limit`
 * deletions: behind events kept pending for good (deliveries of a disabled endpoint wait for it to be
 * enabled), every write of 1,000 deletions walked all of them again, 100,000 of them ~150 ms a write.
 * A batch of 1,000 took ~20–29 ms; on the writer thread the event loop pays none of it.
 */
export function createPruneWebhookEventsProcedure(sqlite: Sqlite): (args: { afterId: string; beforeId: string; limit: number }) => CursorStep {
  const next = sqlite.prepare(
    `select e.id, exists (select 1 from webhook_deliveries d where d.event_id = e.id and d.status = 'pending') as pending
       from webhook_events e where e.id > ? and e.id < ? order by e.id limit ?`,
  );
  const deleteIds = sqlite.prepare(`delete from webhook_events where id in (select value from json_each(?))`);
  return ({ afterId, beforeId, limit }) => {
    const events = next.all(afterId, beforeId, limit) as { id: string; pending: number }[];
    const final = events.filter((event) => !event.pending).map((event) => event.id);
    const pruned = final.length === 0 ? 0 : deleteIds.run(JSON.stringify(final)).changes;
    return { pruned, next: events.length < limit ? null : events[events.length - 1].id };
  };
}

/**
 * Write procedure of an endpoint's deletion: deletes up to `limit` of its deliveries (their attempts
 * cascade), answering how many went. Called until 0 before the endpoint row goes: one cascading delete
 * of an endpoint with 700,000 deliveries and attempts held the event loop 4.9 s.
 */
export function createPurgeEndpointDeliveriesProcedure(sqlite: Sqlite): (args: { endpointId: string; limit: number }) => number {
  const purge = sqlite.prepare(`delete from webhook_deliveries where id in (select id from webhook_deliveries where endpoint_id = ? limit ?)`);
  return ({ endpointId, limit }) => purge.run(endpointId, limit).changes;
}
