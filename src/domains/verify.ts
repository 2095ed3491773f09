import { getDomain } from 'tldts';
import { BlockList } from 'node:net';
import { mailauthResolver } from '../lib/mailauth-resolver.js';
import { classifyDnsError, type Resolver } from '../lib/resolver.js';
import type { ExpectedRecord, RecordPurpose } from './dns-records.js';
import { isSpfMechanism } from './publishing-settings.js';

export type CheckStatus = 'ok' | 'missing' | 'mismatch' | 'temporary-error';

/** The result for one expected record: stored in `verification.records` and shown to the owner. */
export interface RecordCheck {
  purpose: RecordPurpose;
  type: 'TXT' | 'MX';
  hostname: string;
  required: boolean;
  status: CheckStatus;
  expected: string;
  found: string[];
  message: string;
}

type Lookup = { values: string[] } | { temporary: string };

/** Looks every expected record up through the configured resolver, in parallel. Never throws. */
export async function checkRecords(resolver: Resolver, records: ExpectedRecord[]): Promise<RecordCheck[]> {
  return Promise.all(records.map((record) => checkRecord(resolver, record)));
}

async function checkRecord(resolver: Resolver, record: ExpectedRecord): Promise<RecordCheck> {
  const lookup = await lookUp(resolver, record);
  const base = { purpose: record.purpose, type: record.type, hostname: record.hostname, required: record.required, expected: record.value };
  if ('temporary' in lookup) {
    return { ...base, status: 'temporary-error', found: [], message: `DNS lookup of ${record.type} ${record.hostname} failed temporarily (${lookup.temporary}); the answer is unknown.` };
  }
  if (record.purpose === 'dmarc' && !lookup.values.some(isDmarcRecord)) {
    const inherited = await parentDmarc(resolver, record);
    if (inherited) return { ...base, ...inherited };
  }
  const { status, message } = await compare(resolver, record, lookup.values);
  const cname = status === 'missing' && record.type === 'TXT' ? await cnameTarget(resolver, record.hostname) : undefined;
  // DKIM keys are often published as a CNAME to a key a provider hosts: "no TXT record" alone sends the
  // owner looking at the wrong name when it is the CNAME's target that lacks it.
  const cnameNote = cname ? ` ${record.hostname} is a CNAME to ${cname}, which has no TXT record: publish the record there, or replace the CNAME with it.` : '';
  return { ...base, status, found: lookup.values, message: message + cnameNote };
}

async function cnameTarget(resolver: Resolver, hostname: string): Promise<string | undefined> {
  try {
    const [target] = await resolver.resolveCname(hostname);
    return target ? stripDot(target) : undefined;
  } catch {
    return undefined;
  }
}

const isDmarcRecord = (value: string) => /^v\s*=\s*DMARC1\s*(;|$)/.test(value.trim());

/**
 * A subdomain without a DMARC record of its own is under its parent's policy (RFC 7489 §6.6.3: the
 * organizational domain's; its `sp=`, else `p=`): calling that "missing" would have the owner publish the
 * p=none suggestion there and lift a parent's p=reject from the subdomain. The parents are asked nearest
 * first, up to the organizational domain (the registrable one, by the Public Suffix List) and never
 * above it: no receiver applies a record at `_dmarc.co.uk` to example.co.uk's mail. Undefined when none
 * has a DMARC record.
 */
async function parentDmarc(resolver: Resolver, record: ExpectedRecord): Promise<Pick<RecordCheck, 'status' | 'found' | 'message'> | undefined> {
  for (const parentDomain of parentsUpToOrganizationalDomain(record.hostname.slice('_dmarc.'.length))) {
    const hostname = `_dmarc.${parentDomain}`;
    const lookup = await lookUp(resolver, { ...record, hostname });
    if ('temporary' in lookup) return { status: 'temporary-error', found: [], message: `DNS lookup of TXT ${hostname} (the parent domain's DMARC policy) failed temporarily (${lookup.temporary}); the answer is unknown.` };
    if (!lookup.values.some(isDmarcRecord)) continue;
    const parent = compareDmarc({ ...record, hostname }, lookup.values);
    if (parent.status !== 'ok') return { status: parent.status, found: lookup.values, message: `No DMARC record at ${record.hostname}, so its parent's applies: ${parent.message}` };
    const tags = lookup.values.find(isDmarcRecord)!;
    const policy = (/(?:^|;)\s*sp\s*=\s*([^;\s]*)/i.exec(tags) ?? /(?:^|;)\s*p\s*=\s*([^;\s]*)/i.exec(tags))?.[1]?.toLowerCase();
    return { status: 'ok', found: lookup.values, message: `No DMARC record at ${record.hostname}: receivers apply the policy at ${hostname} (p=${policy} for this subdomain); keep it, do not add the suggestion here.` };
  }
  return undefined;
}

