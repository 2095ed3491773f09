import { setImmediate as nextTurn } from 'node:timers/promises';
import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { contacts } from '../db/schema/index.js';
import type { DraftRecipients, DraftStatus } from '../db/schema/messenger.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { contactQueryCondition } from '../contacts/query.js';
import { instantOfLocalTime, isTimeZone } from '../lib/time-zone.js';
import { domainOf } from '../emails/address.js';
import { isRenderRefusal, type BroadcastInput, type EmailsService } from '../emails/service.js';
import type { ParsedSendEmail } from '../emails/schemas.js';
import { isoInstant } from '../lib/iso-date.js';
import { writeInBatches } from '../lib/batches.js';
import type { Clock } from '../lib/clock.js';
import { AppError, deletedMeanwhile, invalid, isStorageRefusal, notFound } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import type { UrlSigner } from '../lib/signing.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import { recordWebhookEvent } from '../webhooks/outbox.js';
import { renderHtmlInLayout, substituteKnownVariables, withinLineLimit, type InlineImage, type ProjectDesign } from '../render/index.js';
import { escapeHtml } from '../render/escape.js';
import { htmlToText } from '../render/html-to-text.js';
import { normalizeAddress } from '../suppressions/repo.js';
import { expansionSuperseded } from './expand-procedure.js';
import type { DraftRow, DraftRowPatch, DraftStats, MessengerRepo, RecipientRow } from './repo.js';
import type { DraftPatch, ListDraftsInput } from './schemas.js';
import { unsubscribePath } from './unsubscribe-page.js';

/** spec §2.10 draft object; `updatedAt` and `error` (why the last expansion attempt stopped) are extensions. */
export interface DraftView {
  id: string;
  subject: string;
  fromName: string | null;
  fromAddress: string | null;
  html: string | null;
  richTextValue: Record<string, unknown> | null;
  templateId: string | null;
  templateProps: Record<string, unknown> | null;
  recipients: DraftRecipients;
  scheduledAt: string | null;
  isTimezoneScheduled: boolean;
  contentType: DraftRow['contentType'];
  status: DraftStatus;
  createdAt: string;
  updatedAt: string;
  error: string | null;
  /** spec §2.10: defined only once the draft is queued. */
  stats?: DraftStats;
}

export interface MessengerDeps {
  db: Db;
  repo: MessengerRepo;
  writes: WritesWithProcedures;
  clock: Clock;
  log: Logger;
  signer: UrlSigner;
  publicUrl(): string;
  /** False when mail leaves this machine and the links would name it by 127.0.0.1 (http.public_url unset). */
  linksReachable: boolean;
  requireVerifiedDomain: boolean;
  emails: Pick<EmailsService, 'acceptBroadcast'>;
  domains: {
    findVerifiedSendingDomain(projectId: string, fromAddress: string): object | undefined;
    explainUnverifiedSender?(projectId: string, fromAddress: string): string | undefined;
  };
  /** Throws template-not-found for a template the project cannot send. */
  templates: { findForSend(projectId: string, ref: { id: string }): unknown };
  projects: { findProject(id: string): { emailTemplateDesign: unknown } | undefined };
  /** The contact query's property types (contacts/repo.ts). */
  propertyTypes(projectId: string): Map<string, 'string' | 'number'>;
  /** The time zones the project's contacts have (contacts/repo.ts). */
  timeZones(projectId: string): string[];
}

/** Contacts turned into emails per write: one transaction each, so sends of other requests interleave. */
const expansionBatch = 100;
/** Contacts the expansion looks at per read, matching or not (messenger/repo.ts recipientsAfter). */
const recipientsWindow = 2_000;
/** A deleted broadcast's unsent emails removed per write. */
const deletionBatch = 2_000;
/** Drafts the scheduler works on per run. */
const draftsPerRun = 10;
/** How long an expansion keeps what its recipient condition read of the contacts (currentRecipients). */
const recipientsRereadMs = 1_000;
/** The refusal of a batch whose project is being deleted (lib/errors.ts), told apart by its message. */
const projectDeletedMeanwhile = deletedMeanwhile().message;
/** Time zones run from UTC−12 to UTC+14: a timezone-scheduled broadcast starts 14 h before its time and ends 12 h after. */
const earliestZoneAheadMs = 14 * 3_600_000;
const latestZoneBehindMs = 12 * 3_600_000;
/** A recipient whose local time is less than this ahead is sent at once rather than scheduled. */
const sendNowWithinMs = 60_000;
/** A broadcast whose expansion was refused (sending paused, its sender's domain deleted) is tried again after this. */
const refusedRetryMs = 60_000;
/** A scheduled broadcast whose last emails are not yet released is looked at again after this. */
const scheduledRecheckMs = 30_000;
/** Where `{unsubscribeUrl}` goes when the layout is rendered once for a whole run; replaced per recipient. */
const unsubscribeMarker = 'https://unsubscribe.invalid/postino-unsubscribe-link';
/** Where the sender's html and the subject (the page's title) go in that layout; put in per recipient, personalised. */
const bodyMarker = '<!--postino:broadcast-body-->';
const subjectMarker = 'postino:broadcast-subject';
/** Where the text of the sender's html goes in the layout's text (htmlToText drops comments, so not bodyMarker). */
const textBodyMarker = 'postino-broadcast-body-text';

