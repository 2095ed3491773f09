import type { Sqlite } from '../db/client.js';
import { createEmailsRepo } from './repo.js';

/**
 * Write procedure (write-procedures.ts): deletes up to `limit` idempotency keys created before
 * `beforeMs`, oldest first, and answers how many went. On the writer thread the event loop pays nothing
 * for it: keys are random in their primary-key index, so a delete touches about one index page per key.
 */
export function createPruneIdempotencyKeysProcedure(sqlite: Sqlite): (args: { beforeMs: number; limit: number }) => number {
  const repo = createEmailsRepo(sqlite);
  return ({ beforeMs, limit }) => repo.pruneIdempotencyKeys(beforeMs, limit);
}
