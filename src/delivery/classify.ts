import { isAddressFailure, namesSenderRefused, saysNoSuchMailbox } from '../bounces/status-code.js';

/**
 * Reply classification (DESIGN convention 5: outcomes are data). A pure function over a rule table so
 * the table is the policy and the tests are table-driven.
 */
export type DeliveryAction = 'delivered' | 'defer' | 'bounce';
export type BounceType = 'hard' | 'soft';

export interface SmtpReply {
  /** Basic reply code (250, 421, 550…); 0 when no reply was received (connection/DNS failure). */
  code: number;
  /** Enhanced status code (RFC 3463) such as `5.1.1`, when the server sent one. */
  enhanced?: string;
  message: string;
  /** For code 0 (no transaction reply): the server's own refusal before the transaction (greeting 421, EHLO…). */
  sessionReply?: { code: number; enhanced?: string };
  /** The command a refusal answered; undefined for the appliance's own outcomes (DNS) and for success. */
  command?: SmtpCommand;
  /** Refused by this appliance's own policy (a private MX address): says nothing about the recipient. */
  localPolicy?: boolean;
}

export type SmtpCommand = 'MAIL FROM' | 'RCPT TO' | 'DATA';

export interface Classification {
  action: DeliveryAction;
  code: number;
  enhanced?: string;
  message: string;
  /** Slow down on this destination (421 / 4.7.x rate limiting and reputation throttles). */
  throttle: boolean;
  /** Set for bounces: `hard` = permanent failure of the address, `soft` = give-up after retries. */
  bounceType?: BounceType;
  /** For bounces: the refusal is about the recipient's address, so later mail to it is suppressed. */
  suppressRecipient: boolean;
  /** Which rule decided, for events and tests. */
  rule: string;
}

interface Rule {
  name: string;
  matches(reply: SmtpReply): boolean;
  action: DeliveryAction;
  throttle?: boolean;
}

const klass = (reply: SmtpReply) => Math.floor(reply.code / 100);
const enhancedClass = (reply: SmtpReply) => (reply.enhanced ? Number(reply.enhanced[0]) : 0);

/** First match wins. Order matters: specific rules before the generic reply-class rules. */
export const classificationRules: readonly Rule[] = [
  { name: 'no-reply', matches: (r) => r.code === 0, action: 'defer' },
  // RFC 5321 §4.2.5: 2xx is success.
  { name: 'success', matches: (r) => klass(r) === 2, action: 'delivered' },
  // 421 = the server is closing the channel; 4.7.x = policy/rate limits (Gmail 4.7.28, Yahoo TSS04). Back off.
  { name: 'throttle-421', matches: (r) => r.code === 421, action: 'defer', throttle: true },
  // Greylisting refuses a message until its retry, and answers every new recipient so (milter-greylist
  // with 451 4.7.1): read as a throttle, it held all of a destination's mail behind each first attempt.
  { name: 'greylisted', matches: (r) => klass(r) === 4 && /gr[ae]y[- ]?list/i.test(r.message), action: 'defer' },
  { name: 'throttle-4.7', matches: (r) => klass(r) === 4 && r.enhanced?.startsWith('4.7.') === true, action: 'defer', throttle: true },
  // A 5xx reply with a 4.x.x enhanced code is a transient condition mislabelled by the server (RFC 3463 §3.1: the
  // enhanced class refines the basic code); retrying is the safe reading.
  { name: 'enhanced-transient', matches: (r) => klass(r) === 5 && enhancedClass(r) === 4, action: 'defer' },
  { name: 'transient', matches: (r) => klass(r) === 4, action: 'defer' },
  // A full mailbox (X.2.2) says nothing against the address and often clears: retried on the schedule, as
  // a DSN reporting it is read (docs/bounces.md). RFC 5321 §4.5.3.1.10 asks the same of a bare 552 at RCPT
  // (or where the command is not known); a bare 552 after the message ("exceeded storage allocation", too
  // large) refuses this message for good, and says nothing against the address either. Yahoo's hosts
  // answer an address that does not exist with a bare 552 too ("mailbox not found"): that one bounces.
  {
    name: 'mailbox-full',
    matches: (r) => r.enhanced === '5.2.2' || (r.code === 552 && !r.enhanced && (r.command === undefined || r.command === 'RCPT TO') && !saysNoSuchMailbox(r.message)),
    action: 'defer',
  },
  { name: 'permanent', matches: (r) => klass(r) === 5, action: 'bounce' },
  // 1xx/3xx as a final reply is a protocol violation: try again later rather than lose or bounce the mail.
  { name: 'unexpected', matches: () => true, action: 'defer' },
];

