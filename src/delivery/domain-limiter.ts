import { throttleCooldownMs, type BackoffPolicy } from './backoff.js';

/**
 * Caps concurrent connections per destination domain (receivers throttle senders that open too many),
 * lower for a destination that refused a connection beside others it took (refusedConnection), and
 * backs off after 421 / 4.7.x: a throttled destination gets no new attempts until its cool-down ends
 * (exponential, capped: backoff.ts), then one delivery at a time until one succeeds, which resets it.
 *
 * It also keeps a slow destination from taking the engine's slots (`delivery.concurrency`) from every
 * other one: a claimed message that would wait long for its destination is not admitted (`admit`) but
 * put back for the time the destination will take to get to it, so a backlog for one slow or throttled
 * domain does not hold up mail for the others (Postfix's per-destination queues do the same job).
 */
export interface DomainLimiter {
  /**
   * Whether a claimed message for `domain` may wait in a slot for one of its connections: 0 if so (call
   * `leave` once it is done with the destination), otherwise the time to put it back to, one expected
   * session after the one before it, so a backlog comes back at the pace the destination takes it. A
   * deferred `retry` is spread behind the other retries only: it was due at the time its event
   * announced, and is never taken back early as never-attempted mail is, so behind the backlog's spread
   * it went out up to an hour late, after mail queued long after it.
   */
  admit(domain: string, retry?: boolean): number;
  /** An admitted message is done with its destination (sent, failed, or put back). */
  leave(domain: string): void;
  /**
   * How many of the messages it put back the destination could take now: 0 unless some may still wait
   * (their put-back times reach past now) and it has fewer admitted than twice its connections (one in
   * each session, one ready behind it); 0 while it cools down. Their put-back times follow the session
   * length measured when they were put back: when sessions got shorter since (a new connection's
   * handshake is slower than a reused one's), they would wait while the destination idles.
   */
  roomForPutBack(domain: string): number;
  /**
   * None of the destination's put-back messages waits any more: a take-back that started at `sinceMs`
   * found fewer than it asked for. Ignored when a message was put back since.
   */
  putBackDrained(domain: string, sinceMs: number): void;
  /**
   * The caller put the destination's backlog back to `untilMs` itself (held past a cool-down in one
   * write): roomForPutBack then counts it as put back, so a probe and, once one is delivered, the rest
   * are taken back at the destination's pace instead of all coming due at `untilMs`.
   */
  heldBack(domain: string, untilMs: number): void;
  /** The time the destination's backlog is held back to (heldBack), while some of it may still wait there; 0 otherwise. */
  heldUntil(domain: string): number;
  /**
   * The latest time the destination's messages were put back or held to (admit, heldBack) while some
   * may still wait, 0 otherwise: a take-back reaches no further (mail of a paused project held past it
   * is left alone, rather than taken back and held again in a loop).
   */
  putBackReach(domain: string): number;
  /**
   * Waits for one of the destination's connection slots; the function returned gives it back, with
   * `used` false when no session ran in it (its length then says nothing about the destination).
   */
  acquire(domain: string): Promise<SlotRelease>;
  /**
   * Records a throttle reply (`answered`), or an attempt nothing answered (no host reachable, a DNS
   * failure); returns the end of the destination's cool-down.
   */
  recordThrottle(domain: string, answered?: boolean): number;
  /**
   * A connection the destination refused at its greeting (421 / 4.7.x) while this one held a slot, with
   * `taken` connections of ours open there (past their greeting): it takes no more connections than
   * those (a receiver's per-client cap, as Postfix's anvil or smtp-server's maxClients keep). Its
   * connection limit is lowered to them (below the limit, whatever `taken` says, so each refusal takes
   * one off) and true returned: the message waits for a slot again, no attempt made. Also true, once
   * until the next delivery, when none was open but one was `justClosed` (within the last second): the
   * receiver may still count it (its close and our new connection cross).
   * Otherwise false: the refusal is about this sender, a throttle. Sessions still being set up are not
   * counted: a receiver greeting every connection with 421 refuses them too. A session granted its slot
   * before the limit last changed (`slot.generation`) lowers nothing: the others refused in the same
   * burst would take the limit below what the receiver takes, one each. It waits for a slot again.
   */
  refusedConnection(domain: string, taken: number, slot: SlotRelease, justClosed: boolean): boolean;
  /**
   * Records a delivery: the destination is healthy again (no cool-down, its connection limit back).
   * Every `growConnectionLimitAfter` deliveries in a row at a lowered connection limit, one more
   * connection is tried: a cap may have been met by a burst of refusals of another kind.
   */
  recordSuccess(domain: string): void;
  /** Connections the destination is given at once now: 1 while it recovers from a throttle, else its connection limit. */
  connectionLimit(domain: string): number;
  /**
   * Whether the destination's pace rests on what it did, not on the second a session is assumed to take
   * before one is measured: a session ended, or one has been running for `evidentSessionMs`.
   */
  paceKnown(domain: string): boolean;
  /** End of the destination's cool-down, or 0 when it may be tried now. */
  cooldownUntil(domain: string): number;
  /** Consecutive throttle replies of a destination (0 = healthy). */
  throttleLevel(domain: string): number;
  /** When the destination's current throttling began (no delivery since); 0 when it is not throttling. */
  throttledSince(domain: string): number;
  /** Whether the destination answered (421 / 4.7.x) at least once in its current throttling, rather than never being reached. */
  throttleAnswered(domain: string): boolean;
  /** Destinations remembered now: in use, cooling down, or with messages put back. */
  readonly destinations: number;
}

