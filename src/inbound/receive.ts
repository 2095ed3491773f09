import type { AddressObject, ParsedMail } from 'mailparser';
import type { Db } from '../db/client.js';
import type { ReceivedAddress, ReceivedAddresses } from '../db/schema/inbound.js';
import type { Writes } from '../db/write-queue.js';
import { domainOfAddress, normalizeDomainName } from '../domains/domain-name.js';
import { isDotAtom } from '../emails/address.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';
import { htmlToText } from '../render/html-to-text.js';
import { headerValue, parseMessage } from '../smtp/parse-message.js';
import { decodeWords } from '../smtp/decode-words.js';
import { recordWebhookEvent } from '../webhooks/outbox.js';
import { headerHasMoreLinesThan, maxHeaderLines, verifyAuth, withMultipleFromFailed, type AuthVerdicts } from './auth-verdicts.js';
import type { InboundRepo, NewReceivedEmailRow, RouteRow } from './repo.js';
import { receivedEmailRecord } from './service.js';
import { scoreSpam } from './spam-score.js';
import { boundedAddresses, boundedAttachment, boundedSubject } from './received-bounds.js';
import { claimsThisHost } from './trace-headers.js';
import { cutToLength } from '../lib/text.js';

/**
 * The receive use case (DESIGN "SMTP" flow): RCPT → the route that takes the address; DATA → parse,
 * authentication verdicts, spam score → one transaction per message: a received email per routed
 * recipient, each with its `email.received` webhook row. Nothing here knows about SMTP.
 */
export interface InboundReceiver {
  /** The enabled route that takes `address`, most specific first (exact, before `+tag`, catch-all). */
  routeFor(address: string): RouteRow | undefined;
  receive(raw: Buffer, envelope: ReceivedEnvelope, routed: { address: string; route: RouteRow }[]): Promise<string[]>;
}

export interface ReceivedEnvelope {
  mailFrom: string;
  remoteAddress: string;
  helo: string;
  protocol: string;
  size: number;
}

export interface InboundReceiverDeps {
  db: Db;
  repo: InboundRepo;
  writes: Writes;
  clock: Clock;
  resolver: Resolver;
  /** This host's name (smtp.hostname): the Authentication-Results authserv-id. */
  hostname: string;
  log: Logger;
  /** storage.min_free_mb: received mail is new mail, refused (452 4.3.1) below the reserve as sends are. */
  storage?: { assertRoomForNewMail(): void };
}

export function createInboundReceiver(deps: InboundReceiverDeps): InboundReceiver {
  const { repo, clock } = deps;
  return {
    routeFor(written) {
      const address = canonicalMailbox(written);
      const at = address.lastIndexOf('@');
      const domain = normalizeDomainName(address.slice(at + 1));
      if (at <= 0 || !domain) return undefined;
      const localPart = address.slice(0, at).toLowerCase();
      const base = localPart.includes('+') ? localPart.slice(0, localPart.indexOf('+')) : localPart;
      const candidates = repo.routesFor(domain, localPart, base).filter((route) => route.isEnabled);
      return candidates.find((r) => r.localPart === localPart) ?? candidates.find((r) => r.localPart === base) ?? candidates.find((r) => r.localPart === '*');
    },

    async receive(raw, envelope, routed) {
      deps.storage?.assertRoomForNewMail();
      if (headerHasMoreLinesThan(raw, maxHeaderLines)) throw new AppError('payload-too-large', `The message's header section has more than ${maxHeaderLines.toLocaleString('en-US')} lines`);
      const parsed = await parseMessage(raw, { inlineImagesMaxLength: previewImagesMaxLength });
      const author = await fromOf(parsed);
      const verdicts = await verifyAuth(raw, { ip: envelope.remoteAddress, helo: envelope.helo, mailFrom: envelope.mailFrom, mta: deps.hostname, shownFrom: author.from.email }, deps.resolver, deps.log);
      const auth = author.multiple ? withMultipleFromFailed(verdicts, domainOfAddress(author.from.email)) : verdicts;
      const fields = receivedFields(parsed, author, auth, envelope, deps.hostname);
      const receivedAt = clock.nowMs();
      const { text, html, headers, attachments, ...shared } = fields;
      const messageId = newId(clock);
      return deps.writes.run(() => {
        // The bytes, bodies, headers and attachment list once, for all the recipients (schema/inbound.ts).
        repo.insertMessage({ id: messageId, raw, text, html, headers, attachments });
        return routed.map(({ address, route }) => {
          const row: NewReceivedEmailRow = { ...shared, headers: {}, attachments: [], messageId, id: newId(clock), projectId: route.projectId, inboundRouteId: route.id, destination: address, receivedAt, envelope: { ...fields.envelope, rcptTo: [address] } };
          repo.insertReceived(row);
          recordWebhookEvent(deps.db, clock, { projectId: route.projectId, type: 'email.received', data: webhookData({ ...row, attachments, text, html }) });
          deps.log.info('inbound email received', { id: row.id, projectId: route.projectId, routeId: route.id, spamScore: fields.spam.score });
          return row.id;
        });
      });
    },
  };
}

