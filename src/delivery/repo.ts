import type { Db, Sqlite } from '../db/client.js';
import type { EmailStatus } from '../db/schema/emails.js';
import type { HeaderRecipients } from '../emails/header-recipients.js';
import type { Clock } from '../lib/clock.js';
import { idLowerBound, newId } from '../lib/ids.js';
import { deletingMark } from '../projects/repo.js';
import { complaintDetail, normalizeAddress } from '../suppressions/repo.js';
import { recordWebhookEvent } from '../webhooks/outbox.js';
import type { BounceType } from './classify.js';
import { defaultMessageId } from './compose.js';
import { countOutcome } from './reputation.js';
import { cutToLength } from '../lib/text.js';

/**
 * Synchronous queue queries (DESIGN convention 6) as prepared statements: delivery runs them several
 * times per message, and building them through the query builder each time cost a third of the main
 * thread at 1,000 messages/s. Writers run inside one transaction (the group-commit write queue).
 */
export interface DeliveryJob {
  emailId: string;
  projectId: string;
  recipientDomain: string;
  nextAttemptAt: number;
  attempts: number;
  leaseUntil: number | null;
  queuedAt: number;
}

/** What delivery reads of an email to build its message: mapped from the row, JSON parsed. */
export interface DeliverableEmail {
  id: string;
  projectId: string;
  status: EmailStatus;
  toAddress: string;
  fromAddress: string;
  fromName: string | null;
  replyToAddress: string | null;
  replyToName: string | null;
  subject: string;
  html: string | null;
  text: string | null;
  /** Whether the open pixel goes into the html at composition. */
  isOpenTracked: boolean;
  headers: Record<string, string> | null;
  messageId: string | null;
  /** The submitted message's To/Cc lists, shown instead of `To: toAddress` (emails/header-recipients.ts). */
  headerRecipients: HeaderRecipients | null;
  templateId: string | null;
  templateName: string | null;
  /** The broadcast (Messenger draft) it belongs to, if any. */
  messengerId: string | null;
}

export interface AttachmentRow {
  name: string;
  contentType: string;
  content: Buffer;
  contentId: string | null;
}

/** A claimed job with what its attempt needs, read in the claim's transaction. */
export interface ClaimedJob {
  job: DeliveryJob;
  /** Undefined when the email is gone; its status may no longer be `queued`. */
  loaded: LoadedEmail | undefined;
  /** The recipient is on the project's suppression list. */
  suppressed: boolean;
}

export interface LoadedEmail {
  email: DeliverableEmail;
  attachments: AttachmentRow[];
}

export interface AttemptEvent {
  type: 'delivered' | 'deferred' | 'bounce' | 'suppressed' | 'error' | 'captured';
  data: Record<string, unknown>;
}

export type DeliveryRepo = ReturnType<typeof createDeliveryRepo>;

/** A report or open recorded about an email before its delivered outcome (applyEarlierReports). */
interface EarlierReport {
  type: 'bounce' | 'complaint' | 'open';
  data: string | null;
  time: number;
  ipAddress: string | null;
  userAgent: string | null;
}

