import { isIPv6 } from 'node:net';
import { withAsciiDomain } from '../emails/address.js';
import { canonicalAddress } from '../lib/private-address.js';
import { cutToLength } from '../lib/text.js';

/**
 * The trace a receiving MTA puts at the top of a message it delivers (RFC 5321 §4.4): `Return-Path` with
 * the envelope sender, the authentication results of this hop (RFC 8601), and a `Received` line saying
 * from where, by whom, how and when. A received email's raw message is served with them above the
 * bytes as they arrived, so a client that files it in a mailbox or hands it to its own filter sees the
 * hop it came by; the stored bytes stay as they arrived (one copy for all its recipients).
 */
export interface TraceFacts {
  /** MAIL FROM, "" for a bounce (null reverse-path). */
  mailFrom: string;
  /** The name the client gave in EHLO/HELO. */
  helo: string;
  remoteAddress: string;
  /**
   * RFC 3848 "with" keyword: SMTP, ESMTP, ESMTPS, or RFC 6531's UTF8SMTP… for an SMTPUTF8 transaction;
   * absent for emails received before it was recorded.
   */
  protocol?: string;
  /** This host's name (smtp.hostname). */
  receivedBy: string;
  /** The received email's id, the `id` clause. */
  id: string;
  /** The recipient this received email is for. */
  destination: string;
  receivedAtMs: number;
  /** mailauth's header lines (Received-SPF, Authentication-Results), folded, or "". */
  authenticationResults: string;
}

/** The trace header lines, each ending in `eol`, the message's own line ending. */
export function traceHeaders(facts: TraceFacts, eol: string): string {
  const utf8 = facts.protocol?.startsWith('UTF8') === true;
  const lines = [`Return-Path: <${printable(returnPath(facts.mailFrom, utf8), utf8)}>`];
  if (facts.authenticationResults !== '') lines.push(...facts.authenticationResults.split(/\r?\n/));
  lines.push(...receivedHeader(facts, utf8));
  return lines.map((line) => line + eol).join('');
}

/**
 * The envelope sender as the client sent it (RFC 5321 §4.4). smtp-server hands its domain over in U-labels
 * however it was written; outside an SMTPUTF8 transaction the client could only have sent A-labels (RFC
 * 5321 §4.1.2 is ASCII; RFC 5890), and the header must stay ASCII too, where the U-label read `m?nchen`.
 * In an SMTPUTF8 one, UTF-8 is allowed in the Return-Path (RFC 6531 §3.7.3, RFC 6532), and stays.
 */
function returnPath(mailFrom: string, utf8: boolean): string {
  return utf8 ? mailFrom : withAsciiDomain(mailFrom);
}

/** Postfix's shape: `from <helo> ([ip]) by <host> (Postino) with ESMTPS id <id> for <rcpt>; <date>`, folded. */
function receivedHeader(facts: TraceFacts, utf8: boolean): string[] {
  const helo = isDomainOrLiteral(facts.helo) ? facts.helo : 'unknown';
  return [
    `Received: from ${helo} (${addressLiteral(facts.remoteAddress)})`,
    `\tby ${facts.receivedBy} (Postino) with ${facts.protocol ?? 'ESMTP'} id ${facts.id}`,
    `\tfor <${printable(facts.destination, utf8)}>; ${rfc5322Date(facts.receivedAtMs)}`,
  ];
}

/** RFC 5321 §4.1.3 address literal, as Postfix writes it: `[192.0.2.1]`, `[IPv6:2001:db8::1]` (no zone: the syntax has none). */
function addressLiteral(address: string): string {
  const shown = printable(canonicalAddress(address), false);
  return isIPv6(shown) ? `[IPv6:${shown}]` : `[${shown}]`;
}

/**
 * The client names itself: anything but a domain or an address literal (`[192.0.2.1]`) would break the
 * header's grammar, or smuggle text into it, and reads as `unknown` (the address is shown anyway).
 */
function isDomainOrLiteral(helo: string): boolean {
  return helo.length <= 255 && (/^\w(?:[\w.-]*\w)?\.?$/.test(helo) || /^\[[0-9A-Fa-f:.IPv]+\]$/.test(helo));
}

/**
 * Addresses came through smtp-server's parser (no CR/LF). In a message sent with SMTPUTF8 its header
 * fields may be UTF-8 (RFC 6532), so an address stays as it is (`jörg@…`; control characters excepted);
 * otherwise what is not printable ASCII shows as `?`.
 */
function printable(text: string, utf8: boolean): string {
  const cut = cutToLength(text, 512);
  return utf8 ? cut.replace(/[\x00-\x1f\x7f]/g, '?') : cut.replace(/[^\x20-\x7e]/gu, '?');
}

/** RFC 5322 §3.3 date-time in UTC: `Sun, 29 Nov 2026 11:30:00 +0000` (toUTCString's "GMT" is the obsolete zone form). */
function rfc5322Date(ms: number): string {
  return new Date(ms).toUTCString().replace(/GMT$/, '+0000');
}

/** The line ending the message uses: a message sent with bare LFs gets trace lines ending in LF. */
export function lineEndingOf(raw: Buffer): string {
  const end = raw.indexOf(0x0a);
  return end > 0 && raw[end - 1] === 0x0d ? '\r\n' : end === -1 ? '\r\n' : '\n';
}

/**
 * Whether a header that arrived with a message claims to be this host's trace: an Authentication-Results
 * whose authserv-id is `hostname`, or a Received-SPF that names it as its receiver (mailauth writes
 * `pass (<host>: domain of …)`, RFC 7208 §9.1 also has `receiver=<host>`). This host's own are added
 * when the message is served (traceHeaders), never stored with it: one in the message was put there by
 * someone else, and RFC 8601 §5 says a receiver deletes it rather than show it as its own.
 */
export function claimsThisHost(name: string, value: string, hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  if (host === '') return false;
  const same = (candidate: string | undefined) => candidate !== undefined && candidate.toLowerCase().replace(/\.$/, '') === host;
  if (name === 'authentication-results') return same(authservId(value));
  if (name === 'received-spf') return same(/^\s*[\w-]+\s*\(\s*([^\s:()]+)\s*:/.exec(value)?.[1]) || same(/(?:^|[\s;])receiver\s*=\s*"?([^\s;"]+)/i.exec(value)?.[1]);
  return false;
}

/**
 * RFC 8601 §2.2: `authserv-id [CFWS authres-version] ;`, where comments may come anywhere (and hold `;`)
 * and the id may be a quoted-string. Read in one pass, so a long run of nested comments costs no more
 * than its length.
 */
function authservId(value: string): string | undefined {
  let depth = 0;
  let quoted = false;
  let id = '';
  for (let i = 0; i < value.length; i++) {
    const char = value[i];
    if (char === '\\') {
      i++;
      if (depth === 0) id += value[i] ?? '';
    } else if (quoted) {
      if (char === '"') quoted = false;
      else id += char;
    } else if (char === '(') depth++;
    else if (char === ')') depth = Math.max(0, depth - 1);
    else if (depth > 0) continue;
    else if (char === '"') quoted = true;
    else if (char === ';') break;
    else id += char;
  }
  return id.trim().split(/\s+/)[0] || undefined;
}
