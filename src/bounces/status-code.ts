/**
 * RFC 3463 enhanced status codes and what an asynchronous report with one means for the address.
 * Pure; the rule table is data so that tests can walk it.
 */
export type BounceType = 'hard' | 'transient';

/** `5.1.1` out of `Status: 5.1.1 (user unknown)` or `smtp; 550 5.1.1 <x>: ...`; undefined when absent. */
export function findEnhancedCode(text: string | undefined): string | undefined {
  if (!text) return undefined;
  const match = /(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])/.exec(text);
  return match ? `${match[1]}.${Number(match[2])}.${Number(match[3])}` : undefined;
}

/**
 * A three-digit SMTP reply code where MTAs write one: opening a line (`550 …`, `550-…`, `<<< 550 …`, qmail's
 * and Yahoo's `554: delivery error: …`), after
 * a word that introduces a reply (`said: 554`, `reply: 550`), or followed by an enhanced code (`#550 5.1.1`).
 * A number elsewhere in prose (`call 555-0100`, `ticket #512 opened`) is not a reply code.
 */
export function findBasicCode(text: string | undefined): string | undefined {
  if (!text) return undefined;
  // Anyone can send a report to a bounce address, so each pattern must stay linear in its text: a run of
  // blanks or line separators made overlapping repetitions (`[\s>]*` across lines with the m flag, `\s*:?\s*`)
  // run for seconds to minutes on the event loop.
  const match =
    /^[ \t>]*(?:<<<[ \t]*)?([245][0-5]\d)(?=[ -]|:\s|$)/m.exec(text) ??
    /\b(?:said|replied|reply|response|answered|error)\s*(?::\s*)?([245][0-5]\d)(?=[ -]|:\s|$)/im.exec(text) ??
    /(?:^|[\s'"(:;#])([245][0-5]\d)[ -][245]\.\d{1,3}\.\d{1,3}(?![\d.])/m.exec(text);
  return match?.[1];
}

/**
 * "size", "too large", or "exceeds … maximum" within one line; found in one pass each (`exceeds? .*maximum`
 * scanned to the line's end from every "exceed").
 */
function saysTooLarge(text: string): boolean {
  if (/\b(size|too (large|big))\b/i.test(text)) return true;
  return text.split(/[\n\r\u2028\u2029]/).some((line) => {
    const exceeds = line.search(/\bexceeds? /i);
    return exceeds !== -1 && /maximum\b/i.test(line.slice(exceeds));
  });
}

/**
 * Exceptions to "class 5 is permanent". X.2.2 (mailbox full) is, per RFC 3463, "useful for both permanent
 * and persistent transient errors": the mailbox exists, so suppressing it for good would be wrong.
 */
const transientDespiteClass5 = new Set(['5.2.2']);

/** Hard (suppress the address) or transient (record only) for an enhanced code; undefined for 2.x.x. */
export function bounceTypeOf(status: string): BounceType | undefined {
  if (transientDespiteClass5.has(status)) return 'transient';
  if (status.startsWith('5.')) return 'hard';
  if (status.startsWith('4.')) return 'transient';
  return undefined;
}

/**
 * RFC 3463 subjects of a permanent failure that say the recipient's address cannot take mail: X.0
 * (unspecified), X.1 (addressing: no such user, bad domain), X.2 (mailbox: disabled) and X.4 (routing:
 * no mail host). The others are about this message or its sender, and the next message to the address
 * may well be accepted: X.3 (mail system: message too big), X.5 (protocol), X.6 (content: media,
 * SMTPUTF8) and X.7 (security and policy: spam, DMARC, a blocklisted sending IP).
 */
const addressSubjects = new Set(['0', '1', '2', '4']);

/**
 * Details of those subjects that are not about the recipient's address: X.1.7 and X.1.8 (the sender's
 * address is bad: `553 5.1.8 Sender address rejected: Domain not found`), X.2.3 (the message is longer
 * than the mailbox allows) and X.4.7 (this message's delivery time expired), and Exchange Online's own
 * X.4.7: after 24 hours of failing to reach the hop behind it (an on-premises server or a partner's
 * filter behind a connector; Microsoft's "mail flow intelligence" codes) it returns the message with
 * `550 5.4.300 Message expired`, or with the last failure, `5.4.312 DNS query failed`, `5.4.315
 * Connection timed out`, `5.4.316 connection refused`, `5.4.317 Cannot connect to remote server`,
 * `5.4.318 Connection was closed abruptly`. The mailbox exists; its server was down or blocked, which
 * suppresses no one when the appliance meets it itself. (`5.4.310 DNS domain does not exist` is about
 * the address and still counts.)
 */
const notAboutTheAddress = new Set(['1.7', '1.8', '2.3', '4.7', '4.300', '4.312', '4.315', '4.316', '4.317', '4.318']);

/**
 * Whether a permanent failure with this enhanced status is about the recipient's address, so that later
 * mail to it is suppressed. `text` is the reply's text, read for one sender's habit: Outlook.com and
 * Exchange Online refuse an address that does not exist with a protocol code,
 * `550 5.5.0 Requested action not taken: mailbox unavailable`; read by its subject alone (X.5), every
 * dead Outlook address was bounced again at each send and never suppressed.
 */
export function isAddressFailure(status: string, text = ''): boolean {
  const [, subject, detail] = status.split('.');
  if (notAboutTheAddress.has(`${subject}.${detail}`)) return false;
  if (subject === '5' && detail === '0') return /\bmailbox (?:unavailable|not found)\b/i.test(text) || saysNoSuchMailbox(text);
  return addressSubjects.has(subject);
}

/**
 * A refusal, in whatever reply, that says it is about our sender. Exim's sender verification callout
 * (cPanel's default) fails our bounce address in its reply to RCPT TO, with no enhanced code
 * (`550-Verification failed for <…>` … `550 Sender verify failed`), and Postfix's sender restrictions
 * say `Sender address rejected` with a code of the addressing subject (5.1.0): read as refusals of the
 * recipient, they suppressed addresses that take mail, for a problem of the sender's. So does Exchange
 * (Microsoft 365, Outlook.com, as a smarthost) refusing a sender the account may not send as, in its reply
 * to the message and with a mailbox code (`554 5.2.252 SendAsDenied; … not allowed to send as …`, or
 * `554 5.2.0 …SendAsDeniedException…`). Delivery reads the replies it gets this way, and so do reports of
 * a later hop that got one.
 */
export function namesSenderRefused(message: string): boolean {
  return /\bsender (?:verify|verification) failed\b|\bsender address rejected\b|SendAsDenied|\bnot allowed to send as\b/i.test(message);
}

/** The SMTP commands whose refusal is not about the recipient: our sender (MAIL FROM), the message (end of DATA). */
export type AnsweredCommand = 'MAIL FROM' | 'end of DATA';

/**
 * The command a refusal answered, where a report's text names it: Postfix writes `(in reply to MAIL FROM
 * command)` and `(in reply to end of DATA command)`, Exim `SMTP error from remote mail server after MAIL
 * FROM:<…>:` and `… after end of data:`. Both write it in the human-readable part only; their
 * Diagnostic-Code is the reply alone. Undefined for any other command, or none named. Words are matched
 * across line breaks: Postfix wraps that text at 80 columns wherever a space falls (`(in reply to end
 * of\n    DATA command)`). Exim puts `pipelined ` before the command when the host offered PIPELINING
 * (`after pipelined MAIL FROM:<…> SIZE=…:`), as nearly every MX does.
 */
export function commandAnswered(text: string): AnsweredCommand | undefined {
  if (/\b(?:in\s+reply\s+to|after(?:\s+pipelined)?)\s+MAIL\s+FROM\b/i.test(text)) return 'MAIL FROM';
  return /\bend\s+of\s+data\b/i.test(text) ? 'end of DATA' : undefined;
}

/**
 * Yahoo's mail hosts (yahoo, aol, att.net, …) answer an address that does not exist with a bare 552:
 * `552 1 Requested mail action aborted, mailbox not found`.
 */
export function saysNoSuchMailbox(text: string): boolean {
  return /\b(mailbox not found|no such (user|mailbox)|user unknown)\b/i.test(text);
}

/**
 * `550` → `5.0.0`: the enhanced form of a bare reply code, so one table decides for both. `552` (and
 * `452`) is RFC 5321's "exceeded storage allocation": a message too large when its text says so (`X.3.4`,
 * a bounce of that message only), an address that does not exist when its text says that (`X.1.1`, as
 * Yahoo's hosts use it), else a full mailbox (`X.2.2`, which suppresses nothing), where `5.0.0` would
 * suppress an address that exists.
 */
export function enhancedFromBasic(code: string, text = ''): string {
  if (code === '552' || code === '452') {
    if (saysTooLarge(text)) return `${code[0]}.3.4`;
    return saysNoSuchMailbox(text) ? `${code[0]}.1.1` : `${code[0]}.2.2`;
  }
  return `${code[0]}.0.0`;
}

/** A status that names only its class (`5.0.0`, `4.0.0`): says failed or delayed, not why. */
export const isGenericStatus = (status: string) => /^\d\.0\.0$/.test(status);