function parentsUpToOrganizationalDomain(domain: string): string[] {
  const organizational = getDomain(domain);
  if (!organizational || organizational === domain) return [];
  const labels = domain.split('.');
  const parents = labels.slice(1).map((_, i) => labels.slice(i + 1).join('.'));
  return parents.slice(0, parents.indexOf(organizational) + 1);
}

async function lookUp(resolver: Resolver, record: ExpectedRecord): Promise<Lookup> {
  try {
    if (record.type === 'MX') return { values: (await resolver.resolveMx(record.hostname)).map((mx) => `${mx.priority} ${stripDot(mx.exchange)}`) };
    // A TXT record may be split into several strings; they are one value joined (RFC 7208 §3.3, RFC 6376 §3.6.2.2).
    return { values: (await resolver.resolveTxt(record.hostname)).map((chunks) => chunks.join('')) };
  } catch (error) {
    // NXDOMAIN / NODATA are definite answers: the record is absent. Anything else (SERVFAIL, timeout) is not.
    if (classifyDnsError(error) !== 'temporary') return { values: [] };
    return { temporary: (error as { code?: string }).code ?? 'error' };
  }
}

async function compare(resolver: Resolver, record: ExpectedRecord, found: string[]): Promise<{ status: CheckStatus; message: string }> {
  switch (record.purpose) {
    case 'dkim':
      return compareDkim(record, found);
    case 'spf':
    case 'mail-from-spf':
      return compareSpf(resolver, record, found);
    case 'mail-from-mx':
    case 'inbound-mx':
      return compareMx(record, found);
    case 'dmarc':
      return compareDmarc(record, found);
  }
}

function compareDkim(record: ExpectedRecord, found: string[]): { status: CheckStatus; message: string } {
  if (found.length === 0) return { status: 'missing', message: `No TXT record at ${record.hostname}: publish the DKIM key.` };
  // Several key records under one selector give undefined results (RFC 6376 §3.6.2.2).
  if (found.length > 1) return { status: 'mismatch', message: `${found.length} TXT records at ${record.hostname}: keep only this domain's DKIM record.` };
  const problem = dkimRecordProblem(found[0]!, dkimTags(record.value)?.get('p'));
  return problem ? { status: 'mismatch', message: `The TXT record at ${record.hostname} ${problem}.` } : { status: 'ok', message: 'DKIM key published.' };
}

/**
 * What a verifier would refuse in the key record, judged as one does (RFC 6376 §3.6.1): tag names are
 * case-sensitive and appear once, `v=` (if present) comes first and is DKIM1, `k=` allows rsa, `h=`
 * allows sha256, and `p=` is this domain's key.
 */
function dkimRecordProblem(text: string, expectedKey: string | undefined): string | undefined {
  const tags = dkimTags(text);
  if (!tags) return 'is not a valid DKIM tag list (a tag is repeated or malformed)';
  const v = tags.get('v');
  if (v !== undefined && (v !== 'DKIM1' || [...tags.keys()][0] !== 'v')) return 'must start with v=DKIM1';
  const k = tags.get('k');
  if (k !== undefined && k !== 'rsa') return `has k=${k}; this domain signs with rsa`;
  const h = tags.get('h');
  if (h !== undefined && !h.split(':').includes('sha256')) return `has h=${h}; this domain signs with sha256`;
  if (!expectedKey || tags.get('p') !== expectedKey) return "does not carry this domain's DKIM public key (p= differs)";
  return undefined;
}

/** A `tag=value; ...` list (RFC 6376 §3.2), whitespace in values removed as the RFC allows; undefined when malformed. */
function dkimTags(text: string): Map<string, string> | undefined {
  const tags = new Map<string, string>();
  for (const part of text.split(';')) {
    if (part.trim() === '') continue;
    const eq = part.indexOf('=');
    const name = part.slice(0, eq).trim();
    if (eq <= 0 || !/^[A-Za-z][A-Za-z0-9_]*$/.test(name) || tags.has(name)) return undefined;
    tags.set(name, part.slice(eq + 1).replace(/\s+/g, ''));
  }
  return tags;
}

