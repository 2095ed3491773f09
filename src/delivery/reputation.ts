import type { Sqlite } from '../db/client.js';
import { cachedStatement } from '../db/statement-cache.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';

/**
 * The spec's suspension rule (§8): a project whose recent bounce rate is above 4.95% or complaint rate
 * above 0.095% is paused (`email-sending-paused`). Rates mean nothing on a handful of emails, so a
 * project with fewer than `minVolume` sent emails in the window is judged by absolute counts instead.
 */
export const maxBounceRate = 0.0495;
export const maxComplaintRate = 0.00095;

export interface SuspensionPolicy {
  enabled: boolean;
  windowMs: number;
  minVolume: number;
  youngMaxBounces: number;
  youngMaxComplaints: number;
}

export interface SendingStats {
  sent: number;
  bounces: number;
  complaints: number;
}

export type SuspensionVerdict = { paused: false } | { paused: true; reason: string };

/** Pure: the rule itself, table-tested. */
export function judgeSending(policy: SuspensionPolicy, stats: SendingStats): SuspensionVerdict {
  if (!policy.enabled) return { paused: false };
  if (stats.sent < policy.minVolume) {
    if (stats.bounces > policy.youngMaxBounces) return { paused: true, reason: `${stats.bounces} bounces (limit ${policy.youngMaxBounces} while under ${policy.minVolume} sent emails)` };
    if (stats.complaints > policy.youngMaxComplaints)
      return { paused: true, reason: `${stats.complaints} complaints (limit ${policy.youngMaxComplaints} while under ${policy.minVolume} sent emails)` };
    return { paused: false };
  }
  // The counts a young project is allowed stay allowed past minVolume: at 1,000 sent the rate allows
  // 0.95 complaints against the young limit's 5, and delivering one more good email paused a project
  // with 3. Over the rate and over that count, then: the verdict never turns against more sending.
  const bounceRate = stats.bounces / stats.sent;
  const complaintRate = stats.complaints / stats.sent;
  if (bounceRate > maxBounceRate && stats.bounces > policy.youngMaxBounces) {
    return { paused: true, reason: `bounce rate ${percentAbove(bounceRate, maxBounceRate, 2)}% is above ${maxBounceRate * 100}%` };
  }
  if (complaintRate > maxComplaintRate && stats.complaints > policy.youngMaxComplaints) {
    return { paused: true, reason: `complaint rate ${percentAbove(complaintRate, maxComplaintRate, 3)}% is above ${maxComplaintRate * 100}%` };
  }
  return { paused: false };
}

/**
 * A rate over its limit, in percent with `digits` decimals, or more where those would round it onto the
 * limit: 100 bounces of 2,020 sent read "4.95% is above 4.95%" to the user it paused.
 */
function percentAbove(rate: number, limit: number, digits: number): string {
  let shown = (rate * 100).toFixed(digits);
  while (Number(shown) <= limit * 100 && digits < 8) shown = (rate * 100).toFixed(++digits);
  return shown;
}

const dayMs = 86_400_000;

/** What an outcome adds to its project's counts of the day (schema/delivery.ts `project_sending_stats`). */
export type CountedOutcome =
  /** Delivered (or captured): one email sent. */
  | 'delivered'
  /** Refused at delivery (5xx, give-up): sent, and a bounce. */
  | 'bounced'
  /** A bounce report for an email counted as delivered before: a bounce only. */
  | 'bounced-later'
  | 'complaint';

const increments: Record<CountedOutcome, [sent: number, bounces: number, complaints: number]> = {
  delivered: [1, 0, 0],
  bounced: [1, 1, 0],
  'bounced-later': [0, 1, 0],
  complaint: [0, 0, 1],
};

/**
 * Counts an outcome in the project's row of the day. Called in the same transaction as the status
 * change it counts, so the counts and the emails never disagree after a crash.
 */
export function countOutcome(sqlite: Sqlite, projectId: string, nowMs: number, outcome: CountedOutcome): void {
  const [sent, bounces, complaints] = increments[outcome];
  cachedStatement(
    sqlite,
    `insert into project_sending_stats (project_id, day, sent, bounces, complaints) values (?, ?, ?, ?, ?)
     on conflict (project_id, day) do update set sent = sent + excluded.sent, bounces = bounces + excluded.bounces, complaints = complaints + excluded.complaints`,
  ).run(projectId, Math.floor(nowMs / dayMs), sent, bounces, complaints);
}

/** The project's counts over the days that overlap the window: whole UTC days, so up to a day more than it. */
export function loadSendingStats(sqlite: Sqlite, projectId: string, sinceMs: number): SendingStats {
  return cachedStatement(
    sqlite,
    `select coalesce(sum(sent), 0) as sent, coalesce(sum(bounces), 0) as bounces, coalesce(sum(complaints), 0) as complaints
       from project_sending_stats where project_id = ? and day >= ?`,
  ).get(projectId, Math.floor(sinceMs / dayMs)) as SendingStats;
}

export interface SendingGuard {
  /** Throws `email-sending-paused` when the project is suspended. Cached briefly: it runs on every send. */
  assertSendingAllowed(projectId: string): void;
  verdict(projectId: string): SuspensionVerdict;
  /** Verdicts kept now (tests). */
  readonly cachedVerdicts: number;
}

/** Kept verdicts past which the expired ones are dropped (then twice as many as were left). */
const minVerdictsBeforeSweep = 1_000;

export function createSendingGuard(deps: { sqlite: Sqlite; clock: Clock; policy: SuspensionPolicy; cacheMs?: number }): SendingGuard {
  const cache = new Map<string, { at: number; verdict: SuspensionVerdict }>();
  const cacheMs = deps.cacheMs ?? 2_000;
  const fresh = (entry: { at: number }, now: number) => now - entry.at < cacheMs && now >= entry.at;
  /**
   * A verdict is only of use for `cacheMs`, but one was kept for every project that ever sent, deleted
   * ones included: an integration that creates a linked project per customer (and deletes it later)
   * grew the map for good. Past a size, the expired ones go; the next sweep waits until the map has
   * doubled, so sweeping stays O(1) per send on average and the map holds at most twice the projects
   * that sent within `cacheMs`.
   */
  let sweepAt = minVerdictsBeforeSweep;
  const forgetExpired = (now: number) => {
    if (cache.size < sweepAt) return;
    for (const [projectId, entry] of cache) if (!fresh(entry, now)) cache.delete(projectId);
    sweepAt = Math.max(minVerdictsBeforeSweep, 2 * cache.size);
  };
  const verdict = (projectId: string): SuspensionVerdict => {
    if (!deps.policy.enabled) return { paused: false };
    const now = deps.clock.nowMs();
    const hit = cache.get(projectId);
    if (hit && fresh(hit, now)) return hit.verdict;
    const result = judgeSending(deps.policy, loadSendingStats(deps.sqlite, projectId, now - deps.policy.windowMs));
    forgetExpired(now);
    cache.set(projectId, { at: now, verdict: result });
    return result;
  };
  return {
    verdict,
    get cachedVerdicts() {
      return cache.size;
    },
    assertSendingAllowed(projectId) {
      const result = verdict(projectId);
      if (result.paused) throw new AppError('email-sending-paused', `Sending is paused for this project: ${result.reason}. Contact the operator of this appliance.`);
    },
  };
}
