import type { Db, Sqlite } from '../db/client.js';
import { refusesSendingHost } from '../delivery/classify.js';
import { emailWebhookData } from '../delivery/repo.js';
import { countOutcome } from '../delivery/reputation.js';
import type { Clock } from '../lib/clock.js';
import { addSuppression, complaintDetail } from '../suppressions/repo.js';
import { recordWebhookEvent } from '../webhooks/outbox.js';
import type { ReportFinding } from './interpret.js';
import type { BounceFinding } from './parse-dsn.js';
import type { FeedbackReport } from './parse-arf.js';
import type { BouncedEmail, createBouncesRepo } from './repo.js';
import { commandAnswered, findEnhancedCode, isAddressFailure, isGenericStatus, namesSenderRefused } from './status-code.js';
import { nextStatus } from './transitions.js';
import { cutToLength } from '../lib/text.js';

/**
 * Records one report about one email. Synchronous: the caller runs it inside ONE write transaction, so
 * the event, the status change, the suppression and the webhook outbox row commit together.
 * Returns what changed, for the log line.
 */
export interface RecordDeps {
  db: Db;
  sqlite: Sqlite;
  clock: Clock;
  repo: ReturnType<typeof createBouncesRepo>;
}

/** Reports of one kind stored per email; later ones still move the status and suppress, not stored as events. */
export const maxReportEventsPerType = 100;

export type RecordOutcome = 'bounced' | 'complained' | 'event-only' | 'ignored' | 'unknown-email';

export function recordReport(deps: RecordDeps, emailId: string, finding: ReportFinding): RecordOutcome {
  if (finding.kind === 'ignored') return 'ignored';
  // Read inside the transaction: the status may have moved since the RCPT check.
  const email = deps.repo.findEmail(emailId);
  if (!email) return 'unknown-email';
  if (finding.kind === 'complaint') return recordComplaint(deps, email, finding.feedback);
  return recordBounce(deps, email, finding.bounce);
}

function recordBounce(deps: RecordDeps, email: BouncedEmail, bounce: BounceFinding): RecordOutcome {
  const { db, clock, repo } = deps;
  const smtpResponse = replyOf(bounce);
  if (bounce.bounceType === 'transient') {
    // RFC 3464 `failed` on a temporary problem (Postfix's 4.4.7, a full mailbox): a later hop gave up, the
    // message is lost. A soft bounce, as when the appliance itself gives up: the sender hears of it; the
    // address is fine (nothing suppressed, nothing counted). Kept as history only, the email read
    // `delivered` for good. An alias member's is the alias's concern (recordMemberBounce).
    if (bounce.action === 'failed' && bounce.memberOf === undefined) return recordSoftBounce(deps, email, bounce, smtpResponse);
    // `delayed`: the remote side is still trying.
    repo.appendEvent(email.id, 'delayed', eventData(bounce), maxReportEventsPerType);
    return 'event-only';
  }
  if (bounce.memberOf !== undefined) return recordMemberBounce(deps, email, bounce);
  const suppress = reportedAddressFailure(bounce);
  repo.appendEvent(email.id, 'bounce', { ...eventData(bounce), bounceType: 'hard', smtpResponse, recipientSuppressed: suppress }, maxReportEventsPerType);
  // About the address whatever the email's status: a second report (5.1.1 after a 5.7.1 bounce), or one
  // for a copy sent while the email is still queued (sent without an answer, then deferred).
  if (suppress) addSuppression(db, { projectId: email.projectId, emailAddress: email.toAddress, reason: 'hard-bounce', detail: detailOf(bounce), createdAt: clock.nowMs() });
  const next = nextStatus(email.status, 'bounce');
  if (!next || !repo.setStatusFrom(email.id, email.status, next)) return 'event-only';
  // Reported after the fact: the email was counted as sent when it was delivered. Not a hop's refusal of
  // the sending IP for a blocklist, as at delivery (§8): through a relay that is the address every project
  // sends from, and one project's spam that got it listed paused every other project.
  if (!refusesSendingHost({ code: 0, message: smtpResponse })) countOutcome(deps.sqlite, email.projectId, clock.nowMs(), 'bounced-later');
  recordWebhookEvent(db, clock, {
    projectId: email.projectId,
    type: 'email.bounce',
    data: emailWebhookData(email, { bounceType: 'hard', smtpResponse, status: bounce.status, bouncedAt: clock.now().toISOString() }),
  });
  return 'bounced';
}

function recordSoftBounce(deps: RecordDeps, email: BouncedEmail, bounce: BounceFinding, smtpResponse: string): RecordOutcome {
  const { db, clock, repo } = deps;
  repo.appendEvent(email.id, 'bounce', { ...eventData(bounce), bounceType: 'soft', smtpResponse, recipientSuppressed: false }, maxReportEventsPerType);
  const next = nextStatus(email.status, 'bounce');
  if (!next || !repo.setStatusFrom(email.id, email.status, next)) return 'event-only';
  recordWebhookEvent(db, clock, {
    projectId: email.projectId,
    type: 'email.bounce',
    data: emailWebhookData(email, { bounceType: 'soft', smtpResponse, status: bounce.status, bouncedAt: clock.now().toISOString() }),
  });
  return 'bounced';
}