async function compareSpf(resolver: Resolver, record: ExpectedRecord, found: string[]): Promise<{ status: CheckStatus; message: string }> {
  const spf = found.filter(isSpfRecord);
  if (spf.length === 0 && found.some((value) => isSpfRecord(value.trimStart()))) {
    return { status: 'mismatch', message: `The SPF record at ${record.hostname} begins with whitespace before v=spf1: receivers discard a record that does not begin with exactly v=spf1 (RFC 7208 §4.5); remove it.` };
  }
  if (spf.length === 0) return { status: 'missing', message: `No SPF (v=spf1) TXT record at ${record.hostname}.` };
  if (spf.length > 1) return { status: 'mismatch', message: `${spf.length} SPF records at ${record.hostname}: more than one is a permanent error (RFC 7208 §4.5); merge them.` };
  // RFC 7208 §4.6: a syntax error anywhere in the record is a permanent error for the whole of it, so a
  // misspelt or broken term makes receivers ignore our mechanisms as well.
  const invalid = invalidSpfTerm(spf[0]);
  if (invalid) return { status: 'mismatch', message: `The SPF record at ${record.hostname} ${invalid}: receivers then reject the whole record as a permanent error (RFC 7208 §4.6); fix it.` };
  const published = spfTerms(spf[0]);
  const ours = spfTerms(record.value).filter((term) => !isAllMechanism(term));
  // The terms say why a record fails, and through which include it passes; receivers' evaluation decides
  // where the terms can be wrong: a record they call wrong (an ip4: of the mail host passes all the same),
  // or one that makes other lookups before ours (a broken include stops a receiver there), or has a term
  // that fails or leaves neutral an address before ours (`-ip6:`). A record of our
  // mechanisms and addresses alone, the one the owner was given, is read right by the terms, and mailauth
  // (its RSS, inbound/auth-verdicts.ts) stays unloaded for it.
  const explained = await compareSpfTerms(resolver, record, published, ours);
  if (explained.status === 'ok' && !mayMatchBefore(published, ours)) return explained;
  const verdict = await receiversVerdict(resolver, record.hostname, ours);
  if (!verdict) return explained;
  if (verdict.result === 'temperror') return { status: 'temporary-error', message: `Receivers cannot evaluate the SPF record at ${record.hostname} for now (${verdict.reason}); the answer is unknown.` };
  if (verdict.result === 'pass') {
    return { status: 'ok', message: explained.status === 'ok' ? explained.message : `SPF authorises this appliance: receivers evaluate the record at ${record.hostname} to pass for ${verdict.addresses.join(', ')}.` };
  }
  if (explained.status !== 'ok') return explained;
  // Our terms are all there, and the record still fails: an include before them that is broken stops a receiver.
  return { status: 'mismatch', message: `Receivers evaluate the SPF record at ${record.hostname} to ${verdict.result} for ${verdict.addresses.join(', ')} (${verdict.reason}), before they reach this appliance's mechanisms: fix or remove what fails.` };
}

/**
 * Whether a term before (the last of) ours may match the mail host first: one that makes a DNS lookup not
 * ours (RFC 7208 §4.6.4), or any with a qualifier other than pass (`-ip6:` of the mail host's address
 * fails it there, whatever follows: §4.6.2); or the record redirects.
 */
function mayMatchBefore(published: string[], ours: string[]): boolean {
  // Before the last of ours: with several (ip4: and ip6:), a term between them comes first for the later ones.
  const last = published.findLastIndex((term) => ours.some((mine) => covers(term, mine)));
  const before = last < 0 ? published : published.slice(0, last);
  return published.some((term) => term.startsWith('redirect=')) || before.some((term) => (lookupTerm.test(term) && !ours.includes(term)) || /^[~?-]/.test(term));
}

const lookupTerm = /^[~?-]?(include|a|mx|ptr|exists)([:/]|$)/;

