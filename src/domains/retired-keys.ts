import type { Sqlite } from '../db/client.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import type { DomainsRepo } from './repo.js';

/**
 * Delivery jobs one step of the walk reads (on the writer thread): a read of the primary key's next
 * leaves, ~1 ms for 2,000 jobs on a 2-vCPU machine, so sends and outcomes interleave with a long walk.
 */
export const earliestQueuedStep = 2_000;

export interface EarliestQueuedArgs {
  afterId: string;
  limit: number;
  /** The projects whose jobs count; the others are only walked past. */
  projectIds: string[];
}

export interface EarliestQueuedStepResult {
  /** Jobs this step read: at most `limit`. */
  looked: number;
  /** The last job read, where the next step starts; null once none is left. */
  next: string | null;
  /** Each of `projectIds` with jobs among those read, and the earliest `queued_at` of them. */
  earliest: [projectId: string, queuedAt: number][];
}

/**
 * Write procedure (write-procedures.ts), one that only reads: the next `limit` delivery jobs after
 * `afterId`, in email id order, and the earliest time one of each project asked for was queued. A
 * read, but on the writer thread the event loop pays nothing for it; the walk goes by the primary key,
 * which no job ever leaves or changes (the due indexes' order moves under every claim), so a walk in
 * steps misses no job that stays queued.
 */
export function createEarliestQueuedProcedure(sqlite: Sqlite): (args: EarliestQueuedArgs) => EarliestQueuedStepResult {
  const next = sqlite.prepare('select email_id, project_id, queued_at from delivery_jobs where email_id > ? order by email_id limit ?').raw();
  return ({ afterId, limit, projectIds }) => {
    const wanted = new Set(projectIds);
    const rows = next.all(afterId, limit) as [string, string, number][];
    const earliest = new Map<string, number>();
    for (const [, projectId, queuedAt] of rows) {
      if (wanted.has(projectId) && !(earliest.get(projectId)! <= queuedAt)) earliest.set(projectId, queuedAt);
    }
    return { looked: rows.length, next: rows.length < limit ? null : rows[rows.length - 1][0], earliest: [...earliest] };
  };
}

/**
 * Forgets the kept keys of deleted domains retired before `retiredBefore`, except those whose project
 * still has mail queued before the retirement (domains/service.ts pruneRetiredKeys says why). Asked as
 * one statement per key (a job of the project queued at or before it?), SQLite read every queued job
 * of the project, through an index without `queued_at`, on the event loop: 10 keys of a project with
 * 100,000 queued jobs held it ~0.6 s. Now the queue is walked once for all of them, in steps of
 * `earliestQueuedStep` jobs on the writer thread, and only the final delete (of a few keys) is a
 * write here. Most runs find no key old enough and walk nothing.
 *
 * Sound in steps: a job queued at or before a retirement in the past was queued before the walk began
 * (jobs are queued with the time they are queued at), and its id never changes, so the walk reads it if
 * it is still queued when the walk passes it; a key is then kept for another hour, never forgotten early.
 */
export async function pruneRetiredSigningKeys(deps: { writes: WritesWithProcedures; repo: DomainsRepo }, retiredBefore: number): Promise<number> {
  const projectIds = deps.repo.projectsWithKeysRetiredBefore(retiredBefore);
  if (projectIds.length === 0) return 0;
  const earliest = new Map<string, number | null>(projectIds.map((projectId) => [projectId, null]));
  for (let afterId: string | null = ''; afterId !== null; ) {
    const step: EarliestQueuedStepResult = await deps.writes.call('domains.earliest-queued', { afterId, limit: earliestQueuedStep, projectIds });
    for (const [projectId, queuedAt] of step.earliest) earliest.set(projectId, Math.min(queuedAt, earliest.get(projectId) ?? Infinity));
    afterId = step.next;
  }
  return deps.writes.run(() => deps.repo.deleteRetiredKeys(retiredBefore, earliest));
}
