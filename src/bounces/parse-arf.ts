import { parseFieldGroups, stripAddressType } from './fields.js';

/**
 * RFC 5965 Abuse Reporting Format: the `message/feedback-report` body is one group of fields. Pure;
 * never throws.
 */
export interface FeedbackReport {
  feedbackType: string;
  userAgent?: string;
  version?: string;
  originalMailFrom?: string;
  originalRcptTo?: string;
  arrivalDate?: string;
  sourceIp?: string;
  reportedDomain?: string;
}

export function parseFeedbackReport(text: string): FeedbackReport | undefined {
  const fields = parseFieldGroups(text).find((group) => group.has('feedback-type'));
  const feedbackType = fields?.get('feedback-type')?.toLowerCase().split(/[\s;(]/)[0];
  if (!fields || !feedbackType) return undefined;
  return {
    feedbackType,
    userAgent: fields.get('user-agent'),
    version: fields.get('version'),
    originalMailFrom: stripAddressType(fields.get('original-mail-from')),
    originalRcptTo: stripAddressType(fields.get('original-rcpt-to')),
    arrivalDate: fields.get('arrival-date') ?? fields.get('received-date'),
    sourceIp: fields.get('source-ip'),
    reportedDomain: fields.get('reported-domain'),
  };
}

/**
 * Feedback types that mean "the recipient did not want this mail" (RFC 5965 §7.3). `auth-failure`
 * (DMARC/DKIM failure reports, RFC 6591) and `not-spam` are about the message or a filter, not the
 * recipient's wish, so they are not complaints; `other` is too vague to suppress an address on.
 */
const complaintTypes = new Set(['abuse', 'fraud', 'virus']);

export function isComplaint(report: FeedbackReport): boolean {
  return complaintTypes.has(report.feedbackType);
}