const editable: readonly DraftStatus[] = ['draft', 'queued'];

export function createMessengerService(deps: MessengerDeps) {
  const { repo, writes, clock, log } = deps;
  let running = false;

  function view(row: DraftRow): DraftView {
    return {
      id: row.id,
      subject: row.subject,
      fromName: row.fromName,
      fromAddress: row.fromAddress,
      html: row.html,
      richTextValue: row.richTextValue ?? null,
      templateId: row.templateId,
      templateProps: row.templateProps ?? null,
      recipients: row.recipients,
      scheduledAt: row.scheduledAt === null ? null : new Date(row.scheduledAt).toISOString(),
      isTimezoneScheduled: row.isTimezoneScheduled,
      contentType: row.contentType,
      status: row.status,
      createdAt: new Date(row.createdAt).toISOString(),
      updatedAt: new Date(row.updatedAt).toISOString(),
      error: row.lastError,
      ...(row.status === 'draft' ? {} : { stats: repo.stats(row.id, row.unsubscribedTotal) }),
    };
  }

  /**
   * The condition of a draft's recipients: its filters, and subscribed in any case (spec §2.10
   * `isSubscribed` accepts only true). Apart from the filters: among them, `match: any` would have let
   * an unsubscribed contact in through any other filter it matched.
   */
  function recipientCondition(projectId: string, recipients: DraftRecipients) {
    const types = deps.propertyTypes(projectId);
    const filters = contactQueryCondition(
      { contactId: recipients.contactId, groupId: recipients.groupId, filter: recipients.filter, match: recipients.match ?? 'all' } as Parameters<typeof contactQueryCondition>[0],
      { propertyType: (keyName) => types.get(keyName), nowMs: clock.nowMs(), timeZones: () => deps.timeZones(projectId) },
      'recipients.',
    );
    return and(eq(contacts.isSubscribed, true), filters);
  }

  /**
   * What a draft needs before it is queued, checked when it is, so the client hears of it then and not
   * from a broadcast that never went: a verified sender, content, recipients the query engine can read,
   * and a time that has not passed. Answers when the scheduler may take it.
   */
  function checkReadyToQueue(projectId: string, draft: DraftRowFields, nowMs: number): number {
    // Every broadcast offers an unsubscribe link (RFC 8058, and the law in most places): one its recipients
    // cannot reach is no offer. Said when the draft is queued, not found out from complaints.
    if (!deps.linksReachable) {
      throw new AppError('conflict', `Broadcasts need http.public_url set to the address recipients reach the appliance at: their unsubscribe links would point to ${deps.publicUrl()}.`);
    }
    if (!draft.fromAddress) throw invalid('Invalid body. fromAddress: is required to queue a draft');
    if (deps.requireVerifiedDomain && !deps.domains.findVerifiedSendingDomain(projectId, draft.fromAddress)) {
      const why = deps.domains.explainUnverifiedSender?.(projectId, draft.fromAddress);
      throw new AppError('from-address-unverified', `fromAddress ${draft.fromAddress} is not on a verified sending domain of this project.${why ? ` ${why}` : ''}`);
    }
    if (draft.contentType === 'template') {
      if (!draft.templateId) throw invalid('Invalid body. templateId: is required to queue a draft whose contentType is template');
      deps.templates.findForSend(projectId, { id: draft.templateId });
    } else if (!draft.html?.trim()) {
      throw invalid(`Invalid body. html: is required to queue a draft whose contentType is ${draft.contentType}`);
    }
    recipientCondition(projectId, draft.recipients);
    return dueAt(draft, nowMs);
  }

  /** Drafts a DELETE request of this process is deleting now: the scheduler leaves them to it. */
  const removing = new Set<string>();

  return {
    async create(projectId: string, patch: DraftPatch): Promise<DraftView> {
      return writes.run(() => {
        refuseWhileProjectDeleting(deps.db, projectId);
        const nowMs = clock.nowMs();
        const fields = applyPatch(defaultDraft(), patch);
        const row: DraftRow = {
          ...fields,
          id: newId(clock),
          projectId,
          dueAt: fields.status === 'queued' ? checkReadyToQueue(projectId, fields, nowMs) : null,
          expandedThrough: null,
          unsubscribedTotal: 0,
          lastError: null,
          deleting: false,
          createdAt: nowMs,
          updatedAt: nowMs,
        };
        repo.insert(row);
        return view(row);
      });
    },

    find(projectId: string, id: string): { data: DraftView } {
      const row = repo.find(projectId, id);
      if (!row) throw notFound(`Messenger draft ${id}`);
      return { data: view(row) };
    },

    list(projectId: string, input: ListDraftsInput) {
      const totalCount = repo.countAll(projectId);
      const rows = repo.listPage(projectId, input.offset, input.limit);
      return { data: rows.map(view), pageCount: Math.ceil(totalCount / input.limit), totalCount, hasMore: input.offset + rows.length < totalCount };
    },

    /** spec §3.2: only draft and queued drafts change; `{status: 'queued'}` queues, `{status: 'draft'}` takes a queued one back. */
    async update(projectId: string, id: string, patch: DraftPatch): Promise<Record<string, never>> {
      return writes.run(() => {
        refuseWhileProjectDeleting(deps.db, projectId);
        const row = repo.find(projectId, id);
        if (!row) throw notFound(`Messenger draft ${id}`);
        if (!editable.includes(row.status)) {
          throw new AppError('conflict', `Draft ${id} is ${row.status}: only draft and queued drafts can be changed (delete it to stop what is left of its sending).`);
        }
        const fields = applyPatch(row, patch);
        const nowMs = clock.nowMs();
        const dueAt = fields.status === 'queued' ? checkReadyToQueue(projectId, fields, nowMs) : null;
        repo.updateFrom(id, editable, { ...fields, dueAt, updatedAt: nowMs });
        return {};
      });
    },

    /**
     * Permanent (spec §4.7). The draft leaves the API at once; its emails still waiting for a recipient's
     * local time go with it a batch per write, so sends interleave (100,000 in one write held every other
     * write ~2 s), and none of them is released meanwhile. A deletion cut short goes on at the next run.
     */
    async remove(projectId: string, id: string): Promise<{ deleted: boolean }> {
      if (!(await writes.run(() => repo.markDeleting(projectId, id)))) return { deleted: false };
      removing.add(id);
      try {
        await finishDeletion(id);
      } finally {
        removing.delete(id);
      }
      log.info('messenger draft deleted', { draftId: id, projectId });
      return { deleted: true };
    },

    /**
     * Scheduler job: queued drafts whose time has come are expanded into an email per recipient, a batch
     * per write; a draft being expanded (after a restart, or a failed batch) goes on from its last batch.
     * One run at a time: a run that outlasts the job's interval is not started twice.
     */
    async runDue(now: Date): Promise<number> {
      if (running) return 0;
      running = true;
      try {
        let worked = 0;
        for (const draft of repo.listDeleting(draftsPerRun)) {
          if (removing.has(draft.id)) continue;
          await finishDeletion(draft.id);
          log.info('messenger draft deleted (a deletion cut short, finished)', { draftId: draft.id, projectId: draft.projectId });
          worked++;
        }
        for (const draft of repo.listDue(now.getTime(), draftsPerRun)) {
          if (await advance(draft, now.getTime())) worked++;
        }
        return worked;
      } finally {
        running = false;
      }
    },

    /** The contact an unsubscribe link is for; undefined for a forged one. */
    readUnsubscribeLink(token: string): UnsubscribeLink | undefined {
      const payload = deps.signer.verify(token, clock.nowMs());
      const [kind, projectId, contactId, draftId, ...address] = payload?.split(':') ?? [];
      if (kind !== 'u' || !projectId || !contactId || !draftId) return undefined;
      // The address may hold colons of its own (a quoted local part); links sent before it was added have none.
      const emailAddress = address.length > 0 ? address.join(':') : undefined;
      const contact = repo.findContact(projectId, contactId, emailAddress === undefined ? undefined : normalizeAddress(emailAddress));
      if (!contact) return { projectId, contactId, recipientId: contactId, draftId, emailAddress: null, isSubscribed: false };
      return { projectId, contactId: contact.id, recipientId: contactId, draftId, emailAddress: contact.emailAddress, isSubscribed: contact.isSubscribed };
    },

    /**
     * Unsubscribes the link's contact: counted for the broadcast and told to the project's webhooks
     * (`contact.unsubscribed`, so a CRM can follow) the first time only, in the same write.
     */
    async unsubscribe(link: UnsubscribeLink): Promise<void> {
      // No contact at the address the email went to (deleted, or moved to another address since): nobody to unsubscribe.
      if (link.emailAddress === null) return;
      const changed = await writes.run(() => {
        const nowMs = clock.nowMs();
        if (!repo.unsubscribeContact(link.projectId, link.contactId, nowMs)) return false;
        repo.countUnsubscribe(link.draftId, link.recipientId, nowMs);
        const data = { contactId: link.contactId, emailAddress: link.emailAddress, messengerId: link.draftId, unsubscribedAt: new Date(nowMs).toISOString() };
        recordWebhookEvent(deps.db, clock, { projectId: link.projectId, type: 'contact.unsubscribed', data });
        return true;
      });
      if (changed) log.info('contact unsubscribed', { projectId: link.projectId, contactId: link.contactId, draftId: link.draftId });
    },
  };

  async function finishDeletion(draftId: string): Promise<void> {
    await writeInBatches(deletionBatch, () => writes.run(() => repo.deleteUnsentEmails(draftId, deletionBatch)));
    await writes.run(() => repo.deleteDraft(draftId));
  }

  /** One scheduler step for one draft; true when it did something. */
  async function advance(draft: DraftRow, nowMs: number): Promise<boolean> {
    if (draft.status === 'scheduled') return finishScheduled(draft, nowMs);
    if (draft.status === 'queued') {
      const claimed = await writes.run(() => repo.claimQueued(draft.id, clock.nowMs()));
      if (!claimed) return false;
      log.info('messenger broadcast started', { draftId: draft.id, projectId: draft.projectId });
      draft = claimed;
    }
    try {
      await expand(draft);
      return true;
    } catch (error) {
      // The draft stays processing and a later run goes on from its last batch. A full or locked database
      // is the storage state's (/healthz), not news at every run; a refusal of this broadcast is recorded
      // on it, and so is an unexpected error (logged with its stack): either way the draft waits a minute,
      // since one that threw at every run, first in line, kept every project's broadcasts from starting.
      // Superseded (the draft changed or was deleted), or its project is being deleted (the draft goes
      // with it in seconds): nothing to try again, nor to tell.
      const gone = error instanceof AppError && (error.message === expansionSuperseded || error.message === projectDeletedMeanwhile);
      if (isStorageRefusal(error)) log.debug('messenger broadcast waits for storage', { draftId: draft.id, error });
      else if (!(error instanceof AppError)) {
        log.error('messenger broadcast failed', { draftId: draft.id, projectId: draft.projectId, error });
        await noteExpansionFailure(draft, new AppError('internal-error', 'An unexpected error stopped this broadcast (it is in the log); it is tried again in a minute.'));
      } else if (!gone) await noteExpansionFailure(draft, error);
      return false;
    }
  }

  /** Adds the recipients after the draft's last committed batch, then marks it scheduled or DONE. */
  async function expand(draft: DraftRow): Promise<void> {
    const content = broadcastContent(draft);
    let recipients = currentRecipients(draft);
    let committed = draft.expandedThrough;
    let through = committed;
    for (;;) {
      let page = repo.recipientsAfter(draft.projectId, recipients.condition, through, expansionBatch, recipientsWindow);
      if (recipients.outdatedBy(page.rows)) {
        recipients = currentRecipients(draft);
        page = repo.recipientsAfter(draft.projectId, recipients.condition, through, expansionBatch, recipientsWindow);
      }
      if (page.rows.length > 0) committed = await addBatch(draft, content, committed, page.rows, page.lookedThrough!);
      else if (!page.last) {
        // A window with no recipient commits nothing (a crash reads it again); the event loop has its turn.
        await nextTurn();
      }
      // A batch of large emails committed part of the page: the next read starts after it.
      const cutShort = page.rows.length > 0 && committed !== page.lookedThrough;
      if (page.last && !cutShort) break;
      through = cutShort ? committed : page.lookedThrough;
    }
    const outcome = await writes.run(() => {
      const lastSend = repo.lastScheduledSend(draft.projectId, draft.id);
      const patch: DraftRowPatch = lastSend === null ? { status: 'DONE', dueAt: null } : { status: 'scheduled', dueAt: lastSend };
      return repo.updateFrom(draft.id, ['processing'], { ...patch, lastError: null, updatedAt: clock.nowMs() }) ? patch.status : undefined;
    });
    if (outcome) log.info('messenger broadcast expanded', { draftId: draft.id, projectId: draft.projectId, status: outcome });
  }

  /**
   * Commits one batch: the emails of `rows` not reached yet, and the draft's progress from `from` through
   * `through`; or, when the emails service took only the first of them (large emails: emails/service.ts
   * prepareAll), through the last contact it took. Returns how far it committed.
   */
  async function addBatch(draft: DraftRow, content: BroadcastContent, from: string | null, rows: RecipientRow[], through: string): Promise<string> {
    // The time of this batch, which recipients' send times are reckoned from (one that has passed by the
    // time the email renders, the batch having waited, is sent at once: emails/prepare-email.ts).
    const nowMs = clock.nowMs();
    const reached = repo.addressesReached(draft.projectId, draft.id, rows.map((contact) => contact.emailAddress));
    const pending = rows.filter((contact) => !reached.has(contact.emailAddress.toLowerCase()));
    const inputs = pending.map((contact) => emailFor(draft, content, contact, nowMs));
    let committedThrough = through;
    await deps.emails.acceptBroadcast(draft.projectId, inputs, { inlineImages: content.inlineImages, broadcastDesign: content.design }, (accept) => {
      committedThrough = accept.emails.length < inputs.length ? pending[accept.emails.length - 1]!.id : through;
      return writes.call('messenger.expand', { draftId: draft.id, from, through: committedThrough, accept: { ...accept, bulk: true } });
    });
    return committedThrough;
  }

  /**
   * The draft's recipient condition as the contacts are now, and whether a page read with it is outdated.
   * The condition holds what it read of them (the zones a timezoneUtcOffset rule compares, contacts/query.ts):
   * it is read again for a page that reaches contacts added since (ids are time-ordered, so they come last),
   * or once a second, so a contact added or moved to a zone no other contact had is on the right side.
   */
  function currentRecipients(draft: DraftRow) {
    const newest = repo.newestContactId(draft.projectId);
    const readAt = clock.nowMs();
    return {
      condition: recipientCondition(draft.projectId, draft.recipients),
      outdatedBy: (page: { id: string }[]) => clock.nowMs() - readAt > recipientsRereadMs || page.some((contact) => newest === null || contact.id > newest),
    };
  }

  /** A timezone-scheduled broadcast is DONE once the last of its emails has been released to the queue. */
  async function finishScheduled(draft: DraftRow, nowMs: number): Promise<boolean> {
    return writes.run(() => {
      const pending = repo.lastScheduledSend(draft.projectId, draft.id) !== null;
      const patch: DraftRowPatch = pending ? { dueAt: nowMs + scheduledRecheckMs } : { status: 'DONE', dueAt: null, updatedAt: clock.nowMs() };
      repo.updateFrom(draft.id, ['scheduled'], patch);
      return !pending;
    });
  }

  /**
   * An expansion refused (sending paused, the sender's domain or the template deleted) keeps its draft
   * processing, and a run a minute later tries again from its last batch (meanwhile the runs go to other
   * drafts); the reason shows as the draft's `error` and is logged when it changes.
   */
  async function noteExpansionFailure(draft: DraftRow, error: AppError): Promise<void> {
    const { message } = error;
    if (message !== draft.lastError) log.warn('messenger broadcast stopped; tried again in a minute', { draftId: draft.id, projectId: draft.projectId, error });
    try {
      const nowMs = clock.nowMs();
      await writes.run(() => repo.updateFrom(draft.id, ['processing'], { lastError: message, dueAt: nowMs + refusedRetryMs, updatedAt: nowMs }));
    } catch (noted) {
      log.warn('messenger broadcast error not recorded', { draftId: draft.id, error: noted });
    }
  }

  /**
   * with-layout: the layout is rendered once per run, with markers where each recipient's html and link
   * go; their footer text is the project's, the same for everyone. template: rendered per recipient by
   * the send pipeline, in the project's design with the unsubscribe link in its footer, unless the
   * template places `{unsubscribeUrl}` itself.
   */
  function broadcastContent(draft: DraftRow): BroadcastContent {
    const projectDesign = (deps.projects.findProject(draft.projectId)?.emailTemplateDesign ?? {}) as ProjectDesign;
    if (draft.contentType === 'template') {
      return { html: '', layout: null, text: null, inlineImages: [], design: templateHasUnsubscribeLink(draft) ? projectDesign : withUnsubscribeLink(projectDesign) };
    }
    const html = draft.contentType === 'no-layout' ? withVisibleUnsubscribeLink(draft.html ?? '') : (draft.html ?? '');
    // The text of the sender's html, once per run (~25 µs per kB: per recipient it cost a third of the
    // expansion); its {props} are put in per recipient, as in the html. The link a recipient leaves by is a
    // web address in it, so it is shown after its label.
    const textBody = htmlToText(html.replaceAll('{unsubscribeUrl}', unsubscribeMarker));
    if (draft.contentType !== 'with-layout') return { html, layout: null, text: { layout: textBodyMarker, body: textBody }, inlineImages: [] };
    const design = withUnsubscribeLink(projectDesign);
    const rendered = renderHtmlInLayout(bodyMarker, { ...(draft.templateProps ?? {}), unsubscribeUrl: unsubscribeMarker }, design, { subject: subjectMarker, broadcast: true });
    return { html, layout: rendered.html, text: { layout: htmlToText(rendered.html.replace(bodyMarker, textBodyMarker)), body: textBody }, inlineImages: rendered.inlineImages };
  }

  function templateHasUnsubscribeLink(draft: DraftRow): boolean {
    const template = deps.templates.findForSend(draft.projectId, { id: draft.templateId! });
    return JSON.stringify(template).includes('{unsubscribeUrl}');
  }

  /**
   * The signed link a broadcast's email carries for its recipient (RFC 8058 one-click, and the footer's
   * link); it does not expire. It names the contact it was made for (counted once, as its recipient) and
   * the address it went to (the contact there is the one it acts on: repo.ts findContact).
   */
  function unsubscribeUrl(projectId: string, contact: RecipientRow, draftId: string): string {
    return `${deps.publicUrl()}${unsubscribePath}${deps.signer.sign(`u:${projectId}:${contact.id}:${draftId}:${contact.emailAddress}`)}`;
  }

  function emailFor(draft: DraftRow, content: BroadcastContent, contact: RecipientRow, nowMs: number): BroadcastInput {
    const link = unsubscribeUrl(draft.projectId, contact, draft.id);
    const props = recipientProps(draft, contact, link);
    const email: ParsedSendEmail = {
      toAddress: contact.emailAddress,
      fromAddress: draft.fromAddress!,
      fromName: draft.fromName ?? undefined,
      subject: draft.subject,
      messengerId: draft.id,
      isOpenTracked: true,
      headers: { ...listUnsubscribeHeaders(link), ...bulkMailHeaders(draft) },
      scheduledAt: sendTime(draft, contact, nowMs),
    };
    // A template is rendered per recipient by the send pipeline, subject included, with these props. A
    // draft whose subject was never set takes the template's own (as a send with no subject does): the
    // placeholder went out as every recipient's subject.
    if (draft.contentType === 'template') {
      const subject = draft.subject === defaultDraftSubject ? undefined : draft.subject;
      return { ...email, subject, templateId: draft.templateId!, templateProps: props };
    }
    try {
      return personalised(email, content, props, link);
    } catch (error) {
      if (isRenderRefusal(error)) return { ...email, notRenderable: error };
      throw error;
    }
  }

  /** A with-layout or no-layout email with its recipient's properties and link put in. */
  function personalised(email: ParsedSendEmail, content: BroadcastContent, props: TemplateProps, link: string): ParsedSendEmail {
    // Bounded as a template's is: one contact's 10,000-character property made a 2,000,000-character subject.
    const subject = withinLineLimit('subject', substituteKnownVariables(email.subject!, props).replace(/[\r\n]+/g, ' '));
    const body = substituteKnownVariables(content.html, props, escapeHtml);
    const html =
      content.layout === null
        ? body
        : content.layout
            .replace(subjectMarker, () => escapeHtml(subject))
            .replace(bodyMarker, () => body)
            .replaceAll(unsubscribeMarker, () => link);
    // A text part beside the html, as every email the appliance renders has: html-only bulk mail scores
    // as spam (rspamd and SpamAssassin MIME_HTML_ONLY), and text-only readers get the footer's link too.
    const text = content.text
      ? content.text.layout
          .replaceAll(subjectMarker, () => subject)
          .replace(textBodyMarker, () => substituteKnownVariables(content.text!.body, props))
          .replaceAll(unsubscribeMarker, () => link)
      : undefined;
    return { ...email, subject, html, text };
  }
}

