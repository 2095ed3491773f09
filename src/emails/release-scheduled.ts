import type { Sqlite } from '../db/client.js';
import { domainOf } from './address.js';
import { normalizeAddress } from '../suppressions/repo.js';
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
  const subscribed = sqlite.prepare(`select 1 from contacts where project_id = ? and email_key = ? and is_subscribed = 1`).pluck();
  return ({ nowMs, eventIds }) => {
    const due = repo.listDueScheduled(nowMs, eventIds.length);
    const sharingTheirTime = countBy(due, scheduledSlot);
    due.forEach((row, i) => {
      // A broadcast's email waits for its recipient's local time, up to 26 h after the broadcast was
      // expanded: a contact who unsubscribed or was deleted meanwhile is left out (messenger/service.ts).
      if (row.messenger_id !== null && subscribed.get(row.project_id, normalizeAddress(row.to_address)) === undefined) {
        if (repo.setStatusFrom(row.id, 'scheduled', 'suppressed', nowMs)) repo.insertEvent(eventIds[i], row.id, 'suppressed', nowMs, null, null, leftOut);
        return;
      }
      if (!repo.markQueued(row.id, nowMs)) return;
      repo.insertEvent(eventIds[i], row.id, 'queued', nowMs);
      // Bulk lane when several of a project's emails were set for the same moment (a newsletter set for
      // 9:00: mail sent meanwhile must not wait behind it); a lone one (a reminder) is a single send, and
      // must not wait behind the project's newsletter either (delivery/repo.ts claimDue). One alone in
      // this batch may still be one of many: a batch's first and last moments go on beyond it.
      const bulk = sharingTheirTime.get(scheduledSlot(row))! > 1 || repo.sharesScheduledTime(row.project_id, row.scheduled_at);
      repo.insertJob(row.id, row.project_id, domainOf(row.to_address), nowMs, bulk);
    });
    return due.length;
  };
}

const leftOut = JSON.stringify({ reason: 'unsubscribed', detail: 'no subscribed contact is at this address any more (the contact unsubscribed, was deleted, or moved to another address) at the local time this broadcast email was scheduled for' });

function scheduledSlot(row: { project_id: string; scheduled_at: number }): string {
  return `${row.project_id}:${row.scheduled_at}`;
}

function countBy<T>(rows: T[], keyOf: (row: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const row of rows) counts.set(keyOf(row), (counts.get(keyOf(row)) ?? 0) + 1);
  return counts;
}
