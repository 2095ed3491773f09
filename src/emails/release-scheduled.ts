import type { Sqlite } from '../db/client.js';
import { domainOf } from './address.js';
import { createEmailsRepo } from './repo.js';

export interface ReleaseScheduledArgs {
  nowMs: number;
  /**
   * One id per email this write may release (its batch size): the `queued` events' ids come from the
   * event loop's id generator, whose ids sort in creation order; the writer thread's would not interleave.
   */
  eventIds: string[];
}

/**
 * Write procedure (write-procedures.ts): moves up to `eventIds.length` due scheduled emails to the
 * delivery queue (status, `queued` event, delivery job) and answers how many were due. On the writer
 * thread: a batch of 500 is ~1,500 row writes, which held the event loop while a large scheduled send
 * came due.
 */
export function createReleaseScheduledProcedure(sqlite: Sqlite): (args: ReleaseScheduledArgs) => number {
  const repo = createEmailsRepo(sqlite);
  return ({ nowMs, eventIds }) => {
    const due = repo.listDueScheduled(nowMs, eventIds.length);
    due.forEach((row, i) => {
      if (!repo.markQueued(row.id, nowMs)) return;
      repo.insertEvent(eventIds[i], row.id, 'queued', nowMs);
      // Bulk lane: a scheduled send comes due all at once (a newsletter set for 9:00), and mail sent now
      // must not wait behind it (delivery/repo.ts claimDue).
      repo.insertJob(row.id, row.project_id, domainOf(row.to_address), nowMs, true);
    });
    return due.length;
  };
}
