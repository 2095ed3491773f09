import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { Config } from '../config/schema.js';
import type { DatabaseHandle } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import { writeInBatches } from '../lib/batches.js';
import { createMemoryBudget } from '../lib/memory-budget.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import type { UrlSigner } from '../lib/signing.js';
import { renderLimits } from '../render/budget.js';
import type { InlineImage, ProjectDesign } from '../render/types.js';
import { notifyDeliveryQueued } from '../delivery/queue-signal.js';
import type { HeaderRecipients } from './header-recipients.js';
import type { AttachedMessage } from './attachments.js';
import { presentEmail } from './present.js';
import type { AcceptArgs, AcceptedEmail, SendResult } from './accept-procedure.js';
import { createEmailsRepo } from './repo.js';
import { limits, parseLegacySendInput, parseSendInput, type ParsedSendEmail, type SendEmailInput } from './schemas.js';
import type { SearchRunner } from './search-runner.js';
import type { SearchEmailsInput } from './schemas.js';
import { createEmailPreparer } from './prepare-email.js';
import { parseClickToken, parseOpenToken } from './tracking.js';
import { recordTrackingEvent } from './record-tracking.js';

export interface EmailsDeps {
  config: Config;
  /** Where searches run (search-runner.ts): threads of their own, shared with contact queries. */
  searches: SearchRunner;
  clock: Clock;
  log: Logger;
  database: DatabaseHandle;
  writes: WriteQueue;
  projects: { findProject(id: string): { parentId: string | null; emailTemplateDesign: unknown } | undefined };
  signer: UrlSigner;
  publicUrl(): string;
  /** The domains feature: which senders a project may use. */
  domains: {
    findVerifiedSendingDomain(projectId: string, fromAddress: string): object | undefined;
    /** The project's domain covering the address, whatever its status (a queued broadcast's sender). */
    findSendingDomain(projectId: string, fromAddress: string): object | undefined;
    explainUnverifiedSender?(projectId: string, fromAddress: string): string | undefined;
  };
  /**
   * Suspension rule (spec §8) from the delivery feature; read at call time (the appliance wires it after
   * this service). Absent, every project may send (`allowEverySender`).
   */
  sendingGuard?: { assertSendingAllowed(projectId: string): void };
  /** The free-space reserve (db/storage-health.ts): new mail is refused below it. */
  storage?: { assertRoomForNewMail(): void };
  /** How a batch's rendering shares the event loop; `batchRenderLimits` by default (tests shorten it). */
  batchRender?: { turnMs: number; totalMs: number };
  /** What accepts may hold rendered; `renderRoomLimits` by default (tests shrink it). */
  renderRoom?: typeof renderRoomLimits;
}

export type { SendResult } from './accept-procedure.js';

export interface SendOptions {
  /** Stored in the same transaction as the emails so a retried request gets this answer (24 h). */
  idempotency?: { key: string; requestHash: string };
  /**
   * Images the given html references as `cid:` (SMTP submission's multipart/related), kept as inline
   * parts of an html email. The send API itself has no such field.
   */
  inlineImages?: InlineImage[];
  /**
   * The Message-ID the submitted message already has (SMTP submission), kept so replies to it thread in
   * the app that made it (helpdesks match In-Reply-To against their own ids). The send API has none.
   */
  messageId?: string;
  /** The submitted message's To/Cc lists (SMTP submission), shown in every copy; the send API has none. */
  headerRecipients?: HeaderRecipients;
  /** Emails the submitted message forwards as attachments (SMTP submission, emails/attachments.ts); the send API has none. */
  attachedMessages?: AttachedMessage[];
  /**
   * Set for a broadcast's emails (messenger): a template is rendered as a broadcast (the footer has the
   * unsubscribe text) in this design, the project's with the recipient's unsubscribe link made sure of.
   */
  broadcastDesign?: ProjectDesign;
}


/** Signed record links (attachments, html reference) are short-lived: they are handed to API clients. */
const recordLinkTtlMs = 60 * 60 * 1000;
export const idempotencyTtlMs = 24 * 60 * 60 * 1000;
/** Expired idempotency keys deleted per write by the hourly prune. */
export const idempotencyPruneBatch = 500;
/** Due scheduled emails moved to the delivery queue per write. */
export const releaseScheduledBatch = 500;