/**
 * The server's reply a report quotes, as a bounce at delivery shows it (`550 5.1.1 …`): RFC 3464
 * §2.3.6's Diagnostic-Code starts with its type (`smtp; 550 …`, `X-Postfix; …`), which a client reading
 * the reply code from the start of `smtpResponse` took for the reply.
 */
function replyOf(bounce: BounceFinding): string {
  return bounce.diagnosticCode?.replace(/^\s*[\w.-]+\s*;\s*/, '') || bounce.status;
}

/**
 * One address the recipient's alias or forward expands to failed (interpret.ts withAliasMember): the alias
 * took the email and its other members got it. What a sender expects then is the alias's mail going on:
 * the email stays delivered; nothing is suppressed (suppression is for good, and would stop every email to
 * the alias for one member who left); no email.bounce webhook (receivers take it as "this address is dead"
 * and drop it themselves); no bounce in the project's rate. The report is kept as the email's
 * `member-bounce` event, so its record says what happened: the alias (`memberOf`), and which of its
 * members failed with their servers' replies (`failedMembers`), what the alias's owner needs to fix it. A
 * forward to one address reads the same (Exim cannot tell it from an alias of several): a wrong
 * suppression loses mail for good, a missed one costs a report per email, and the alias's owner is the
 * one who can fix it.
 */
function recordMemberBounce(deps: RecordDeps, email: BouncedEmail, bounce: BounceFinding): RecordOutcome {
  const data = { ...eventData(bounce), bounceType: 'hard', memberOf: bounce.memberOf, failedMembers: bounce.failedMembers ?? [], recipientSuppressed: false };
  deps.repo.appendEvent(email.id, 'member-bounce', data, maxReportEventsPerType);
  return 'event-only';
}

/**
 * A failure report suppresses the address only when it is about the address (status-code.ts). A generic
 * `Status: 5.0.0` defers to a more specific code in its Diagnostic-Code (`550 5.7.1 spam detected`); with
 * none, a refusal "in reply to end of DATA command" (Postfix's words) refused the message, not the
 * recipient, as a bare 5xx after DATA does when the appliance delivers itself (delivery/classify.ts).
 */
function reportedAddressFailure(bounce: BounceFinding): boolean {
  // A later hop that refused our Return-Path (sender verify, "Sender address rejected", any refusal of
  // MAIL FROM) refused us, not the recipient, as delivery reads a refused MAIL FROM (classify.ts).
  if (namesSenderRefused(bounce.diagnosticCode ?? '') || bounce.answered === 'MAIL FROM') return false;
  const diagnosed = findEnhancedCode(bounce.diagnosticCode);
  const atEndOfData = bounce.answered === 'end of DATA' || commandAnswered(bounce.diagnosticCode ?? '') === 'end of DATA';
  if (diagnosed === undefined && isGenericStatus(bounce.status) && atEndOfData) return false;
  const text = bounce.diagnosticCode ?? '';
  return isAddressFailure(bounce.status, text) && (diagnosed === undefined || isAddressFailure(diagnosed, text));
}

function recordComplaint(deps: RecordDeps, email: BouncedEmail, feedback: FeedbackReport): RecordOutcome {
  const { db, clock, repo } = deps;
  const data = { source: 'arf', feedbackType: feedback.feedbackType, userAgent: feedback.userAgent ?? null, sourceIp: feedback.sourceIp ?? null, arrivalDate: feedback.arrivalDate ?? null };
  repo.appendEvent(email.id, 'complaint', data, maxReportEventsPerType);
  // About the recipient whatever the email's status, as a bounce: one still queued (a copy sent without
  // an answer, retried since) would otherwise be sent to the complainant again.
  addSuppression(db, { projectId: email.projectId, emailAddress: email.toAddress, reason: 'complaint', detail: complaintDetail(feedback.feedbackType, feedback.userAgent), createdAt: clock.nowMs() });
  const next = nextStatus(email.status, 'complaint');
  if (!next || !repo.setStatusFrom(email.id, email.status, next)) return 'event-only';
  countOutcome(deps.sqlite, email.projectId, clock.nowMs(), 'complaint');
  recordWebhookEvent(db, clock, {
    projectId: email.projectId,
    type: 'email.complaint',
    data: emailWebhookData(email, { feedbackType: feedback.feedbackType, userAgent: feedback.userAgent ?? null, complainedAt: clock.now().toISOString() }),
  });
  return 'complained';
}

function eventData(bounce: BounceFinding): Record<string, unknown> {
  return {
    source: bounce.source,
    status: bounce.status,
    action: bounce.action ?? null,
    diagnosticCode: bounce.diagnosticCode ?? null,
    reportingMta: bounce.reportingMta ?? null,
    remoteMta: bounce.remoteMta ?? null,
    recipient: bounce.recipient ?? null,
  };
}

function detailOf(bounce: BounceFinding): string {
  const from = bounce.reportingMta ? ` from ${bounce.reportingMta}` : '';
  return cutToLength(`asynchronous bounce${from}: ${replyOf(bounce)}`, 1000);
}
