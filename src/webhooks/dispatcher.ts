import { setMaxListeners } from 'node:events';
import type { Db } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import { isStorageBusy, isStorageFull, isStorageStopped } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';
import { waitAtMost } from '../lib/wait-at-most.js';
import { parseRetryAfterMs, planRetry } from './backoff.js';
import { noWebhookMetrics, type WebhookMetrics } from './metrics.js';
import { onWebhookEventRecorded } from './outbox.js';
import { postWebhook, type PostResult } from './post.js';
import { createWebhooksRepo, type ClaimedDelivery } from './repo.js';
import { buildWebhookHeaders } from './sign.js';

export interface DispatcherPolicy {
  allowPrivate: boolean;
  timeoutMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
  giveUpAfterMs: number;
  pollIntervalMs: number;
  concurrency: number;
}

export interface DispatcherDeps {
  db: Db;
  /**
   * Claims and outcomes go through the group commit: a transaction of its own per attempt made the event
   * loop wait for one fsync per webhook (docs/benchmarks.md).
   */
  writes: WriteQueue;
  clock: Clock;
  log: Logger;
  resolver: Resolver;
  policy: DispatcherPolicy;
  /** Jitter source (0..1); tests pass a constant. */
  random?: () => number;
  metrics?: WebhookMetrics;
}

/** How long a stop waits for POSTs in flight before aborting them (the whole stop has 10 s). */
const stopGraceMs = 2_000;

export interface WebhookDispatcher {
  start(): void;
  /** Stops the loop; POSTs in flight get `stopGraceMs` to be answered, then are aborted and put back. */
  stop(): Promise<void>;
  /** One pass: claim due deliveries, POST them, record the outcomes. Returns how many were attempted. */
  runOnce(): Promise<number>;
  readonly running: boolean;
}

/**
 * Picks up to `limit` due deliveries from per-endpoint queues (each oldest first), one at a time for the
 * endpoint with the fewest attempts in flight and picked so far; ties go to the endpoint whose next
 * delivery has waited longest. One endpoint alone gets every slot; a receiver that hangs keeps the slots
 * it has, and the ones that free go to the others while they have work.
 */
export function pickFairly<T extends { endpointId: string; nextAttemptAt: number | null }>(queues: T[][], limit: number, busy: ReadonlyMap<string, number>): T[] {
  const pending = queues.map((queue) => [...queue]).filter((queue) => queue.length > 0);
  const taken = new Map<string, number>();
  const picked: T[] = [];
  while (picked.length < limit && pending.length > 0) {
    let best = 0;
    const load = (queue: T[]) => (busy.get(queue[0].endpointId) ?? 0) + (taken.get(queue[0].endpointId) ?? 0);
    for (let i = 1; i < pending.length; i++) {
      const [a, b] = [pending[i], pending[best]];
      if (load(a) < load(b) || (load(a) === load(b) && (a[0].nextAttemptAt ?? 0) < (b[0].nextAttemptAt ?? 0))) best = i;
    }
    const queue = pending[best];
    const delivery = queue.shift()!;
    picked.push(delivery);
    taken.set(delivery.endpointId, (taken.get(delivery.endpointId) ?? 0) + 1);
    if (queue.length === 0) pending.splice(best, 1);
  }
  return picked;
}

/**
 * The outbox dispatcher (`dispatchWebhook` use case): claim → sign → POST → record. A claim is a lease:
 * a crash mid-POST leaves it, and the next start releases it, so that delivery is sent again
 * (at-least-once; receivers deduplicate on `webhook-id`).
 */