/**
 * RFC 8058: mailbox providers show their own unsubscribe button and POST to the link (Gmail and Yahoo
 * require it of bulk senders); RFC 2369 brackets. One-click is claimed only for an https link (§3: "MUST
 * be HTTPS"): with `http.public_url` unset or http, the link is offered without the claim.
 */
export function listUnsubscribeHeaders(link: string): Record<string, string> {
  const headers: Record<string, string> = { 'List-Unsubscribe': `<${link}>` };
  if (link.startsWith('https://')) headers['List-Unsubscribe-Post'] = 'List-Unsubscribe=One-Click';
  return headers;
}

/**
 * A broadcast's identity for mailbox providers, both DKIM-signed (delivery/dkim.ts): `List-Id` (RFC 2919),
 * the project's list under the sender's domain, which readers filter by and providers group bulk mail
 * by; `Feedback-ID`, by which Gmail's Postmaster Tools report spam complaints per broadcast and project
 * (campaign:customer:type:sender).
 */
function bulkMailHeaders(draft: DraftRow): Record<string, string> {
  const domain = domainOf(draft.fromAddress!);
  return { 'List-Id': `<${draft.projectId}.${domain}>`, 'Feedback-ID': `${draft.id}:${draft.projectId}:broadcast:postino` };
}