/** Whether the published terms reach ours (walkSpf), told in terms of the record: what is missing, misplaced or too deep. */
async function compareSpfTerms(resolver: Resolver, record: ExpectedRecord, published: string[], ours: string[]): Promise<{ status: CheckStatus; message: string }> {
  const walk = await walkSpf(resolver, published, ours);
  const missing = ours.filter((term) => !walk.reached.has(term));
  if (missing.length > 0) {
    if (walk.temporary) return { status: 'temporary-error', message: `The SPF record at ${record.hostname} does not list ${missing.join(' ')} itself, and ${walk.temporary}; the answer is unknown.` };
    // RFC 7208 §5.1: mechanisms after "all" are never tested, so ours must come before it.
    const allAt = published.findIndex(isAllMechanism);
    const late = missing.filter((term) => published.some((p) => covers(p, term)));
    if (late.length === missing.length) return { status: 'mismatch', message: `The SPF record at ${record.hostname} has ${late.join(' ')} after "${published[allAt]}", where it is never tested (RFC 7208 §5.1): move it before.` };
    return { status: 'mismatch', message: `The SPF record at ${record.hostname} lacks ${missing.join(' ')}.` };
  }
  // RFC 7208 §4.6.4: an evaluation that needs more than 10 DNS lookups is a permanent error, so ours must be
  // reached within 10. Lookups inside included records that do not lead to ours are not made here: this
  // catches a record over the limit by itself.
  const lookups = Math.max(...ours.map((term) => walk.reached.get(term)!.lookups));
  if (lookups > 10) return { status: 'mismatch', message: `The SPF record at ${record.hostname} needs ${lookups} DNS lookups to reach this appliance's mechanisms; more than 10 is a permanent error (RFC 7208 §4.6.4).` };
  const via = [...new Set(ours.map((term) => walk.reached.get(term)!.via).filter((term) => term !== undefined))];
  return { status: 'ok', message: via.length > 0 ? `SPF authorises this appliance (through ${via.join(', ')}).` : 'SPF authorises this appliance.' };
}

/** mailauth's verdict for each address, the first that is not a pass deciding; the addresses evaluated. */
interface ReceiversVerdict {
  result: 'pass' | 'fail' | 'softfail' | 'neutral' | 'none' | 'permerror' | 'temperror';
  reason: string;
  addresses: string[];
}

/**
 * What a receiver decides for mail from this appliance: RFC 7208's evaluation (mailauth's, as inbound mail
 * is checked) of the domain's SPF for each address our mechanisms name. An `ip4:` from the mail host's own
 * address, `mx` on the bounce subdomain or `a:host/32` pass as well as our `a:host`, which a comparison of
 * terms called a mismatch (and the domain's sends were refused); an include before ours that is broken
 * (no SPF there, a syntax error) stops a receiver with permerror, which it did not see. Undefined when our
 * mechanisms are not all addresses (an `include:` of a relay's record): the terms are compared then.
 */
async function receiversVerdict(resolver: Resolver, domain: string, ours: string[]): Promise<ReceiversVerdict | undefined> {
  const addresses = await addressesOf(resolver, ours);
  if (!addresses) return undefined;
  const { spf } = await import('mailauth');
  for (const ip of addresses) {
    const checked = await spf({ sender: `postmaster@${domain}`, ip, helo: domain, mta: 'receivers', resolver: mailauthResolver(resolver, spfLookupsPerCheck) } as any);
    const result = checked.status.result as ReceiversVerdict['result'];
    if (result !== 'pass') return { result, reason: String(checked.status.comment ?? result).replace(/^receivers: /, ''), addresses: [ip] };
  }
  return { result: 'pass', reason: 'pass', addresses };
}

/**
 * The most lookups one evaluation may make, past which its answer is temperror. mailauth keeps RFC 7208's
 * own limits (§4.6.4: 10 mechanisms that look up, 2 void lookups, 10 addresses per `mx`, each asked as A
 * and AAAA), which can take 10 + 10 × 10 × 2 = 210 lookups; at 40, a record that receivers pass (two `mx`
 * of 10 hosts) read temporary-error at every check.
 */
const spfLookupsPerCheck = 220;

/**
 * The addresses our mechanisms authorise: `ip4:`/`ip6:` of one address, `a:host` by its A and AAAA
 * records. Undefined when one is something else, or names a host that has no address now.
 */
