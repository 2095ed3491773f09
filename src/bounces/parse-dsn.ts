import type { FailedMember } from './alias-member.js';
import { parseFieldGroups, stripAddressType, type FieldGroup } from './fields.js';
import { bounceTypeOf, enhancedFromBasic, findBasicCode, findEnhancedCode, isGenericStatus, type AnsweredCommand, type BounceType } from './status-code.js';
import { cutToLength } from '../lib/text.js';

/**
 * RFC 3464 delivery status notifications: the `message/delivery-status` body is one group of
 * per-message fields followed by one group per recipient. Pure; never throws.
 */
export interface DsnRecipient {
  finalRecipient?: string;
  originalRecipient?: string;
  action?: string;
  status?: string;
  diagnosticCode?: string;
  remoteMta?: string;
}

export interface DeliveryStatus {
  reportingMta?: string;
  recipients: DsnRecipient[];
}

/** What a bounce report says about the email it refers to. */
export interface BounceFinding {
  bounceType: BounceType;
  status: string;
  action?: string;
  diagnosticCode?: string;
  recipient?: string;
  reportingMta?: string;
  remoteMta?: string;
  /** `dsn`: RFC 3464 fields; `text`: recognised in a free-form (non-standard) bounce. */
  source: 'dsn' | 'text';
  /** The command the refusal answered, when the report's own text names MAIL FROM or end of DATA (status-code.ts commandAnswered). */
  answered?: AnsweredCommand;
  /**
   * The email's recipient, when the failed address is one its alias or forward expanded to (alias-member.ts):
   * a member's failure, not the recipient's.
   */
  memberOf?: string;
  /** With `memberOf`: the members the report says failed, with their servers' replies (alias-member.ts failedMembersOf). */
  failedMembers?: FailedMember[];
}

const recipientFields = ['final-recipient', 'original-recipient', 'action', 'status'];

export function parseDeliveryStatus(text: string): DeliveryStatus {
  const groups = parseFieldGroups(text);
  const isRecipient = (group: FieldGroup) => recipientFields.some((name) => group.has(name));
  const perMessage = groups.find((group) => !isRecipient(group) && (group.has('reporting-mta') || group.has('received-from-mta')));
  return {
    reportingMta: stripAddressType(perMessage?.get('reporting-mta')),
    recipients: groups.filter(isRecipient).map(toRecipient),
  };
}

function toRecipient(group: FieldGroup): DsnRecipient {
  return {
    finalRecipient: stripAddressType(group.get('final-recipient')),
    originalRecipient: stripAddressType(group.get('original-recipient')),
    action: group.get('action')?.toLowerCase().split(/[\s(]/)[0] || undefined,
    status: group.get('status'),
    diagnosticCode: group.get('diagnostic-code'),
    remoteMta: stripAddressType(group.get('remote-mta')),
  };
}

/**
 * The status a recipient group reports: its `Status` field, else a code inside `Diagnostic-Code`, else
 * `5.0.0` for `Action: failed` (RFC 3464 §2.3.3: failed means it will not be delivered). A generic
 * `Status` (X.0.0) defers to a more specific code in the Diagnostic-Code: `5.0.0` with `552 5.2.2
 * Mailbox full` is a full mailbox (retried, nothing suppressed), not a hard bounce.
 */
export function statusOf(recipient: DsnRecipient): string | undefined {
  const stated = findEnhancedCode(recipient.status);
  const basic = findBasicCode(recipient.diagnosticCode?.replace(/^[a-z-]+;\s*/i, ''));
  // The Diagnostic-Code's own enhanced code, else its bare reply code (`552 Mailbox full` → 5.2.2).
  const diagnosed = findEnhancedCode(recipient.diagnosticCode) ?? (basic ? enhancedFromBasic(basic, recipient.diagnosticCode) : undefined);
  if (stated && diagnosed && isGenericStatus(stated) && (!isGenericStatus(diagnosed) || temporaryBehindPermanent(stated, diagnosed))) return diagnosed;
  return stated ?? diagnosed ?? (recipient.action === 'failed' ? '5.0.0' : undefined);
}

/**
 * Exim writes `Status: 5.0.0` for every failure, also when its retry rules timed out on a host that kept
 * answering a bare 4xx (`451 Temporary local problem - please try later`): the reply is the report's own
 * code, a temporary one (RFC 5321 §4.2.1), as Postfix reports the same give-up with a 4.x.x Status.
 */
function temporaryBehindPermanent(stated: string, diagnosed: string): boolean {
  return stated.startsWith('5.') && diagnosed.startsWith('4.');
}

/**
 * `failed` + 5.x.x → hard; `failed` + 4.x.x (e.g. Postfix giving up with 4.4.1) and `delayed` → transient;
 * `delivered`, `relayed`, `expanded` → nothing to record. Without an Action the status class decides.
 */
export function classifyRecipient(recipient: DsnRecipient): BounceType | undefined {
  if (recipient.action && ['delivered', 'relayed', 'expanded'].includes(recipient.action)) return undefined;
  const status = statusOf(recipient);
  if (recipient.action === 'delayed') return 'transient';
  return status ? bounceTypeOf(status) : undefined;
}

/**
 * The finding for the email sent to `toAddress`: its own recipient groups when present, else every group
 * (one email has one recipient, so those are about it), the most final of them: a permanent failure over
 * a temporary one, a failure over a delay (an alias's groups may say `delayed` for one member and
 * `failed` for another; the first alone hid the failure).
 */
export function interpretDeliveryStatus(text: string, toAddress?: string): BounceFinding | undefined {
  const report = parseDeliveryStatus(text);
  const wanted = toAddress?.toLowerCase();
  const own = wanted ? report.recipients.filter((r) => [r.finalRecipient, r.originalRecipient].some((a) => a?.toLowerCase() === wanted)) : [];
  const candidates = own.length > 0 ? own : report.recipients;
  const finality = (recipient: DsnRecipient, bounceType: BounceType) => (bounceType === 'hard' ? 2 : recipient.action === 'failed' ? 1 : 0);
  let best: { recipient: DsnRecipient; bounceType: BounceType } | undefined;
  for (const recipient of candidates) {
    const bounceType = classifyRecipient(recipient);
    if (bounceType && (!best || finality(recipient, bounceType) > finality(best.recipient, best.bounceType))) best = { recipient, bounceType };
  }
  if (best) {
    const { recipient, bounceType } = best;
    return {
      bounceType,
      status: statusOf(recipient) ?? '4.0.0',
      action: recipient.action,
      diagnosticCode: recipient.diagnosticCode === undefined ? undefined : cutToLength(recipient.diagnosticCode, 1000),
      recipient: recipient.finalRecipient ?? recipient.originalRecipient,
      reportingMta: report.reportingMta,
      remoteMta: recipient.remoteMta,
      source: 'dsn',
    };
  }
  return undefined;
}
