import type { Config } from '../config/schema.js';
import type { Db, Sqlite } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import { createReachWatch } from './reach-watch.js';
import { monotonicMs, type Clock } from '../lib/clock.js';
import { isStorageBusy, isStorageFull } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';
import { classify, classifyThroughRelay, formatReply, refusesRecipient, refusesSendingHost, type Classification, type SmtpReply } from './classify.js';
import { domainOf } from '../emails/address.js';
import { BuilderThreadLost, type MessageBuilder } from './message-builder.js';
import { createDomainLimiter, maxPutBackMs, type SlotRelease } from './domain-limiter.js';
import { noDeliveryMetrics, type DeliveryMetrics, type PostponeReason } from './metrics.js';
import { notifyDeliveryQueued } from './queue-signal.js';
import type { MtaSts, MtaStsPolicy } from './mta-sts.js';
import { createDeliveryRepo, type AttachmentRow, type ClaimedJob, type DeliveryJob, type DeliverableEmail } from './repo.js';
import { decideRetry, effectiveSchedule } from './retry.js';
import { readSetting, writeSetting } from '../db/settings.js';
import { createLeaseKeeper } from './leases.js';
import { createOutcomeBatcher } from './outcome-batcher.js';
import { parseRelayUrl } from './relay-url.js';
import { createTargetResolver, type AttemptResult } from './resolve-targets.js';
import type { SmtpClient, SmtpTarget } from './smtp-client.js';

/** The DKIM key (and bounce domain) a sender's domain signs with; undefined when it has none. */
export interface SigningKeyLookup {
  (projectId: string, fromAddress: string): { domain: string; selector: string; privateKeyPem: string; mailFromDomain: string; retiredAt?: number } | undefined;
}

export interface DeliveryEngineDeps {
  db: Db;
  sqlite: Sqlite;
  writes: WriteQueue;
  clock: Clock;
  log: Logger;
  resolver: Resolver;
  /**
   * What the relay's host is looked up with: the resolver when `dns.servers` is set; absent, the
   * system's lookup at connect (getaddrinfo), which reads /etc/hosts and resolv.conf's search list.
   */
  relayResolver?: Resolver;
  config: Config['delivery'];
  findSigningKey: SigningKeyLookup;
  /** Compose + sign (worker threads). */
  builder: MessageBuilder;
  smtp: SmtpClient;
  random?: () => number;
  /** RFC 8461 policy lookup; absent = MTA-STS not honoured. */
  mtaSts?: MtaSts;
  metrics?: DeliveryMetrics;
  /** VERP envelope sender for an email (bounces/verp.ts signs the id); default `bounce-<id>@<domain>`. */
  returnPath?: (emailId: string, mailFromDomain: string) => string;
  /** Open pixel and click rewriting (emails/tracking.ts); absent = html sent as stored. */
  trackHtml?: (html: string, emailId: string, openTracked: boolean) => string;
  /** The spec's suspension rule (reputation.ts): why a project is paused (its queued mail waits too), else undefined. */
  projectPaused?: (projectId: string) => string | undefined;
}

export interface DeliveryEngine {
  /** Releases leases of a previous process; call once before the first tick. */
  recover(): number;
  /**
   * Fills free slots with due jobs (first waiting for a slot when every one is held); resolves with
   * whether another pass should follow at once: it claimed jobs, or a slot came free meanwhile.
   */
  tick(): Promise<boolean>;
  /** Starts no more deliveries and wakes a tick waiting for a slot; drain() follows. */
  halt(): void;
  /**
   * Stops: deliveries whose SMTP session (or capture) is under way finish and are recorded (at most
   * `timeoutMs`); the others are left as they are, their leases released at the next start as after a
   * crash. Then closes connections and signer threads.
   */
  drain(timeoutMs?: number): Promise<void>;
  readonly inFlight: number;
}

const claimBatch = 100;
/** How long a claim waits for enough free slots to make a batch before claiming what is free. */
const claimGatherMs = 20;
/** When an attempt whose connection failed for want of file descriptors (this process's) goes again. */
const localFailureRetryDelayMs = 5_000;
/** When a build is tried again after its compose/sign thread died. */
const buildRetryDelayMs = 5_000;
/**
 * Jobs one write moves when a backlog is held (moveInChunks): ~3.5 ms of the event loop on a 2-vCPU
 * machine, where SQLite rewrites a job and its three index entries in ~7 µs.
 */
const backlogChunk = 500;
/** The longest a refused connection waits for the destination's other connections being set up to be answered (refusedBesideOthers). */
const refusalSettleMs = 5_000;
/** How long after one of ours closed a receiver may still count it (refusedBesideOthers). */
const closingCountedMs = 1_000;
/** The spread added to a put-back or held message's time (postpone; repo's holds add the same). */
const putBackSpreadMs = 250;
/**
 * A destination's backlog is held in bulk (holdBusyBacklog) once a message would wait this long for it,
 * and only on its own evidence (domain-limiter.ts paceKnown): one not measured yet is assumed to take a
 * second a message, and its first claims are put back a moment until its sessions say how fast it is.
 * Held at the first of those, a local sink's whole queue went back through take-backs ten at a time:
 * -10 % messages a second in the delivery bench.
 */
const busyHoldAfterMs = 10_000;
/** A busy destination's backlog is held in one pass at most this often (holdBusyBacklog). */
const busyHoldEveryMs = 1_000;
/** How long a paused project's queued mail waits before it is looked at again. */
const suspensionHoldMs = 10 * 60_000;
/** Retry delays of an outcome write refused for lack of space: doubling, capped. */
const outcomeRetryFirstMs = 500;
const outcomeRetryMaxMs = 30_000;

/** The settings key of the retry schedule the last start applied (applyRetryScheduleToDeferred). */
const retryScheduleSetting = 'delivery_retry_schedule';

/** Refusals that pass by themselves (a full disk, the write lock held by another process): worth waiting out. */
const waitsForStorage = (error: unknown) => isStorageFull(error) || isStorageBusy(error);

/**
 * The outbound pipeline (DESIGN "QUEUE" flow): claim → resolve → compose and sign → connect → classify →
 * record. Resolved first, so a message for a domain that cannot be reached now is not built for nothing.
 * One `deliverJob` per claimed row; the engine keeps up to `delivery.concurrency` in flight.
 */