async function addressesOf(resolver: Resolver, ours: string[]): Promise<string[] | undefined> {
  const addresses: string[] = [];
  for (const term of ours) {
    const network = ipNetwork(term);
    if (network) {
      // A network of ours is more than one address: whether a published one holds it is the terms' question.
      if (network.prefix !== (network.family === 'ipv4' ? 32 : 128)) return undefined;
      addresses.push(network.address);
      continue;
    }
    const host = /^a:([^/%]+)$/.exec(term)?.[1];
    if (!host) return undefined;
    const found = await Promise.all([resolver.resolve4(host), resolver.resolve6(host)].map((lookup) => lookup.catch(() => [] as string[])));
    if (found.flat().length === 0) return undefined;
    addresses.push(...found.flat());
  }
  return addresses.length > 0 ? addresses : undefined;
}

/** RFC 7208 §4.5: a TXT record is an SPF record when it begins with exactly `v=spf1`, ended by a space or the record's end. */
const isSpfRecord = (value: string) => /^v=spf1( |$)/i.test(value);

/**
 * Whether a published term passes what our term does: the same term, or an ip4/ip6 network that holds
 * ours (RFC 7208 §5.6: the sending IP is matched against the network, so `ip4:203.0.113.5/32` and
 * `ip4:203.0.113.0/24` both pass 203.0.113.5). An ip6 network never holds an ip4 address (§5.6).
 */
function covers(term: string, ours: string): boolean {
  if (term === ours) return true;
  const network = ipNetwork(term);
  const mine = ipNetwork(ours);
  if (!network || !mine || network.family !== mine.family || network.prefix > mine.prefix) return false;
  const list = new BlockList();
  list.addSubnet(network.address, network.prefix, network.family);
  return list.check(mine.address, mine.family);
}

/** An unqualified ip4/ip6 mechanism as a network (terms were checked by isSpfMechanism before). */
function ipNetwork(term: string): { family: 'ipv4' | 'ipv6'; address: string; prefix: number } | undefined {
  const match = /^ip([46]):([^/]+)(?:\/(\d+))?$/.exec(term);
  if (!match) return undefined;
  const family = match[1] === '4' ? 'ipv4' : 'ipv6';
  return { family, address: match[2], prefix: match[3] === undefined ? (family === 'ipv4' ? 32 : 128) : Number(match[3]) };
}

const namesCheckedDomain = (term: string) => /^(a|mx|ptr)(\/|$)/.test(term);

interface SpfWalk {
  /** Each of our terms a receiver reaches with a pass: the DNS lookups it takes to get there, and the include/redirect it is under. */
  reached: Map<string, { lookups: number; via?: string }>;
  /** Why an included or redirected record could not be read, when one could not. */
  temporary?: string;
}

/**
 * Where a receiver evaluating `terms` (RFC 7208 §4.6) meets each of `ours` with a pass. Owners often keep
 * their senders in one record that every domain names with `include:` or `redirect=`: such a record is
 * read only for the terms the domain's own record does not list (one DNS lookup per record, as a
 * receiver makes it). An include passes only unqualified (§5.2: `~include:` gives softfail at best), and a
 * redirect applies only to a record without `all` (§6.1). Macros (`%{d}`) are not expanded: not followed.
 */
async function walkSpf(resolver: Resolver, terms: string[], ours: string[]): Promise<SpfWalk> {
  const walk: SpfWalk = { reached: new Map() };
  let lookups = 0;
  const visit = async (recordTerms: string[], via: string | undefined, depth: number): Promise<void> => {
    const allAt = recordTerms.findIndex(isAllMechanism);
    const tested = allAt < 0 ? recordTerms : recordTerms.slice(0, allAt);
    for (const term of tested) {
      if (lookupTerm.test(term)) lookups++;
      // `a`, `mx` and `ptr` without a domain name the domain being checked: the included or redirected one there (§5.2, §6.1).
      if (depth === 0 || !namesCheckedDomain(term)) {
        for (const mine of ours) if (!walk.reached.has(mine) && covers(term, mine)) walk.reached.set(mine, { lookups, via });
      }
      const target = /^include:([^%]+)$/.exec(term)?.[1];
      if (target && ours.some((t) => !walk.reached.has(t) && !tested.some((other) => covers(other, t)))) await follow(target, via ?? term, depth);
    }
    const redirect = allAt < 0 ? /^redirect=([^%]+)$/.exec(recordTerms.find((term) => term.startsWith('redirect=')) ?? '')?.[1] : undefined;
    if (redirect && ours.some((t) => !walk.reached.has(t))) {
      lookups++;
      await follow(redirect, via ?? `redirect=${redirect}`, depth);
    }
  };
  const follow = async (domain: string, via: string, depth: number): Promise<void> => {
    // Past 10 lookups a receiver has already stopped with a permanent error (§4.6.4).
    if (depth >= 10 || lookups > 10) return;
    let values: string[];
    try {
      values = (await resolver.resolveTxt(domain)).map((chunks) => chunks.join(''));
    } catch (error) {
      if (classifyDnsError(error) === 'temporary') walk.temporary ??= `the lookup of TXT ${domain} (${via}) failed temporarily (${(error as { code?: string }).code ?? 'error'})`;
      return;
    }
    const spf = values.filter(isSpfRecord);
    if (spf.length !== 1 || invalidSpfTerm(spf[0])) return;
    await visit(spfTerms(spf[0]), via, depth + 1);
  };
  await visit(terms, undefined, 0);
  return walk;
}