/**
 * What a run renders once for all of a broadcast's recipients: with-layout and no-layout, the layout's
 * html and text with markers where each recipient's part goes; template, the design its emails are
 * rendered in.
 */
interface BroadcastContent {
  /** The sender's html, {props} still in it (a no-layout one with its unsubscribe link: withVisibleUnsubscribeLink); empty for a template. */
  html: string;
  layout: string | null;
  /** The text part's: the layout's text (or just the body's marker) and the text of the sender's html, with its {props}. */
  text: { layout: string; body: string } | null;
  inlineImages: InlineImage[];
  design?: ProjectDesign;
}

/**
 * What `{name}` may name in a recipient's email: the draft's `templateProps`, the contact's own custom
 * properties over them (personal values win; the draft's are the defaults), `emailAddress`, and
 * `unsubscribeUrl`. Every value a string, as the send's templateProps rule takes them.
 */
function recipientProps(draft: DraftRow, contact: RecipientRow, link: string): TemplateProps {
  const own = Object.fromEntries(Object.entries(contact.customProps).map(([keyName, prop]) => [keyName, String(prop.value)]));
  // The draft's props passed the send's templateProps rule when they were written (schemas.ts).
  return { ...((draft.templateProps ?? {}) as TemplateProps), ...own, emailAddress: contact.emailAddress, unsubscribeUrl: link };
}

