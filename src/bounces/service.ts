/*
 * Asynchronous bounces and complaints arriving at the VERP Return-Path of emails this appliance sent
 * (DESIGN "SMTP" flow), and feedback-loop complaints (ARF) sent to `postmaster@` one of its domains, the
 * address registered with a mailbox provider's feedback loop (feedback-loop.ts). The inbound listener
 * asks `checkRecipient` at RCPT and hands accepted messages to `receive`; nothing here knows about SMTP.
 */

import type { Db, Sqlite } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import { normalizeDomainName } from '../domains/domain-name.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { UrlSigner } from '../lib/signing.js';
import { decodeWords } from '../smtp/decode-words.js';
import { reportedEnvelopeSenders } from './feedback-loop.js';
import { interpretParsedReport, parseReport, type ParsedReport } from './read-report.js';
import { recordReport } from './record-report.js';
import { createBouncesRepo, createServedDomainLookup } from './repo.js';
import { createVerp, type Verp } from './verp.js';
import { cutToLength } from '../lib/text.js';

export type RecipientVerdict = { accept: true } | { accept: false; code: number; message: string };

export interface BouncesService {
  /** Builds and verifies Return-Path addresses (delivery uses `verp.address`). */
  verp: Verp;
  /** 250 for an authentic VERP address of an existing email; today's 550 5.1.1 for anything else. */
  checkRecipient(address: string): Promise<RecipientVerdict>;
  /**
   * Interprets one report and records it. A report that means nothing (garbage, success DSN, DMARC
   * failure report) is accepted and logged so the sender does not retry it forever; only a database
   * failure throws (→ 451, the sender retries).
   */
  /** `keptAsReceived`: postmaster recipients an inbound route also stored (inbound/recipients.ts), not to be called dropped. */
  receive(raw: Buffer, envelope: { mailFrom: string; rcptTo: string[]; remoteAddress: string; size?: number; keptAsReceived?: string[] }): Promise<void>;
  /** The bytes of a message it reads (the start: the report parts come before the returned original). */
  readonly readBytes: number;
}

export interface BouncesDeps {
  db: Db;
  /** The same connection, for the suspension rule's counts (delivery/reputation.ts countOutcome). */
  sqlite: Sqlite;
  writes: WriteQueue;
  clock: Clock;
  log: Logger;
  signer: UrlSigner;
  /** Only this many leading bytes are parsed: reports are small, the returned original may not be. */
  maxReportBytes?: number;
  /**
   * Host names of the appliance itself (smtp.hostname, domains.mail_hostname, delivery.helo_name):
   * `postmaster@` one of them is accepted, as at a sending domain or its MAIL FROM domain.
   */
  localNames?: string[];
}

const defaultMaxReportBytes = 1024 * 1024;
/**
 * One report concerns one email; more recipients than this in one transaction is not a bounce. The
 * inbound listener answers 452 past it (inbound/recipients.ts), so a sender delivers the rest in another transaction.
 */
export const maxEmailsPerReport = 10;
const refused: RecipientVerdict = { accept: false, code: 550, message: '5.1.1 No inbound route for this recipient' };

