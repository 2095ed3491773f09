import type { BounceFinding } from './parse-dsn.js';
import { bounceTypeOf, enhancedFromBasic, findBasicCode, findEnhancedCode } from './status-code.js';
import { cutToLength } from '../lib/text.js';

/**
 * Best effort for bounces that are not RFC 3464 reports (qmail, old Exchange, appliances, forwarders):
 * a message that looks like a bounce and carries an SMTP status code in its own text. Pure, table-driven;
 * never throws. The quoted original message is cut off first, so its content cannot fake a code.
 */
export interface TextBounceInput {
  subject?: string;
  from?: string;
  text: string;
  /** The `Auto-Submitted` keyword (RFC 3834 §5), lowercased: `auto-replied`, `auto-generated`, `no`. */
  autoSubmitted?: string;
  /** The envelope named a sender: not `<>`, which RFC 5321 §4.5.5 requires of every bounce. */
  namedSender?: boolean;
}

const bounceSubjects = [
  /undeliver/i,
  /delivery (status notification|has failed|failure|failed|notification)/i,
  /failure notice/i,
  /returned mail/i,
  /mail delivery (failed|failure|system)/i,
  /non[- ]?delivery/i,
  /could not be delivered/i,
  /delivery problem/i,
  // Exchange's "Undeliverable:" in the languages it writes it in (German, French, Spanish, Italian, Dutch).
  /^\s*(unzustellbar|non remis|no se puede entregar|non recapitabile|onbestelbaar)\b/i,
];
/** The names MTAs send their own reports from. */
const mtaSenders = [/mailer-daemon/i, /mail delivery (subsystem|system)/i];
/** A role mailbox: MTAs send from it (Exchange), and so do the people and helpdesks who answer it. */
const postmasterSender = /postmaster/i;

/** Where the copy of the original message starts in common MTAs' bounces. */
const originalMessageMarkers = [
  /^-+ ?Below this line is a copy of the message/im, // qmail
  /^-+ ?This is a copy of the message/im, // Exim
  /^Original message headers:/im, // Exchange
  /^-+ ?Original message ?-+/im, // Gmail and many clients
  /^-+ ?Forwarded message/im,
  /^-+ ?The header of the original message/im,
  /^-+ ?Returned message ?-+/im,
];

/** When no code is given, phrases that MTAs use for a few unambiguous outcomes. */
const phraseRules: { pattern: RegExp; status: string }[] = [
  { pattern: /\b(user unknown|unknown user|no such (user|mailbox|recipient)|(mailbox|recipient|address|account) (does not|doesn't) exist|(does not|doesn't) have an? [\w.-]+ account|recipient not found|invalid recipient|mailbox unavailable)\b/i, status: '5.1.1' },
  { pattern: /\b(mailbox (is )?full|over quota|quota exceeded|insufficient (disk )?space)\b/i, status: '4.2.2' },
  // Exim giving up when its retry rules time out with no reply to report (`retry timeout exceeded`, `all
  // hosts for '…' have been failing for a long time`): the hosts never answered, this message's delivery
  // time expired (X.4.7), which says nothing against the address, as when the appliance gives up so itself.
  { pattern: /\b(retry timeout exceeded|have been failing for a long time|retry time not reached for any host)\b/i, status: '4.4.7' },
];

/**
 * Vacation notices and ticket acknowledgements (RFC 3834 auto-replies): never bounces, whatever they
 * quote. Outlook's "Automatic reply:" in the languages it writes it in, and the usual English phrases.
 */