type TemplateProps = NonNullable<ParsedSendEmail['templateProps']>;

export type MessengerService = ReturnType<typeof createMessengerService>;

export interface UnsubscribeLink {
  projectId: string;
  /** The contact at the address now. */
  contactId: string;
  /**
   * The contact the email was made for (the link's): a broadcast counts each recipient's unsubscribe once,
   * where one deleted and added again (a new id) after unsubscribing was counted twice.
   */
  recipientId: string;
  draftId: string;
  /** Null when no contact is at the address the email went to (deleted, or moved to another address since). */
  emailAddress: string | null;
  isSubscribed: boolean;
}

/** The columns a client writes, with their stored types. */
type DraftRowFields = Pick<
  DraftRow,
  'subject' | 'fromName' | 'fromAddress' | 'html' | 'richTextValue' | 'templateId' | 'templateProps' | 'recipients' | 'scheduledAt' | 'isTimezoneScheduled' | 'contentType' | 'status'
>;

/** spec §2.10's default subject: a draft's placeholder, never meant for recipients' inboxes. */
const defaultDraftSubject = 'Untitled draft';

/** spec §2.10 defaults. */
function defaultDraft(): DraftRowFields {
  return {
    subject: defaultDraftSubject,
    fromName: null,
    fromAddress: null,
    html: null,
    richTextValue: null,
    templateId: null,
    templateProps: null,
    recipients: {},
    scheduledAt: null,
    isTimezoneScheduled: false,
    contentType: 'with-layout',
    status: 'draft',
  };
}