export function createBouncesService(deps: BouncesDeps): BouncesService {
  const { db, clock, log } = deps;
  const verp = createVerp(deps.signer);
  const repo = createBouncesRepo(db, clock);
  const maxBytes = deps.maxReportBytes ?? defaultMaxReportBytes;
  const localNames = new Set((deps.localNames ?? []).map(normalizeDomain).filter((name) => name !== ''));
  let servesDomain: ((domain: string) => boolean) | undefined;
  const servesPostmasterDomain = (address: string): boolean => {
    const at = address.lastIndexOf('@');
    if (at < 0) return true; // the bare `postmaster` (RFC 5321 §4.5.1)
    const domain = normalizeDomain(address.slice(at + 1));
    if (localNames.has(domain)) return true;
    servesDomain ??= createServedDomainLookup(deps.sqlite);
    return servesDomain(domain);
  };

  /** The emails these addresses are the authentic VERP Return-Paths of (verp.parse checks the tag). */
  const sentEmailIds = (addresses: string[]): string[] =>
    addresses.map((address) => verp.parse(address)).filter((id): id is string => id !== undefined && repo.findEmail(id) !== undefined);

  return {
    verp,
    readBytes: maxBytes,
    async checkRecipient(address) {
      // RFC 5321 §4.5.1 asks for postmaster only at the domains a host serves: accepting (and dropping)
      // postmaster@gmail.com looks like an open relay to every relay test and loses the sender's mail.
      if (isPostmaster(address)) return servesPostmasterDomain(address) ? { accept: true } : refused;
      const emailId = verp.parse(address);
      if (!emailId || !repo.findEmail(emailId)) return refused;
      return { accept: true };
    },
    async receive(raw, envelope) {
      const body = raw.length > maxBytes ? raw.subarray(0, maxBytes) : raw;
      let parsed: ParsedReport | undefined;
      const parse = async () => (parsed ??= await parseReport(body));
      const postmaster = envelope.rcptTo.filter(isPostmaster);
      const reported = postmaster.length > 0 ? sentEmailIds(reportedEnvelopeSenders(await parse())) : [];
      // Anything else for postmaster is for the operator, who reads it in the log.
      const dropped = postmaster.filter((address) => !envelope.keptAsReceived?.includes(address));
      if (dropped.length > 0 && reported.length === 0) logPostmasterMail(log, raw, envelope, dropped);
      const emailIds = [...new Set([...sentEmailIds(envelope.rcptTo), ...reported])].slice(0, maxEmailsPerReport);
      // The envelope sender of a bounce is <> (RFC 5321 §4.5.5); a named sender makes free text less trustworthy.
      const nullSender = envelope.mailFrom === '';
      for (const emailId of emailIds) {
        const email = repo.findEmail(emailId);
        if (!email) continue;
        const finding = interpretParsedReport(await parse(), { nullSender, toAddress: email.toAddress });
        const outcome = await deps.writes.run(() => recordReport({ db, sqlite: deps.sqlite, clock, repo }, emailId, finding));
        log.info('inbound report', {
          emailId,
          projectId: email.projectId,
          outcome,
          kind: finding.kind,
          ...(finding.kind === 'bounce' && { bounceType: finding.bounce.bounceType, status: finding.bounce.status, source: finding.bounce.source, ...(finding.bounce.memberOf !== undefined && { aliasMember: true }) }),
          ...(finding.kind === 'complaint' && { feedbackType: finding.feedback.feedbackType }),
          ...(finding.kind === 'ignored' && { reason: finding.reason }),
          remoteAddress: envelope.remoteAddress,
          bytes: envelope.size ?? raw.length,
          truncated: (envelope.size ?? raw.length) > maxBytes,
        });
      }
    },
  };
}

/**
 * The domain in the form domains are stored in: A-labels (RFC 5891). smtp-server hands an RCPT domain on
 * in U-labels (`xn--bcher-kva.example` arrives as `bücher.example`), so comparing as given refused
 * postmaster at every internationalized sending domain. A name the domains module does not take as a
 * domain (a single-label host name) is only lower-cased.
 */
function normalizeDomain(name: string): string {
  const plain = name.trim().toLowerCase().replace(/\.$/, '');
  return normalizeDomainName(plain) ?? plain;
}

/**
 * RFC 5321 §4.5.1: a host that takes mail MUST take it for `postmaster`, with or without a domain (the
 * bounce domains' MX points here). Nothing reads a mailbox on the appliance: an ARF report about an email
 * it sent is recorded as at the VERP address; anything else is acknowledged and said in the log (sender,
 * subject, size) for the operator, its body not kept.
 */
export function isPostmaster(address: string): boolean {
  const at = address.lastIndexOf('@');
  return (at < 0 ? address : address.slice(0, at)).toLowerCase() === 'postmaster';
}

function logPostmasterMail(log: Logger, raw: Buffer, envelope: { mailFrom: string; remoteAddress?: string; size?: number }, recipients: string[]): void {
  const headerEnd = raw.indexOf('\r\n\r\n');
  const head = headerText(raw.subarray(0, headerEnd < 0 ? Math.min(raw.length, 8192) : Math.min(headerEnd, 8192)));
  // RFC 5322 §2.2.3 unfolding, then RFC 2047 encoded-words: most clients encode a non-ASCII subject.
  const folded = /^subject:[ \t]*(.*(?:\r\n[ \t].*)*)/im.exec(head)?.[1];
  const subject = folded === undefined ? undefined : cutToLength(decodeWords(folded.replace(/\r\n([ \t])/g, '$1')), 200);
  log.warn('mail for postmaster received: logged here, not kept (the appliance has no mailbox)', {
    from: envelope.mailFrom,
    to: recipients,
    subject,
    bytes: envelope.size ?? raw.length,
    remoteAddress: envelope.remoteAddress,
  });
}

/**
 * Header bytes as text for the operator: UTF-8 when they are (RFC 6532 headers, sent with 8BITMIME or
 * SMTPUTF8), else Latin-1 (legacy 8-bit mail): read as Latin-1 alone, `Grüße` was logged as `GrÃ¼Ãe`.
 */
function headerText(bytes: Buffer): string {
  try {
    // stream: a character cut by the 8 kB cap is left out instead of failing the whole header as UTF-8.
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: true });
  } catch {
    return bytes.toString('latin1');
  }
}