const autoReplySubjects = [
  /^\s*(auto(matic)?[ -]?(reply|response|respond|antwort)|autoreply|out of (the )?office|ooo\b|abwesen|vacation|on leave)/i,
  /^\s*(automatische antwort|automatisch antwoord|r[ée]ponse automatique|risposta automatica|respuesta autom[áa]tica|resposta autom[áa]tica|automatisk svar|automaattinen vastaus|odpowied[źz] automatyczna|automatick[áa] odpov[ěe]ď)/i,
  /^\s*auto:/i,
  // A reply to the email ("Re: <its subject>", as RFC 3834 responders such as Sieve vacation write it, in
  // the languages mail clients write it): bounces name their own outcome first ("Undeliverable: Re: …"),
  // and a billing or shipping subject ("Payment failure notice") would otherwise read like a bounce.
  /^\s*(re|aw|sv|vs|antw|odp|res|rif|ynt|r)(\[\d+\])?\s*:/i,
];

/**
 * A free-form message is read as a bounce only when its subject or sender says so. The null envelope
 * sender alone does not: auto-replies are sent with `<>` too (RFC 3834 §3.3), and a vacation notice
 * read as a hard bounce would suppress a working address.
 */
export function looksLikeBounce(input: Pick<TextBounceInput, 'subject' | 'from' | 'autoSubmitted'>): boolean {
  if (input.subject && autoReplySubjects.some((pattern) => pattern.test(input.subject!))) return false;
  if (input.subject && bounceSubjects.some((pattern) => pattern.test(input.subject!))) return true;
  if (!input.from) return false;
  if (mtaSenders.some((pattern) => pattern.test(input.from!))) return true;
  return postmasterSender.test(input.from) && !isAutoSubmitted(input.autoSubmitted);
}

/**
 * RFC 3834 §5: any `Auto-Submitted` but `no` marks a message a program sent. From postmaster with no
 * bounce subject, that is the mailbox's auto-reply (a helpdesk acknowledging a ticket), not its MTA's
 * report: MTAs mark their bounces so too (Exim, Postfix), but under their own names or a bounce subject.
 */
function isAutoSubmitted(keyword: string | undefined): boolean {
  return keyword !== undefined && keyword !== '' && keyword !== 'no';
}

/** The bounce's own words, without the quoted original message. */
export function ownText(text: string): string {
  let end = text.length;
  for (const marker of originalMessageMarkers) {
    const match = marker.exec(text);
    if (match && match.index < end) end = match.index;
  }
  return text.slice(0, end);
}

export function detectTextBounce(input: TextBounceInput): BounceFinding | undefined {
  if (!looksLikeBounce(input)) return undefined;
  // A named envelope sender, which no bounce has (RFC 5321 §4.5.5), leaves only a server's quoted reply
  // as evidence: a code standing alone in its prose (`section 5.1.2 of our terms`) is no status.
  const found = findStatus(ownReadText(input.text), { standaloneCodes: !input.namedSender });
  if (!found) return undefined;
  const bounceType = bounceTypeOf(found.status);
  if (!bounceType) return undefined;
  return { bounceType, status: found.status, diagnosticCode: found.line, source: 'text' };
}

/** The status a report's own words give (a code where MTAs write one, else a known phrase), if any. */
export function statusInText(text: string): string | undefined {
  return findStatus(ownReadText(text))?.status;
}

const ownReadText = (text: string) => ownText(text).slice(0, 64 * 1024);

/**
 * Free text holds other numbers shaped like status codes: a date written d.m.yy (`bis 5.1.25`, `vom
 * 4.1.25`) reads as 5.1.25, a street number opening an address line (`550 Main St`) as a reply code. So a
 * code after a reply code on its line (`550 5.1.1`) comes first; one standing alone counts only within the
 * registered codes (IANA's registry: X.1.0–X.1.10, …, X.7.0–X.7.30), and only with `standaloneCodes`; a
 * bare reply code only where a bounce quotes a server's reply (isQuotedReply).
 */
