import { isGeneratedContentId } from '../render/types.js';
import type { AttachmentMeta, StoredEmailRow, EventRow } from './repo.js';

export interface RecordLinks {
  html: string;
  attachment(attachmentId: string): string;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/**
 * The email object of spec §2.5 with the client expectations of COMPAT.md: `templateProps` as
 * `[{keyName, value}]`, `text` a boolean. Events and attachments are included when given (GET by id).
 */
export function presentEmail(row: StoredEmailRow, events: EventRow[] | undefined, attachments: AttachmentMeta[] | undefined, links: RecordLinks) {
  return {
    id: row.id,
    projectId: row.project_id,
    automationId: row.automation_id ?? undefined,
    messengerId: row.messenger_id ?? undefined,
    toAddress: row.to_address,
    fromName: row.from_name ?? undefined,
    fromAddress: row.from_address,
    replyToName: row.reply_to_name ?? undefined,
    replyToAddress: row.reply_to_address ?? undefined,
    subject: row.subject,
    templateId: row.template_id ?? undefined,
    templateName: row.template_name ?? undefined,
    templateProps: propsAsPairs(row.template_props),
    status: row.status,
    isOpenTracked: row.is_open_tracked === 1,
    createdAt: iso(row.created_at),
    scheduledAt: iso(row.scheduled_at) ?? undefined,
    text: row.text !== null && row.text !== '',
    htmlReferenceUrl: row.html !== null ? links.html : undefined,
    events: events?.map((e) => ({
      type: e.type,
      time: iso(e.time),
      ...(e.ip_address ? { ipAddress: e.ip_address } : {}),
      ...(e.user_agent ? { userAgent: e.user_agent } : {}),
      ...eventDetails(e.data),
    })),
    attachments: attachments === undefined ? undefined : presentAttachments(attachments, links),
  };
}

/**
 * The files of the sender's message, its own inline images included (SMTP submission). The inline images
 * a template or markdown adds (a project logo, charts) are parts the sender never attached: not listed
 * (the html reference shows them).
 */
function presentAttachments(attachments: AttachmentMeta[], links: { attachment(id: string): string }) {
  const attached = attachments.filter((a) => !a.content_id || !isGeneratedContentId(a.content_id));
  if (attached.length === 0) return null;
  return attached.map((a) => ({ id: a.id, name: a.name, size: a.size, contentType: a.content_type, fileUrl: links.attachment(a.id) }));
}

/**
 * Extension fields of an event (the spec's are type, time, ipAddress, userAgent): what a delivery attempt
 * met (mail host, the server's reply, the next attempt, the bounce type; why a message could not be
 * built at all, an `error` event's message: without it the record said `error` and nothing else; why a
 * `suppressed` email was not sent, its suppression's reason and detail), what a later bounce report
 * said (its status, diagnostic and reporting host) or a complaint (its feedback type and the address it
 * names), and a click's link, so a client can see why an email is still queued, bounced or complained
 * about. Internal fields of the row stay out.
 */
const eventDetailFields = ['mxHost', 'smtpResponse', 'nextAttemptAt', 'bounceType', 'status', 'diagnosticCode', 'reportingMta', 'feedbackType', 'sourceIp', 'url', 'message', 'reason', 'detail'] as const;

function eventDetails(json: string | null): Record<string, unknown> {
  if (!json) return {};
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return {};
  }
  const out: Record<string, unknown> = {};
  for (const field of eventDetailFields) if (data[field] !== undefined && data[field] !== null) out[field] = data[field];
  if (typeof out.message === 'string') out.message = firstLine(out.message);
  return out;
}

/**
 * An `error` event's `message` (why the message could not be built) as stored: the build thread's
 * error, stack trace included. Its first line says why; the frames name the server's paths, which are
 * the log's to keep, not a tenant's record.
 */
function firstLine(text: string): string {
  const end = text.indexOf('\n');
  return (end === -1 ? text : text.slice(0, end)).trimEnd();
}

function propsAsPairs(json: string | null): { keyName: string; value: unknown }[] {
  if (!json) return [];
  const props = JSON.parse(json) as Record<string, unknown>;
  return Object.entries(props).map(([keyName, value]) => ({ keyName, value }));
}
