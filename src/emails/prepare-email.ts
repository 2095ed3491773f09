import { createReadCache } from '../db/read-cache.js';
import { candidateDomains } from '../domains/domain-name.js';
import { AppError } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import { clipped } from '../lib/zod-issues.js';
import { renderedTooLarge, renderLimits } from '../render/budget.js';
import type { ProjectDesign, TemplateInput } from '../render/types.js';
import type { AcceptedEmail } from './accept-procedure.js';
import { domainOf } from './address.js';
import { attachedMessageType, attachmentContentType, type AttachedMessage } from './attachments.js';
import type { HeaderRecipients } from './header-recipients.js';
import { renderMarkdown, renderTemplateEmail, type RenderedContent } from './render-content.js';
import type { EmailsRepo, NewAttachment, NewEmail, TemplateRow } from './repo.js';
import { isoInstant } from '../lib/iso-date.js';
import type { ParsedSendEmail } from './schemas.js';
import { allowEverySender } from './sending-allowed.js';
import type { EmailsDeps, SendOptions } from './service.js';

/**
 * The steps of accepting one email before its commit (the sendEmail use case of DESIGN): may this
 * project send, is the sender's domain its own, when does it go, what does it say (rendered now), what
 * does it carry. `deps` is the emails service's own, read at call time (the sending guard is wired
 * after the service).
 */
