import { withAsciiDomain } from '../emails/address.js';
import type { Logger } from '../lib/logger.js';
import { mailauthResolver } from '../lib/mailauth-resolver.js';
import type { Resolver } from '../lib/resolver.js';

/**
 * SPF, DKIM, DMARC and ARC verdicts of a received message (spec §2.8 `auth`), by mailauth, looking up
 * through the appliance's resolver (DESIGN convention 4: `dns.servers`, a real DNS server in tests).
 */
export interface AuthVerdicts {
  spf: { result: string; domain: string | null };
  dkim: { result: string; domain: string | null; selector: string | null }[];
  dmarc: { result: string; domain: string | null; policy: string | null };
  arc: { result: string };
  /**
   * The trace headers mailauth would add, folded: Received-SPF (RFC 7208 §9.1), then Authentication-Results
   * (RFC 8601). Stored as such for the raw message's trace; the API shows the second alone
   * (`authenticationResultsHeader`).
   */
  authenticationResults: string;
}

/**
 * The Authentication-Results header, with its folded lines, out of mailauth's block: what the API's
 * `auth.authenticationResults` promises (one header, which a client may add to a message as it is).
 */
export function authenticationResultsHeader(traceLines: string): string {
  const start = traceLines.search(/^Authentication-Results:/im);
  if (start < 0) return '';
  const rest = traceLines.slice(start);
  // The header ends where a line that is no continuation (RFC 5322 §2.2.3: starts with no space or tab) begins.
  const end = rest.search(/\r?\n(?![ \t])/);
  return end < 0 ? rest : rest.slice(0, end);
}

export interface Connection {
  ip: string;
  helo: string;
  mailFrom: string;
  /** This host's name, the Authentication-Results authserv-id. */
  mta: string;
  /** The From address the record shows (the first of the first From field), read for a From field too long to check as it is. */
  shownFrom: string;
}

/** A check that cannot be done (a DNS outage, a message mailauth cannot read) is `temperror`, not a crash. */
const unknown: AuthVerdicts = {
  spf: { result: 'temperror', domain: null },
  dkim: [],
  dmarc: { result: 'temperror', domain: null, policy: null },
  arc: { result: 'temperror' },
  authenticationResults: '',
};

/**
 * DNS lookups the checks of one message may make. SPF stops at its own 10 (RFC 7208 §4.6.4); DKIM looks
 * up a key per signature, and a message of 3,000 forged signatures sent 3,000 queries to the name
 * servers of a domain its sender chose (RFC 6376 §6.1 lets a verifier try fewer). Past this, a lookup
 * fails as a DNS outage would: those signatures are `temperror`.
 */
export const lookupsPerMessage = 40;

/**
 * Header lines a message may have to be checked. mailauth joins folded lines in a way that costs the
 * square of their number, on the event loop: one header folded 50,000 times (200 kB) held the whole
 * appliance 9 s, 200,000 times over 2 minutes. Real mail has a few hundred at most.
 */
export const maxHeaderLines = 2_000;

/** Whether the header section (up to the first empty line) has more than `limit` lines; reads no further than that. */
export function headerHasMoreLinesThan(raw: Buffer, limit: number): boolean {
  let start = 0;
  for (let lines = 0; lines <= limit; lines++) {
    const end = raw.indexOf(0x0a, start);
    if (end === -1) return false;
    const length = end - start;
    if (length === 0 || (length === 1 && raw[start] === 0x0d)) return false;
    start = end + 1;
  }
  return true;
}

/**
 * DKIM signatures the checks read; the rest are left out (RFC 6376 §6.1 lets a verifier limit the
 * signatures it checks). mailauth hashes the body once per distinct `l=`: 1,900 forged signatures, each
 * with its own, held the event loop 85 s over a 20 MB body. Real mail carries one to three.
 */
export const signaturesChecked = 8;

/**
 * ARC headers of one kind a message may carry for its chain to be checked: RFC 8617 §4.2.1 allows 50
 * instances, and each ARC-Message-Signature is a body hash too. Past that the chain is not read at all
 * (`arc=none`): a chain cut to some of its sets would read as forged (`fail`).
 */
export const arcInstancesChecked = 50;

/**
 * `@` a From (or Return-Path) field may hold, and characters, for the checks to read it as it is.
 * mailauth's own copy of an older address parser costs the square of the number of entries: 150,000
 * addresses in one From field (900 kB) held the event loop 75 s, and 100,000 bare tokens (`a,a,…`, no
 * `@` at all) 40 s. Real fields hold one address, and an encoded display name is a few hundred characters.
 */
export const fromAddressesChecked = 20;
export const fromCharactersChecked = 2_000;

/**
 * The message as the checks read it: `raw` itself, unless its header section has more signatures or From
 * addresses than they read at a bearable cost; then a copy with those bounded. Only the checks see it: the
 * stored message is `raw`. A From field too long to read is read as `shownFrom`, the address the record
 * shows: the checks must judge the author the reader sees, not a text an attacker put first (a display
 * name holding another domain's address would have given the spoofed From that domain's DMARC pass). A
 * Return-Path as long is left out (mailauth reads it only for a null sender; SPF then checks the HELO).
 */