export function createDeliveryEngine(deps: DeliveryEngineDeps): DeliveryEngine {
  const { clock, log, config } = deps;
  const repo = createDeliveryRepo(deps.sqlite, deps.db, clock);
  const findSigningKey = cacheSigningKeys(deps.findSigningKey, clock);
  const metrics = deps.metrics ?? noDeliveryMetrics;
  const reach = createReachWatch(log);
  const limiter = createDomainLimiter(config.per_domain_concurrency, () => clock.nowMs(), { baseMs: config.throttle_backoff_base, maxMs: config.throttle_backoff_max });
  const relay = config.mode === 'relay' ? parseRelayUrl(config.relay_url) : undefined;
  /** The destination a recipient domain's mail counts against: the domain, or through a relay the relay alone. */
  const destinationOf = (recipientDomain: string) => (relay ? 'relay' : recipientDomain);
  /** A destination's jobs as the repo selects them: by recipient domain, or every domain through a relay (undefined). */
  const jobsDomainOf = (destination: string) => (relay ? undefined : destination);
  const { resolveTargets, resolveRelay } = createTargetResolver({ resolver: deps.resolver, relayResolver: deps.relayResolver, config, log, random: deps.random });
  /** Claimed deliveries not finished yet, outcome written or not. */
  let inFlight = 0;
  /**
   * Claimed deliveries that hold one of the `concurrency` slots: until their SMTP session is over, or
   * until they finish when there is no session. A delivered message waiting for its outcome to commit
   * does not keep a slot: a slot held through the outcome's batching and fsync left the next message
   * waiting (with the slot freed at the session's end: +5-15 % messages/s, docs/benchmarks.md).
   */
  let slotsHeld = 0;
  /** Deliveries past the point of no return, by email id: an SMTP session or a capture under way, until recorded. */
  const committed = new Set<string>();
  const leases = createLeaseKeeper({ db: deps.db, writes: deps.writes, repo, clock, log, leaseMs: config.lease });
  /** When each paused project's backlog was last held (and logged): once per hold period, not per message. */
  const suspensionHeldAt = new Map<string, number>();
  let stopping = false;
  let slotWaiters: (() => void)[] = [];
  /** Waits that a halt cuts short (not one promise raced by each: every race left a reaction on it until the stop). */
  const haltWaiters = new Set<() => void>();
  const { record: recordOnce, flush: flushOutcomes } = createOutcomeBatcher(deps.writes);
  // Claim in batches: one claim per freed slot would be one fsync per message (synchronous=FULL).
  const minClaim = Math.max(1, Math.min(claimBatch, Math.floor(config.concurrency / 4)));

  const freeSlot = () => {
    const waiters = slotWaiters;
    slotWaiters = [];
    for (const wake of waiters) wake();
  };

  /**
   * Resolves once `count` slots are free, or after `ms`, or at a stop. Claims go in batches (a claim is a
   * commit), but mail is not held back behind slow sessions: after `ms` whatever is free is claimed.
   * Woken by freed slots, not by polling (a 2 ms poll cost ~7 % of a core while sessions held the slots).
   */
  const freeSlotsOrTimeout = (count: number, ms: number) =>
    new Promise<void>((resolve) => {
      let settled = false;
      const done = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(done, ms);
      const check = () => {
        if (settled) return;
        if (stopping || config.concurrency - slotsHeld >= count) done();
        else slotWaiters.push(check);
      };
      check();
    });

  const halt = () => {
    stopping = true;
    for (const { timer } of cooldownHolds.values()) clearTimeout(timer);
    cooldownHolds.clear();
    freeSlot();
    for (const wake of haltWaiters) wake();
  };

  /** Resolves after `ms`, or at once when the engine halts. */
  const sleepUnlessHalted = (ms: number) =>
    new Promise<void>((resolve) => {
      if (stopping) return resolve();
      const wake = () => {
        clearTimeout(timer);
        haltWaiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      timer.unref();
      haltWaiters.add(wake);
    });

  /**
   * An outcome refused for lack of space, or because another process holds the write lock, is written again until it commits: once a message has left,
   * giving up would send it once more when the lease expires. New claims are writes too, so they wait
   * for space like it. A stop ends the wait; the lease is then released at the next start, as after a
   * crash.
   */
  async function recordUntilStored(work: () => void): Promise<void> {
    for (let delayMs = outcomeRetryFirstMs; ; delayMs = Math.min(delayMs * 2, outcomeRetryMaxMs)) {
      try {
        return await recordOnce(work);
      } catch (error) {
        if (!waitsForStorage(error) || stopping) throw error;
        log.debug(isStorageFull(error) ? 'delivery outcome waits for storage space' : 'delivery outcome waits for the write lock another process holds', { retryInMs: delayMs });
        await sleepUnlessHalted(delayMs);
      }
    }
  }

  /**
   * Moves a backlog (a cooling destination's, a paused project's) in writes of at most `backlogChunk`
   * jobs, each its own trip through the group commit, until a write moves fewer or `stillWanted` says the
   * rest is moot. One statement over 100,000 queued jobs held the event loop, and every request with it,
   * for 0.7 s on a 2-vCPU machine (docs/benchmarks.md); between chunks sends and outcomes go on. Mail
   * not moved yet may be claimed meanwhile: the claim puts it back, as it did before any hold.
   * Resolves to the number of jobs moved.
   */
  async function moveInChunks(move: (limit: number) => number, stillWanted: () => boolean = () => !stopping): Promise<number> {
    let total = 0;
    for (;;) {
      let moved = 0;
      await recordUntilStored(() => {
        moved = move(backlogChunk);
      });
      total += moved;
      if (moved < backlogChunk || !stillWanted()) return total;
    }
  }

  const startDelivery = (claimed: ClaimedJob) => {
    const { job } = claimed;
    if (leases.isHeld(job.emailId)) {
      // Claimed again while its attempt is still running (its lease renewal failed, or its outcome made it
      // due again before this claim): that attempt decides, and holds the new lease until it ends.
      leases.adopt(job);
      log.warn('delivery claimed while in flight; not started twice', { emailId: job.emailId });
      return;
    }
    leases.hold(job);
    inFlight++;
    slotsHeld++;
    let slotReleased = false;
    const releaseSlot = () => {
      if (slotReleased) return;
      slotReleased = true;
      slotsHeld--;
      freeSlot();
    };
    deliverJob(claimed, releaseSlot)
      .catch((error) => {
        // The outcome could not be written: the job keeps its lease, released at the next start.
        if (isStorageFull(error)) log.warn('delivery outcome not stored: storage full at stop; the email is attempted again at the next start', { emailId: job.emailId });
        // Stopped meanwhile: the database may be closed already; the lease brings the email back at the next start.
        else if (stopping) log.info('delivery attempt ended by the stop; the email is attempted again at the next start', { emailId: job.emailId });
        // Its project was deleted during the attempt: there is nothing left to record the outcome on.
        else if (!repo.emailExists(job.emailId)) log.info('delivery outcome not recorded: its email was deleted meanwhile', { emailId: job.emailId });
        else log.error('delivery attempt crashed', { emailId: job.emailId, error });
      })
      .finally(() => {
        leases.end(job.emailId);
        inFlight--;
        const sessionRan = slotReleased; // its SMTP session gave the slot back (and took back put-back mail)
        releaseSlot();
        // A job taken back as a destination's probe that ended without a session (suppressed, its project
        // paused or deleted, no longer queued) never left the destination to take the next ones back:
        // the rest of a held backlog waited one more cool-down length. A job that had its session took
        // back when it left the destination: not asked twice (a write each) on the delivery path.
        if (!sessionRan) takeBackPutBack(destinationOf(job.recipientDomain));
        freeSlot(); // also wakes a drain waiting for the last outcomes
      });
  };

  /** `sessionOver` gives the job's slot back once its SMTP session has ended (the outcome is still to be written). */
  async function deliverJob({ job, loaded, suppressed }: ClaimedJob, sessionOver: () => void): Promise<void> {
    if (!loaded || loaded.email.status !== 'queued') {
      await recordUntilStored(() => repo.deleteJob(job.emailId));
      return;
    }
    const { email, attachments } = loaded;
    if (broadcastDeleted(email)) return dropForDeletedBroadcast(email);
    if (suppressed) return recordSuppressed(email);
    // A suspended project (§8) sends nothing, its backlog included: the reputation the rule protects is
    // the sending IP's. Its mail waits, without an attempt, and is looked at again until the pause lifts.
    const pausedBecause = deps.projectPaused?.(email.projectId);
    if (pausedBecause !== undefined) return holdForSuspension(job, email.projectId, pausedBecause);
    const key = signingKeyFor(job, email);
    const mailFromDomain = key?.mailFromDomain ?? domainOf(email.fromAddress);
    const mailFrom = deps.returnPath ? deps.returnPath(email.id, mailFromDomain) : `bounce-${email.id}@${mailFromDomain}`;
    const envelope = { from: mailFrom, to: email.toAddress };
    if (config.mode === 'capture') {
      const message = await buildMessage(email, attachments, key, job.queuedAt).catch((error: unknown) => error as Error);
      if (stopping) return; // the signer threads may be closing under this build
      if (message instanceof Error) return recordBuildFailure(email, message);
      if (repo.isProjectDeleting(email.projectId)) return dropForDeletedProject(job);
      if (broadcastDeleted(email)) return dropForDeletedBroadcast(email);
      return whileCommitted(job.emailId, () => recordCaptured(job, email, mailFrom, message));
    }
    const recipientDomain = domainOf(email.toAddress);
    const limitKey = destinationOf(recipientDomain);
    // A destination that answered 421 / 4.7.x is left alone until its cool-down ends: no attempt, no connection.
    const cooldownUntil = limiter.cooldownUntil(limitKey);
    if (cooldownUntil > 0) return holdForCooldown(job, email, limitKey, cooldownUntil);
    // A message that would wait long for its destination's connections goes back to the queue instead
    // of holding a slot other domains' mail could use (domain-limiter.ts).
    const putBackUntil = limiter.admit(limitKey, job.attempts > 0);
    if (putBackUntil > 0) {
      if (putBackUntil - clock.nowMs() >= busyHoldAfterMs && limiter.paceKnown(limitKey)) holdBusyBacklog(limitKey);
      return postpone(job, putBackUntil, 'destination busy');
    }
    let admitted = true;
    const leaveDestination = () => {
      if (!admitted) return;
      admitted = false;
      limiter.leave(limitKey);
      takeBackPutBack(limitKey);
    };
    try {
      await deliverToDestination({ job, email, attachments, key, envelope, recipientDomain, limitKey }, sessionOver, leaveDestination);
    } finally {
      leaveDestination();
    }
  }

  /** deliverJob's direct-to-MX or relay attempt, once its destination has admitted it. */
  async function deliverToDestination(
    { job, email, attachments, key, envelope, recipientDomain, limitKey }: {
      job: DeliveryJob;
      email: DeliverableEmail;
      attachments: AttachmentRow[];
      key: ReturnType<SigningKeyLookup>;
      envelope: { from: string; to: string };
      recipientDomain: string;
      limitKey: string;
    },
    sessionOver: () => void,
    leaveDestination: () => void,
  ): Promise<void> {
    // Resolve before composing: a message that cannot go anywhere now (DNS failure, null MX) costs no
    // compose/sign CPU, which matters with a large backlog for a broken domain.
    const policy = relay || !deps.mtaSts ? undefined : await deps.mtaSts.policyFor(recipientDomain);
    const destination = relay ? await resolveRelay(relay) : await resolveTargets(recipientDomain, policy);
    if (stopping) return;
    if ('result' in destination) {
      if (destination.result.localFailure) return deferForLocalFailure(email, destination.result);
      const outcome = classify(destination.result.reply);
      const heldUntil = backsOff(outcome, destination.result) ? throttleAndHoldBacklog(limitKey, !nothingAnswered(destination.result)) : 0;
      return recordAttempt(job, email, outcome, destination.result, heldUntil > 0 ? heldUntil - clock.nowMs() : 0);
    }
    const message = await buildMessage(email, attachments, key, job.queuedAt).catch((error: unknown) => error as Error);
    if (stopping) return;
    if (message instanceof Error) return recordBuildFailure(email, message);
    const session = { job, email, envelope, recipientDomain, limitKey, policy, targets: destination.targets, message };
    // A connection refused beside others the destination took: its limit is lowered, and the message waits for a slot again.
    while ((await sessionInSlot(session, sessionOver, leaveDestination)) === 'refused-connection');
  }

  /**
   * One SMTP session for the message in one of its destination's connection slots, and its outcome
   * recorded; 'refused-connection' when the destination refused the connection while it took others
   * (domain-limiter.ts refusedConnection): no attempt was made, and the caller waits for a slot again.
   */
  async function sessionInSlot(
    { job, email, envelope, recipientDomain, limitKey, policy, targets, message }: {
      job: DeliveryJob;
      email: DeliverableEmail;
      envelope: { from: string; to: string };
      recipientDomain: string;
      limitKey: string;
      policy: MtaStsPolicy | undefined;
      targets: SmtpTarget[];
      message: Buffer;
    },
    sessionOver: () => void,
    leaveDestination: () => void,
  ): Promise<'refused-connection' | void> {
    const release = await limiter.acquire(limitKey);
    if (stopping) return release(false);
    // Waiting for the destination's slot may have taken a 421: this one then waits for the cool-down too.
    const cooledUntil = limiter.cooldownUntil(limitKey);
    if (cooledUntil > 0) {
      release(false);
      leaveDestination();
      return holdForCooldown(job, email, limitKey, cooledUntil);
    }
    // Checked with nothing awaited between here and the session: while this one resolved, built and
    // waited for a connection (seconds to minutes), its project may have been deleted, or its address
    // suppressed (by hand, or by another email's bounce).
    const stopped = repo.isProjectDeleting(email.projectId)
      ? 'project-deleted'
      : broadcastDeleted(email)
        ? 'broadcast-deleted'
        : repo.isSuppressed(email.projectId, email.toAddress)
          ? 'suppressed'
          : undefined;
    if (stopped) {
      release(false);
      leaveDestination();
      if (stopped === 'suppressed') return recordSuppressed(email);
      return stopped === 'broadcast-deleted' ? dropForDeletedBroadcast(email) : dropForDeletedProject(job);
    }
    return whileCommitted(job.emailId, async () => {
      let result: AttemptResult | undefined;
      let outcome: Classification | undefined;
      let throttledUntil = 0;
      try {
        // The pool keeps no more connections open than the destination was learned to take.
        const groupCap = limiter.connectionLimit(limitKey);
        result = await sendVia(
          targets.map((target) => ({ ...target, groupCap })),
          envelope,
          message,
        );
        outcome = relay ? classifyThroughRelay(result.reply) : classify(result.reply);
      } catch (error) {
        release(false);
        leaveDestination();
        sessionOver();
        throw error;
      }
      if (result.refusedConnection && !stopping && (await refusedBesideOthers(limitKey, release))) {
        release(false);
        metrics.recordConnectionRefused();
        log.info('destination refused a connection beside ones it took (or had just closed): the message waits for a connection again, no attempt', { destination: limitKey, connections: limiter.connectionLimit(limitKey), reply: formatReply(result.reply) });
        return 'refused-connection';
      }
      // The throttle is noted before the slot passes to the next message waiting for this destination.
      if (backsOff(outcome, result)) throttledUntil = throttleAndHoldBacklog(limitKey, !nothingAnswered(result));
      // No session ran when the connection could not even be opened: its slot says nothing of the destination's pace.
      release(!result.localFailure);
      leaveDestination();
      sessionOver();
      if (result.localFailure) return deferForLocalFailure(email, result);
      await recordSession(job, email, result, outcome, { limitKey, policy, recipientDomain, throttledUntil });
    });
  }

  /**
   * Whether a connection the destination refused was one too many beside those it took (domain-limiter.ts
   * refusedConnection). Counted once the destination's other connections being set up have their answer:
   * smtp-server refuses one too many at once but greets the others after 100 ms, and a receiver
   * greeting every connection with 421 refuses them too.
   */
  async function refusedBesideOthers(limitKey: string, slot: SlotRelease): Promise<boolean> {
    const group = jobsDomainOf(limitKey); // the pool groups connections as the repo does jobs
    await deps.smtp.setupsSettled(group, refusalSettleMs);
    // A connection closed a moment ago (after its 100th message) may still count at the receiver: its
    // close and the new connection crossed (a 421 to every tenth run of a test against a receiver taking two).
    const justClosed = deps.smtp.closedWithin(group, closingCountedMs);
    return !stopping && limiter.refusedConnection(limitKey, deps.smtp.takenConnections(group), slot, justClosed);
  }

  /**
   * Until here a stop leaves the job alone: no message has left, and the next start retries it. From
   * here on the session runs and its outcome is recorded, and stop() waits for both.
   */
  async function whileCommitted<T>(emailId: string, work: () => Promise<T>): Promise<T> {
    committed.add(emailId);
    try {
      return await work();
    } finally {
      committed.delete(emailId);
    }
  }

  /** An SMTP session's classified reply (its throttle already noted by the caller): the destination's state, then the attempt. */
  async function recordSession(
    job: DeliveryJob,
    email: DeliverableEmail,
    result: AttemptResult,
    outcome: Classification,
    { limitKey, policy, recipientDomain, throttledUntil }: { limitKey: string; policy: MtaStsPolicy | undefined; recipientDomain: string; throttledUntil: number },
  ): Promise<void> {
    const minRetryDelayMs = throttledUntil > 0 ? throttledUntil - clock.nowMs() : 0;
    if (outcome.action === 'delivered') limiter.recordSuccess(limitKey);
    if (policy?.mode === 'testing' && !result.tls) log.warn('mta-sts testing: delivered without TLS (enforce would defer)', { emailId: email.id, domain: recipientDomain, mxHost: result.mxHost });
    if (policy && policy.mode !== 'none') result.mtaSts = policy.mode;
    await recordAttempt(job, email, outcome, result, minRetryDelayMs);
  }

  /** Its project is being deleted: the mail does not go out, and the purge removes the email. */
  async function dropForDeletedProject(job: DeliveryJob): Promise<void> {
    await recordUntilStored(() => repo.deleteJob(job.emailId));
    log.info('delivery dropped: the project is being deleted', { emailId: job.emailId });
  }

  /**
   * A broadcast being deleted while its email waited: the deletion removes the queued emails it reaches,
   * but not one claimed for delivery then, and one cut short by a crash left them all; after the restart
   * they were delivered (237 of a deleted broadcast, 8 that were under way at the kill) before the
   * scheduler finished the deletion.
   */
  function broadcastDeleted(email: DeliverableEmail): boolean {
    return email.messengerId !== null && repo.isBroadcastDeleting(email.messengerId);
  }

  async function dropForDeletedBroadcast(email: DeliverableEmail): Promise<void> {
    await recordUntilStored(() => repo.deleteEmail(email.id));
    log.info('delivery dropped: its broadcast was deleted', { emailId: email.id, messengerId: email.messengerId });
  }

  /** Destinations whose put-back messages are being made due again (one such write at a time each). */
  const takingBack = new Set<string>();

  /**
   * A destination with room takes back messages it put back (domain-limiter.ts roomForPutBack), earliest
   * first, instead of idling until their put-back times: those follow the pace measured when they were
   * put back, and sessions often get shorter once connections are open and reused.
   */
  function takeBackPutBack(limitKey: string): void {
    if (stopping || takingBack.has(limitKey)) return;
    const room = limiter.roomForPutBack(limitKey);
    if (room === 0) return;
    takingBack.add(limitKey);
    const domain = jobsDomainOf(limitKey);
    const startedAt = clock.nowMs();
    let taken = 0;
    // Through the outcome batcher, behind the put-backs recorded before it: a message put back a moment
    // ago is still leased until its write commits, and would otherwise be missed and counted as drained.
    // Up to the latest time the destination put back or held to, and the spread those writes add.
    const reachMs = limiter.putBackReach(limitKey) + putBackSpreadMs;
    recordUntilStored(() => {
      taken = repo.pullForward(domain, clock.nowMs(), room, reachMs);
    })
      .then(() => {
        if (taken < room) limiter.putBackDrained(limitKey, startedAt);
        if (taken > 0) notifyDeliveryQueued(deps.db);
      })
      .catch((error: unknown) => log.warn('put-back messages not taken back; they come back at their time', { destination: limitKey, error }))
      .finally(() => takingBack.delete(limitKey));
  }

  /**
   * Each cooling destination's hold: its cool-down's end, the time its backlog was held back to, and the
   * timer that takes a probe back when the cool-down ends.
   */
  const cooldownHolds = new Map<string, { untilMs: number; heldUntilMs: number; timer: NodeJS.Timeout }>();

  /** Records a throttle (backsOff) of the destination and holds its backlog for the cool-down; returns the cool-down's end. */
  function throttleAndHoldBacklog(limitKey: string, answered: boolean): number {
    const untilMs = limiter.recordThrottle(limitKey, answered);
    holdBacklog(limitKey, untilMs);
    return untilMs;
  }

  /**
   * Moves the destination's waiting mail past its cool-down in one write. Left due, each cool-down
   * claimed the whole backlog and put it back one write per message, twice (held, then put back behind
   * the probe): 2,000 messages for one throttling domain were 9,123 put-backs in 14 s. Held one more
   * cool-down length past its end, the backlog is taken back from there (domain-limiter.ts heldBack): a
   * probe when the cool-down ends, the rest once one is delivered; a refused probe holds it again. The
   * extra length only matters when nothing takes it back (a restart forgets the cool-down).
   */
  function holdBacklog(limitKey: string, untilMs: number): void {
    const hold = cooldownHolds.get(limitKey);
    if (stopping || hold?.untilMs === untilMs) return;
    if (hold) clearTimeout(hold.timer);
    const nowMs = clock.nowMs();
    // A later 421 of a session already under way extends the cool-down a little: the backlog is held past it already.
    const heldAlready = hold !== undefined && hold.heldUntilMs >= untilMs;
    const heldUntilMs = heldAlready ? hold.heldUntilMs : untilMs + (untilMs - nowMs);
    const timer = setTimeout(() => endCooldownHold(limitKey, untilMs), Math.max(0, untilMs - nowMs)).unref();
    cooldownHolds.set(limitKey, { untilMs, heldUntilMs, timer });
    limiter.heldBack(limitKey, heldUntilMs);
    if (heldAlready) return;
    // Mail past its give-up deadline is left due: holdForCooldown gives it up (or holds it) when claimed.
    // A newer hold (a later cool-down) or a stop makes the rest of this one moot.
    const stillThisHold = () => !stopping && cooldownHolds.get(limitKey)?.heldUntilMs === heldUntilMs;
    moveInChunks((limit) => repo.holdDestination(jobsDomainOf(limitKey), heldUntilMs, nowMs - config.give_up_after, limit), stillThisHold)
      .then((held) => held > 0 && log.debug('destination cooling down: its queued mail held', { destination: limitKey, held, until: heldUntilMs }))
      .catch((error: unknown) => log.warn('a cooling-down destination\'s mail was not held; it is put back as it comes due', { destination: limitKey, error }));
  }

  /**
   * Mail put back or held for its destination is taken back at the destination's pace by the limiter,
   * which a restart empties: a busy destination's backlog, held an hour ahead, then sat out the hour. At
   * start each such destination is known again and a first few of its messages are taken back; the rest
   * follow as their sessions end.
   */
  function resumeHeldBacklogs(): void {
    const held = repo.heldBacklogs(clock.nowMs());
    // Every hold first: through a relay all domains are one destination, and a take-back reaches as far as the latest.
    for (const { domain, heldUntil } of held) limiter.heldBack(destinationOf(domain), heldUntil);
    for (const { domain } of held) takeBackPutBack(destinationOf(domain));
    if (held.length > 0) log.info('mail held for busy or cooling destinations is taken back at their pace', { destinations: relay ? 1 : held.length });
  }

  /** Destinations whose backlog was held for being busy within the last `busyHoldEveryMs` (holdBusyBacklog). */
  const busyHolds = new Set<string>();

  /**
   * A destination too busy to admit a message: its mail never attempted yet is moved out of the claim's
   * way in writes of 500 (an hour ahead, as far as a message is ever put back), and taken back from there
   * at the pace its sessions end (domain-limiter.ts heldBack, takeBackPutBack). Claimed and put back one
   * write per message, 20,000 messages for a tarpit held mail queued behind them in the same lane for
   * 18 s, and 50,000 for 23 s; at the hour, each was written back one by one again. While a hold is in
   * place, the next one holds to the same time, so it moves only the mail that came since, not the
   * held backlog once more.
   */
  function holdBusyBacklog(limitKey: string): void {
    if (stopping || busyHolds.has(limitKey)) return;
    busyHolds.add(limitKey);
    const nowMs = clock.nowMs();
    const heldUntilMs = limiter.heldUntil(limitKey) || nowMs + maxPutBackMs;
    // Before the first write: a take-back that starts meanwhile and finds nothing does not end the hold.
    limiter.heldBack(limitKey, heldUntilMs);
    moveInChunks((limit) => repo.holdDestination(jobsDomainOf(limitKey), heldUntilMs, nowMs - config.give_up_after, limit))
      .then((held) => {
        if (held > 0) log.debug('destination busy: its queued mail held, taken back at its pace', { destination: limitKey, held });
        // Its sessions may all have ended while the backlog was moved: nothing else would take it back.
        takeBackPutBack(limitKey);
      })
      .catch((error: unknown) => log.warn('a busy destination\'s mail was not held; it is put back as it comes due', { destination: limitKey, error }))
      .finally(() => setTimeout(() => busyHolds.delete(limitKey), busyHoldEveryMs).unref());
  }

  /**
   * The cool-down is over: a probe is taken back from the held backlog (domain-limiter.ts roomForPutBack).
   * A timer may fire before the clock reads its end (Node runs some timers up to 1 ms before the wall clock reaches their time):
   * the limiter would still say cooling, nothing would be taken back, and the backlog would wait one more
   * cool-down length. The timer is set again for what is left.
   */
  function endCooldownHold(limitKey: string, untilMs: number): void {
    const hold = cooldownHolds.get(limitKey);
    const leftMs = untilMs - clock.nowMs();
    if (hold?.untilMs === untilMs && leftMs > 0 && !stopping) {
      hold.timer = setTimeout(() => endCooldownHold(limitKey, untilMs), leftMs).unref();
      return;
    }
    if (hold?.untilMs === untilMs) cooldownHolds.delete(limitKey);
    takeBackPutBack(limitKey);
  }

  /**
   * Where a job claimed during its destination's cool-down goes: with the held backlog, when it could
   * be taken back from there (never attempted, before its give-up deadline); else to the cool-down's end,
   * so a deferred retry's schedule is not lengthened more than the cool-down asks.
   */
  function cooldownHoldFor(job: DeliveryJob, destination: string, untilMs: number, nowMs: number): number {
    const heldUntilMs = cooldownHolds.get(destination)?.heldUntilMs ?? 0;
    return job.attempts === 0 && nowMs < job.queuedAt + config.give_up_after && heldUntilMs > untilMs ? heldUntilMs : untilMs;
  }

  /**
   * Holds a job until its destination can take it (a cool-down ends, or its backlog gets to it); not an
   * attempt (no SMTP, no event, attempts unchanged).
   */
  async function postpone(job: DeliveryJob, untilMs: number, reason: PostponeReason): Promise<void> {
    // A little spread so a large backlog does not all come due in the same millisecond.
    const atMs = untilMs + Math.floor((deps.random ?? Math.random)() * putBackSpreadMs);
    await recordUntilStored(() => repo.postpone(job.emailId, atMs));
    metrics.recordPostponed(reason);
    log.debug(`delivery postponed: ${reason}`, { emailId: job.emailId, until: atMs });
  }

  /**
   * Puts the job back until its destination's cool-down ends; past `give_up_after`, with the destination
   * throttling for at least `throttle_backoff_max`, gives it up instead. A destination that keeps
   * answering 421 gets one probe per cool-down (up to an hour), and mail put back makes no attempt:
   * waiting for attempts, a backlog of N would bounce after about 2N hours, not after give_up_after. The
   * throttle is about the sender, so nobody is suppressed.
   */
  async function holdForCooldown(job: DeliveryJob, email: DeliverableEmail, destination: string, untilMs: number): Promise<void> {
    const nowMs = clock.nowMs();
    // Only a destination that has refused for a while, not one routine 421 (a backlog past the deadline
    // after a long pause would all bounce at it); through a relay the refusals are the relay's.
    const throttlingFor = nowMs - (limiter.throttledSince(destination) || nowMs);
    if (nowMs < job.queuedAt + config.give_up_after || throttlingFor < config.throttle_backoff_max) {
      return postpone(job, cooldownHoldFor(job, destination, untilMs, nowMs), 'destination cooling down');
    }
    const smtpResponse = `Gave up: ${destination} kept answering 421 / 4.7.x (slow down), or could not be reached, until delivery.give_up_after, so the email was held without a further attempt`;
    const data = { attempt: job.attempts, mxHost: null, smtpResponse, rule: 'held-by-throttle', gaveUp: true };
    // Counted (§8) only when the destination did answer, with its 421s: never reached, it may as well have
    // been this side's outage (see nothingAnswered).
    const countsAgainstSender = !relay && limiter.throttleAnswered(destination);
    await recordUntilStored(() => repo.recordBounce(email, 'soft', smtpResponse, data, { suppressRecipient: false, countsAgainstSender }));
    metrics.recordOutcome('bounced');
    log.info('email bounced after retries', { emailId: email.id, smtpResponse, attempts: job.attempts });
  }

  /**
   * Puts the job back for `suspensionHoldMs`; the first held job of a period also moves the rest of the
   * project's due backlog (moveInChunks), so a large backlog is not claimed one message at a time.
   */
  async function holdForSuspension(job: DeliveryJob, projectId: string, reason: string): Promise<void> {
    const nowMs = clock.nowMs();
    const untilMs = nowMs + suspensionHoldMs;
    // Past what its destination takes back (takeBackPutBack): taken back, it was held again, and the
    // next taken back in its place, in a loop for as long as the destination's hold lasted.
    const destination = destinationOf(job.recipientDomain);
    const jobUntilMs = Math.max(untilMs, limiter.putBackReach(destination) + putBackSpreadMs + 1_000);
    const firstOfPeriod = nowMs - (suspensionHeldAt.get(projectId) ?? -Infinity) >= suspensionHoldMs;
    if (firstOfPeriod) suspensionHeldAt.set(projectId, nowMs);
    await recordUntilStored(() => repo.postpone(job.emailId, jobUntilMs));
    const backlog = firstOfPeriod ? await moveInChunks((limit) => repo.postponeProjectDue(projectId, nowMs, untilMs, limit)) : 0;
    // DESIGN convention 10: an id to look up (one held email), why, and until when, not the project alone.
    if (firstOfPeriod) {
      log.warn('queued mail held: the project is paused by the suspension rule (delivery.suspension_*)', {
        projectId,
        emailId: job.emailId,
        reason,
        held: backlog + 1,
        until: new Date(untilMs).toISOString(),
      });
    }
  }

  /** The sender's key; a deleted domain's kept key only for mail queued before the deletion. */
  function signingKeyFor(job: DeliveryJob, email: DeliverableEmail): ReturnType<SigningKeyLookup> {
    const key = findSigningKey(email.projectId, email.fromAddress);
    return key?.retiredAt === undefined || job.queuedAt <= key.retiredAt ? key : undefined;
  }

  /**
   * Once per sender domain at warn level (a sandbox sending from an unverified domain would otherwise
   * log it for every email and bury other warnings), then at debug.
   */
  const warnedUnsigned = new Set<string>();
  function warnUnsigned(email: DeliverableEmail): void {
    const domain = domainOf(email.fromAddress);
    const first = !warnedUnsigned.has(domain) && warnedUnsigned.size < 1000;
    if (first) warnedUnsigned.add(domain);
    (first ? log.warn : log.debug).call(log, 'no DKIM key for sender; sending unsigned', { emailId: email.id, projectId: email.projectId, senderDomain: domain, ...(first && { note: 'said once per sender domain' }) });
  }

  /**
   * `queuedAtMs` dates the message (RFC 5322 §3.6.1: the origination date, when it was ready to enter the
   * mail system: accepted, or released at its scheduledAt). The attempt's time made a message deferred for
   * days read as written the day it got through, and every retry a different message.
   */
  async function buildMessage(email: DeliverableEmail, attachments: AttachmentRow[], key: ReturnType<SigningKeyLookup>, queuedAtMs: number): Promise<Buffer> {
    if (!key) warnUnsigned(email);
    const input = {
      emailId: email.id,
      toAddress: email.toAddress,
      headerRecipients: email.headerRecipients,
      fromAddress: email.fromAddress,
      fromName: email.fromName,
      replyToAddress: email.replyToAddress,
      replyToName: email.replyToName,
      subject: email.subject,
      html: email.html !== null && deps.trackHtml ? deps.trackHtml(email.html, email.id, email.isOpenTracked) : email.html,
      text: email.text,
      headers: email.headers,
      messageId: email.messageId ? (email.messageId.startsWith('<') ? email.messageId : `<${email.messageId}>`) : null,
      attachments: attachments.map((a) => ({ name: a.name, contentType: a.contentType, content: a.content, contentId: a.contentId })),
      date: new Date(queuedAtMs),
    };
    const dkim = key ? { domain: key.domain, selector: key.selector, privateKeyPem: key.privateKeyPem } : undefined;
    return deps.builder.build(input, dkim, Math.floor(clock.nowMs() / 1000));
  }

  /** RFC 5321 §5.1: on a connection failure try the next address / MX; a transaction reply is final. */
  async function sendVia(preferred: SmtpTarget[], envelope: { from: string; to: string }, message: Buffer): Promise<AttemptResult> {
    // The order they are tried in: the last of them is the last tried, named in the attempt's event.
    const targets = hostsWithRoomFirst(preferred);
    const failures: string[] = [];
    let throttled: { code: number; enhanced?: string } | undefined;
    let unsupported: { reply: SmtpReply; count: number } | undefined;
    for (const target of targets) {
      const outcome = await deps.smtp.send(target, envelope, message);
      if (outcome.kind === 'reply') return { reply: outcome.reply, mxHost: target.host, tls: outcome.tls };
      // Sent, unanswered: another host now would make a second copy; the retry schedule decides.
      if (outcome.kind === 'unknown') return { reply: outcome.reply, mxHost: target.host, tls: outcome.tls, unanswered: true };
      // This process is out of file descriptors: the next host would fail the same way, and none was reached.
      if (outcome.kind === 'local-failure') return { reply: outcome.reply, mxHost: target.host, localFailure: true };
      failures.push(`${target.host}[${target.address}]: ${outcome.reply.message}`);
      if (outcome.kind === 'unsupported') {
        unsupported = { reply: outcome.reply, count: (unsupported?.count ?? 0) + 1 };
        continue;
      }
      const session = outcome.reply.sessionReply;
      if (session && (session.code === 421 || session.enhanced?.startsWith('4.7.'))) throttled ??= session;
      log.debug('mx connection failed', { host: target.host, address: target.address, reason: outcome.reply.message });
    }
    // Every host answered that it cannot take this message (RFC 6531 §3.2: no SMTPUTF8): final. When some
    // were only unreachable, one of those may take it later.
    if (unsupported && unsupported.count === targets.length) return { reply: unsupported.reply, mxHost: targets[targets.length - 1]?.host ?? null };
    const summary = `All mail hosts failed: ${failures.join('; ')}`;
    // A host that said "421 / 4.7.x, slow down" and closed is a throttle signal for the destination, not an outage.
    if (throttled) return { reply: { code: throttled.code, enhanced: throttled.enhanced, message: summary }, mxHost: targets[targets.length - 1]?.host ?? null, refusedConnection: true };
    // Some host lacking an extension this message needs says nothing of the destination's reachability.
    return { reply: { code: 0, message: summary }, mxHost: targets[targets.length - 1]?.host ?? null, unreachable: unsupported === undefined };
  }

  /**
   * The hosts in preference order, those known to take no more connections of ours now last
   * (smtp-client hostAtCapacity): asked first, each refused a connection per message.
   */
  function hostsWithRoomFirst(targets: SmtpTarget[]): SmtpTarget[] {
    const full = targets.filter((target) => deps.smtp.hostAtCapacity(target));
    return full.length === 0 ? targets : [...targets.filter((target) => !full.includes(target)), ...full];
  }

  /**
   * Whether the destination is held off after this attempt, as after a 421: it asked to slow down, or
   * nothing answered at all (no host reachable, no greeting, a DNS failure). Otherwise every message of
   * a backlog for a dead destination would try it in turn, each holding a slot for connect and greeting
   * timeouts; held, its mail waits without attempts and one message at a time probes it.
   */
  function backsOff(outcome: Classification, result: AttemptResult): boolean {
    return outcome.throttle || result.unreachable === true;
  }

  /**
   * Whether days of deferrals count against the recipient's address: only when its mail hosts kept
   * refusing the address (4xx to RCPT TO, a full mailbox). Not when nothing answered (a DNS failure, no
   * host reachable, a TLS hang-up, a message sent without an answer): that is as often this side's
   * outage (its resolver, an outbound port 25 its provider blocks) as the recipient's, and an address
   * suppressed for it stays suppressed once it is fixed. Nor a relay's (an outage, the operator's
   * credentials), this appliance's own refusal of a private MX, a throttle or an X.7 refusal (the
   * sending IP's reputation, a blocklist), or a refusal of the sender or of the message's content.
   */
  function giveUpSuppresses(outcome: Classification, result: AttemptResult): boolean {
    if (relay || result.reply.localPolicy || outcome.throttle || nothingAnswered(result)) return false;
    return refusesRecipient(result.reply);
  }

  /**
   * No reply to judge the attempt by: a DNS failure, no host reachable, a TLS hang-up, a message sent
   * without an answer. As often this side's outage (its resolver, an outbound port 25 its provider
   * blocks) as the recipient's, so a give-up after it neither suppresses the address nor counts in the
   * project's bounce rate (§8): counted, such an outage paused every project with mail queued, and the
   * pause outlived the fix by the whole `suspension_window`.
   */
  function nothingAnswered(result: AttemptResult): boolean {
    return result.unanswered === true || result.reply.code === 0;
  }

  async function recordAttempt(job: DeliveryJob, email: DeliverableEmail, outcome: Classification, result: AttemptResult, minRetryDelayMs = 0): Promise<void> {
    const attempts = job.attempts + 1;
    const smtpResponse = formatReply(result.reply);
    const data = { attempt: attempts, mxHost: result.mxHost, smtpResponse, tls: result.tls ?? false, rule: outcome.rule, ...(result.mtaSts ? { mtaSts: result.mtaSts } : {}) };
    if (!relay) reach.observe(job.recipientDomain, outcome.action === 'delivered' || outcome.action === 'bounce' || !nothingAnswered(result), smtpResponse);
    if (outcome.action === 'delivered') {
      await recordUntilStored(() => repo.recordDelivered(email, smtpResponse, data));
      metrics.recordOutcome('delivered', clock.nowMs() - job.queuedAt);
      log.info('email delivered', { emailId: email.id, mxHost: result.mxHost, attempts });
      return;
    }
    if (outcome.action === 'bounce') {
      // The appliance's own refusal of a private MX, or a blocklist's of the address every project sends
      // from, says nothing of the sender's mail: not counted (§8).
      await recordUntilStored(() => repo.recordBounce(email, 'hard', smtpResponse, data, { suppressRecipient: outcome.suppressRecipient, countsAgainstSender: !result.reply.localPolicy && !refusesSendingHost(result.reply) }));
      metrics.recordOutcome('bounced');
      log.info('email bounced', { emailId: email.id, mxHost: result.mxHost, smtpResponse, attempts });
      return;
    }
    const decision = decideRetry({ schedule: config.retry_schedule, giveUpAfterMs: config.give_up_after }, attempts, job.queuedAt, clock.nowMs(), minRetryDelayMs);
    if (decision.kind === 'give-up') {
      await recordUntilStored(() =>
        repo.recordBounce(email, 'soft', smtpResponse, { ...data, gaveUp: true }, {
          suppressRecipient: giveUpSuppresses(outcome, result),
          countsAgainstSender: !relay && !result.reply.localPolicy && !nothingAnswered(result) && !refusesSendingHost(result.reply),
        }),
      );
      metrics.recordOutcome('bounced');
      log.info('email bounced after retries', { emailId: email.id, smtpResponse, attempts });
      return;
    }
    await recordUntilStored(() =>
      repo.reschedule(email.id, attempts, decision.atMs, { type: 'deferred', data: { ...data, nextAttemptAt: new Date(decision.atMs).toISOString() } }),
    );
    metrics.recordOutcome('deferred');
    log.info('email deferred', { emailId: email.id, mxHost: result.mxHost, smtpResponse, attempts, nextAttemptAt: new Date(decision.atMs).toISOString() });
    // The relay refusing the session (a wrong password, TLS), refusing to relay for us, or being down is
    // the operator's to fix.
    // Named by email and project (DESIGN convention 10): the operator finds the mail that waits, and whose.
    const held = { emailId: email.id, projectId: email.projectId };
    if (relay && result.reply.code === 0) log.warn('relay session failed; mail waits for it', { relay: relay.host, reason: smtpResponse, ...held });
    if (outcome.rule === 'relay-refused') log.warn('the relay refused the mail (relaying denied, or our sender); it waits: check delivery.relay_url and the relay\'s settings', { relay: relay?.host, reason: smtpResponse, ...held });
  }

  async function recordCaptured(job: DeliveryJob, email: DeliverableEmail, mailFrom: string, message: Buffer): Promise<void> {
    const smtpResponse = '250 2.0.0 captured';
    await recordUntilStored(() => {
      repo.storeCaptured({ emailId: email.id, projectId: email.projectId, mailFrom, rcptTo: email.toAddress, raw: message });
      repo.recordDelivered(email, smtpResponse, { attempt: 1, mxHost: null, smtpResponse, captured: true });
    });
    metrics.recordOutcome('delivered', clock.nowMs() - job.queuedAt);
    log.info('email captured', { emailId: email.id });
  }

  async function recordSuppressed(email: DeliverableEmail): Promise<void> {
    let reported = false;
    await recordUntilStored(() => {
      // The suppression may come from a report about this very email (a copy sent without an answer).
      reported = repo.finishByEarlierReports(email);
      if (reported) return;
      // Why, from the suppression itself (a bounce, a complaint, by hand): it may be deleted later.
      const suppression = repo.findSuppression(email.projectId, email.toAddress);
      repo.appendEvent(email.id, { type: 'suppressed', data: { reason: suppression?.reason ?? 'Recipient is on the suppression list', detail: suppression?.detail ?? null } });
      repo.finishEmail(email.id, 'suppressed');
    });
    if (reported) return log.info('email finished by a report about a copy already sent', { emailId: email.id });
    metrics.recordOutcome('suppressed');
    log.info('email suppressed', { emailId: email.id });
  }

  /**
   * The connection or a DNS lookup failed on this side (out of file descriptors, under a burst of connections): the
   * destination is neither held off (its other mail would wait out a cool-down for nothing) nor charged
   * an attempt; the email goes again shortly, and the operator is told the problem is this side's.
   */
  async function deferForLocalFailure(email: DeliverableEmail, result: AttemptResult): Promise<void> {
    log.warn('delivery deferred: this process is out of file descriptors (raise the open-file limit, ulimit -n / LimitNOFILE); the destination is not held off', { emailId: email.id, mxHost: result.mxHost, reason: result.reply.message });
    await recordUntilStored(() => repo.postpone(email.id, clock.nowMs() + localFailureRetryDelayMs));
  }

  async function recordBuildFailure(email: DeliverableEmail, error: unknown): Promise<void> {
    // The thread that was building it died: the message itself is fine, it goes again shortly.
    if (error instanceof BuilderThreadLost) {
      log.warn('email build interrupted; trying again shortly', { emailId: email.id, error: error.message });
      await recordUntilStored(() => repo.postpone(email.id, clock.nowMs() + buildRetryDelayMs));
      return;
    }
    // A message that cannot be composed (corrupt stored data) will not compose on a retry either.
    log.error('email could not be composed', { emailId: email.id, error });
    await recordUntilStored(() => {
      repo.appendEvent(email.id, { type: 'error', data: { message: (error as Error)?.message ?? String(error) } });
      repo.finishEmail(email.id, 'error');
    });
    metrics.recordOutcome('error');
  }

  /**
   * An operator who shortens delivery.retry_schedule (an outage over, mail deferred for hours) expects it
   * to apply at the restart: deferred mail waited out the delay the old schedule gave it. A longer
   * schedule moves nothing (the next deferral uses it). Only a start on another schedule than the last
   * one (or the first start that keeps it) reads the queue: the update scans it (~90 ms per 1,000,000
   * jobs), and with the schedule unchanged it would only move mail held for other reasons (a cool-down).
   */
  function applyRetryScheduleToDeferred(): void {
    const schedule = effectiveSchedule(config.retry_schedule);
    const applied = JSON.stringify(schedule);
    if (readSetting(deps.db, retryScheduleSetting) === applied) return;
    const moved = repo.bringRetriesWithin(clock.nowMs(), schedule);
    writeSetting(deps.db, retryScheduleSetting, applied);
    if (moved > 0) log.info('deferred mail brought forward to delivery.retry_schedule', { count: moved });
  }

  /** Emails named in the start's warning of leases left by a previous run; the count says how many in all. */
  const leasedEmailsNamed = 20;

  return {
    get inFlight() {
      return inFlight;
    },
    recover() {
      stopping = false;
      try {
        // Named, as a stop with sessions under way names them: the operator finds the mail that may go twice.
        const leased = repo.leasedEmailIds(leasedEmailsNamed);
        const released = repo.releaseAllLeases(clock.nowMs());
        if (released > 0) {
          log.warn('the previous run stopped while delivering (a crash, a kill, a stop cut short): those emails are tried again, and one the receiver took before the stop may arrive twice', { count: released, emailIds: leased });
        }
        applyRetryScheduleToDeferred();
        resumeHeldBacklogs();
        return released;
      } catch (error) {
        // A start on a disk still full (or a database another process holds) goes on: it refuses new mail
        // until there is room (507), and each leased job comes due again when its lease runs out. Thrown,
        // this failed the start with SQLite's stack, at every start until space was freed.
        if (!waitsForStorage(error)) throw error;
        log.warn('delivery leases of the previous run not released (storage full or busy): their emails are attempted when the leases run out', { error: (error as Error).message });
        return 0;
      }
    },
    async tick() {
      if (stopping) return false;
      const free = config.concurrency - slotsHeld;
      if (free <= 0) {
        await new Promise<void>((resolve) => slotWaiters.push(resolve));
        return true;
      }
      if (free < minClaim && slotsHeld > 0) {
        await freeSlotsOrTimeout(minClaim, claimGatherMs);
        if (stopping) return false;
      }
      const claimed = await deps.writes.run(() => repo.claimDue(clock.nowMs(), Math.min(config.concurrency - slotsHeld, claimBatch), config.lease));
      for (const job of claimed) startDelivery(job);
      return claimed.length > 0;
    },
    halt,
    // 6 s of the process's 10 s to stop (main.ts): the database's close and the WAL's tidy-up come after
    // it, and with 8 s a loaded machine passed 10 s and exited 1 (nothing lost, but a failed stop).
    async drain(timeoutMs = 6_000) {
      halt();
      const notStarted = inFlight - committed.size;
      if (notStarted > 0) log.info('stopping: deliveries not started yet are left for the next start', { count: notStarted });
      const deadline = monotonicMs() + timeoutMs;
      while (committed.size > 0 && monotonicMs() < deadline) {
        await new Promise<void>((resolve) => {
          slotWaiters.push(resolve);
          setTimeout(resolve, 100).unref();
        });
      }
      // Named: a message already sent in full whose reply had not come goes again at the next start, so its recipient may get two copies.
      if (committed.size > 0) log.warn('stopping with SMTP sessions under way; their leases are released at the next start, and a message among them already sent may go twice', { inFlight: committed.size, emailIds: [...committed] });
      leases.stop();
      // Outcomes of jobs that were not committed (a suppression found, a DNS answer) go to the queue now, before it closes.
      flushOutcomes();
      deps.smtp.close();
      await deps.builder.close();
    },
  };
}

/** Signing keys change rarely (domain added/verified); a short cache keeps the lookup off the per-message path. */
function cacheSigningKeys(lookup: SigningKeyLookup, clock: Clock): SigningKeyLookup {
  const cache = new Map<string, { at: number; key: ReturnType<SigningKeyLookup> }>();
  return (projectId, fromAddress) => {
    const cacheKey = `${projectId}|${domainOf(fromAddress)}`;
    const now = clock.nowMs();
    const hit = cache.get(cacheKey);
    if (hit && now - hit.at < 5000 && now >= hit.at) return hit.key;
    const key = lookup(projectId, fromAddress);
    if (cache.size > 10_000) cache.clear();
    cache.set(cacheKey, { at: now, key });
    return key;
  };
}