function findStatus(text: string, { standaloneCodes = true } = {}): { status: string; line: string } | undefined {
  const lines = text.split(/\r?\n/);
  for (const line of lines) {
    const enhanced = enhancedAfterReplyCode(line);
    if (enhanced && !enhanced.startsWith('2.')) return { status: enhanced, line: clip(line) };
  }
  if (standaloneCodes) {
    for (const line of lines) {
      const enhanced = findEnhancedCode(line);
      if (enhanced && !enhanced.startsWith('2.') && isRegisteredCode(enhanced)) return { status: enhanced, line: clip(line) };
    }
  }
  let before: string | undefined;
  for (const line of lines) {
    const basic = findBasicCode(line);
    if (basic && !basic.startsWith('2') && isQuotedReply(line, basic, before)) return { status: enhancedFromBasic(basic, line), line: clip(line) };
    if (line.trim() !== '') before = line;
  }
  for (const rule of phraseRules) {
    const match = rule.pattern.exec(text);
    if (match) return { status: rule.status, line: clip(lineAround(text, match.index)) };
  }
  return undefined;
}

/** `550 5.1.1`, `#550 5.1.1`, `said: 554 5.7.1`: the enhanced code that follows the line's reply code. */
function enhancedAfterReplyCode(line: string): string | undefined {
  const basic = findBasicCode(line);
  if (!basic) return undefined;
  const after = line.slice(line.indexOf(basic) + basic.length);
  return /^[ \t:-]*[245]\./.test(after) ? findEnhancedCode(after) : undefined;
}

/**
 * Whether a reply code found on `line` is a server's reply the bounce quotes. Found after `<<<` (a
 * Sendmail transcript), after `said:` and the like, or before an enhanced code (`550 5.1.1`), it is.
 * Merely opening the line (`550 …`, `550-…`) it is a number like any other (`550 Main St`, a signature's
 * `503-555-0142`) unless the reply names the address (`550 <x@y>... User unknown`) or the line before
 * introduces it (replyIntroductions): read as a hard bounce, a street number suppressed a working address.
 * `before`: the nearest line above that is not blank.
 */
function isQuotedReply(line: string, code: string, before: string | undefined): boolean {
  if (/^[ \t>]*(\d{3})/.exec(line)?.[1] !== code || enhancedAfterReplyCode(line)) return true;
  return repliesWithAddress.test(line) || (before !== undefined && introducesReply(before));
}

/** `550 <x@y.test>... User unknown` (Sendmail), `550 <x@y.test>: Recipient address rejected` (Postfix). */
const repliesWithAddress = /^[ \t>]*\d{3}[ -]<[^\s<>@]+@[^\s<>]+>/;

/**
 * Lines above a reply that bounces put on its own line, ending with a colon: the failed address alone
 * (qmail, Yahoo: `<x@yahoo.com>:`), or words naming the server that replied (Exim: `SMTP error from
 * remote mail server after RCPT TO:<x>:`, Gmail: `The response from the remote server was:`, Postfix
 * wrapping at 80 columns: `<x>: host mx.y.test[10.0.0.7] said:`).
 */
const replyIntroductions = [/^[ \t>]*<?[^\s<>@]+@[^\s<>@]+>?:$/, /\b(?:server|remote host|said|replied|responded|response|reply)\b/i];

function introducesReply(line: string): boolean {
  const trimmed = line.trimEnd();
  return trimmed.endsWith(':') && replyIntroductions.some((pattern) => pattern.test(trimmed));
}

/** The highest detail registered for each subject (RFC 3463 and later additions in IANA's registry). */
const registeredDetails = [0, 10, 4, 6, 7, 6, 10, 30];

function isRegisteredCode(code: string): boolean {
  const [, subject, detail] = code.split('.').map(Number);
  return subject < registeredDetails.length && detail <= registeredDetails[subject];
}

function lineAround(text: string, index: number): string {
  const start = text.lastIndexOf('\n', index) + 1;
  const end = text.indexOf('\n', index);
  return text.slice(start, end < 0 ? undefined : end);
}

function clip(line: string): string {
  return cutToLength(line.trim(), 500);
}