export function createWebhookDispatcher(deps: DispatcherDeps): WebhookDispatcher {
  const repo = createWebhooksRepo(deps.db);
  const { policy } = deps;
  const metrics = deps.metrics ?? noWebhookMetrics;
  let running = false;
  let timer: NodeJS.Timeout | undefined;
  let loop: Promise<void> | undefined;
  let wakeRequested = false;
  let unsubscribe: (() => void) | undefined;
  const inFlight = new Set<Promise<unknown>>();
  /**
   * Cuts attempts short at a stop. Each attempt in flight listens on it up to twice (its DNS lookup, its
   * request): past Node's default of 10 listeners a warning about a leak went to stderr as soon as
   * webhooks.concurrency was above 5.
   */
  const newAborter = () => {
    const controller = new AbortController();
    setMaxListeners(2 * policy.concurrency + 2, controller.signal);
    return controller;
  };
  let aborter = newAborter();

  /** Attempts in flight per endpoint, so one slow receiver cannot take every slot (pickFairly). */
  const busyByEndpoint = new Map<string, number>();

  const claim = (limit: number): Promise<ClaimedDelivery[]> => {
    const now = deps.clock.nowMs();
    return deps.writes.run(() => {
      const due = pickFairly(repo.selectDueByEndpoint(now, limit), limit, busyByEndpoint);
      // Lease longer than one POST can take, so the lease never expires under a live attempt (unless the
      // clock jumps or the process stalls: then the attempt finds it lost, recordOutcome).
      const leaseUntil = now + policy.timeoutMs * 2 + 5_000;
      repo.lease(
        due.map((row) => row.id),
        leaseUntil,
      );
      const events = new Map(repo.eventsByIds([...new Set(due.map((row) => row.eventId))]).map((e) => [e.id, e]));
      const endpoints = new Map(repo.endpointsByIds([...new Set(due.map((row) => row.endpointId))]).map((e) => [e.id, e]));
      return due.flatMap((delivery) => {
        const event = events.get(delivery.eventId);
        const endpoint = endpoints.get(delivery.endpointId);
        return event && endpoint ? [{ delivery, leaseUntil, event, endpoint }] : [];
      });
    });
  };

  const dispatchWebhook = async (claimed: ClaimedDelivery): Promise<void> => {
    const body = JSON.stringify({ type: claimed.event.type, data: claimed.event.data });
    const timestamp = Math.floor(deps.clock.nowMs() / 1000);
    const headers = buildWebhookHeaders(claimed.endpoint.secret, claimed.event.id, timestamp, body);
    const signal = aborter.signal;
    const result = await postWebhook(claimed.endpoint.url, headers, body, {
      resolver: deps.resolver,
      allowPrivate: policy.allowPrivate,
      timeoutMs: policy.timeoutMs,
      signal,
    });
    if (signal.aborted && !result.ok) {
      // Shutting down: not the receiver's fault; release the lease and try again after restart.
      await deps.writes.run(() => repo.releaseLease(claimed.delivery.id, claimed.leaseUntil));
      return;
    }
    await recordOutcome(claimed, result);
  };

  const recordOutcome = async (claimed: ClaimedDelivery, result: PostResult): Promise<void> => {
    const now = deps.clock.nowMs();
    const attempts = claimed.delivery.attempts + 1;
    const common = { attempts, lastStatusCode: result.statusCode ?? null, lastError: result.error ?? null, updatedAt: now };
    let status = 'delivered' as 'delivered' | 'pending' | 'failed' | 'dropped' | 'superseded';
    let endpointDisabled = false;
    await deps.writes.run(() => {
      const lease = repo.leaseState(claimed.delivery.id, claimed.leaseUntil);
      // The endpoint was deleted while this attempt was out: nothing is left to record it against.
      if (lease === 'gone') {
        status = 'dropped';
        return;
      }
      repo.insertAttempt({
        id: newId(deps.clock),
        deliveryId: claimed.delivery.id,
        attemptedAt: now,
        statusCode: result.statusCode ?? null,
        error: result.error ?? null,
        durationMs: result.durationMs,
      });
      // The POST happened, so its attempt is listed; but a later claim owns the delivery now, and this
      // late outcome must not turn its `delivered` back into `pending`.
      if (lease === 'lost') {
        status = 'superseded';
        return;
      }
      if (result.ok) return repo.finishAttempt(claimed.delivery.id, { ...common, status: 'delivered', nextAttemptAt: null });
      if (isGone(result)) {
        status = 'failed';
        endpointDisabled = true;
        repo.finishAttempt(claimed.delivery.id, { ...common, status: 'failed', nextAttemptAt: null });
        return repo.updateEndpoint(claimed.endpoint.id, { enabled: false, updatedAt: now });
      }
      const plan = planRetry(
        { attempt: attempts, nowMs: now, firstQueuedAtMs: claimed.delivery.createdAt, retryAfterMs: parseRetryAfterMs(result.retryAfter, now) },
        { baseMs: policy.retryBaseMs, maxMs: policy.retryMaxMs, giveUpAfterMs: policy.giveUpAfterMs },
        deps.random,
      );
      const next = plan.action === 'retry' ? 'pending' : 'failed';
      status = next;
      repo.finishAttempt(claimed.delivery.id, { ...common, status: next, nextAttemptAt: plan.action === 'retry' ? plan.nextAttemptAt : null });
    });
    // Counted once its outcome is stored; a POST whose delivery was deleted or re-claimed meanwhile decides nothing.
    if (status === 'delivered' || status === 'pending' || status === 'failed') metrics.recordAttempt(status === 'pending' ? 'retrying' : status);
    // Given up is the one outcome an operator must act on (the receiver never took it): warn, not info.
    (status === 'failed' ? deps.log.warn : deps.log.info)('webhook attempt', {
      deliveryId: claimed.delivery.id,
      eventId: claimed.event.id,
      // The email the event is about: an operator follows an email by grepping its id (DESIGN convention 10).
      ...emailIdOf(claimed.event.data),
      endpointId: claimed.endpoint.id,
      type: claimed.event.type,
      statusCode: result.statusCode,
      error: result.error,
      ms: result.durationMs,
      status,
    });
    if (endpointDisabled) deps.log.warn('webhook endpoint disabled: its receiver answered 410 Gone', { endpointId: claimed.endpoint.id });
  };

  /** The last claim filled every free slot, so more may be due: a slot that frees wakes the loop. */
  let backlog = false;

  /** Starts the attempts; each holds a slot (an entry of inFlight) until its outcome is recorded. */
  const launch = (batch: ClaimedDelivery[]): Promise<unknown>[] =>
    batch.map((claimed) => {
      const endpointId = claimed.endpoint.id;
      busyByEndpoint.set(endpointId, (busyByEndpoint.get(endpointId) ?? 0) + 1);
      const work = dispatchWebhook(claimed).catch((error) => deps.log.error('webhook attempt crashed', { deliveryId: claimed.delivery.id, error }));
      inFlight.add(work);
      void work.finally(() => {
        inFlight.delete(work);
        const busy = (busyByEndpoint.get(endpointId) ?? 1) - 1;
        if (busy > 0) busyByEndpoint.set(endpointId, busy);
        else busyByEndpoint.delete(endpointId);
        // After the outcomes committed with this one have freed their slots too: one claim for all of them.
        if (backlog) setImmediate(poke);
      });
      return work;
    });

  const runOnce = async (): Promise<number> => {
    const batch = await claim(policy.concurrency);
    await Promise.all(launch(batch));
    return batch.length;
  };

  const sleep = () =>
    new Promise<void>((resolve) => {
      if (!running || wakeRequested) return resolve();
      timer = setTimeout(resolve, policy.pollIntervalMs);
      wake = resolve;
    });
  let wake: (() => void) | undefined;

  /**
   * Keeps every slot busy: claims as many due deliveries as there are free slots and goes again when one
   * frees, so a slow receiver holds one slot instead of holding back a whole round of attempts.
   */
  const runLoop = async () => {
    while (running) {
      wakeRequested = false;
      const free = policy.concurrency - inFlight.size;
      // Woken while every slot is busy (a new event, a poll): the next slot that frees looks for work.
      if (free <= 0) backlog = true;
      else {
        let claimed = 0;
        try {
          claimed = launch(await claim(free)).length;
        } catch (error) {
          logPassFailure(deps.log, error);
        }
        backlog = claimed === free;
        // Every free slot taken and one already free again: go on at once. Otherwise wait for a poll, a
        // new event, or (with a backlog) the next freed slot.
        if (backlog && inFlight.size < policy.concurrency) continue;
      }
      await sleep();
      clearTimeout(timer);
      wake = undefined;
    }
  };

  /**
   * Leases no attempt holds: a dispatcher starts with nothing in flight (stop() waits for its attempts),
   * and one appliance owns the data directory's outbox (db/data-dir-lock.ts), so a lease found now is a
   * killed process's (kill -9, a crash, a power loss). Left to run out, those deliveries, a POST the
   * receiver may have taken included, waited 2 × webhooks.timeout + 5 s (25 s; over 2 minutes with a
   * 60 s timeout) after the restart before they were sent again; now at once, as delivery's leases are
   * (delivery/service.ts recover). If it cannot be written (a full disk), the leases run out as before.
   */
  const releaseLeftLeases = async (): Promise<void> => {
    try {
      const released = await deps.writes.run(() => repo.releaseAllLeases());
      if (released > 0) deps.log.info('released webhook leases of a previous run', { count: released });
    } catch (error) {
      logPassFailure(deps.log, error);
    }
  };

  const poke = () => {
    wakeRequested = true;
    wake?.();
  };

  return {
    get running() {
      return running;
    },
    start() {
      if (running) return;
      running = true;
      unsubscribe = onWebhookEventRecorded(deps.db, poke);
      loop = releaseLeftLeases().then(runLoop);
    },
    async stop() {
      if (!running) return;
      running = false;
      unsubscribe?.();
      poke();
      await loop;
      // POSTs in flight get a moment to be answered: one aborted after the receiver processed it would
      // be sent again after the restart, without an attempt listed. Then the rest are cut short.
      await waitAtMost(Promise.all([...inFlight]), stopGraceMs);
      aborter.abort();
      await Promise.all([...inFlight]);
      // Direct runOnce() calls after stop (CLI, tests) must not inherit the aborted signal.
      aborter = newAborter();
    },
    runOnce,
  };
}

/**
 * 410 Gone: the receiver wants no more webhooks (Standard Webhooks, "Delivery success and failure": the
 * sender should disable the endpoint; Zapier answers it for a zap turned off). Retrying it for a day, for
 * every event, was traffic it had asked to stop.
 */
function isGone(result: PostResult): boolean {
  return result.statusCode === 410;
}

/** `{emailId}` of an email event's payload (emailWebhookData, record-tracking.ts); nothing for other events. */
function emailIdOf(data: unknown): { emailId?: string } {
  const emailId = (data as { emailId?: unknown } | null)?.emailId;
  return typeof emailId === 'string' ? { emailId } : {};
}

/**
 * A full disk, a write lock held by another process, or a failed sync of the database, is reported once per episode (storage-health.ts,
 * write-queue.ts) and refuses every pass meanwhile: at error, with its stack, it came once per poll.
 */
function logPassFailure(log: Logger, error: unknown): void {
  if (isStorageFull(error) || isStorageBusy(error) || isStorageStopped(error)) log.debug('webhook dispatch pass refused: storage full, busy or stopped', { error: (error as Error).message });
  else log.error('webhook dispatch pass failed', { error });
}