/** Gives a connection slot back (`used` false: no session ran in it). */
export interface SlotRelease {
  (used?: boolean): void;
  /** The destination's connection-limit generation when the slot was granted (refusedConnection). */
  readonly generation: number;
}

interface Slot {
  active: number;
  waiting: (() => void)[];
  throttleLevel: number;
  throttledUntil: number;
  /** When the current throttling episode began (its first 421 / 4.7.x since the last delivery); 0 when none. */
  throttledSince: number;
  /** Whether a reply (421 / 4.7.x) came in the current episode, not only silence (unreachable, DNS failures). */
  throttleAnswered: boolean;
  /** Admitted messages not done with this destination yet: in its sessions, or waiting or getting ready for one. */
  admitted: number;
  /** How long a session to this destination holds its connection slot, a moving average. */
  sessionMs: number;
  /** Whether a session has ended yet (sessionMs is then measured, not assumed). */
  measured: boolean;
  /** When each session holding a connection slot now began. */
  running: number[];
  /** When a session last ended: a measured pace is kept for `paceMemoryMs` after it. */
  lastSessionEndedAt: number;
  /** The latest time a message not admitted was put back to. */
  spreadUntil: number;
  /** The latest time a deferred retry not admitted was put back to: retries are spread behind each other, not behind the never-attempted backlog. */
  retrySpreadUntil: number;
  /** When the latest message was put back. */
  lastPutBackAt: number;
  /** The latest time the caller held the destination's backlog back to (heldBack); 0 when none. */
  heldUntil: number;
  /** Connections the destination takes at once, as far as known: `cap` until it refuses one (refusedConnection). */
  connectionCap: number;
  /** Deliveries since the connection cap was last lowered or raised (recordSuccess raises it after `growConnectionLimitAfter`). */
  deliveriesAtCap: number;
  /** A refusal with no connection taken was put down to one of ours just closed, still counted there (refusedConnection); reset by a delivery. */
  refusedAfterClose: boolean;
  /** Counts changes of connectionCap: a slot granted under an older one says nothing of the new limit. */
  capGeneration: number;
}

/**
 * The longest a claimed message may expect to wait for its destination while holding one of the
 * engine's slots. Longer, and it is put back: a slot held that long is taken from every other domain.
 */