export function createEmailPreparer(deps: EmailsDeps, repo: Pick<EmailsRepo, 'findTemplateById' | 'findTemplateByName'>) {
  const { clock, config } = deps;
  // A template send reads its project (design, parent) and its template: kept until the projects or
  // templates table changes (db/read-cache.ts). Templates can be large, so few are kept.
  const projectsById = createReadCache<{ parentId: string | null; emailTemplateDesign: unknown }>(deps.database.sqlite);
  const templates = createReadCache<TemplateRow>(deps.database.sqlite, 64);

  /**
   * The sendEmail use case as a checklist: validate → may this project send → sender domain → content → commit.
   * Synchronous, like everything it calls (cached reads, rendering): an async step per email cost each
   * send its promises and microtask turns (~1 kB of garbage apiece) for nothing.
   */
  function prepareEmail(
    projectId: string,
    input: ParsedSendEmail,
    verifiedSenders: Set<string>,
    { inlineImages: givenImages = [], messageId, headerRecipients, attachedMessages = [], broadcastDesign }: SendOptions,
    broadcast = false,
  ): AcceptedEmail {
    (deps.sendingGuard ?? allowEverySender).assertSendingAllowed(projectId);
    // A broadcast's sender was checked when it was queued: a domain that failed a re-check since holds it
    // no more than it holds a scheduled email (a Monday newsletter went out when DNS was fixed, a day late).
    if (broadcast) checkBroadcastSender(projectId, input.fromAddress);
    else checkSender(projectId, input.fromAddress, verifiedSenders);
    const now = clock.nowMs();
    // A broadcast recipient's local time that passed while the batch waited (for the render room, or the
    // writer) is now: a client's scheduledAt in the past is refused.
    const scheduledAt = broadcast && input.scheduledAt !== undefined && isoInstant(input.scheduledAt) <= now ? null : parseScheduledAt(input.scheduledAt, now);
    const content = resolveContent(projectId, input, broadcastDesign);
    // Given images belong to the given html: a template or markdown makes html of its own.
    const inline = content.kind === 'html' || content.kind === 'html+text' ? [...content.inlineImages, ...givenImages] : content.inlineImages;
    const attachments = buildAttachments(input.attachments ?? [], attachedMessages, inline);
    return {
      email: emailRow(projectId, input, content, scheduledAt !== null ? 'scheduled' : 'queued', { scheduledAt, messageId, headerRecipients }),
      attachments,
      eventId: newId(clock),
      senderDomains: config.sending.require_verified_domain ? candidateDomains(domainOf(input.fromAddress)) : undefined,
      ...(broadcast ? { senderCheckedAtQueue: true } : {}),
    };
  }

  /** The email's row as accepted; its id and time are given by numberForCommit, once the whole request is rendered. */
  function emailRow(
    projectId: string,
    input: ParsedSendEmail,
    content: Omit<Content, 'inlineImages'>,
    status: NewEmail['status'],
    { scheduledAt = null, messageId, headerRecipients }: { scheduledAt?: number | null; messageId?: string; headerRecipients?: HeaderRecipients } = {},
  ): NewEmail {
    return {
      id: '',
      projectId,
      status,
      toAddress: input.toAddress,
      fromAddress: input.fromAddress,
      fromName: input.fromName ?? null,
      // Spec §4.2: replyToName is ignored without replyToAddress.
      replyToAddress: input.replyToAddress ?? null,
      replyToName: input.replyToAddress ? (input.replyToName ?? null) : null,
      subject: content.subject,
      templateId: content.templateId,
      templateName: content.templateName,
      templateProps: input.templateProps ? JSON.stringify(input.templateProps) : null,
      automationId: input.automationId ?? null,
      messengerId: input.messengerId ?? null,
      contentKind: content.kind,
      html: content.html,
      text: content.text,
      headers: input.headers && Object.keys(input.headers).length > 0 ? JSON.stringify(input.headers) : null,
      isOpenTracked: input.isOpenTracked ? 1 : 0,
      scheduledAt,
      createdAt: 0,
      messageId: messageId ?? null,
      headerRecipients: headerRecipients ? JSON.stringify(headerRecipients) : null,
    };
  }

  /** `verifiedSenders`: sender domains already checked in this request (a batch usually has one sender). */
  function checkSender(projectId: string, fromAddress: string, verifiedSenders: Set<string>): void {
    if (!config.sending.require_verified_domain) return;
    const senderDomain = domainOf(fromAddress);
    if (verifiedSenders.has(senderDomain)) return;
    const found = deps.domains.findVerifiedSendingDomain(projectId, fromAddress);
    if (!found) {
      const why = deps.domains.explainUnverifiedSender?.(projectId, fromAddress);
      throw new AppError('from-address-unverified', `fromAddress ${fromAddress} is not on a verified sending domain of this project.${why ? ` ${why}` : ''}`);
    }
    verifiedSenders.add(senderDomain);
  }

  /** A broadcast's sender: a domain of the project (any status) still covers it. */
  function checkBroadcastSender(projectId: string, fromAddress: string): void {
    if (!config.sending.require_verified_domain) return;
    if (deps.domains.findSendingDomain(projectId, fromAddress)) return;
    throw new AppError('from-address-unverified', `fromAddress ${fromAddress} is on no sending domain of this project any more.`);
  }

  function parseScheduledAt(value: string | undefined, now: number): number | null {
    if (value === undefined) return null;
    const at = isoInstant(value);
    // Validated on the way in; a value made inside the appliance (a broadcast's local time) is checked too.
    if (Number.isNaN(at)) throw new AppError('parameters-invalid', 'scheduledAt: must be an ISO 8601 date.');
    if (at <= now) throw new AppError('parameters-invalid', 'scheduledAt: must be a date in the future.');
    return at;
  }

  interface Content {
    kind: string;
    subject: string;
    html: string | null;
    text: string | null;
    templateId: string | null;
    templateName: string | null;
    inlineImages: RenderedContent['inlineImages'];
  }

  function resolveContent(projectId: string, input: ParsedSendEmail, broadcastDesign: ProjectDesign | undefined): Content {
    if (input.templateId !== undefined || input.templateName !== undefined) return renderFromTemplate(projectId, input, broadcastDesign);
    if (input.markdown !== undefined) {
      const rendered = renderMarkdown(input.markdown, input.templateProps ?? {}, designOf(projectId), input.subject);
      // The spec's subject has no optional marker; markdown may carry it in its front matter instead.
      if (input.subject === undefined && !rendered.subject) {
        throw new AppError('parameters-invalid', 'subject: is required with markdown content, in the body or in the front matter (---\nsubject: …\n---)');
      }
      return { kind: 'markdown', subject: rendered.subject, html: rendered.html, text: rendered.text, templateId: null, templateName: null, inlineImages: rendered.inlineImages ?? [] };
    }
    const kind = input.html !== undefined ? (input.text !== undefined ? 'html+text' : 'html') : 'text';
    // Within the send API's limits by its schema; a broadcast's, made per recipient with the contact's
    // properties (messenger/service.ts), is held to what a render may make (render/budget.ts).
    if ((input.text?.length ?? 0) > renderLimits.textChars) throw renderedTooLarge(renderLimits.textChars, "email's text");
    if ((input.html?.length ?? 0) > renderLimits.outputChars) throw renderedTooLarge();
    return { kind, subject: input.subject ?? '', html: input.html ?? null, text: input.text ?? null, templateId: null, templateName: null, inlineImages: [] };
  }

  function renderFromTemplate(projectId: string, input: ParsedSendEmail, broadcastDesign: ProjectDesign | undefined): Content {
    const project = projectsById.get(projectId, () => deps.projects.findProject(projectId));
    const parentId = project?.parentId ?? null;
    const { templateId, templateName } = input;
    const row =
      templateId !== undefined
        ? templates.get(`${projectId}\n${parentId}\nid\n${templateId}`, () => repo.findTemplateById(templateId, projectId, parentId))
        : templates.get(`${projectId}\nname\n${templateName}`, () => repo.findTemplateByName(projectId, templateName!));
    if (!row) {
      const which = input.templateId !== undefined ? `id ${clipped(input.templateId)}` : `name "${clipped(input.templateName!)}"`;
      throw new AppError('template-not-found', `Template with ${which} does not exist (ids and names are case and whitespace sensitive).`);
    }
    const template: TemplateInput = {
      // A blank subject keeps the template's, as an empty Subject header does over SMTP: sent as given, the
      // email went out with no Subject at all (PHP and form-driven clients send "" for "not set").
      subject: input.subject?.trim() ? input.subject : row.subject,
      content: JSON.parse(row.content),
      preheader: row.preheader,
      emailText: row.email_text,
      layoutId: row.layout_id,
    };
    const rendered = broadcastDesign
      ? renderTemplateEmail(template, input.templateProps ?? {}, broadcastDesign, { broadcast: true })
      : renderTemplateEmail(template, input.templateProps ?? {}, (project?.emailTemplateDesign ?? {}) as ProjectDesign);
    return {
      kind: 'template',
      subject: rendered.subject,
      html: rendered.html,
      text: rendered.text,
      templateId: row.id,
      templateName: row.name,
      inlineImages: rendered.inlineImages ?? [],
    };
  }

  function designOf(projectId: string): ProjectDesign {
    return (deps.projects.findProject(projectId)?.emailTemplateDesign ?? {}) as ProjectDesign;
  }

  /** A broadcast's email that could not be rendered for its recipient: recorded as `error`, with the reason as its event's message. */
  function notRendered(projectId: string, input: ParsedSendEmail, error: AppError): AcceptedEmail {
    const content = { kind: input.templateId !== undefined ? 'template' : 'html', subject: input.subject ?? '', html: null, text: null, templateId: input.templateId ?? null, templateName: null };
    return {
      email: emailRow(projectId, input, content, 'error'),
      attachments: [],
      eventId: newId(clock),
      eventData: JSON.stringify({ message: error.message }),
    };
  }

  /** The email's id is set by numberForCommit. */
  function buildAttachments(given: { name: string; content: string }[], messages: AttachedMessage[], inline: RenderedContent['inlineImages']): NewAttachment[] {
    const out: NewAttachment[] = [];
    for (const a of given) {
      const content = Buffer.from(a.content, 'base64');
      out.push({ id: newId(clock), emailId: '', name: a.name, contentType: attachmentContentType(a.name)!, size: content.length, content, contentId: null });
    }
    for (const message of messages) {
      out.push({ id: newId(clock), emailId: '', name: message.name, contentType: attachedMessageType, size: message.content.length, content: message.content, contentId: null });
    }
    for (const image of inline) {
      out.push({ id: newId(clock), emailId: '', name: image.filename, contentType: image.contentType, size: image.content.length, content: image.content, contentId: image.cid });
    }
    return out;
  }

  return { prepareEmail, notRendered };
}