export function createDeliveryRepo(sqlite: Sqlite, db: Db, clock: Clock) {
  const s = {
    releaseLeases: sqlite.prepare(`update delivery_jobs set lease_until = null, next_attempt_at = ? where lease_until is not null`),
    leasedEmails: sqlite.prepare(`select email_id from delivery_jobs where lease_until is not null limit ?`).pluck(),
    // The delay the schedule gives the job's next attempt (its last step repeats), counted from @now.
    bringRetriesWithin: sqlite.prepare(
      `update delivery_jobs set next_attempt_at = @now + json_extract(@schedule, '$[' || cast(min(attempts, @steps) - 1 as integer) || ']')
        where attempts > 0 and lease_until is null and next_attempt_at > @now + json_extract(@schedule, '$[' || cast(min(attempts, @steps) - 1 as integer) || ']')`,
    ),
    // The projects with jobs, one index seek each (a skip scan): not a read of every due job.
    queuedProjects: sqlite
      .prepare(
        `with recursive project(id) as (
           select min(project_id) from delivery_jobs
           union all
           select (select min(project_id) from delivery_jobs where project_id > project.id) from project where project.id is not null)
         select id from project where id is not null`,
      )
      .pluck(),
    laneDue: sqlite.prepare(
      `select email_id as emailId, project_id as projectId, recipient_domain as recipientDomain, next_attempt_at as nextAttemptAt,
              attempts, lease_until as leaseUntil, queued_at as queuedAt
         from delivery_jobs indexed by delivery_jobs_lane_due_idx
        where project_id = ? and bulk = ? and next_attempt_at <= ? order by next_attempt_at limit ? offset ?`,
    ),
    lease: sqlite.prepare(`update delivery_jobs set lease_until = ?, next_attempt_at = ? where email_id = ?`),
    extendLease: sqlite.prepare(`update delivery_jobs set lease_until = ?, next_attempt_at = ? where email_id = ? and lease_until = ?`),
    email: sqlite.prepare(
      `select id, project_id as projectId, status, to_address as toAddress, from_address as fromAddress, from_name as fromName,
              reply_to_address as replyToAddress, reply_to_name as replyToName, subject, html, text, is_open_tracked as isOpenTracked, headers,
              message_id as messageId, header_recipients as headerRecipients, template_id as templateId, template_name as templateName,
              messenger_id as messengerId
         from emails where id = ?`,
    ),
    attachments: sqlite.prepare(`select * from email_attachments where email_id = ?`),
    exists: sqlite.prepare(`select 1 from emails where id = ?`).pluck(),
    status: sqlite.prepare(`select status from emails where id = ? and project_id = ?`).pluck(),
    projectDeleting: sqlite.prepare(`select 1 from settings where key = ?`).pluck(),
    broadcastDeleting: sqlite.prepare(`select 1 from messenger_drafts where id = ? and deleting`).pluck(),
    deleteEmail: sqlite.prepare(`delete from emails where id = ?`),
    deleteJob: sqlite.prepare(`delete from delivery_jobs where email_id = ?`),
    reschedule: sqlite.prepare(`update delivery_jobs set attempts = ?, next_attempt_at = ?, lease_until = null where email_id = ?`),
    postpone: sqlite.prepare(`update delivery_jobs set next_attempt_at = ?, lease_until = null where email_id = ?`),
    // Never-attempted jobs only: a deferred retry keeps its schedule (greylisting counts on the wait). The
    // put-back indexes hold only those (migration 0025), so the retries due before them are not read.
    pullForwardDomain: sqlite.prepare(
      `update delivery_jobs set next_attempt_at = ? where email_id in (
         select email_id from delivery_jobs indexed by delivery_jobs_put_back_idx
          where recipient_domain = ? and next_attempt_at > ? and next_attempt_at <= ? and attempts = 0 and lease_until is null
          order by next_attempt_at limit ?)`,
    ),
    pullForwardAny: sqlite.prepare(
      `update delivery_jobs set next_attempt_at = ? where email_id in (
         select email_id from delivery_jobs indexed by delivery_jobs_put_back_any_idx
          where next_attempt_at > ? and next_attempt_at <= ? and attempts = 0 and lease_until is null
          order by next_attempt_at limit ?)`,
    ),
    // A cool-down's hold: the put-back indexes again (never-attempted jobs only), the earliest due first,
    // at most `limit` per statement. A held job leaves the range (due past the hold), so the next
    // statement takes the next ones.
    holdDestinationDomain: sqlite.prepare(
      `update delivery_jobs set next_attempt_at = ? + abs(random() % 250) where email_id in (
         select email_id from delivery_jobs indexed by delivery_jobs_put_back_idx
          where recipient_domain = ? and attempts = 0 and next_attempt_at < ? and lease_until is null and queued_at > ?
          order by next_attempt_at limit ?)`,
    ),
    holdDestinationAny: sqlite.prepare(
      `update delivery_jobs set next_attempt_at = ? + abs(random() % 250) where email_id in (
         select email_id from delivery_jobs indexed by delivery_jobs_put_back_any_idx
          where attempts = 0 and next_attempt_at < ? and lease_until is null and queued_at > ?
          order by next_attempt_at limit ?)`,
    ),
    // One pass over the put-back index (never-attempted jobs only), grouped by its leading column.
    heldBacklogs: sqlite.prepare(
      `select recipient_domain as domain, max(next_attempt_at) as heldUntil from delivery_jobs indexed by delivery_jobs_put_back_idx
        where attempts = 0 and next_attempt_at > ? group by recipient_domain`,
    ),
    postponeProjectDue: sqlite.prepare(
      // `bulk in (0, 1)`: both lanes of the project, each a range of delivery_jobs_lane_due_idx. A
      // postponed job is due past `nowMs`, out of the range: the next statement takes the next ones.
      `update delivery_jobs set next_attempt_at = ? + abs(random() % 250), lease_until = null where email_id in (
         select email_id from delivery_jobs indexed by delivery_jobs_lane_due_idx
          where project_id = ? and bulk in (0, 1) and next_attempt_at <= ? limit ?)`,
    ),
    finish: sqlite.prepare(`update emails set status = ?, updated_at = ? where id = ? and status = 'queued'`),
    statusFrom: sqlite.prepare(`update emails set status = ?, updated_at = ? where id = ? and status = ?`),
    earlierReports: sqlite.prepare(
      `select type, data, time, ip_address as ipAddress, user_agent as userAgent from email_events where email_id = ? and type in ('bounce', 'complaint', 'open') order by time`,
    ),
    event: sqlite.prepare(`insert into email_events (id, email_id, type, time, data) values (?, ?, ?, ?, ?)`),
    suppression: sqlite.prepare(`select reason, detail from suppressions where project_id = ? and email_address = ?`),
    suppress: sqlite.prepare(
      `insert into suppressions (project_id, email_address, reason, detail, created_at) values (?, ?, ?, ?, ?) on conflict do nothing`,
    ),
    capture: sqlite.prepare(
      `insert into captured_messages (email_id, project_id, mail_from, rcpt_to, raw, captured_at) values (?, ?, ?, ?, ?, ?)
       on conflict(email_id) do update set raw = excluded.raw, captured_at = excluded.captured_at`,
    ),
    captured: sqlite.prepare(`select email_id as emailId, mail_from as mailFrom, rcpt_to as rcptTo, raw, captured_at as capturedAt from captured_messages where email_id = ? and project_id = ?`),
    wasCaptured: sqlite
      .prepare(`select 1 from email_events where email_id = ? and type = 'delivered' and json_extract(data, '$.captured') = 1 limit 1`)
      .pluck(),
  };

  function loadEmail(emailId: string): LoadedEmail | undefined {
    const row = s.email.get(emailId) as
      | (Omit<DeliverableEmail, 'headers' | 'isOpenTracked' | 'headerRecipients'> & { headers: string | null; isOpenTracked: number; headerRecipients: string | null })
      | undefined;
    if (!row) return undefined;
    const attachments = (s.attachments.all(emailId) as Record<string, unknown>[]).map((a) => ({
      name: a.name as string,
      contentType: a.content_type as string,
      content: a.content as Buffer,
      // The inline-image column is optional (added by the send feature); tolerate its absence.
      contentId: (a.content_id as string | null | undefined) ?? null,
    }));
    const headers = row.headers ? (JSON.parse(row.headers) as Record<string, string>) : null;
    const headerRecipients = row.headerRecipients ? (JSON.parse(row.headerRecipients) as HeaderRecipients) : null;
    return { email: { ...row, isOpenTracked: row.isOpenTracked === 1, headers, headerRecipients }, attachments };
  }

  const findSuppression = (projectId: string, address: string) =>
    s.suppression.get(projectId, normalizeAddress(address)) as { reason: string; detail: string | null } | undefined;
  const isSuppressed = (projectId: string, address: string) => findSuppression(projectId, address) !== undefined;

  function appendEvent(emailId: string, event: AttemptEvent): void {
    s.event.run(newId(clock), emailId, event.type, clock.nowMs(), JSON.stringify(event.data));
  }

  /** Moves a queued email to a final status and drops its job; false when it was not queued any more. */
  function finishEmail(emailId: string, status: 'delivered' | 'bounce' | 'error' | 'suppressed'): boolean {
    const changed = s.finish.run(status, clock.nowMs(), emailId).changes > 0;
    s.deleteJob.run(emailId);
    return changed;
  }

  /**
   * Reports about the message recorded while its email was still queued: they came while the delivered
   * outcome's write waited, or for a copy sent without an answer (retried since). Reports leave a
   * queued email to delivery, so the email moves on here as it would have then, webhooks included: a
   * hard bounce, then a complaint (which outranks it); an open only moves a delivered email. Answers
   * whether a bounce or complaint decided the email's status. `current`: its status now.
   */
  function applyEarlierReports(email: DeliverableEmail, current: 'delivered' | 'queued'): boolean {
    const reports = s.earlierReports.all(email.id) as EarlierReport[];
    const bounce = reports.find((r) => r.type === 'bounce');
    const complaint = reports.find((r) => r.type === 'complaint');
    const firstOpen = reports.find((r) => r.type === 'open');
    const nowMs = clock.nowMs();
    // Opened while still queued (a copy sent without an answer): its first-open webhook waited for
    // email.delivered, and goes after it, unless a bounce says the email never arrived.
    if (current === 'delivered' && firstOpen && !bounce) {
      const data = { id: email.id, emailId: email.id, time: new Date(firstOpen.time).toISOString(), ipAddress: firstOpen.ipAddress, userAgent: firstOpen.userAgent };
      recordWebhookEvent(db, clock, { projectId: email.projectId, type: 'email.open', data });
    }
    if (!bounce && !complaint) {
      if (current === 'delivered' && firstOpen) s.statusFrom.run('open', nowMs, email.id, 'delivered');
      return false;
    }
    const at = clock.now().toISOString();
    const dataOf = (report: { data: string | null }) => JSON.parse(report.data ?? '{}') as Record<string, string | null | undefined>;
    let status: string = current;
    if (current === 'queued') s.deleteJob.run(email.id);
    if (bounce) {
      const data = dataOf(bounce);
      s.statusFrom.run('bounce', nowMs, email.id, status);
      // A queued email was not counted as sent yet: a copy of it was.
      countOutcome(sqlite, email.projectId, nowMs, status === 'delivered' ? 'bounced-later' : 'bounced');
      const extra = { bounceType: 'hard', smtpResponse: data.smtpResponse ?? null, status: data.status ?? null, bouncedAt: at };
      recordWebhookEvent(db, clock, { projectId: email.projectId, type: 'email.bounce', data: emailWebhookData(email, extra) });
      status = 'bounce';
    }
    if (complaint) {
      const data = dataOf(complaint);
      s.statusFrom.run('complaint', nowMs, email.id, status);
      if (status === 'queued') countOutcome(sqlite, email.projectId, nowMs, 'delivered');
      countOutcome(sqlite, email.projectId, nowMs, 'complaint');
      s.suppress.run(email.projectId, normalizeAddress(email.toAddress), 'complaint', complaintDetail(data.feedbackType, data.userAgent), nowMs);
      const extra = { feedbackType: data.feedbackType ?? null, userAgent: data.userAgent ?? null, complainedAt: at };
      recordWebhookEvent(db, clock, { projectId: email.projectId, type: 'email.complaint', data: emailWebhookData(email, extra) });
    }
    return true;
  }

  /**
   * When each lane was last served or found with nothing due, by `projectId:bulk`, as a sequence number
   * (one per lane, in the order a claim took them: a round robin). A claim of fewer jobs than lanes
   * waiting (a saturated engine claims one or two as its slots free) starts with the lanes served longest
   * ago: ordered by due time alone, it took the oldest lane's head every time, and a reset queued after a
   * newsletter waited for all of it again.
   */
  const lastServed = new Map<string, number>();
  let turns = 0;

  /**
   * Up to `limit` due jobs, taken from every lane in turn (each project's single sends, and its bulk
   * mail: batches, scheduled releases), each lane in due order, the lane served longest ago first (then the one due longest). In one due
   * order a password reset sent after a 50,000-email newsletter waited for all of it (40 minutes at a
   * second a message over 20 slots), and one project's newsletter held up every other project's mail.
   */
  function dueInTurn(nowMs: number, limit: number): DeliveryJob[] {
    type Lane = { projectId: string; bulk: number; key: string; due: DeliveryJob[] };
    const servedAt = (lane: Lane) => lastServed.get(lane.key) ?? 0;
    // The lanes served (or found with nothing due) longest ago first, read until the claim is full: with
    // more lanes than a claim takes (50 projects, a claim of one as a slot frees) every lane was read at
    // every claim, 100 seeks for one job; now the next lanes in turn are.
    const lanes: Lane[] = (s.queuedProjects.all() as string[])
      .flatMap((projectId) => [0, 1].map((bulk) => ({ projectId, bulk, key: `${projectId}:${bulk}`, due: [] as DeliveryJob[] })))
      .sort((a, b) => servedAt(a) - servedAt(b));
    const read = (lane: Lane, count: number) => {
      lane.due.push(...(s.laneDue.all(lane.projectId, lane.bulk, nowMs, count, lane.due.length) as DeliveryJob[]));
    };
    // Each lane's share first, then the room the emptier lanes left goes to the fuller ones: a claim reads
    // about `limit` rows however many projects have mail waiting, not `limit` per lane.
    const share = Math.ceil(limit / Math.max(1, lanes.length));
    const looked: Lane[] = [];
    for (let found = 0; found < limit && looked.length < lanes.length; found += looked[looked.length - 1].due.length) {
      read(lanes[looked.length], share);
      looked.push(lanes[looked.length]);
    }
    const fuller = looked.filter((lane) => lane.due.length === share);
    const room = limit - looked.reduce((sum, lane) => sum + lane.due.length, 0);
    if (room > 0) for (const lane of fuller) read(lane, Math.ceil(room / fuller.length));
    const waiting = looked.filter((lane) => lane.due.length > 0);
    const empty = looked.filter((lane) => lane.due.length === 0).map((lane) => lane.key);
    waiting.sort((a, b) => servedAt(a) - servedAt(b) || a.due[0].nextAttemptAt - b.due[0].nextAttemptAt);
    const taken: DeliveryJob[] = [];
    for (let turn = 0; taken.length < limit && waiting.some((lane) => turn < lane.due.length); turn++) {
      for (const lane of waiting) if (turn < lane.due.length && taken.length < limit) taken.push(lane.due[turn]);
    }
    // The first `taken.length` lanes in turn order got a job each (the first turn goes through them in
    // order); lanes found with nothing due go behind them too, so the next claims look at the others.
    rememberServed([...empty, ...waiting.slice(0, taken.length).map((lane) => lane.key)], lanes.map((lane) => lane.key));
    return taken;
  }

  /** Notes the lanes this claim took from (or found empty); lanes with no jobs any more (a project emptied or deleted) are forgotten. */
  function rememberServed(served: string[], queued: string[]): void {
    for (const key of served) lastServed.set(key, ++turns);
    if (lastServed.size > queued.length) {
      const current = new Set(queued);
      for (const key of lastServed.keys()) if (!current.has(key)) lastServed.delete(key);
    }
  }

  return {
    /**
     * After a restart nothing is in flight: every lease belongs to a dead process, so make those jobs
     * due now instead of waiting for the lease to run out (the single-process appliance owns the queue).
     */
    releaseAllLeases: (nowMs: number) => s.releaseLeases.run(nowMs).changes,
    /** Emails whose delivery holds a lease (up to `limit`): at start, those a previous run was delivering. */
    leasedEmailIds: (limit: number) => s.leasedEmails.all(limit) as string[],

    /**
     * Destinations with mail never attempted that waits past `nowMs` (put back, or held for a busy or
     * cooling destination), with the latest time it waits to: read at start, when nothing remembers them.
     */
    heldBacklogs: (nowMs: number) => s.heldBacklogs.all(nowMs) as { domain: string; heldUntil: number }[],

    /**
     * Deferred jobs whose next attempt lies further off than `schedule` (delivery.retry_schedule, in ms)
     * would now put it are brought forward to that delay from `nowMs`: the new schedule applies to mail
     * already deferred, not only from its next attempt. A restart scans the queue once (not a hot path).
     */
    bringRetriesWithin: (nowMs: number, schedule: readonly number[]) =>
      s.bringRetriesWithin.run({ now: nowMs, schedule: JSON.stringify(schedule), steps: schedule.length }).changes,

    /**
     * Claims up to `limit` due jobs (dueInTurn). A claim moves `nextAttemptAt` to the lease end, so the due index
     * alone skips claimed rows and a crashed claim comes due again by itself when the lease runs out.
     * Each job's email and suppression state are read here, in the claim's transaction: read one
     * statement at a time afterwards, each was a read transaction of its own (WAL read lock, index
     * header check), ~3 per message for what one transaction per claim does.
     */
    claimDue(nowMs: number, limit: number, leaseMs: number): ClaimedJob[] {
      const due = dueInTurn(nowMs, limit);
      const leaseUntil = nowMs + leaseMs;
      return due.map((row) => {
        s.lease.run(leaseUntil, leaseUntil, row.emailId);
        const loaded = loadEmail(row.emailId);
        const suppressed = loaded !== undefined && isSuppressed(loaded.email.projectId, loaded.email.toAddress);
        return { job: { ...row, leaseUntil, nextAttemptAt: leaseUntil }, loaded, suppressed };
      });
    },

    /**
     * Moves a lease still held (`heldUntil` unchanged: no outcome recorded since) to `untilMs`; false when
     * the job was finished, rescheduled or claimed again meanwhile.
     */
    extendLease: (emailId: string, heldUntil: number, untilMs: number) => s.extendLease.run(untilMs, untilMs, emailId, heldUntil).changes > 0,

    /** The project's deletion is under way (projects/service.ts marks it): its mail must not go out. */
    isProjectDeleting: (projectId: string) => s.projectDeleting.get(deletingMark(projectId)) !== undefined,
    /**
     * The email's broadcast is being deleted (messenger/service.ts remove marks it first): its emails still
     * queued must not go out, however the deletion was cut short. Not "no such draft": a client may give
     * any messengerId to a send of its own (emails/schemas.ts), and such mail was dropped as deleted.
     */
    isBroadcastDeleting: (messengerId: string) => s.broadcastDeleting.get(messengerId) !== undefined,
    /** Deletes an email not sent (its job with it), as a broadcast's deletion does with those it reaches first. */
    deleteEmail: (emailId: string) => void s.deleteEmail.run(emailId),
    /** The recipient is on the project's suppression list now (the claim read it too, before the session's awaits). */
    isSuppressed,
    findSuppression,
    /** False once the email is gone (its project was deleted; the purge takes its job with it). */
    emailExists: (emailId: string) => s.exists.get(emailId) !== undefined,
    deleteJob: (emailId: string) => void s.deleteJob.run(emailId),
    appendEvent,
    finishEmail,

    reschedule(emailId: string, attempts: number, nextAttemptAt: number, event: AttemptEvent): void {
      appendEvent(emailId, event);
      s.reschedule.run(attempts, nextAttemptAt, emailId);
    },

    /**
     * Makes due now up to `limit` jobs put back for `domain` (undefined: for any domain, as through a
     * relay), earliest first: its destination has room for them sooner than their put-back time said.
     * Jobs never attempted only, due by `upToMs` (what was put back or held for the destination; a
     * paused project's mail is held past it). Returns how many moved.
     */
    pullForward: (domain: string | undefined, nowMs: number, limit: number, upToMs = Number.MAX_SAFE_INTEGER): number =>
      domain === undefined ? s.pullForwardAny.run(nowMs, nowMs, upToMs, limit).changes : s.pullForwardDomain.run(nowMs, domain, nowMs, upToMs, limit).changes,

    /** Moves a job's next attempt without counting an attempt (destination cooling down). */
    postpone: (emailId: string, nextAttemptAt: number) => void s.postpone.run(nextAttemptAt, emailId),

    /**
     * Moves up to `limit` due jobs of a project to `nextAttemptAt` (plus up to 250 ms of spread): a held
     * backlog is not claimed message by message to be put back. Jobs in flight (leased, due at their
     * lease's end) are left alone. Called again while it returns `limit` (delivery service, moveInChunks).
     */
    postponeProjectDue: (projectId: string, nowMs: number, nextAttemptAt: number, limit: number): number =>
      s.postponeProjectDue.run(nextAttemptAt, projectId, nowMs, limit).changes,

    /**
     * Moves up to `limit` jobs for `domain` (undefined: for any domain, as through a relay) due before
     * `nextAttemptAt` to it (plus up to 250 ms of spread), the earliest due first: a destination cooling
     * down does not have its backlog claimed message by message to be put back. Never-attempted jobs
     * queued after `queuedAfter` only: a deferred retry keeps its own schedule (as with pullForward), and
     * mail past its give-up deadline is left to come due and be given up. Jobs in flight (leased) are
     * left alone. Called again while it returns `limit` (delivery service, moveInChunks).
     */
    holdDestination: (domain: string | undefined, nextAttemptAt: number, queuedAfter: number, limit: number): number =>
      domain === undefined
        ? s.holdDestinationAny.run(nextAttemptAt, nextAttemptAt, queuedAfter, limit).changes
        : s.holdDestinationDomain.run(nextAttemptAt, domain, nextAttemptAt, queuedAfter, limit).changes,

    recordDelivered(email: DeliverableEmail, smtpResponse: string, data: Record<string, unknown>): void {
      appendEvent(email.id, { type: 'delivered', data: { ...data, smtpResponse } });
      if (!finishEmail(email.id, 'delivered')) return;
      countOutcome(sqlite, email.projectId, clock.nowMs(), 'delivered');
      recordWebhookEvent(db, clock, {
        projectId: email.projectId,
        type: 'email.delivered',
        data: emailWebhookData(email, { smtpResponse, deliveredAt: clock.now().toISOString() }),
      });
      applyEarlierReports(email, 'delivered');
    },

    /**
     * A queued email with a bounce or complaint report about a copy already sent (sent without an
     * answer, then deferred): the report decides its status, not the suppression it led to. False when
     * there is none.
     */
    finishByEarlierReports: (email: DeliverableEmail): boolean => applyEarlierReports(email, 'queued'),

    /**
     * Hard bounce (5xx, NXDOMAIN, null MX) or give-up: final status, `email.bounce`, and the suppression
     * of the address when the failure is about it (classify.ts refusesRecipient).
     */
    recordBounce(email: DeliverableEmail, bounceType: BounceType, smtpResponse: string, data: Record<string, unknown>, { suppressRecipient, countsAgainstSender }: BounceEffects): void {
      appendEvent(email.id, { type: 'bounce', data: { ...data, bounceType, smtpResponse, recipientSuppressed: suppressRecipient } });
      if (!finishEmail(email.id, 'bounce')) return;
      if (countsAgainstSender) countOutcome(sqlite, email.projectId, clock.nowMs(), 'bounced');
      if (suppressRecipient) {
        s.suppress.run(email.projectId, normalizeAddress(email.toAddress), bounceType === 'hard' ? 'hard-bounce' : 'give-up', cutToLength(smtpResponse, 1000), clock.nowMs());
      }
      recordWebhookEvent(db, clock, {
        projectId: email.projectId,
        type: 'email.bounce',
        data: emailWebhookData(email, { bounceType, smtpResponse, bouncedAt: clock.now().toISOString() }),
      });
    },

    storeCaptured(row: { emailId: string; projectId: string; mailFrom: string; rcptTo: string; raw: Buffer }): void {
      s.capture.run(row.emailId, row.projectId, row.mailFrom, row.rcptTo, row.raw, clock.nowMs());
    },

    /** The email's status, undefined when the project has no such email (why nothing is captured: routes.ts). */
    emailStatus: (projectId: string, emailId: string) => s.status.get(emailId, projectId) as EmailStatus | undefined,

    /** Whether the email was captured (its delivered event says so), whether or not its message is still kept. */
    wasCaptured: (emailId: string) => s.wasCaptured.get(emailId) !== undefined,

    findCaptured(projectId: string, emailId: string) {
      return s.captured.get(emailId, projectId) as { emailId: string; mailFrom: string; rcptTo: string; raw: Buffer; capturedAt: number } | undefined;
    },
  };
}