export const maxDestinationWaitMs = 2_000;
/** The session length assumed for a destination before one is measured. */
const initialSessionMs = 1_000;
/** A message is never put back further than this; it comes back and is looked at again. */
export const maxPutBackMs = 60 * 60_000;
/** Weight of the newest session in the moving average. */
const sessionWeight = 0.2;
/** A destination's measured pace is remembered this long after its last session (bursts a few minutes apart). */
const paceMemoryMs = 10 * 60_000;
/**
 * Every this many admissions, destinations nobody uses any more are forgotten (~0.25 kB each): one
 * whose pace memory ran out, or one that throttled, then got no mail (its messages given up), which
 * nothing else would forget once forgiven.
 */
const sweepEveryAdmissions = 1_000;
/**
 * Deliveries in a row at a lowered connection limit before one more connection is tried. A try the
 * destination refuses costs a connection and a greeting, no attempt: one per this many messages.
 */
export const growConnectionLimitAfter = 100;
/** A session running this long says the destination is slow before any has ended (paceKnown). */
const evidentSessionMs = 500;

export function createDomainLimiter(cap: number, nowMs: () => number, backoff: BackoffPolicy = { baseMs: 60_000, maxMs: 3_600_000 }): DomainLimiter {
  const slots = new Map<string, Slot>();
  /** A throttled destination is forgiven once `backoff.maxMs` passed after its cool-down without another throttle. */
  const forgiven = (slot: Slot, now: number) => slot.throttleLevel > 0 && now - slot.throttledUntil > backoff.maxMs;
  // While a destination is recovering from throttling, one delivery at a time probes it.
  const limitOf = (slot: Slot) => (slot.throttleLevel > 0 && !forgiven(slot, nowMs()) ? 1 : slot.connectionCap);
  const slotOf = (domain: string) => {
    let slot = slots.get(domain);
    if (!slot) {
      slot = { active: 0, waiting: [], throttleLevel: 0, throttledUntil: 0, throttledSince: 0, throttleAnswered: false, admitted: 0, sessionMs: initialSessionMs, measured: false, running: [], lastSessionEndedAt: 0, spreadUntil: 0, retrySpreadUntil: 0, lastPutBackAt: 0, heldUntil: 0, connectionCap: cap, deliveriesAtCap: 0, refusedAfterClose: false, capGeneration: 0 };
      slots.set(domain, slot);
    }
    return withCurrentPace(slot);
  };

  /**
   * A pace measured more than `paceMemoryMs` ago, with no session since, is forgotten here too: a slot
   * kept for its put-back messages, or not swept yet, would otherwise pace its next mail by a session
   * of days ago.
   */
  const withCurrentPace = (slot: Slot) => {
    if (slot.measured && slot.running.length === 0 && nowMs() - slot.lastSessionEndedAt >= paceMemoryMs) {
      slot.measured = false;
      slot.sessionMs = initialSessionMs;
    }
    return slot;
  };
  const existing = (domain: string) => {
    const slot = slots.get(domain);
    return slot && withCurrentPace(slot);
  };

  const wake = (slot: Slot) => {
    while (slot.waiting.length > 0 && slot.active < limitOf(slot)) {
      slot.active++;
      slot.waiting.shift()!();
    }
  };

  /**
   * How long a session holds a slot: the moving average, or the age of the oldest session begun since
   * the last one ended, when that is longer. A destination that stopped answering ends no session, so
   * the average alone would go on saying it is fast; a session begun before the last end (one slow
   * message beside others that end) says nothing of the destination's pace.
   */
  const sessionLengthOf = (slot: Slot) => {
    const stalled = slot.running.filter((startedAt) => startedAt >= slot.lastSessionEndedAt);
    return stalled.length === 0 ? slot.sessionMs : Math.max(slot.sessionMs, nowMs() - Math.min(...stalled));
  };
  // A session ends every session length / limit on average.
  const intervalOf = (slot: Slot) => sessionLengthOf(slot) / limitOf(slot);
  /**
   * How many admitted messages the destination takes: one per connection, and those that wait at most
   * maxDestinationWaitMs behind them. Before any session has ended, one per connection only: a
   * destination that never answers (a hung DNS lookup, an MX that never greets) took 15 of the 20
   * delivery slots, and two such destinations all of them, for minutes per wave.
   */
  const admissible = (slot: Slot) => (slot.measured ? limitOf(slot) + Math.floor(maxDestinationWaitMs / intervalOf(slot)) : limitOf(slot));

  // A destination with messages put back is remembered until they are drained or due: its pace and
  // put-back time are what brings them back.
  const forgetIfIdle = (domain: string, slot: Slot) => {
    const now = nowMs();
    const idle = slot.active === 0 && slot.waiting.length === 0 && (slot.throttleLevel === 0 || forgiven(slot, now)) && slot.admitted === 0;
    const paceForgotten = !slot.measured || now - slot.lastSessionEndedAt >= paceMemoryMs;
    if (idle && paceForgotten && !hasPutBack(slot, now)) slots.delete(domain);
  };

  /** Whether some of the destination's put-back (or held) messages may still wait: their times reach past now. */
  const hasPutBack = (slot: Slot, now: number) => slot.spreadUntil > now || slot.heldUntil > now;

  const release = (domain: string, slot: Slot, grantedAt: number, used: boolean) => {
    slot.active--;
    slot.running.splice(slot.running.indexOf(grantedAt), 1);
    if (used) {
      const heldMs = Math.max(0, nowMs() - grantedAt);
      // The first session replaces the assumed length; later ones move the average.
      slot.sessionMs = slot.measured ? slot.sessionMs + sessionWeight * (heldMs - slot.sessionMs) : heldMs;
      slot.measured = true;
      slot.lastSessionEndedAt = nowMs();
    }
    wake(slot);
    forgetIfIdle(domain, slot);
  };

  let admissionsSinceSweep = 0;
  const sweepIfDue = () => {
    if (++admissionsSinceSweep < sweepEveryAdmissions) return;
    admissionsSinceSweep = 0;
    for (const [domain, slot] of slots) forgetIfIdle(domain, slot);
  };

  return {
    get destinations() {
      return slots.size;
    },
    admit(domain, retry = false) {
      sweepIfDue();
      const s = slotOf(domain);
      if (s.admitted < admissible(s)) {
        s.admitted++;
        return 0;
      }
      // Sessions end one every interval on average; the admitted ones beyond `limit` go first.
      const intervalMs = intervalOf(s);
      const now = nowMs();
      const expectedWaitMs = (s.admitted - limitOf(s) + 1) * intervalMs;
      // One interval after the retry put back before it, so each is written back about once.
      if (retry) return (s.retrySpreadUntil = Math.min(Math.max(s.retrySpreadUntil, now + expectedWaitMs) + intervalMs, now + maxPutBackMs));
      s.lastPutBackAt = now;
      s.spreadUntil = Math.min(Math.max(s.spreadUntil, now + expectedWaitMs) + intervalMs, now + maxPutBackMs);
      return s.spreadUntil;
    },
    leave(domain) {
      const s = slots.get(domain);
      if (!s || s.admitted === 0) return;
      s.admitted--;
      forgetIfIdle(domain, s);
    },
    roomForPutBack(domain) {
      const s = existing(domain);
      if (!s || !hasPutBack(s, nowMs()) || s.throttledUntil > nowMs()) return 0;
      return Math.max(0, Math.min(2 * limitOf(s), admissible(s)) - s.admitted);
    },
    putBackDrained(domain, sinceMs) {
      const s = slots.get(domain);
      if (!s || s.lastPutBackAt >= sinceMs) return;
      s.spreadUntil = 0;
      s.heldUntil = 0;
      forgetIfIdle(domain, s);
    },
    heldBack(domain, untilMs) {
      const s = slotOf(domain);
      s.lastPutBackAt = nowMs();
      s.heldUntil = Math.max(s.heldUntil, untilMs);
    },
    heldUntil(domain) {
      const s = slots.get(domain);
      return s && s.heldUntil > nowMs() ? s.heldUntil : 0;
    },
    putBackReach(domain) {
      const s = slots.get(domain);
      return s && hasPutBack(s, nowMs()) ? Math.max(s.heldUntil, s.spreadUntil) : 0;
    },
    acquire(domain) {
      const s = slotOf(domain);
      let released = false;
      let grantedAt = 0;
      let generation = 0;
      const done = ((used = true) => {
        if (released) return;
        released = true;
        release(domain, s, grantedAt, used);
      }) as SlotRelease;
      Object.defineProperty(done, 'generation', { get: () => generation });
      const granted = () => {
        grantedAt = nowMs();
        generation = s.capGeneration;
        s.running.push(grantedAt);
      };
      if (s.active < limitOf(s)) {
        s.active++;
        granted();
        return Promise.resolve(done);
      }
      return new Promise((resolve) => s.waiting.push(() => (granted(), resolve(done))));
    },
    recordThrottle(domain, answered = true) {
      const slot = slotOf(domain);
      const now = nowMs();
      // Quiet for a while after its last cool-down: a new episode starts again from the base.
      if (forgiven(slot, now)) slot.throttleLevel = 0;
      // Replies of sessions already under way when the cool-down began belong to the same episode (five
      // parallel 421s took the first cool-down to 16 times the base): only one after it, a probe's, escalates.
      if (slot.throttleLevel === 0) {
        slot.throttledSince = now;
        slot.throttleAnswered = false;
      }
      slot.throttleAnswered ||= answered;
      if (slot.throttleLevel === 0 || now >= slot.throttledUntil) slot.throttleLevel++;
      slot.throttledUntil = Math.max(slot.throttledUntil, now + throttleCooldownMs(backoff, slot.throttleLevel));
      return slot.throttledUntil;
    },
    refusedConnection(domain, taken, granted, justClosed) {
      const slot = slots.get(domain);
      if (!slot) return false;
      if (granted.generation !== slot.capGeneration) return true;
      // Below the limit whatever `taken` says: a receiver counting what we do not (another MX host's
      // idle connections) would otherwise refuse each retry again, at the same limit.
      const lowered = Math.min(taken, limitOf(slot) - 1);
      if (lowered < 1) {
        if (!justClosed || slot.refusedAfterClose) return false;
        slot.refusedAfterClose = true;
        return true;
      }
      slot.connectionCap = Math.min(slot.connectionCap, lowered);
      slot.deliveriesAtCap = 0;
      slot.capGeneration++;
      return true;
    },
    recordSuccess(domain) {
      const slot = slots.get(domain);
      if (!slot) return;
      slot.refusedAfterClose = false;
      if (slot.connectionCap < cap && ++slot.deliveriesAtCap >= growConnectionLimitAfter) {
        slot.connectionCap++;
        slot.deliveriesAtCap = 0;
        slot.capGeneration++;
        wake(slot);
      }
      if (slot.throttleLevel === 0) return;
      slot.throttleLevel = 0;
      slot.throttledUntil = 0;
      slot.throttledSince = 0;
      slot.throttleAnswered = false;
      wake(slot);
      // The delivery's slot and admission are given back before its success is recorded (service.ts).
      forgetIfIdle(domain, slot);
    },
    connectionLimit(domain) {
      const slot = slots.get(domain);
      return slot ? limitOf(slot) : cap;
    },
    paceKnown(domain) {
      const slot = existing(domain);
      return slot !== undefined && (slot.measured || slot.running.some((startedAt) => nowMs() - startedAt >= evidentSessionMs));
    },
    cooldownUntil(domain) {
      const until = slots.get(domain)?.throttledUntil ?? 0;
      return until > nowMs() ? until : 0;
    },
    throttleLevel(domain) {
      return slots.get(domain)?.throttleLevel ?? 0;
    },
    throttledSince(domain) {
      const slot = slots.get(domain);
      return slot && slot.throttleLevel > 0 && !forgiven(slot, nowMs()) ? slot.throttledSince : 0;
    },
    throttleAnswered(domain) {
      const slot = slots.get(domain);
      return slot !== undefined && slot.throttleLevel > 0 && !forgiven(slot, nowMs()) && slot.throttleAnswered;
    },
  };
}
