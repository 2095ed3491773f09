/*
 * Synchronous queries of the send path and of email records. The hot path (accepting an email) uses raw
 * prepared statements: building a drizzle query per request costs more than the insert itself.
 */

import type { Sqlite } from '../db/client.js';
import { deletingMark } from '../projects/repo.js';

/** An `emails` row as SQLite returns it (snake_case columns, 0/1 booleans, JSON as text): the record read back. */
export interface StoredEmailRow {
  id: string;
  project_id: string;
  status: string;
  to_address: string;
  from_address: string;
  from_name: string | null;
  reply_to_address: string | null;
  reply_to_name: string | null;
  subject: string;
  template_id: string | null;
  template_name: string | null;
  template_props: string | null;
  automation_id: string | null;
  messenger_id: string | null;
  content_kind: string;
  html: string | null;
  text: string | null;
  headers: string | null;
  is_open_tracked: number;
  scheduled_at: number | null;
  created_at: number;
  updated_at: number;
}

export interface NewEmail {
  id: string;
  projectId: string;
  /** `error`: a broadcast's email that could not be rendered for its recipient (emails/service.ts notRendered). */
  status: 'queued' | 'scheduled' | 'suppressed' | 'error';
  toAddress: string;
  fromAddress: string;
  fromName: string | null;
  replyToAddress: string | null;
  replyToName: string | null;
  subject: string;
  templateId: string | null;
  templateName: string | null;
  templateProps: string | null;
  automationId: string | null;
  messengerId: string | null;
  contentKind: string;
  html: string | null;
  text: string | null;
  headers: string | null;
  isOpenTracked: number;
  scheduledAt: number | null;
  createdAt: number;
  /** Set only when the sender's message had its own (SMTP submission); delivery makes one otherwise. */
  messageId?: string | null;
  /** JSON of the submitted message's To/Cc lists (SMTP submission); delivery writes `To: toAddress` otherwise. */
  headerRecipients?: string | null;
}

export interface NewAttachment {
  id: string;
  emailId: string;
  name: string;
  contentType: string;
  size: number;
  content: Buffer;
  contentId: string | null;
}

export interface TemplateRow {
  id: string;
  project_id: string;
  name: string;
  subject: string;
  content: string;
  email_text: string | null;
  preheader: string | null;
  layout_id: string | null;
}

export interface EventRow {
  type: string;
  time: number;
  ip_address: string | null;
  user_agent: string | null;
  /** JSON: a delivery attempt's mxHost, smtpResponse, nextAttemptAt, bounceType; a click's url. */
  data: string | null;
}

export interface AttachmentMeta {
  id: string;
  name: string;
  size: number;
  content_type: string;
  content_id: string | null;
}