export function classify(reply: SmtpReply): Classification {
  const rule = classificationRules.find((candidate) => candidate.matches(reply))!;
  return {
    action: rule.action,
    code: reply.code,
    enhanced: reply.enhanced,
    message: reply.message,
    throttle: rule.throttle ?? false,
    bounceType: rule.action === 'bounce' ? 'hard' : undefined,
    suppressRecipient: rule.action === 'bounce' && refusesRecipient(reply),
    rule: rule.name,
  };
}

/**
 * Through a relay (`delivery.mode = relay`) a permanent refusal before DATA may be the relay's own and
 * not the recipient domain's: relaying denied (Postfix `554 5.7.1 Relay access denied`, Exim's bare
 * `550 relay not permitted`), authentication required (`530 5.7.0`), our sender refused at MAIL FROM.
 * Bounced, such a refusal lost every queued email, suppressed every recipient (a bare 5xx at RCPT) and
 * paused the project for its bounce rate, for what the operator fixes in the relay's settings. So a
 * refusal of MAIL FROM, one with a 5.7.x (security or policy) code and one without an enhanced code, and
 * any reply whose text says our sender is refused or (Amazon SES) an identity is not verified, are
 * deferred instead, and the appliance warns
 * (service.ts); the recipient-specific ones (5.1.1 through the relay's recipient check) and other
 * refusals of the message after DATA bounce as direct delivery does.
 * Deferred ones that never clear end as a soft bounce that suppresses no one and does not count (§8).
 */
export function classifyThroughRelay(reply: SmtpReply): Classification {
  const direct = classify(reply);
  if (direct.action !== 'bounce' || !refusedByTheRelay(reply)) return direct;
  return { ...direct, action: 'defer', bounceType: undefined, suppressRecipient: false, rule: 'relay-refused' };
}

/**
 * A permanent refusal that is the relay's own, not the recipient domain's. Our sender refused counts
 * wherever it comes: Exchange Online (Microsoft 365 SMTP AUTH) refuses a From the account may not send as
 * in its reply to the message, with a mailbox code (`554 5.2.252 SendAsDenied`), which bounced every
 * queued email, suppressed every recipient and paused the project.
 */
function refusedByTheRelay(reply: SmtpReply): boolean {
  // The relay refusing this host (its HELO name, its reverse DNS) is the operator's to fix in its setup.
  if (reply.command !== undefined && refusesSendingHost(reply)) return true;
  if (reply.command === 'MAIL FROM' || (reply.command !== undefined && (namesSenderRefused(reply.message) || namesUnverifiedIdentity(reply.message)))) return true;
  return reply.command === 'RCPT TO' && (!reply.enhanced || reply.enhanced.split('.')[1] === '7');
}

/**
 * Amazon SES refuses the message (a bare 554 after DATA) when its From or Return-Path is not an identity
 * verified in the SES account, or, in the SES sandbox, the recipient is not: `Message rejected: Email
 * address is not verified. The following identities failed the check in region …`. Either way the
 * relay account's setup, not the recipient's address: bounced, each counted in the project's bounce rate.
 */
function namesUnverifiedIdentity(message: string): boolean {
  return /\bidentities failed the check\b|\bemail address is not verified\b/i.test(message);
}

/**
 * Whether a permanent refusal is about the recipient's address (suppress it) rather than about this
 * message or its sender (bounce this one only). A refused MAIL FROM is about the sender. An enhanced code
 * decides by its subject (status-code.ts); after DATA only addressing and mailbox codes count, since a
 * refusal of the content there is the common case. A bare 5xx code answering RCPT TO refuses the
 * recipient; after DATA it refuses the message.
 */