function applyPatch(current: DraftRowFields, patch: DraftPatch): DraftRowFields {
  const next: DraftRowFields = {
    subject: patch.subject ?? current.subject,
    fromName: patch.fromName !== undefined ? patch.fromName : current.fromName,
    fromAddress: patch.fromAddress !== undefined ? patch.fromAddress : current.fromAddress,
    html: patch.html !== undefined ? patch.html : current.html,
    richTextValue: patch.richTextValue !== undefined ? patch.richTextValue : current.richTextValue,
    templateId: patch.templateId !== undefined ? patch.templateId : current.templateId,
    templateProps: patch.templateProps !== undefined ? patch.templateProps : current.templateProps,
    recipients: patch.recipients ? storedRecipients(patch.recipients) : current.recipients,
    scheduledAt: patch.scheduledAt !== undefined ? (patch.scheduledAt === null ? null : isoInstant(patch.scheduledAt)) : current.scheduledAt,
    isTimezoneScheduled: patch.isTimezoneScheduled ?? current.isTimezoneScheduled,
    contentType: patch.contentType ?? current.contentType,
    status: patch.status ?? current.status,
  };
  return next;
}

/** Recipients as stored and shown: the fields the client set, without nulls. */
function storedRecipients(recipients: NonNullable<DraftPatch['recipients']>): DraftRecipients {
  const out: DraftRecipients = {};
  if (recipients.contactId) out.contactId = recipients.contactId;
  if (recipients.groupId) out.groupId = recipients.groupId;
  if (recipients.filter) out.filter = recipients.filter;
  if (recipients.match) out.match = recipients.match;
  if (recipients.isSubscribed) out.isSubscribed = true;
  return out;
}

