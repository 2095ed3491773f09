import { request } from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';
import { isPrivateAddress } from '../lib/private-address.js';

/**
 * MTA-STS (RFC 8461): a recipient domain announces with `_mta-sts.<domain>` TXT that it publishes a policy
 * at `https://mta-sts.<domain>/.well-known/mta-sts.txt`; in mode `enforce` mail goes only to the listed MX
 * hosts, over TLS with a certificate valid for the MX name.
 */
export type MtaStsMode = 'enforce' | 'testing' | 'none';

export interface MtaStsPolicy {
  id: string;
  mode: MtaStsMode;
  mx: string[];
  maxAgeSeconds: number;
}

/** RFC 8461 §3.1: `v=STSv1; id=<1-32 alphanumerics>;` — the id changes whenever the policy does. */
export function parseStsRecord(txt: string): { id: string } | undefined {
  const fields = new Map<string, string>();
  for (const part of txt.split(';')) {
    const trimmed = part.trim();
    if (!trimmed) continue;
    const eq = trimmed.indexOf('=');
    if (eq <= 0) return undefined;
    const key = trimmed.slice(0, eq).trim();
    // RFC 8461 §3.1: a duplicated field counts as its first occurrence.
    if (!fields.has(key)) fields.set(key, trimmed.slice(eq + 1).trim());
  }
  if (!txt.trimStart().startsWith('v=STSv1') || fields.get('v') !== 'STSv1') return undefined;
  const id = fields.get('id');
  if (!id || !/^[A-Za-z0-9]{1,32}$/.test(id)) return undefined;
  return { id };
}

/** RFC 8461 §3.2: `key: value` lines; version STSv1, a mode, max_age ≤ 31557600, mx lines unless mode none. */
export function parseStsPolicy(text: string, id: string): MtaStsPolicy | undefined {
  let version: string | undefined;
  let mode: string | undefined;
  let maxAge: number | undefined;
  const mx: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const key = line.slice(0, colon).trim();
    const value = line.slice(colon + 1).trim();
    // RFC 8461 §3.1: every field but mx counts as its first occurrence; a later `mode: testing` line
    // does not turn an enforce policy into a report-only one.
    if (key === 'version') version ??= value;
    else if (key === 'mode') mode ??= value;
    else if (key === 'max_age') maxAge ??= /^\d{1,10}$/.test(value) ? Number(value) : NaN;
    else if (key === 'mx' && value) mx.push(value.toLowerCase().replace(/\.$/, ''));
  }
  if (version !== 'STSv1') return undefined;
  if (mode !== 'enforce' && mode !== 'testing' && mode !== 'none') return undefined;
  if (maxAge === undefined || !Number.isFinite(maxAge)) return undefined;
  if (mode !== 'none' && mx.length === 0) return undefined;
  return { id, mode, mx, maxAgeSeconds: Math.min(maxAge, 31_557_600) };
}

/** RFC 8461 §4.1: exact names, or `*.example.com` matching exactly one leftmost label. */
export function mxMatchesPolicy(host: string, patterns: readonly string[]): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return patterns.some((pattern) => {
    if (!pattern.startsWith('*.')) return pattern === name;
    const suffix = pattern.slice(1);
    if (!name.endsWith(suffix)) return false;
    const label = name.slice(0, name.length - suffix.length);
    return label.length > 0 && !label.includes('.');
  });
}

/**
 * RFC 8461 §3.3 (policy host) and §4.2 (MX host): the name is matched "only against the DNS-ID
 * identifiers", the certificate "MUST have a subject alternative name". Node's own check falls back to
 * the subject CN when a certificate has no DNS name, and accepted such a certificate as valid.
 */
export function checkDnsIdentity(hostname: string, cert: PeerCertificate): Error | undefined {
  const dnsIds = (cert.subjectaltname ?? '').split(', ').filter((entry) => entry.startsWith('DNS:'));
  if (dnsIds.length === 0) {
    return Object.assign(new Error(`Certificate of ${hostname} has no subjectAltName DNS name (MTA-STS does not accept a name in the subject CN only)`), {
      code: 'ERR_TLS_CERT_ALTNAME_INVALID',
    });
  }
  return checkServerIdentity(hostname, cert);
}

export interface MtaStsOptions {
  resolver: Resolver;
  log: Logger;
  nowMs(): number;
  port: number;
  timeoutMs: number;
  /** CA certificates for the HTTPS fetch (system roots plus `delivery.extra_ca_file`); undefined = Node's defaults. */
  ca?: string[];
  allowPrivate: boolean;
  /** How long one TXT answer is reused before asking DNS again. */
  recordTtlMs: number;
}