export function refusesRecipient(reply: SmtpReply): boolean {
  // A blocklisted sending IP is refused at RCPT TO, often with a bare 554: it says nothing of the address.
  if (reply.localPolicy || reply.command === 'MAIL FROM' || namesSenderRefused(reply.message) || refusesSendingHost(reply)) return false;
  if (reply.enhanced) {
    const subject = reply.enhanced.split('.')[1];
    return isAddressFailure(reply.enhanced, reply.message) && (reply.command !== 'DATA' || subject === '1' || subject === '2');
  }
  return reply.command !== 'DATA';
}

/**
 * A refusal of the sending host itself: its IP address on a blocklist (Postfix's "Client host [ip]
 * blocked using …", the IP lists of Spamhaus, Spamcop and Barracuda, Microsoft's S3150 and 5.7.606), its
 * HELO name (Postfix's reject_non_fqdn_helo_hostname and its kin: "Helo command rejected", given at RCPT
 * TO), or its address without reverse DNS (RFC 7372's 5.7.25; Postfix's "cannot find your hostname").
 * Every project sends from that one host, so such a refusal says nothing of the project whose email met
 * it, nor of the recipient: counted in its bounce rate (spec §8), one project's spam that got the address
 * listed paused every other project sending meanwhile, and a machine named `vm` (a container's name is no
 * domain either) bounced and suppressed every recipient of a host that asks for a full name. A listed
 * sender domain (Spamhaus DBL) is the project's own.
 */
export function refusesSendingHost(reply: SmtpReply): boolean {
  return reply.enhanced === '5.7.25' || sendingHostRefused.some((pattern) => pattern.test(reply.message));
}

const sendingHostRefused = [
  /\bclient host\b[^;]{0,80}\bblocked\b/i,
  /\b(?:zen|sbl|xbl|pbl|sbl-xbl)\.spamhaus\.org\b|\bbl\.spamcop\.net\b|\bb\.barracudacentral\.org\b/i,
  /\bpart of their network is on our block list\b|\bbanned sending ip\b/i,
  /\bIP(?: address)?\b[^;]{0,60}\b(?:black|block) ?listed\b/i,
  /\b(?:helo|ehlo) command rejected\b|\binvalid (?:helo|ehlo)\b|\bhelo(?: name| hostname)?\b[^;]{0,60}\b(?:invalid|not (?:a )?(?:fully[- ]qualified|valid)|rejected)\b/i,
  /\bcannot find your (?:reverse )?hostname\b|\breverse (?:dns|hostname|lookup)\b[^;]{0,60}\b(?:fail|missing|not found|required|does not)/i,
  /\bdoes not have a PTR record\b/i,
];

/** Parses a raw server response such as `550-5.1.1 The email account…\r\n550 5.1.1 …` into a reply. */
export function parseSmtpResponse(response: string | undefined, fallbackCode = 0): SmtpReply {
  const text = (response ?? '').trim();
  // The enhanced code ends at a space or at the end of its line: some servers send the codes alone
  // (`550 5.7.1`), which read as text made a policy refusal a bare 5xx that suppressed the address.
  // The text itself is optional too (RFC 5321 §4.2: Reply-code [ SP textstring ] CRLF): a bare `550`
  // read as no reply at all was deferred for days, and a bare `421` sent the mail to the next MX.
  const match = /^(\d{3})(?:[ -](?:(\d\.\d{1,3}\.\d{1,3})(?:\s+|$))?|\r?\n|$)/.exec(text);
  if (!match) return { code: fallbackCode, message: text };
  const lines = text.split(/\r?\n/);
  const message = lines
    .map((line) => line.replace(/^\d{3}(?:[ -](?:\d\.\d{1,3}\.\d{1,3}(?:\s+|$))?|$)/, ''))
    .join(' ')
    .trim();
  // RFC 2034 puts the enhanced code on every line; a server that gives it on a later line only
  // (`550-Blocked\r\n550 5.7.1 …`) was read as a bare 550, which suppressed the address.
  const enhanced = match[2] ?? lines.map((line) => /^\d{3}[ -](\d\.\d{1,3}\.\d{1,3})(?:\s|$)/.exec(line)?.[1]).find((code) => code !== undefined);
  return { code: Number(match[1]), enhanced, message };
}

/** Formats a reply the way it is shown to users (`smtpResponse`): `250 2.0.0 OK`. */
export function formatReply(reply: SmtpReply): string {
  if (reply.code === 0) return reply.message;
  return [String(reply.code), reply.enhanced, reply.message].filter(Boolean).join(' ');
}