/**
 * When the scheduler may take a queued draft: now, at `scheduledAt`, or, scheduled by time zone, when
 * the first zone reaches that local time. A time already past is refused: sent late, a "9:00" broadcast
 * would go out whenever the draft happened to be queued.
 */
function dueAt(draft: DraftRowFields, nowMs: number): number {
  if (draft.scheduledAt === null) {
    if (draft.isTimezoneScheduled) throw invalid('Invalid body. scheduledAt: is required when isTimezoneScheduled is true (the local time to send at)');
    return nowMs;
  }
  if (!draft.isTimezoneScheduled) {
    if (draft.scheduledAt <= nowMs) throw invalid('Invalid body. scheduledAt: must be in the future to queue the draft (null sends it now)');
    return draft.scheduledAt;
  }
  if (draft.scheduledAt + latestZoneBehindMs <= nowMs) throw invalid('Invalid body. scheduledAt: that local time has passed in every time zone');
  return Math.max(nowMs, draft.scheduledAt - earliestZoneAheadMs);
}

/**
 * A recipient's send time as an ISO date for the send pipeline, or undefined for now. By time zone, the
 * draft's time is read as a local time (its UTC fields) in the contact's zone; a contact without a zone
 * gets the time as given. A time that has passed (the run started late, a zone already past it) is now.
 */