export function boundedForChecks(raw: Buffer, shownFrom: string): Buffer {
  const headerEnd = headerSectionEnd(raw);
  const fields = splitHeaderFields(raw.subarray(0, headerEnd).toString('latin1'));
  const names = fields.map((field) => field.slice(0, Math.max(0, field.indexOf(':'))).trim().toLowerCase());
  const counts = new Map<string, number>();
  for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1);
  const arcTooLong = [...counts].some(([name, count]) => name.startsWith('arc-') && count > arcInstancesChecked);
  let signatures = 0;
  let changed = false;
  const kept: string[] = [];
  for (const [index, field] of fields.entries()) {
    const name = names[index];
    const tooLongAddress = (name === 'from' || name === 'return-path') && (field.length > fromCharactersChecked || countOf(field, '@') > fromAddressesChecked);
    const dropped = (name === 'dkim-signature' && ++signatures > signaturesChecked) || (arcTooLong && name.startsWith('arc-')) || (tooLongAddress && name === 'return-path');
    if (dropped || tooLongAddress) changed = true;
    if (dropped) continue;
    kept.push(tooLongAddress ? `From: <${shownFrom}>\r\n` : field);
  }
  return changed ? Buffer.concat([Buffer.from(kept.join(''), 'latin1'), raw.subarray(headerEnd)]) : raw;
}

/** Where the header section ends: at its empty line (included in what follows), or the whole message. */
function headerSectionEnd(raw: Buffer): number {
  let start = 0;
  for (;;) {
    const end = raw.indexOf(0x0a, start);
    if (end === -1) return raw.length;
    const length = end - start;
    if (length === 0 || (length === 1 && raw[start] === 0x0d)) return start;
    start = end + 1;
  }
}

/** Header fields with their line endings, a field's folded lines (starting with a space or tab) with it. */
function splitHeaderFields(header: string): string[] {
  return header.split(/(?<=\n)(?![ \t])/).filter((field) => field !== '');
}

function countOf(text: string, character: string): number {
  let count = 0;
  for (let at = text.indexOf(character); at !== -1; at = text.indexOf(character, at + 1)) count++;
  return count;
}

export async function verifyAuth(raw: Buffer, connection: Connection, resolver: Resolver, log: Logger): Promise<AuthVerdicts> {
  try {
    // Loaded with the first message (and kept out of the bundle, build.mjs): mailauth and what it loads
    // cost an idle appliance ~17 MB of RSS, which one that receives no mail for routes never needs (domain
    // verification loads it only for an SPF record it must evaluate, domains/verify.ts).
    const { authenticate } = await import('mailauth');
    const result = (await authenticate(boundedForChecks(raw, connection.shownFrom), {
      ip: connection.ip,
      helo: connection.helo,
      // smtp-server hands an IDN domain over as U-labels (`news@bücher.example`), even when the client wrote
      // its A-labels. mailauth's SPF takes ASCII domains only and answered `none` with no lookup, so SPF
      // (and DMARC aligned through it) was never checked: the domain is looked up as it is in DNS (RFC 7208 §4.3).
      sender: withAsciiDomain(connection.mailFrom),
      mta: connection.mta,
      resolver: mailauthResolver(resolver, lookupsPerMessage),
      disableBimi: true,
    })) as any;
    return {
      spf: { result: result.spf?.status?.result ?? 'none', domain: result.spf?.domain ?? null },
      dkim: (result.dkim?.results ?? [])
        .filter((entry: any) => entry.status?.result !== 'none')
        .map((entry: any) => ({ result: entry.status?.result ?? 'none', domain: entry.signingDomain ?? null, selector: entry.selector ?? null })),
      dmarc: { result: result.dmarc?.status?.result ?? 'none', domain: result.dmarc?.domain ?? null, policy: result.dmarc?.policy ?? null },
      arc: { result: result.arc?.status?.result ?? 'none' },
      authenticationResults: typeof result.headers === 'string' ? result.headers.trim() : '',
    };
  } catch (error) {
    // Said, not only stored as temperror: a mailauth that cannot load would otherwise pass unnoticed.
    log.warn('authentication checks failed', { error });
    return unknown;
  }
}

/**
 * RFC 7489 §6.6.1: a message with more than one From address (two From fields, or one field listing two)
 * has no single author domain to check, and such mail is "typically rejected". mailauth gives no DMARC
 * verdict for it at all, which read as `none`: a forged From under p=reject, alone a `fail` and spam,
 * passed as unchecked beside a second From. It is a `fail` here, about the From the record shows
 * (`shownDomain`), with no policy (none was looked up), and the Authentication-Results says so too.
 */
export function withMultipleFromFailed(verdicts: AuthVerdicts, shownDomain: string | undefined): AuthVerdicts {
  const reason = `dmarc=fail (multiple From addresses)${shownDomain ? ` header.from=${shownDomain}` : ''}`;
  // mailauth wrote no dmarc clause (nothing to replace), and its Authentication-Results is the last header
  // of the block (verifyAuth seals nothing): the clause goes at its end. With no header at all (the
  // checks failed) there is nothing to add it to.
  const header = verdicts.authenticationResults;
  const addClause = header !== '' && !/^\s*dmarc=/m.test(authenticationResultsHeader(header));
  return {
    ...verdicts,
    dmarc: { result: 'fail', domain: shownDomain ?? null, policy: null },
    authenticationResults: addClause ? `${header};\r\n ${reason}` : header,
  };
}