/**
 * One spelling per mailbox: a local part quoted (whole or in parts), with needless backslash escapes or
 * with comments, whose content is a plain dot-atom, names the same mailbox as the plain one (RFC 5321
 * §4.1.2, RFC 5322 §3.4.1): `"perm"@`, `pe\rm@`, `p"erm"@` and `perm(x)@example.org` are
 * `perm@example.org`. Matched as written, they passed a reject-perm route by to the catch-all. A local
 * part that needs its quotes stays as it is.
 */
export function canonicalMailbox(address: string): string {
  const at = address.lastIndexOf('@');
  const local = address.slice(0, at);
  if (at <= 0 || !/["\\()]/.test(local)) return address;
  // Comments, quotes (whole or in parts, RFC 5322's obs-local-part) and escapes name nothing of the mailbox.
  const plain = local
    .replace(/\((?:[^()\\]|\\.)*\)/g, '')
    .replace(/\\(.)|"/g, '$1');
  // The local parts routes take (inbound/schemas.ts): anything else meets only a catch-all, as written.
  return isDotAtom(plain) ? `${plain}${address.slice(at)}` : address;
}

/**
 * Characters of `data:` URLs a received html may take for its `cid:` images (the preview loads no other
 * image): 10 M, some 7 MB of images, far more than the logos and pasted screenshots of real mail; past it
 * (or one image repeated thousands of times) references stay `cid:`, and the stored html stays bounded.
 */
export const previewImagesMaxLength = 10 * 1024 * 1024;

type ReceivedFields = Pick<NewReceivedEmailRow, 'subject' | 'addresses' | 'attachments' | 'headers' | 'auth' | 'spam'> & { text: string; html: string | null; envelope: Record<string, unknown> };

/** What a received email shows of the message (spec §2.8), read once for all its recipients. */
function receivedFields(parsed: ParsedMail, author: Author, auth: AuthVerdicts, envelope: ReceivedEnvelope, hostname: string): ReceivedFields {
  const html = typeof parsed.html === 'string' && parsed.html !== '' ? parsed.html : null;
  // mailparser gives "" (not undefined) for a message with only an html part. The text made from the html
  // is shown, but the message still has no text part of its own (scored MIME_HTML_ONLY below).
  const text = parsed.text || (html ? htmlToText(html) : '');
  const headers = rawHeaders(parsed, hostname);
  return {
    subject: boundedSubject(firstSubjectOf(parsed) ?? ''),
    addresses: addressesOf(parsed, author.from),
    text,
    html,
    attachments: parsed.attachments.map((part) => boundedAttachment({ name: part.filename ?? 'attachment', contentType: part.contentType, size: part.size })),
    headers,
    auth: { ...auth },
    spam: scoreSpam({ auth, hasSubject: parsed.subject !== undefined, hasDate: 'date' in headers, hasMessageId: 'message-id' in headers, hasText: (parsed.text ?? '').trim() !== '', hasHtml: html !== null, hasFrom: author.from.email !== '', multipleFrom: author.multiple }),
    envelope: { mailFrom: envelope.mailFrom, remoteAddress: envelope.remoteAddress, helo: envelope.helo, protocol: envelope.protocol, size: envelope.size },
  };
}

/**
 * Header values as they arrived (unfolded), by lowercased name; a repeated header is an array. Left out:
 * authentication results that claim this host's name (`hostname`), which the sender wrote (claimsThisHost).
 */
function rawHeaders(parsed: ParsedMail, hostname: string): Record<string, string | string[]> {
  // A Map, not a `{}`: the sender names the keys, and `__proto__: x` set on an object literal changed its
  // prototype instead of adding a header, while `constructor` found Object's own as an earlier value.
  const headers = new Map<string, string | string[]>();
  for (const { key, line } of parsed.headerLines) {
    // A line with no colon (a message without its header section, body lines taken for headers) names no header.
    if (key === '') continue;
    const value = headerValue(line).trim();
    if (claimsThisHost(key, value, hostname)) continue;
    const seen = headers.get(key);
    headers.set(key, seen === undefined ? value : Array.isArray(seen) ? [...seen, value] : [seen, value]);
  }
  // fromEntries defines each key as an own property (`__proto__` included), which JSON then carries; a
  // null-prototype object would do as well, but drizzle's insert cannot take one.
  return Object.fromEntries(headers);
}

/**
 * The first Subject field's, as mail clients show it and as the record shows the first From (fromOf):
 * mailparser's `subject` is the last field's.
 */
function firstSubjectOf(parsed: ParsedMail): string | undefined {
  const fields = parsed.headerLines.filter((header) => header.key === 'subject');
  if (fields.length <= 1) return parsed.subject;
  return decodeWords(headerValue(fields[0].line).trim());
}

interface Author {
  /** The From address the record shows; `{email: "", name: null}` for a message with none. */
  from: ReceivedAddress;
  /** More than one From address: two From fields, or one field that lists two (RFC 5322 §3.6 allows one). */
  multiple: boolean;
}

/**
 * Who the message says it is from. Of several From addresses the record shows the first address of the
 * first From field, the one the checks read (mailauth aligns DKIM with it); mailparser's `from` is the last
 * field's, which a forger would put below the address he wants a DMARC verdict for.
 */
async function fromOf(parsed: ParsedMail): Promise<Author> {
  const fields = parsed.headerLines.filter((header) => header.key === 'from');
  if (fields.length <= 1) {
    const addresses = listOf(parsed.from);
    return { from: addresses[0] ?? noAddress, multiple: addresses.length > 1 };
  }
  // The first field alone, read as mailparser reads the message's own (encoded names, IDN domains).
  const first = await parseMessage(Buffer.from(`${fields[0].line}\r\n\r\n`, 'latin1'));
  return { from: listOf(first.from)[0] ?? noAddress, multiple: true };
}

const noAddress: ReceivedAddress = { email: '', name: null };

function addressesOf(parsed: ParsedMail, from: ReceivedAddress): ReceivedAddresses {
  return boundedAddresses({ from, to: listOf(parsed.to), cc: listOf(parsed.cc), replyTo: listOf(parsed.replyTo) });
}

function listOf(field: AddressObject | AddressObject[] | undefined): ReceivedAddress[] {
  const objects = field === undefined ? [] : Array.isArray(field) ? field : [field];
  const out: ReceivedAddress[] = [];
  for (const entry of objects.flatMap((object) => object.value)) {
    // A group (`Team: a@x, b@y;`) lists its members.
    for (const member of entry.group ?? [entry]) out.push({ email: member.address ?? '', name: member.name || null });
  }
  return out;
}

/** Text a webhook carries at most: a receiver should not have to take a 25 MB POST (the record has it all). */
export const webhookTextMax = 256 * 1024;

/**
 * The `email.received` payload (COMPAT.md: `{type, data}`): the received email as the API shows it, without
 * raw bytes, headers and links; GET /v1/inbound/emails/{id} gives fresh links.
 */
function webhookData(row: NewReceivedEmailRow & { text: string; html: string | null }): Record<string, unknown> {
  const textTruncated = row.text.length > webhookTextMax;
  const attachmentsTruncated = row.attachments.length > webhookAttachmentsMax;
  const record = receivedEmailRecord({ ...row, html: row.html ?? null, attachments: row.attachments.slice(0, webhookAttachmentsMax) });
  return {
    ...record,
    ...(textTruncated ? { text: cutToLength(row.text, webhookTextMax), textTruncated: true } : {}),
    ...(attachmentsTruncated ? { attachmentsTruncated: true } : {}),
  };
}

/** Attachments a webhook lists at most (one event per recipient); the record lists them all. */
export const webhookAttachmentsMax = 100;