export function createEmailsRepo(sqlite: Sqlite) {
  const s = {
    insertEmail: sqlite.prepare(
      `insert into emails (id, project_id, status, to_address, from_address, from_name, reply_to_address, reply_to_name, subject,
        template_id, template_name, template_props, automation_id, messenger_id, content_kind, html, text, headers,
        is_open_tracked, scheduled_at, created_at, updated_at, message_id, header_recipients)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    insertAttachment: sqlite.prepare(
      `insert into email_attachments (id, email_id, name, content_type, size, content, content_id)
       values (@id, @emailId, @name, @contentType, @size, @content, @contentId)`,
    ),
    insertEvent: sqlite.prepare(
      `insert into email_events (id, email_id, type, time, ip_address, user_agent, data) values (?, ?, ?, ?, ?, ?, ?)`,
    ),
    insertJob: sqlite.prepare(
      `insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at, bulk) values (?, ?, ?, ?, 0, ?, ?)`,
    ),
    suppression: sqlite.prepare(`select reason, detail from suppressions where project_id = ? and email_address in (?, ?) limit 1`),
    verifiedDomain: sqlite.prepare(`select 1 from domains where project_id = ? and domain = ? and status = 'success'`).pluck(),
    anyDomain: sqlite.prepare(`select 1 from domains where project_id = ? and domain = ?`).pluck(),
    // The mark of a linked project whose deletion is under way (projects/repo.ts deletingMark).
    projectDeleting: sqlite.prepare(`select 1 from settings where key = ?`).pluck(),
    templateById: sqlite.prepare(
      `select id, project_id, name, subject, content, email_text, preheader, layout_id from templates where id = ? and project_id in (?, ?)`,
    ),
    templateByName: sqlite.prepare(
      `select id, project_id, name, subject, content, email_text, preheader, layout_id from templates where project_id = ? and name = ?`,
    ),
    emailById: sqlite.prepare(`select * from emails where id = ? and project_id = ?`),
    // No html: an open or a click (public, possibly in a loop) must not read up to 1 MB of body per hit.
    emailByIdAnyProject: sqlite.prepare(`select id, project_id, status, is_open_tracked from emails where id = ?`),
    htmlById: sqlite.prepare(`select html from emails where id = ?`),
    // A click link's email, on file and of a project not being deleted (its mark, projects/repo.ts).
    emailOnFile: sqlite.prepare(`select 1 from emails where id = ? and not exists (select 1 from settings where key = '${deletingMark('')}' || emails.project_id)`).pluck(),
    eventsOf: sqlite.prepare(`select type, time, ip_address, user_agent, data from email_events where email_id = ? order by time, id`),
    attachmentsOf: sqlite.prepare(`select id, name, size, content_type, content_id from email_attachments where email_id = ? order by id`),
    attachmentById: sqlite.prepare(`select name, content_type, content from email_attachments where id = ? and email_id = ?`),
    deleteScheduled: sqlite.prepare(`delete from emails where id = ? and project_id = ? and status = 'scheduled'`),
    // An email of a broadcast being deleted (messenger/service.ts remove) is never released: its
    // deletion goes on in batches, after a restart too.
    dueScheduled: sqlite.prepare(
      `select id, project_id, to_address, scheduled_at, messenger_id from emails e where status = 'scheduled' and scheduled_at <= ?
         and (messenger_id is null or not exists (select 1 from messenger_drafts d where d.id = e.messenger_id and d.deleting = 1))
       order by scheduled_at limit ?`,
    ),
    markQueued: sqlite.prepare(`update emails set status = 'queued', updated_at = ? where id = ? and status = 'scheduled'`),
    // emails_project_scheduled_at_id_idx: two entries read at most.
    scheduledTogether: sqlite
      .prepare(`select count(*) from (select 1 from emails indexed by emails_project_scheduled_at_id_idx where project_id = ? and scheduled_at = ? limit 2)`)
      .pluck(),
    hasEvent: sqlite.prepare(`select 1 from email_events where email_id = ? and type = ? limit 1`).pluck(),
    countEventsUpTo: sqlite.prepare(`select count(*) from (select 1 from email_events where email_id = ? and type = ? limit ?)`).pluck(),
    setStatusFrom: sqlite.prepare(`update emails set status = ?, updated_at = ? where id = ? and status = ?`),
    idempotencyGet: sqlite.prepare(`select request_hash, response, created_at from idempotency_keys where project_id = ? and key = ?`),
    idempotencyDeleteExpired: sqlite.prepare(`delete from idempotency_keys where project_id = ? and key = ? and created_at < ?`),
    idempotencyInsert: sqlite.prepare(
      `insert into idempotency_keys (project_id, key, request_hash, response, created_at) values (?, ?, ?, ?, ?)`,
    ),
    // Oldest first through the created_at index, `limit` at a time: one write never deletes a whole day of keys.
    idempotencyPrune: sqlite.prepare(
      `delete from idempotency_keys where rowid in (select rowid from idempotency_keys where created_at < ? order by created_at limit ?)`,
    ),
  };

  return {
    // Positional: binding 22 named parameters from an object costs ~4 µs more per accepted email.
    insertEmail: (row: NewEmail) =>
      s.insertEmail.run(
        row.id, row.projectId, row.status, row.toAddress, row.fromAddress, row.fromName, row.replyToAddress, row.replyToName, row.subject,
        row.templateId, row.templateName, row.templateProps, row.automationId, row.messengerId, row.contentKind, row.html, row.text, row.headers,
        row.isOpenTracked, row.scheduledAt, row.createdAt, row.createdAt, row.messageId ?? null, row.headerRecipients ?? null,
      ),
    insertAttachment: (row: NewAttachment) => s.insertAttachment.run(row),
    insertEvent: (id: string, emailId: string, type: string, time: number, ip: string | null = null, userAgent: string | null = null, data: string | null = null) =>
      s.insertEvent.run(id, emailId, type, time, ip, userAgent, data),
    /** `bulk`: queued with others (a batch, a scheduled release): the bulk lane of delivery's claims (delivery/repo.ts). */
    insertJob: (emailId: string, projectId: string, recipientDomain: string, now: number, bulk: boolean) =>
      s.insertJob.run(emailId, projectId, recipientDomain, now, now, bulk ? 1 : 0),
    /** The address's suppression, if any: its reason and detail go in the email's `suppressed` event. */
    findSuppression: (projectId: string, address: string) =>
      s.suppression.get(projectId, address, address.toLowerCase()) as { reason: string; detail: string | null } | undefined,
    hasVerifiedDomain: (projectId: string, names: string[]) => names.some((name) => s.verifiedDomain.get(projectId, name) !== undefined),
    /** Whether one of `names` is a domain of the project, verified or not (a broadcast's sender, checked when it was queued). */
    hasDomain: (projectId: string, names: string[]) => names.some((name) => s.anyDomain.get(projectId, name) !== undefined),
    isProjectDeleting: (projectId: string) => s.projectDeleting.get(deletingMark(projectId)) !== undefined,
    /** A linked project may use its parent's templates by id (COMPAT.md "Projects"). */
    findTemplateById: (id: string, projectId: string, parentId: string | null) =>
      s.templateById.get(id, projectId, parentId ?? projectId) as TemplateRow | undefined,
    findTemplateByName: (projectId: string, name: string) => s.templateByName.get(projectId, name) as TemplateRow | undefined,
    findEmail: (id: string, projectId: string) => s.emailById.get(id, projectId) as StoredEmailRow | undefined,
    findEmailForTracking: (id: string) => s.emailByIdAnyProject.get(id) as Pick<StoredEmailRow, 'id' | 'project_id' | 'status' | 'is_open_tracked'> | undefined,
    /** Whether the email is on file, of a project that is not being deleted. */
    isEmailOnFile: (id: string) => s.emailOnFile.get(id) !== undefined,
    /** The stored html of an email (the signed html reference link); undefined when there is no such email. */
    findEmailHtml: (id: string) => s.htmlById.get(id) as Pick<StoredEmailRow, 'html'> | undefined,
    listEvents: (emailId: string) => s.eventsOf.all(emailId) as EventRow[],
    listAttachments: (emailId: string) => s.attachmentsOf.all(emailId) as AttachmentMeta[],
    findAttachment: (id: string, emailId: string) => s.attachmentById.get(id, emailId) as { name: string; content_type: string; content: Buffer } | undefined,
    deleteScheduled: (id: string, projectId: string) => s.deleteScheduled.run(id, projectId).changes > 0,
    listDueScheduled: (nowMs: number, limit: number) =>
      s.dueScheduled.all(nowMs, limit) as { id: string; project_id: string; to_address: string; scheduled_at: number; messenger_id: string | null }[],
    markQueued: (id: string, nowMs: number) => s.markQueued.run(nowMs, id).changes > 0,
    /** Whether another email of the project was set for the same moment (released already or not). */
    sharesScheduledTime: (projectId: string, scheduledAt: number) => (s.scheduledTogether.get(projectId, scheduledAt) as number) > 1,
    hasEvent: (emailId: string, type: string) => s.hasEvent.get(emailId, type) !== undefined,
    /** How many events of `type` the email has, counting no further than `limit`. */
    countEventsUpTo: (emailId: string, type: string, limit: number) => s.countEventsUpTo.get(emailId, type, limit) as number,
    setStatusFrom: (id: string, from: string, to: string, nowMs: number) => s.setStatusFrom.run(to, nowMs, id, from).changes > 0,
    findIdempotencyKey: (projectId: string, key: string) =>
      s.idempotencyGet.get(projectId, key) as { request_hash: string; response: string; created_at: number } | undefined,
    deleteExpiredIdempotencyKey: (projectId: string, key: string, beforeMs: number) => s.idempotencyDeleteExpired.run(projectId, key, beforeMs),
    insertIdempotencyKey: (projectId: string, key: string, hash: string, response: unknown, nowMs: number) =>
      s.idempotencyInsert.run(projectId, key, hash, JSON.stringify(response), nowMs),
    pruneIdempotencyKeys: (beforeMs: number, limit: number) => s.idempotencyPrune.run(beforeMs, limit).changes,
  };
}

export type EmailsRepo = ReturnType<typeof createEmailsRepo>;
