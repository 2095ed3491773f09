import type { Sqlite } from './db/client.js';
import { createPruneCapturedProcedure } from './delivery/capture-retention.js';
import { createEarliestQueuedProcedure } from './domains/retired-keys.js';
import { createAcceptProcedure } from './emails/accept-procedure.js';
import { createIndexFtsProcedure } from './emails/fts-indexer.js';
import { createPruneIdempotencyKeysProcedure } from './emails/idempotency-prune.js';
import { createReleaseScheduledProcedure } from './emails/release-scheduled.js';
import { createPruneFinishedEmailsProcedure } from './emails/retention.js';
import { createPruneReceivedProcedure } from './inbound/retention.js';
import { createExpandProcedure } from './messenger/expand-procedure.js';
import { createPurgeProjectRowsProcedure } from './projects/purge.js';
import { createPruneWebhookEventsProcedure, createPurgeEndpointDeliveriesProcedure } from './webhooks/prune.js';

/**
 * Writes that may run on the writer thread (db/writer-thread.ts) instead of the event loop. Each is a
 * factory that prepares its statements on a connection and returns a synchronous function of plain,
 * structured-cloneable data. It runs inside the group commit's transaction, in its own savepoint, on the
 * writer thread's connection or, until that thread is up (or in a memory database), on the main one:
 * it may use nothing but its connection and its arguments.
 */
export const writeProcedures = {
  'emails.accept': createAcceptProcedure,
  'emails.index-fts': createIndexFtsProcedure,
  'emails.prune-idempotency-keys': createPruneIdempotencyKeysProcedure,
  'emails.prune-finished': createPruneFinishedEmailsProcedure,
  'emails.release-scheduled': createReleaseScheduledProcedure,
  'projects.purge-rows': createPurgeProjectRowsProcedure,
  'webhooks.prune-events': createPruneWebhookEventsProcedure,
  'webhooks.purge-endpoint-deliveries': createPurgeEndpointDeliveriesProcedure,
  'delivery.prune-captured': createPruneCapturedProcedure,
  'domains.earliest-queued': createEarliestQueuedProcedure,
  'inbound.prune-received': createPruneReceivedProcedure,
  'messenger.expand': createExpandProcedure,
};

export type WriteProcedures = typeof writeProcedures;
export type ProcedureName = keyof WriteProcedures;
export type ProcedureArgs<N extends ProcedureName> = Parameters<ReturnType<WriteProcedures[N]>>[0];
export type ProcedureResult<N extends ProcedureName> = ReturnType<ReturnType<WriteProcedures[N]>>;
export type ProcedureRunner = (name: string, args: unknown) => unknown;

/** Binds the procedures to one connection; each prepares its statements on first use. */
export function bindProcedures(sqlite: Sqlite): ProcedureRunner {
  const bound = new Map<string, (args: unknown) => unknown>();
  return (name, args) => {
    let run = bound.get(name);
    if (!run) {
      if (!Object.hasOwn(writeProcedures, name)) throw new Error(`unknown write procedure "${name}"`);
      run = writeProcedures[name as ProcedureName](sqlite) as (args: unknown) => unknown;
      bound.set(name, run);
    }
    return run(args);
  };
}