const isAllMechanism = (term: string) => /^[~?+-]?all$/.test(term);

/**
 * What makes a receiver's parse of the record fail (RFC 7208 §4.6.1, §5, §6): a term that is neither a
 * known mechanism (with a valid argument) nor a `name=value` modifier, a redirect or exp given twice, or a
 * character outside printable ASCII. Undefined when the record parses.
 */
function invalidSpfTerm(value: string): string | undefined {
  if (/[^\x20-\x7e]/.test(value)) return 'holds a character outside printable ASCII';
  const terms = value.trim().split(/\s+/).slice(1);
  for (const term of terms) {
    const modifier = /^([a-z][a-z0-9_.-]*)=/i.exec(term);
    if (modifier) {
      if (term.length === modifier[0].length && /^(redirect|exp)$/i.test(modifier[1])) return `has ${term} with no domain`;
      continue;
    }
    if (!isAllMechanism(term.toLowerCase()) && !isSpfMechanism(term)) return `has "${term}", which is not an SPF mechanism`;
  }
  for (const name of ['redirect', 'exp']) {
    if (terms.filter((term) => term.toLowerCase().startsWith(`${name}=`)).length > 1) return `has more than one ${name}= modifier`;
  }
  return undefined;
}

/**
 * Terms without the `v=spf1` version, lower-cased, with the default `+` qualifier made implicit and a
 * domain-spec's trailing dot (an absolute name, the same name) removed: `+a:Mail.Example.com.` is `a:mail.example.com`.
 */
function spfTerms(value: string): string[] {
  return value
    .trim()
    .toLowerCase()
    .split(/\s+/)
    .slice(1)
    .map((term) => term.replace(/^\+/, '').replace(/^([a-z]+[:=][^/]*?)\.(\/|$)/, '$1$2'));
}

/**
 * Mail goes to the most preferred MX hosts (lowest preference value; RFC 5321 §5.1): ours must be one of
 * them, or bounces (or inbound mail) reach another host first.
 */
function compareMx(record: ExpectedRecord, found: string[]): { status: CheckStatus; message: string } {
  const expected = stripDot(record.value).toLowerCase();
  if (found.length === 0) return { status: 'missing', message: `No MX record at ${record.hostname}.` };
  const hosts = found.map((value) => {
    const [preference, host] = value.split(' ');
    return { preference: Number(preference), host: (host ?? '').toLowerCase() };
  });
  const ours = hosts.filter((mx) => mx.host === expected);
  if (ours.length === 0) return { status: 'mismatch', message: `The MX records at ${record.hostname} do not point to ${expected}.` };
  const best = Math.min(...hosts.map((mx) => mx.preference));
  if (!ours.some((mx) => mx.preference === best)) {
    const first = hosts.filter((mx) => mx.preference === best).map((mx) => mx.host);
    return { status: 'mismatch', message: `The MX records at ${record.hostname} prefer ${first.join(', ')} (preference ${best}) to ${expected}: mail goes there first.` };
  }
  return { status: 'ok', message: `MX points to ${expected}.` };
}

/**
 * Any valid DMARC policy is fine: the owner's own policy wins over our suggestion. Valid as a receiver
 * reads it (RFC 7489 §6.3, §6.6.3): exactly one record, starting with `v=DMARC1` (that exact value), and
 * a `p=` of none, quarantine or reject.
 */
