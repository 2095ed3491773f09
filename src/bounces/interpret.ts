import { aliasOfFailedMember, failedMembersOf } from './alias-member.js';
import { isComplaint, parseFeedbackReport, type FeedbackReport } from './parse-arf.js';
import { interpretDeliveryStatus, type BounceFinding } from './parse-dsn.js';
import { detectTextBounce, looksLikeBounce, ownText, statusInText } from './parse-text-bounce.js';
import { bounceTypeOf, commandAnswered, isGenericStatus } from './status-code.js';

/**
 * Decides what one inbound report means, from its parts as mailparser gave them. Pure; never throws.
 * Order: RFC 5965 feedback report → RFC 3464 delivery status → DSN fields in plain text → free-form bounce.
 */
export interface ReportParts {
  /** `report-type` parameter of a top-level multipart/report, lowercased. */
  reportType?: string;
  subject?: string;
  from?: string;
  /** The `Auto-Submitted` keyword (RFC 3834 §5), lowercased, if the message has the header. */
  autoSubmitted?: string;
  /** The text/plain body (the human-readable part of a report). */
  text: string;
  /** Non-text parts as text: `message/delivery-status`, `message/feedback-report`, ... */
  parts: { contentType: string; text: string }[];
  /** The header block of the returned original (message/rfc822 or text/rfc822-headers part), if any. */
  originalHeaders?: string;
  nullSender: boolean;
}

export type ReportFinding =
  | { kind: 'bounce'; bounce: BounceFinding }
  | { kind: 'complaint'; feedback: FeedbackReport }
  | { kind: 'ignored'; reason: string };

const deliveryStatusTypes = ['message/delivery-status', 'message/global-delivery-status'];

export function interpretReport(report: ReportParts, toAddress?: string): ReportFinding {
  const feedback = feedbackReportText(report);
  if (feedback !== undefined) return interpretFeedback(feedback);

  const statusPart = report.parts.find((part) => deliveryStatusTypes.includes(part.contentType));
  if (statusPart) {
    const bounce = interpretDeliveryStatus(statusPart.text, toAddress);
    return bounce ? bounceFinding(withStatusFromText(bounce, report.text), report.text, toAddress) : { kind: 'ignored', reason: 'delivery status reports no failure or delay' };
  }
  // Some MTAs put RFC 3464 fields in a plain-text body; only trust them in a message that looks like a
  // bounce, and only in its own words: an auto-reply sent with <> may quote a report below the original.
  const fieldsInText = report.reportType === 'delivery-status' || (report.nullSender && looksLikeBounce(report));
  const bounce = (fieldsInText ? interpretDeliveryStatus(ownText(report.text), toAddress) : undefined) ?? detectTextBounce({ ...report, namedSender: !report.nullSender });
  return bounce ? bounceFinding(bounce, report.text, toAddress) : { kind: 'ignored', reason: 'not a recognised bounce or complaint report' };
}

/** A bounce with what the report's own words add to its fields: the command refused, an alias's member. */
function bounceFinding(bounce: BounceFinding, text: string, toAddress: string | undefined): ReportFinding {
  return { kind: 'bounce', bounce: withAliasMember(withStage(bounce, text), text, toAddress) };
}

/**
 * A failure of an address the recipient's alias or forward expanded to is that member's, not the
 * recipient's (alias-member.ts): Exim's DSN names the alias as Final-Recipient whichever member failed, so
 * read by its recipient group alone, one member who left suppressed the alias. The DSN's recipient is
 * compared too: behind a forward to the alias, the email's address is not the one the report names. Only
 * the text names the failed members themselves, and their servers' replies.
 */
function withAliasMember(bounce: BounceFinding, text: string, toAddress: string | undefined): BounceFinding {
  const own = ownText(text);
  const alias = aliasOfFailedMember(own, [toAddress, bounce.recipient]);
  return alias === undefined ? bounce : { ...bounce, memberOf: alias, failedMembers: failedMembersOf(own, alias) };
}

/**
 * The command the refusal answered, read from the report's own words (above any quoted original): Postfix
 * and Exim name it only there, so read from the Diagnostic-Code alone a later hop's refusal of our sender
 * at MAIL FROM, or a bare `5.0.0` refusal of the message at end of DATA, suppressed the recipient
 * (record-report.ts reportedAddressFailure).
 */
function withStage(bounce: BounceFinding, text: string): BounceFinding {
  const answered = commandAnswered(ownText(text));
  return answered ? { ...bounce, answered } : bounce;
}

/**
 * A failure whose DSN says only `Status: 5.0.0`, with no Diagnostic-Code, is what Exim writes for a
 * delivery that used no remote host (a local mailbox, a pipe): its reason is only in the report's own
 * text, `mailbox is full (MTA-imposed quota exceeded …): retry timeout exceeded`. Read there as in a
 * free-form bounce: read as 5.0.0 alone, a full mailbox was a hard bounce that suppressed a working address.
 */
function withStatusFromText(bounce: BounceFinding, text: string): BounceFinding {
  if (bounce.action === 'delayed' || bounce.diagnosticCode !== undefined || !isGenericStatus(bounce.status)) return bounce;
  const said = statusInText(text);
  const bounceType = said === undefined || isGenericStatus(said) ? undefined : bounceTypeOf(said);
  return said && bounceType ? { ...bounce, status: said, bounceType } : bounce;
}

/** The fields of an RFC 5965 feedback report when `report` is one (its own part, else a report-type=feedback-report body). */
export function feedbackReportText(report: Pick<ReportParts, 'reportType' | 'text' | 'parts'>): string | undefined {
  const feedbackPart = report.parts.find((part) => part.contentType === 'message/feedback-report');
  if (feedbackPart) return feedbackPart.text;
  return report.reportType === 'feedback-report' ? report.text : undefined;
}

function interpretFeedback(text: string): ReportFinding {
  const feedback = parseFeedbackReport(text);
  if (!feedback) return { kind: 'ignored', reason: 'feedback report without Feedback-Type' };
  if (!isComplaint(feedback)) return { kind: 'ignored', reason: `feedback type ${feedback.feedbackType} is not a complaint` };
  return { kind: 'complaint', feedback };
}