export interface MtaSts {
  /** The policy in force for a domain, or undefined when it publishes none (or none could be fetched). */
  policyFor(domain: string): Promise<MtaStsPolicy | undefined>;
}

const policyByteCap = 64 * 1024;
/** Domains whose MTA-STS state (policy, TXT id, last check) is remembered in memory. */
const cacheCap = 10_000;

/**
 * RFC 8461 §3.3: "MTAs SHOULD proactively refresh cached policies before they expire; a suggested refresh
 * frequency is once per day." Fetched only when the TXT id changed, a policy ran out at its max_age and
 * had to be fetched again right then: an attacker blocking the policy host at that moment took the
 * domain back to no policy (a downgrade). Refreshed daily, or at half a shorter max_age, it never runs out
 * while mail keeps going to the domain and the host answers now and then.
 */
const refreshAfterMs = 86_400_000;
function dueForRefresh(entry: CacheEntry, nowMs: number): boolean {
  const policyAgeMs = nowMs - (entry.fetchedAtMs ?? 0);
  return policyAgeMs >= Math.min(refreshAfterMs, ((entry.policy?.maxAgeSeconds ?? 0) * 1000) / 2);
}

/**
 * RFC 8461 §3.3: after a failed policy fetch, further attempts are limited to one per five minutes or
 * longer per policy id. Tried again at every TXT check (every `dns_cache_ttl`, or every message with it
 * at 0), a policy host that hangs made each of those messages wait `mta_sts_timeout` for it. A new id
 * in the TXT record (a new policy published) is fetched at once.
 */
const failedFetchRetryMs = 5 * 60_000;
function fetchFailedRecently(entry: CacheEntry | undefined, id: string, nowMs: number): boolean {
  if (entry?.failedId !== id || entry.failedAtMs === undefined) return false;
  return nowMs - entry.failedAtMs < failedFetchRetryMs && nowMs >= entry.failedAtMs;
}

interface CacheEntry {
  policy?: MtaStsPolicy;
  expiresAtMs: number;
  /** When `policy` was fetched. */
  fetchedAtMs?: number;
  recordCheckedAtMs: number;
  recordId?: string;
  /** The TXT id whose policy fetch failed last, and when. */
  failedId?: string;
  failedAtMs?: number;
}

export function createMtaSts(options: MtaStsOptions): MtaSts {
  const cache = new Map<string, CacheEntry>();
  const inFlight = new Map<string, Promise<MtaStsPolicy | undefined>>();

  async function lookupRecordId(domain: string): Promise<string | undefined> {
    let records: string[][];
    try {
      records = await options.resolver.resolveTxt(`_mta-sts.${domain}`);
    } catch {
      return undefined;
    }
    // RFC 8461 §3.1: more than one STS record means none is valid.
    const parsed = records.map((chunks) => chunks.join('')).filter((txt) => txt.startsWith('v=STSv1'));
    if (parsed.length !== 1) return undefined;
    return parseStsRecord(parsed[0])?.id;
  }

  async function refresh(domain: string, cached: CacheEntry | undefined): Promise<MtaStsPolicy | undefined> {
    const now = options.nowMs();
    const valid = cached?.policy && cached.expiresAtMs > now ? cached.policy : undefined;
    const id = await lookupRecordId(domain);
    // RFC 8461 §5.1: without a record, a cached unexpired policy still applies (an attacker can strip the TXT).
    if (!id) {
      cache.set(domain, { ...(cached ?? { expiresAtMs: 0 }), recordCheckedAtMs: now, recordId: undefined, policy: valid });
      return valid;
    }
    if (valid && valid.id === id && !dueForRefresh(cached!, now)) {
      cache.set(domain, { ...cached!, recordCheckedAtMs: now, recordId: id });
      return valid;
    }
    if (fetchFailedRecently(cached, id, now)) {
      cache.set(domain, { ...cached!, recordCheckedAtMs: now, policy: valid });
      return valid;
    }
    try {
      const text = await fetchPolicyText(domain, options);
      const policy = parseStsPolicy(text, id);
      if (!policy) throw new Error('policy document is not a valid STSv1 policy');
      cache.set(domain, { policy, expiresAtMs: now + policy.maxAgeSeconds * 1000, fetchedAtMs: now, recordCheckedAtMs: now, recordId: id });
      options.log.info('mta-sts policy fetched', { domain, id, mode: policy.mode, mx: policy.mx, maxAge: policy.maxAgeSeconds });
      return policy;
    } catch (error) {
      // RFC 8461 §3.3/§5: a policy that cannot be fetched is as good as none, unless a cached one is still valid.
      options.log.warn('mta-sts policy fetch failed', { domain, id, error: (error as Error).message, usingCached: Boolean(valid) });
      cache.set(domain, { ...(cached ?? { expiresAtMs: 0 }), policy: valid, recordCheckedAtMs: now, recordId: undefined, failedId: id, failedAtMs: now });
      return valid;
    }
  }

  /**
   * Past `cacheCap` domains one is forgotten: the oldest without an unexpired policy. The oldest of all
   * was often a large provider's enforce policy; forgotten after mail to 10,000 other domains, a fetch
   * failing once then meant no policy, where the cached one must still have applied (RFC 8461 §5.1).
   */
  function makeRoom(now: number): void {
    if (cache.size <= cacheCap) return;
    for (const [domain, entry] of cache) {
      if (entry.policy && entry.expiresAtMs > now) continue;
      cache.delete(domain);
      return;
    }
    // Every domain remembered has a policy: the oldest goes, so memory stays bounded.
    cache.delete(cache.keys().next().value!);
  }

  return {
    policyFor(domainInput) {
      const domain = domainInput.toLowerCase().replace(/\.$/, '');
      const cached = cache.get(domain);
      const now = options.nowMs();
      if (cached && now - cached.recordCheckedAtMs < options.recordTtlMs && now >= cached.recordCheckedAtMs) {
        return Promise.resolve(cached.policy && cached.expiresAtMs > now ? cached.policy : undefined);
      }
      let pending = inFlight.get(domain);
      if (!pending) {
        pending = refresh(domain, cached).finally(() => inFlight.delete(domain));
        inFlight.set(domain, pending);
        makeRoom(now);
      }
      return pending;
    },
  };
}

