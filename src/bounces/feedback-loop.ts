import { parseFieldGroups, stripAddressType } from './fields.js';
import { feedbackReportText } from './interpret.js';
import { parseFeedbackReport } from './parse-arf.js';
import type { ParsedReport } from './read-report.js';

/**
 * Feedback loops (Yahoo's CFL, which AOL's mail uses too, Microsoft's JMRP) mail their ARF reports to the
 * address the sender registered with them, not to the VERP Return-Path, so the email is found from the
 * report itself: the feedback report's `Original-Mail-From` (RFC 5965 §3.2, the original's envelope
 * sender), and the `Return-Path` the receiving MX wrote into the returned original (RFC 5321 §4.4), for
 * reports that leave the first out (JMRP). Pure; these are candidates only: the caller keeps those that
 * are authentic VERP addresses, so a forged report names no email.
 */
export function reportedEnvelopeSenders(report: ParsedReport): string[] {
  if ('unreadable' in report) return [];
  const feedback = feedbackReportText(report);
  // Not an ARF report: a person forwarding "your spam" with the original attached is no complaint.
  if (feedback === undefined) return [];
  const originalMailFrom = parseFeedbackReport(feedback)?.originalMailFrom;
  const returnPath = stripAddressType(parseFieldGroups(report.originalHeaders ?? '')[0]?.get('return-path'));
  return [originalMailFrom, returnPath].filter((address): address is string => address !== undefined);
}
