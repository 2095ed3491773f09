import type { Sqlite } from '../db/client.js';

/**
 * Write procedure (write-procedures.ts) of the retention job: deletes up to `limit` events older than
 * `beforeId` whose deliveries are all final, oldest first, with those deliveries and their attempts (the
 * foreign keys cascade). A batch of 1,000 took ~20–29 ms; on the writer thread the event loop pays none of it.
 */
export function createPruneWebhookEventsProcedure(sqlite: Sqlite): (args: { beforeId: string; limit: number }) => number {
  const prune = sqlite.prepare(
    `delete from webhook_events where id in (
       select e.id from webhook_events e
        where e.id < ?
          and not exists (select 1 from webhook_deliveries d where d.event_id = e.id and d.status = 'pending')
        order by e.id limit ?)`,
  );
  return ({ beforeId, limit }) => prune.run(beforeId, limit).changes;
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
