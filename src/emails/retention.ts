import type { Sqlite } from '../db/client.js';
import type { EmailStatus } from '../db/schema/emails.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { leadingWithinBytes, writeFromCursor, type CursorStep } from '../lib/batches.js';
import { idLowerBound } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import { emailStoredBytesSql } from './stored-bytes.js';

/**
 * The statuses an email leaves only through tracking or a late report: the ones retention deletes.
 * Listed, not derived: a status added later is kept until someone decides it is final.
 */
export const finishedEmailStatuses: readonly EmailStatus[] = ['delivered', 'open', 'bounce', 'complaint', 'error', 'suppressed'];

/** Emails one write looks at: 500 with their events and text-index rows took p50 7 ms, max 30 ms (docs/architecture.md). */
const batchSize = 500;
/** Bytes of emails one write deletes at most (a larger email goes alone): SQLite reads every overflow page it frees. */
const batchBytes = 8 * 1024 * 1024;

/**
 * `emails.retention`: a VPS sending 50,000 emails a day grew its database without end. Finished emails
 * whose last change is older than the retention are deleted with everything that cascades from them
 * (attachments, events, captured message; the text index through its delete trigger), in short writes
 * on the writer thread, so sends interleave. The suppression list and webhook events (which carry their
 * own copy of what they tell) are not touched. Runs hourly from the scheduler; 0 keeps everything.
 */
export async function pruneFinishedEmails(writes: WritesWithProcedures, log: Logger, now: Date, retentionMs: number): Promise<number> {
  if (retentionMs <= 0) return 0;
  const beforeMs = now.getTime() - retentionMs;
  // An email is created before its last change: only ids older than the cut-off can be due.
  const beforeId = idLowerBound(beforeMs);
  const pruned = await writeFromCursor((afterId) => writes.call('emails.prune-finished', { afterId, beforeId, beforeMs, limit: batchSize, maxBytes: batchBytes }));
  if (pruned > 0) log.info('emails pruned', { count: pruned, olderThan: new Date(beforeMs).toISOString() });
  return pruned;
}

/**
 * Write procedure (write-procedures.ts): looks at the next `limit` emails after `afterId` and older than
 * `beforeId`, in id order, and deletes those finished, last changed before `beforeMs` and without a
 * delivery job (a job, leased or not, means a delivery may still write its outcome), at most `maxBytes`
 * of them but one in any case. Each write looks at `limit` emails, not `limit` deletions, and the next
 * starts after them: the queued and scheduled emails kept ahead are not walked again by every write.
 */
export function createPruneFinishedEmailsProcedure(sqlite: Sqlite): (args: { afterId: string; beforeId: string; beforeMs: number; limit: number; maxBytes: number }) => CursorStep {
  const statuses = finishedEmailStatuses.map((status) => `'${status}'`).join(', ');
  const next = sqlite.prepare(
    `select e.id,
            e.status in (${statuses}) and e.updated_at < ? and not exists (select 1 from delivery_jobs j where j.email_id = e.id) as due,
            ${emailStoredBytesSql('e')} as bytes
       from emails e where e.id > ? and e.id < ? order by e.id limit ?`,
  );
  const deleteIds = sqlite.prepare(`delete from emails where id in (select value from json_each(?))`);
  return ({ afterId, beforeId, beforeMs, limit, maxBytes }) => {
    const looked = next.all(beforeMs, afterId, beforeId, limit) as { id: string; due: number; bytes: number }[];
    const due = looked.filter((email) => email.due);
    const ids = leadingWithinBytes(due, maxBytes);
    const pruned = ids.length === 0 ? 0 : deleteIds.run(JSON.stringify(ids)).changes;
    // Cut short by its bytes: the next write starts after the last email deleted and looks at the rest again.
    if (ids.length < due.length) return { pruned, next: ids[ids.length - 1] };
    return { pruned, next: looked.length < limit ? null : looked[looked.length - 1].id };
  };
}
