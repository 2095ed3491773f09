import { isIP } from 'node:net';
import { classifyDnsError, failedForWantOfDescriptors, type Resolver } from '../lib/resolver.js';

/**
 * Where to deliver a recipient domain, or why not now / never. `localFailure`: the lookup failed on this
 * side (out of file descriptors), which says nothing about the domain.
 */
export type MxResolution =
  | { kind: 'hosts'; hosts: MxHost[] }
  | { kind: 'bounce'; message: string }
  | { kind: 'defer'; message: string; localFailure?: boolean };

export interface MxHost {
  /** Host name (or the domain itself for the implicit MX). */
  name: string;
  priority: number;
}

/** `random` is injected so tests can pin the shuffle of equal preferences. */
export async function resolveMx(resolver: Resolver, domain: string, random?: () => number): Promise<MxResolution> {
  let records: { exchange: string; priority: number }[];
  try {
    records = await resolver.resolveMx(domain);
  } catch (error) {
    const failure = classifyDnsError(error);
    if (failure === 'nxdomain') return { kind: 'bounce', message: `Domain ${domain} does not exist (NXDOMAIN)` };
    if (failure === 'temporary') return { kind: 'defer', message: `DNS lookup of MX ${domain} failed: ${dnsCode(error)}`, localFailure: failedForWantOfDescriptors(error) };
    records = [];
  }
  // RFC 7505: a single MX with an empty exchange (".") declares the domain accepts no mail.
  if (records.some((r) => r.exchange === '' || r.exchange === '.')) {
    return { kind: 'bounce', message: `Domain ${domain} does not accept mail (null MX, RFC 7505)` };
  }
  // RFC 5321 §5.1: no MX records → the domain itself is the implicit MX (its A/AAAA records).
  if (records.length === 0) return { kind: 'hosts', hosts: [{ name: domain, priority: 0 }] };
  return { kind: 'hosts', hosts: orderByPreference(records, random).map((r) => ({ name: r.exchange.replace(/\.$/, ''), priority: r.priority })) };
}

/** RFC 5321 §5.1: lowest preference first; hosts with equal preference in random order to spread load. */
export function orderByPreference<T extends { priority: number }>(records: T[], random: () => number = Math.random): T[] {
  const keyed = records.map((record) => ({ record, tie: random() }));
  keyed.sort((a, b) => a.record.priority - b.record.priority || a.tie - b.tie);
  return keyed.map((k) => k.record);
}

/**
 * One host's addresses in a fresh random order for each attempt, IPv4 still ahead of IPv6 (as
 * resolveHostAddresses gives them). An attempt tries at most five addresses: in the order DNS gave
 * them (and the cache kept), a host with more addresses whose first five were down never had the
 * others tried, attempt after attempt. Postfix shuffles them too (smtp_randomize_addresses = yes).
 */
export function shuffleAddresses(addresses: string[], random: () => number = Math.random): string[] {
  if (addresses.length < 2) return addresses; // most hosts: nothing to shuffle, nothing to allocate per message
  const shuffled = (family: string[]) => {
    const out = [...family];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  };
  return [...shuffled(addresses.filter((a) => isIP(a) === 4)), ...shuffled(addresses.filter((a) => isIP(a) !== 4))];
}

/**
 * `incomplete`: the host's AAAA answer was not waited for, or failed for now (it may have IPv6 addresses
 * besides these). `localFailure`: a lookup failed on this side (out of file descriptors).
 */
export type AddressResolution =
  | { kind: 'addresses'; addresses: string[]; incomplete?: boolean }
  | { kind: 'none'; temporary: boolean; message: string; localFailure?: boolean };

/** A/AAAA of one MX host; IPv4 first (most receivers' IPv6 reputation rules are stricter for new senders). */
export async function resolveHostAddresses(resolver: Resolver, host: string, aaaaGraceMs = 500): Promise<AddressResolution> {
  // An MX names a host (RFC 1035 §3.3.9), never an address: one written as an IP is a broken record, not
  // used (Exim's default, allow_mx_to_ip = false); as a name it has no address either.
  // Nor as an address literal, the bracketed form of an email domain (RFC 5321 §4.1.3), which DNS
  // resolvers refuse as a name (EBADNAME): read as a failed lookup, it deferred the mail for days.
  if (isIP(host) || isAddressLiteral(host)) return { kind: 'none', temporary: false, message: `MX host ${host} is an IP address, not a host name` };
  const [v4, v6Lookup] = [settled(resolver.resolve4(host)), settled(resolver.resolve6(host))];
  const v4Result = await v4;
  // With IPv4 addresses in hand, an AAAA query left unanswered (some servers drop them) is not waited
  // for through every retry of the resolver (10 s by default, a delivery slot held meanwhile).
  const v6 = v4Result.status === 'fulfilled' && v4Result.value.length > 0 ? await withinGrace(v6Lookup, aaaaGraceMs) : await v6Lookup;
  const resolution = addressesOf(host, v4Result, v6 ?? { status: 'fulfilled', value: [] });
  // IPv6 addresses not known yet, not known to be none: not waited for, or the AAAA lookup failed for now.
  const v6Unknown = v6 === undefined || (v6.status === 'rejected' && classifyDnsError(v6.reason) === 'temporary');
  return v6Unknown && resolution.kind === 'addresses' ? { ...resolution, incomplete: true } : resolution;
}

function addressesOf(host: string, v4: PromiseSettledResult<string[]>, v6: PromiseSettledResult<string[]>): AddressResolution {
  const addresses = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])];
  if (addresses.length > 0) return { kind: 'addresses', addresses };
  const errors = [v4, v6].filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason);
  const temporary = errors.some((error) => classifyDnsError(error) === 'temporary');
  const message = `Host ${host} has no usable address${errors.length ? ` (${errors.map(dnsCode).join(', ')})` : ''}`;
  return { kind: 'none', temporary, message, localFailure: errors.some(failedForWantOfDescriptors) };
}

/** `[192.0.2.1]`, `[IPv6:2001:db8::1]`: an address literal (RFC 5321 §4.1.3). */
function isAddressLiteral(host: string): boolean {
  const literal = /^\[(?:IPv6:)?([^\]]+)\]$/i.exec(host);
  return literal !== null && isIP(literal[1]) !== 0;
}

function settled<T>(promise: Promise<T>): Promise<PromiseSettledResult<T>> {
  return promise.then(
    (value) => ({ status: 'fulfilled', value }),
    (reason: unknown) => ({ status: 'rejected', reason }),
  );
}

/** The lookup's result, or undefined once `ms` passed (the lookup goes on, unheard). */
async function withinGrace(lookup: Promise<PromiseSettledResult<string[]>>, ms: number): Promise<PromiseSettledResult<string[]> | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  try {
    return await Promise.race([lookup, late]);
  } finally {
    clearTimeout(timer);
  }
}

function dnsCode(error: unknown): string {
  return (error as { code?: string })?.code ?? String(error);
}
