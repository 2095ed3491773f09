import type { Db } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import { notifyDeliveryQueued } from './queue-signal.js';
import type { DeliveryJob, DeliveryRepo } from './repo.js';

export interface LeaseKeeperDeps {
  db: Db;
  writes: WriteQueue;
  repo: Pick<DeliveryRepo, 'extendLease'>;
  clock: Clock;
  log: Logger;
  /** `delivery.lease`: how long a claim holds a job. */
  leaseMs: number;
}

/**
 * The lease of each job in flight here, by email id. A session may outlast `delivery.lease` (RFC 5321
 * timeouts allow minutes per step, and a 421'd destination's slot is waited for): a lease that ran out
 * would let the next claim pick the job up and send it again while the first attempt is still on the
 * wire. So leases are renewed while their attempt runs, and a claim never starts a job already here.
 */
export function createLeaseKeeper(deps: LeaseKeeperDeps) {
  const { clock, log, leaseMs } = deps;
  const leases = new Map<string, number>();
  /**
   * The lease a claim took while the job's attempt was still running, adopted by that attempt (renewed
   * with its own). The claim may have come after the attempt's outcome made the job due again, in the
   * same commit batch: nobody would then work on the job until that lease expired, so the attempt gives
   * it back when it ends. Given back after an outcome that already cleared or finished the job, it
   * matches nothing.
   */
  const adopted = new Set<string>();
  let renewal: NodeJS.Timeout | undefined;

  /** Extends, in one write, the leases that are past half their term; every lease/3 while jobs are in flight. */
  const renewExpiring = () => {
    const nowMs = clock.nowMs();
    const expiring = [...leases].filter(([, until]) => until - nowMs < leaseMs / 2);
    if (expiring.length === 0) return;
    const untilMs = nowMs + leaseMs;
    deps.writes
      .run(() => expiring.filter(([emailId, heldUntil]) => deps.repo.extendLease(emailId, heldUntil, untilMs)).map(([emailId]) => emailId))
      .then((extended) => {
        for (const emailId of extended) if (leases.has(emailId)) leases.set(emailId, untilMs);
      })
      .catch((error: unknown) => log.warn('delivery leases not renewed; the next pass tries again', { error, count: expiring.length }));
  };

  const giveBack = (emailId: string, heldUntil: number) => {
    deps.writes
      .run(() => deps.repo.extendLease(emailId, heldUntil, clock.nowMs()))
      .then((given) => given && notifyDeliveryQueued(deps.db))
      .catch((error: unknown) => log.warn('a re-claimed delivery lease was not given back; it expires instead', { emailId, error }));
  };

  const stopRenewing = () => {
    clearInterval(renewal);
    renewal = undefined;
  };

  return {
    /** Whether an attempt of this job runs here. */
    isHeld: (emailId: string) => leases.has(emailId),
    /** A claimed job's attempt starts: its lease is renewed until it ends. */
    hold(job: DeliveryJob): void {
      leases.set(job.emailId, job.leaseUntil ?? clock.nowMs() + leaseMs);
      renewal ??= setInterval(renewExpiring, Math.max(100, Math.floor(leaseMs / 3))).unref();
    },
    /** A claim of a job whose attempt still runs here: that attempt holds the new lease, and gives it back when it ends. */
    adopt(job: DeliveryJob): void {
      leases.set(job.emailId, job.leaseUntil ?? 0);
      adopted.add(job.emailId);
    },
    /** The attempt ended (its outcome recorded or not): an adopted lease is given back, and the job is no longer renewed. */
    end(emailId: string): void {
      const heldUntil = leases.get(emailId);
      if (adopted.delete(emailId) && heldUntil !== undefined) giveBack(emailId, heldUntil);
      leases.delete(emailId);
      if (leases.size === 0) stopRenewing();
    },
    /** At a stop: leases left are released by the next start, as after a crash. */
    stop: stopRenewing,
  };
}