function compareDmarc(record: ExpectedRecord, found: string[]): { status: CheckStatus; message: string } {
  const dmarc = found.filter((value) => /^v\s*=\s*DMARC1\s*(;|$)/.test(value.trim()));
  if (found.length === 0) return { status: 'missing', message: `No DMARC record at ${record.hostname}.` };
  if (dmarc.length === 0) return { status: 'mismatch', message: `The TXT record at ${record.hostname} is not a DMARC policy (it must start with v=DMARC1).` };
  if (dmarc.length > 1) return { status: 'mismatch', message: `${dmarc.length} DMARC records at ${record.hostname}: receivers then apply none (RFC 7489 §6.6.3); keep one.` };
  const policy = /(?:^|;)\s*p\s*=\s*([^;\s]*)/i.exec(dmarc[0])?.[1]?.toLowerCase();
  if (policy !== 'none' && policy !== 'quarantine' && policy !== 'reject') {
    return { status: 'mismatch', message: `The DMARC record at ${record.hostname} has ${policy === undefined ? 'no p= policy' : `p=${policy}`}; it needs p=none, p=quarantine or p=reject.` };
  }
  return { status: 'ok', message: 'DMARC policy published.' };
}

function stripDot(name: string): string {
  return name.replace(/\.$/, '');
}

export type DomainStatus = 'pending' | 'success' | 'failed';

/** What the last checks left behind; the `verification` column (extension field `verification`). */
export interface VerificationState {
  checkedAt: string;
  /** Outcome of this check: all required records ok, one definitely wrong, or an unknown answer. */
  result: 'success' | 'failed' | 'temporary-error';
  /** Required records that are not ok, as `TYPE hostname (purpose): status`. */
  failing: string[];
  records: RecordCheck[];
  /** Since when checks have only failed temporarily; null after any definite answer. */
  temporaryFailureSince: string | null;
}

export interface DomainVerificationFields {
  status: DomainStatus;
  dkimVerified: boolean;
  mailFromStatus: DomainStatus;
}

export interface Decision extends DomainVerificationFields {
  verification: VerificationState;
}

/**
 * Turns one round of checks into the domain's new state. Policy (documented in docs and the README):
 * - a definite answer (record absent or different) is authoritative: the domain becomes `failed`;
 * - a temporary failure (SERVFAIL, timeout) proves nothing, so the previous status is kept, and a verified
 *   domain stays verified until lookups have failed only temporarily for longer than `graceMs`;
 * - `dkim` and `mailFromStatus` follow the same rule for their own records.
 */
export function decideOutcome(previous: DomainVerificationFields & { verification: VerificationState | null }, checks: RecordCheck[], nowMs: number, graceMs: number): Decision {
  const required = checks.filter((check) => check.required);
  const result = summarize(required);
  const since = result === 'temporary-error' ? previous.verification?.temporaryFailureSince ?? new Date(nowMs).toISOString() : null;
  const graceOver = since !== null && nowMs - Date.parse(since) >= graceMs;
  const resolve = (part: 'success' | 'failed' | 'temporary-error', kept: DomainStatus): DomainStatus => {
    if (part !== 'temporary-error') return part;
    return graceOver && kept === 'success' ? 'failed' : kept;
  };
  const dkim = resolve(summarize(required.filter((c) => c.purpose === 'dkim')), previous.dkimVerified ? 'success' : 'pending');
  return {
    status: resolve(result, previous.status),
    dkimVerified: dkim === 'success',
    mailFromStatus: resolve(summarize(required.filter((c) => c.purpose === 'mail-from-mx' || c.purpose === 'mail-from-spf')), previous.mailFromStatus),
    verification: {
      checkedAt: new Date(nowMs).toISOString(),
      result,
      failing: required.filter((c) => c.status !== 'ok').map((c) => `${c.type} ${c.hostname} (${c.purpose}): ${c.status}`),
      records: checks,
      temporaryFailureSince: since,
    },
  };
}

function summarize(checks: RecordCheck[]): 'success' | 'failed' | 'temporary-error' {
  if (checks.some((c) => c.status === 'missing' || c.status === 'mismatch')) return 'failed';
  if (checks.some((c) => c.status === 'temporary-error')) return 'temporary-error';
  return 'success';
}