export function sendTime(draft: DraftRow, contact: RecipientRow, nowMs: number): string | undefined {
  if (draft.scheduledAt === null) return undefined;
  // A zone this Node's ICU does not know (a database from a newer one, a row written by hand) is no zone.
  const at = draft.isTimezoneScheduled && contact.timezone && isTimeZone(contact.timezone) ? instantOfLocalTime(draft.scheduledAt, contact.timezone) : draft.scheduledAt;
  // A zone's local time past 9999-12-31 would be written +010000-…, which the send pipeline cannot read back.
  return at > nowMs + sendNowWithinMs ? new Date(Math.min(at, latestIsoInstantMs)).toISOString() : undefined;
}

/** 9999-12-31T23:59:59.999Z: the last instant with a four-digit year. */
const latestIsoInstantMs = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * A no-layout draft's html as it goes out: with a visible unsubscribe link at its end when it shows none
 * itself (`{unsubscribeUrl}` as a link's address, or a link of its own saying "unsubscribe", to the
 * sender's own list). The List-Unsubscribe header alone is not enough: CAN-SPAM and the bulk-sender
 * rules of Gmail and Yahoo ask for a link in the body too, and the header was all such a broadcast
 * carried. Comments are no place for either: a `{unsubscribeUrl}` or `</body>` in one shows nothing.
 */
function withVisibleUnsubscribeLink(html: string): string {
  const shown = html.replace(/<!--[\s\S]*?(?:-->|$)/g, '');
  if (/<a\b[^>]*\bhref\s*=\s*["']?\{unsubscribeUrl\}/i.test(shown) || /<a\b[^>]*>[^<]*unsubscribe/i.test(shown)) return html;
  const footer = '<p style="margin:24px 0 0;font-size:12px;color:#6b7280"><a href="{unsubscribeUrl}" style="color:#6b7280">Unsubscribe</a></p>';
  const lower = html.toLowerCase();
  const end = lower.lastIndexOf('</body');
  // Before the last </body>, unless that sits in a comment (one opened before it and not closed before it): then at the end.
  const inComment = end >= 0 && lower.lastIndexOf('<!--', end) > lower.lastIndexOf('-->', end);
  return end < 0 || inComment ? `${html}${footer}` : `${html.slice(0, end)}${footer}${html.slice(end)}`;
}

/**
 * A broadcast always carries an unsubscribe link in its footer: the project's text, and the link if the
 * text has none. The footer text is markdown: a bare `{unsubscribeUrl}` in it would show the address as
 * text, not as a link, so it is made a link showing the address.
 */
function withUnsubscribeLink(design: ProjectDesign): ProjectDesign {
  const text = design.unsubscribeText?.trim() ?? '';
  if (!text.includes('{unsubscribeUrl}')) return { ...design, unsubscribeText: `${text ? `${text} ` : ''}[Unsubscribe]({unsubscribeUrl})` };
  // `<{unsubscribeUrl}>` is no autolink here either: the brackets showed around the address.
  const bare = text.replaceAll('<{unsubscribeUrl}>', '{unsubscribeUrl}');
  return { ...design, unsubscribeText: bare.replace(/(\[|\]\()?\{unsubscribeUrl\}/g, (placed, linked) => (linked ? placed : '[{unsubscribeUrl}]({unsubscribeUrl})')) };
}