/** RFC 8461 §3.3: HTTPS with a valid certificate for mta-sts.<domain>, no redirects, 200 text/plain only. */
function fetchPolicyText(domain: string, options: MtaStsOptions): Promise<string> {
  const host = `mta-sts.${domain}`;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host,
        servername: host,
        port: options.port,
        path: '/.well-known/mta-sts.txt',
        method: 'GET',
        ca: options.ca,
        checkServerIdentity: checkDnsIdentity,
        lookup: lookupThrough(options),
        timeout: options.timeoutMs,
        headers: { accept: 'text/plain' },
        agent: false,
      },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          return reject(new Error(`HTTP ${res.statusCode} (redirects are not followed)`));
        }
        if (!/^text\/plain\b/i.test(String(res.headers['content-type'] ?? ''))) {
          res.resume();
          return reject(new Error(`content type ${res.headers['content-type']} is not text/plain`));
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > policyByteCap) {
            req.destroy(new Error(`policy larger than ${policyByteCap} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
        res.on('error', reject);
      },
    );
    // The whole fetch, not just socket inactivity, is bounded: a slow-drip server must not hold a delivery.
    const deadline = setTimeout(() => req.destroy(new Error(`timed out after ${options.timeoutMs} ms`)), options.timeoutMs);
    deadline.unref();
    req.on('timeout', () => req.destroy(new Error(`timed out after ${options.timeoutMs} ms`)));
    req.on('error', reject);
    // A 101 never reaches the response callback: without an 'upgrade' listener Node destroys the socket and
    // emits no 'error', and the 'close' cleared the deadline, so the fetch (and every delivery to the
    // domain, each holding a slot) waited forever.
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      reject(new Error(`HTTP ${res.statusCode} (upgrades are not followed)`));
    });
    req.on('close', () => {
      clearTimeout(deadline);
      // Settled already in the usual cases (a no-op then); otherwise the request ended without an answer.
      reject(new Error('connection closed without an answer'));
    });
    req.end();
  });
}

/** Name resolution for the policy host goes through the appliance's resolver (DESIGN convention 4). */
function lookupThrough(options: MtaStsOptions): LookupFunction {
  return ((hostname: string, lookupOptions: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    resolveAddresses(hostname, options).then(
      (addresses) => {
        const entries = addresses.map((address) => ({ address, family: isIP(address) }));
        if (lookupOptions?.all) callback(null, entries);
        else callback(null, entries[0].address, entries[0].family);
      },
      (error) => callback(error),
    );
  }) as unknown as LookupFunction;
}

async function resolveAddresses(hostname: string, options: MtaStsOptions): Promise<string[]> {
  if (isIP(hostname)) return [hostname];
  const [v4, v6] = await Promise.all([options.resolver.resolve4(hostname).catch(() => []), options.resolver.resolve6(hostname).catch(() => [])]);
  const addresses = [...v4, ...v6].filter((address) => options.allowPrivate || !isPrivateAddress(address));
  if (addresses.length === 0) throw Object.assign(new Error(`no usable address for ${hostname}`), { code: 'ENOTFOUND' });
  return addresses;
}