/** Rendering a batch: the event loop gets a turn after `turnMs`, and the whole batch may take `totalMs`. */
export const batchRenderLimits = { turnMs: 50, totalMs: 10_000 };

/**
 * The rendered html and text that accepts hold, counted in characters from render to commit. A small
 * request can render much more than its body (a 95 kB template send rendered 38 million characters, and
 * 20 of them at once exhausted the heap), and the body budget (lib/memory-budget.ts) sees only bodies.
 * An email renders to at most `emailChars` (render/budget.ts: its html and its text), a
 * request to `requestChars` in all (else 400), and accepts in progress hold `roomChars` together: one
 * reserves its worst case before rendering, waits in arrival order while others hold the room, and
 * keeps what it rendered until it commits.
 */
export const renderRoomLimits = { emailChars: renderLimits.outputChars + renderLimits.textChars, requestChars: 20_480_000, roomChars: 51_200_000 };

export function createEmailsService(deps: EmailsDeps) {
  const { clock, signer, log } = deps;
  const repo = createEmailsRepo(deps.database.sqlite);
  const { prepareEmail, notRendered } = createEmailPreparer(deps, repo);
  const { emailChars, requestChars, roomChars } = deps.renderRoom ?? renderRoomLimits;
  const renderRoom = createMemoryBudget(roomChars, 0);

  /**
   * Ids are the search cursors and sort in creation order (COMPAT.md "Email"), so an email must not
   * commit after one with a greater id: a client that polls for emails newer than the newest it has
   * seen (paginationCursorPrev), or pages back from the top, would never get it. They are given here,
   * in the turn of the event loop that hands the request to the (first-in, first-out) write queue, not
   * as each email is rendered: a batch yields between renders, and emails accepted meanwhile, numbered
   * after its first items, committed before them.
   */
  function numberForCommit(prepared: AcceptedEmail[], nowMs: number): void {
    for (const { email, attachments } of prepared) {
      email.id = newId(clock);
      email.createdAt = nowMs;
      for (const attachment of attachments) attachment.emailId = email.id;
    }
  }

  /** The write that stores a request's emails; messenger's broadcasts record their progress in the same one. */
  type Commit = (args: AcceptArgs) => Promise<SendResult[]>;
  const commitAccepted: Commit = (args) => deps.writes.call('emails.accept', args);

  /**
   * How a request's emails are accepted. `batch`: one invalid item fails them all, its error naming the
   * item. `broadcast` (messenger, inputs the appliance built): a recipient whose email cannot be rendered
   * (their properties make it too long, or too slow) gets an `error` email saying why, and the others go;
   * refused whole, the same batch was refused at every run and the broadcast stopped there for good. A
   * broadcast's batch that renders past `requestChars` commits the first inputs only, in order (the
   * commit's `emails` say how many).
   */
  interface AcceptMode {
    batch?: boolean;
    broadcast?: boolean;
    /** One submitted message's copies, one per recipient: never refused for their size together. */
    copies?: boolean;
    commit?: Commit;
  }

  async function acceptAll(projectId: string, parsed: ParsedSendEmail[], options: SendOptions, mode: AcceptMode = {}): Promise<SendResult[]> {
    deps.storage?.assertRoomForNewMail();
    // A message's copies may hold more than a request's share: they reserve up to the whole room, so such a
    // message renders with nothing else beside it.
    const room = renderRoom.reserve(Math.min(parsed.length * emailChars, mode.copies ? roomChars : requestChars));
    try {
      await room.granted;
      const { prepared, renderedChars } = await prepareAll(projectId, parsed, options, mode);
      room.keep(renderedChars);
      const nowMs = clock.nowMs();
      numberForCommit(prepared, nowMs);
      const idempotency = options.idempotency && { ...options.idempotency, expiredBeforeMs: nowMs - idempotencyTtlMs };
      const results = await (mode.commit ?? commitAccepted)({ projectId, emails: prepared, nowMs, idempotency, batch: mode.batch ?? false });
      // At debug: a line per accepted email at info costs the send path more than it tells (thousands a
      // second; the API's answer, GET /v1/email/{id} and its events are the trail). Delivery logs each outcome.
      for (const r of results) log.debug('email accepted', { emailId: r.id, projectId, status: r.status });
      // Wake the delivery worker now rather than at its next poll.
      if (results.some((r) => r.status === 'queued')) notifyDeliveryQueued(deps.database.db);
      return results;
    } finally {
      room.release();
    }
  }

  /** Renders and checks every email of an accept, in order; with the characters of html and text they hold. */
  async function prepareAll(projectId: string, parsed: ParsedSendEmail[], options: SendOptions, { batch = false, broadcast = false, copies = false }: AcceptMode) {
    const prepared: AcceptedEmail[] = [];
    let renderedChars = 0;
    const verifiedSenders = new Set<string>();
    const { turnMs, totalMs } = deps.batchRender ?? batchRenderLimits;
    // Time this batch spent rendering in the turns before the current one: the waits in between, while
    // other requests ran, are not its cost and must not get a light batch refused on a busy server.
    let renderedMs = 0;
    let turnStarted = performance.now();
    for (let i = 0; i < parsed.length; i++) {
      try {
        // Each render has its own budget (render/budget.ts); a batch of 50 heavy ones would still hold the
        // event loop for a minute: it yields between items, and the batch as a whole has a budget too.
        if (i > 0 && performance.now() - turnStarted >= turnMs) {
          renderedMs += performance.now() - turnStarted;
          await yieldToEventLoop();
          turnStarted = performance.now();
        }
        // A broadcast's batch is the appliance's own, and each of its renders has its budget.
        if (!broadcast && renderedMs + performance.now() - turnStarted > totalMs) {
          throw new AppError('parameters-invalid', `the batch takes more than ${totalMs / 1000} s to render: send fewer emails per request, or a lighter template.`);
        }
        // Refused while the broadcast personalised it (messenger/service.ts emailFor): an `error` email below, like any render refusal.
        const refusal = broadcast ? (parsed[i] as BroadcastInput).notRenderable : undefined;
        if (refusal) throw refusal;
        const email = prepareEmail(projectId, parsed[i], verifiedSenders, options, broadcast);
        const chars = (email.email.html?.length ?? 0) + (email.email.text?.length ?? 0);
        // A broadcast's batch of large emails (100 of a 980 kB with-layout html held 196 million characters)
        // stops before the email that would pass its share; the expansion goes on from the last recipient
        // taken (messenger/service.ts addBatch), and renders that one again there.
        if (broadcast && prepared.length > 0 && renderedChars + chars > requestChars) break;
        renderedChars += chars;
        if (!broadcast && !copies && renderedChars > requestChars) {
          throw new AppError('parameters-invalid', `the emails of this request render to more than ${requestChars.toLocaleString('en-US')} characters of html and text in all: send fewer per request.`);
        }
        prepared.push(email);
      } catch (error) {
        if (broadcast && isRenderRefusal(error)) {
          prepared.push(notRendered(projectId, parsed[i], error));
          continue;
        }
        if (batch && error instanceof AppError) throw new AppError(error.code, `batch item ${i}: ${error.message}`, error.details);
        throw error;
      }
    }
    return { prepared, renderedChars };
  }

  /**
   * A recipient's open or click is recorded when it can be: a write that fails (a full disk) is logged,
   * and the pixel or the redirect is answered all the same, never a JSON error in a mail client.
   */
  async function recordTracking(hit: Parameters<typeof recordTrackingEvent>[3]): Promise<void> {
    try {
      await deps.writes.run(() => recordTrackingEvent(deps.database.db, repo, clock, hit));
    } catch (error) {
      log.warn('tracking event not recorded', { emailId: hit.emailId, type: hit.type, error });
    }
  }

  /**
   * `onFile` false: the link's email was deleted (retention, its project's deletion), and the link is no
   * longer redirected blindly: a deleted tenant's links to a phishing page would point there from the
   * operator's domain for ever.
   */
  function clickTargetOf(token: string): ClickTarget | undefined {
    const click = parseClickToken(signer, token);
    return click && { ...click, onFile: repo.isEmailOnFile(click.emailId) };
  }

  return {
    /** Validates and accepts one email: durably stored (and queued unless scheduled/suppressed) before it resolves. */
    async send(projectId: string, input: SendEmailInput, options: SendOptions = {}): Promise<SendResult> {
      const [result] = await acceptAll(projectId, [parseSendInput(input)], options);
      return result;
    },

    /** Up to 50 emails in one transaction; one invalid item fails the whole batch, naming its index. */
    async sendBatch(projectId: string, inputs: unknown[], options: SendOptions = {}): Promise<SendResult[]> {
      if (inputs.length === 0) throw new AppError('parameters-invalid', 'A batch needs at least 1 email.');
      if (inputs.length > limits.batch) throw new AppError('parameters-invalid', `A batch holds at most ${limits.batch} emails; got ${inputs.length}.`);
      const parsed = inputs.map((item, i) => parseSendInput(item, `batch item ${i}`));
      return acceptAll(projectId, parsed, options, { batch: true });
    },

    /** One message submitted over SMTP to several recipients (smtp/submission.ts): a batch of its copies. */
    async sendCopies(projectId: string, inputs: SendEmailInput[], options: SendOptions = {}): Promise<SendResult[]> {
      const parsed = inputs.map((item, i) => parseSendInput(item, `batch item ${i}`));
      return acceptAll(projectId, parsed, options, { batch: true, copies: true });
    },

    /**
     * A batch of a broadcast (messenger/service.ts): prepared by the send's own rules and rendering, and
     * stored by `commit`, the write that also records how far the broadcast got. Inputs are built by the
     * appliance, not parsed from a request.
     */
    async acceptBroadcast(projectId: string, inputs: BroadcastInput[], options: SendOptions, commit: Commit): Promise<SendResult[]> {
      return acceptAll(projectId, inputs, options, { broadcast: true, commit });
    },

    async sendLegacy(projectId: string, input: unknown, options: SendOptions = {}): Promise<SendResult> {
      const [result] = await acceptAll(projectId, [parseLegacySendInput(input)], options);
      return result;
    },

    findEmail(projectId: string, id: string) {
      const row = repo.findEmail(id, projectId);
      if (!row) return null;
      return presentEmail(row, repo.listEvents(id), repo.listAttachments(id), recordLinks(id));
    },

    /** Spec §4.4: only a scheduled, not yet sent email can be deleted. */
    async deleteEmail(projectId: string, id: string): Promise<boolean> {
      return deps.writes.run(() => repo.deleteScheduled(id, projectId));
    },

    /** On the search worker thread (search-runner.ts); rows are presented here, where the URL signer is. */
    async search(projectId: string, input: SearchEmailsInput) {
      const page = await deps.searches.search(projectId, input);
      return { ...page, data: page.data.map((row) => presentEmail(row, undefined, undefined, recordLinks(row.id))) };
    },

    /**
     * Scheduler job: moves due scheduled emails to the delivery queue, a batch per write on the writer
     * thread (release-scheduled.ts), so sends interleave with a large scheduled send. Idempotent.
     */
    async releaseScheduled(now: Date): Promise<number> {
      // A read first: the job runs every 5 s, and most runs find nothing due (no write, no fsync).
      if (repo.listDueScheduled(now.getTime(), 1).length === 0) return 0;
      const released = await writeInBatches(releaseScheduledBatch, () => {
        const eventIds = Array.from({ length: releaseScheduledBatch }, () => newId(clock));
        return deps.writes.call('emails.release-scheduled', { nowMs: now.getTime(), eventIds });
      });
      if (released > 0) {
        log.info('scheduled emails released', { count: released });
        notifyDeliveryQueued(deps.database.db);
      }
      return released;
    },

    /**
     * Scheduler job: keys past their 24 h go in batches, each a write of its own on the writer thread, so
     * sends interleave: a busy hour's keys in one statement on the event loop held it that long (100,000
     * keys: 0.5–0.6 s; docs/benchmarks.md).
     */
    async pruneIdempotencyKeys(now: Date): Promise<number> {
      const beforeMs = now.getTime() - idempotencyTtlMs;
      const pruned = await writeInBatches(idempotencyPruneBatch, () => deps.writes.call('emails.prune-idempotency-keys', { beforeMs, limit: idempotencyPruneBatch }));
      if (pruned > 0) log.info('idempotency keys pruned', { count: pruned });
      return pruned;
    },

    /** The stored first answer for this key, `conflict` when the key was used for another request (none of `requestHashes`). */
    async findIdempotentAnswer(projectId: string, key: string, requestHashes: string[]): Promise<unknown> {
      const row = repo.findIdempotencyKey(projectId, key);
      if (!row || row.created_at < clock.nowMs() - idempotencyTtlMs) return undefined;
      // The first request's commit may be visible before its WAL sync is done: a retry, or a conflict
      // that tells of the first request, is answered only once that commit is as durable as its answer.
      await deps.writes.synced();
      if (!requestHashes.includes(row.request_hash)) {
        throw new AppError('conflict', 'This Idempotency-Key was already used with another request (a different body, or the other send endpoint).');
      }
      return JSON.parse(row.response);
    },

    async recordOpen(token: string, ip: string | undefined, userAgent: string | undefined): Promise<void> {
      const emailId = parseOpenToken(signer, token);
      if (!emailId) return;
      await recordTracking({ emailId, type: 'open', ip, userAgent });
    },

    /** The target of a click link, after recording the click; undefined for a forged token. */
    async recordClick(token: string, ip: string | undefined, userAgent: string | undefined): Promise<ClickTarget | undefined> {
      const target = clickTargetOf(token);
      if (target?.onFile) await recordTracking({ emailId: target.emailId, type: 'click', ip, userAgent, url: target.url });
      return target;
    },

    /**
     * The target of a click link without recording anything (HEAD: a link scanner's probe); undefined
     * for a forged token.
     */
    clickTarget: clickTargetOf,

    /** Serves a signed record link: the html reference or an attachment. */
    readSignedFile(token: string): { body: Buffer | string; contentType: string; name?: string } | undefined {
      const payload = signer.verify(token, clock.nowMs());
      if (!payload) return undefined;
      const [kind, emailId, attachmentId] = payload.split(':');
      if (kind === 'h') {
        const row = repo.findEmailHtml(emailId);
        return row ? { body: linkInlineImages(row.html ?? '', emailId), contentType: 'text/html; charset=utf-8' } : undefined;
      }
      if (kind === 'a' && attachmentId) {
        const file = repo.findAttachment(attachmentId, emailId);
        return file ? { body: file.content, contentType: file.content_type, name: file.name } : undefined;
      }
      return undefined;
    },
  };

  /**
   * The stored html refers to its inline images (a project logo, charts) as `cid:` parts of the message,
   * which a browser cannot resolve: served for viewing, they point at their signed download links.
   */
  function linkInlineImages(html: string, emailId: string): string {
    const inline = repo.listAttachments(emailId).filter((part) => part.content_id);
    if (inline.length === 0) return html;
    const links = recordLinks(emailId);
    const idsByContentId = new Map(inline.map((part) => [part.content_id!.toLowerCase(), part.id]));
    // One pass over whole references: `cid:image1` must not be rewritten inside `cid:image10`.
    return html.replace(/cid:([^"'\s()<>]+)/gi, (reference, contentId: string) => {
      const id = idsByContentId.get(contentId.toLowerCase());
      return id ? links.attachment(id) : reference;
    });
  }

  function recordLinks(emailId: string) {
    const base = deps.publicUrl();
    const expires = clock.nowMs() + recordLinkTtlMs;
    return {
      html: `${base}/v1/email-files/${signer.sign(`h:${emailId}`, expires)}`,
      attachment: (attachmentId: string) => `${base}/v1/email-files/${signer.sign(`a:${emailId}:${attachmentId}`, expires)}`,
    };
  }
}

export type EmailsService = ReturnType<typeof createEmailsService>;

/**
 * One recipient's email of a broadcast; `notRenderable` when putting the recipient's properties in (the
 * broadcast does it for with-layout and no-layout drafts) was refused: that recipient gets an `error`
 * email, the others go on. Thrown there instead, one contact's properties failed the whole batch, and
 * every run after it: the broadcast stayed `processing` and nobody got anything.
 */
export type BroadcastInput = ParsedSendEmail & { notRenderable?: AppError };

/** Where a click link leads; `onFile` false when its email is no longer on file (not redirected blindly). */
export interface ClickTarget {
  emailId: string;
  url: string;
  onFile: boolean;
}

/** A refusal of one email's content (rendering limits, template data), not of the sender or the project. */
export function isRenderRefusal(error: unknown): error is AppError {
  return error instanceof AppError && error.code === 'parameters-invalid';
}
