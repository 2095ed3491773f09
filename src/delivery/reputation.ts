import { and, eq, gte, inArray, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { emails } from '../db/schema/emails.js';
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
  const bounceRate = stats.bounces / stats.sent;
  const complaintRate = stats.complaints / stats.sent;
  if (bounceRate > maxBounceRate) return { paused: true, reason: `bounce rate ${(bounceRate * 100).toFixed(2)}% is above ${maxBounceRate * 100}%` };
  if (complaintRate > maxComplaintRate) return { paused: true, reason: `complaint rate ${(complaintRate * 100).toFixed(3)}% is above ${maxComplaintRate * 100}%` };
  return { paused: false };
}

/** Statuses that mean the email left (or tried to leave) the machine: the denominator of the rates. */
const sentStatuses = ['delivered', 'open', 'bounce', 'complaint'] as const;

export function loadSendingStats(db: Db, projectId: string, sinceMs: number): SendingStats {
  const rows = db
    .select({ status: emails.status, count: sql<number>`count(*)` })
    .from(emails)
    .where(and(eq(emails.projectId, projectId), inArray(emails.status, [...sentStatuses]), gte(emails.updatedAt, sinceMs)))
    .groupBy(emails.status)
    .all();
  const count = (status: string) => rows.find((r) => r.status === status)?.count ?? 0;
  return { sent: rows.reduce((sum, r) => sum + r.count, 0), bounces: count('bounce'), complaints: count('complaint') };
}

export interface SendingGuard {
  /** Throws `email-sending-paused` when the project is suspended. Cached briefly: it runs on every send. */
  assertSendingAllowed(projectId: string): void;
  verdict(projectId: string): SuspensionVerdict;
}

export function createSendingGuard(deps: { db: Db; clock: Clock; policy: SuspensionPolicy; cacheMs?: number }): SendingGuard {
  const cache = new Map<string, { at: number; verdict: SuspensionVerdict }>();
  const cacheMs = deps.cacheMs ?? 2_000;
  const verdict = (projectId: string): SuspensionVerdict => {
    if (!deps.policy.enabled) return { paused: false };
    const now = deps.clock.nowMs();
    const hit = cache.get(projectId);
    if (hit && now - hit.at < cacheMs && now >= hit.at) return hit.verdict;
    const result = judgeSending(deps.policy, loadSendingStats(deps.db, projectId, now - deps.policy.windowMs));
    cache.set(projectId, { at: now, verdict: result });
    return result;
  };
  return {
    verdict,
    assertSendingAllowed(projectId) {
      const result = verdict(projectId);
      if (result.paused) throw new AppError('email-sending-paused', `Sending is paused for this project: ${result.reason}. Contact the operator of this appliance.`);
    },
  };
}