export interface BounceEffects {
  /** Add the address to the project's suppression list (classify.ts refusesRecipient). */
  suppressRecipient: boolean;
  /**
   * Count it in the project's bounce rate (§8 suspension rule). Not for failures that are the operator's
   * (a relay's outage or credentials) or this appliance's own policy (a refused private MX): an outage
   * of the relay would otherwise pause every project with mail queued.
   */
  countsAgainstSender: boolean;
}

/** The webhook payloads (COMPAT.md "Webhooks"): `email.delivered` with smtpResponse, `email.bounce` with bounceType. */
export function emailWebhookData(email: Pick<DeliverableEmail, 'id' | 'messageId' | 'toAddress' | 'fromAddress' | 'subject' | 'templateId' | 'templateName'>, extra: Record<string, unknown>): Record<string, unknown> {
  return {
    id: email.id,
    emailId: email.id,
    // The Message-ID the message went out with: the stored one, else the one composition gives it.
    messageId: email.messageId ?? defaultMessageId(email.id, email.fromAddress),
    toAddress: email.toAddress,
    fromAddress: email.fromAddress,
    subject: email.subject,
    templateId: email.templateId,
    templateName: email.templateName,
    ...extra,
  };
}

/**
 * When the longest-queued job was queued (undefined for an empty queue), for /metrics without an index on
 * queued_at (one more B-tree written by every accepted send). A job is queued after its email is created,
 * and ids start with their creation second (lib/ids.ts): no job created after the second in which the
 * lowest id's job was queued can have been queued earlier, so the scan stops at that id. A queue of
 * 1,000,000 jobs: ~0.03 ms instead of ~50-70 ms for min(queued_at) over the table; only a backlog created
 * long before it was queued (a released schedule) makes it read that backlog. After a backward clock step
 * ids keep their later second for a while, so the answer may be younger by at most that step.
 */
export function createOldestQueuedReader(sqlite: Sqlite): () => number | undefined {
  const first = sqlite.prepare('select queued_at from delivery_jobs order by email_id limit 1').pluck();
  const earliestCreatedBefore = sqlite.prepare('select min(queued_at) from delivery_jobs where email_id < ?').pluck();
  return () => {
    const candidate = first.get() as number | undefined;
    if (candidate === undefined) return undefined;
    const earlier = earliestCreatedBefore.get(idLowerBound(candidate + 1000)) as number | null;
    return Math.min(candidate, earlier ?? candidate);
  };
}

/** How many emails wait in the delivery queue (due or not, leased or not), for /metrics. */
export function createQueueDepthReader(sqlite: Sqlite): () => number {
  const count = sqlite.prepare('select count(*) from delivery_jobs').pluck();
  return () => count.get() as number;
}
