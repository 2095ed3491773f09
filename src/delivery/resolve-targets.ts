import { isIP } from 'node:net';
import type { Config } from '../config/schema.js';
import type { Logger } from '../lib/logger.js';
import { isLocalhostName, isPrivateAddress } from '../lib/private-address.js';
import type { Resolver } from '../lib/resolver.js';
import type { SmtpReply } from './classify.js';
import { createTtlCache } from './dns-cache.js';
import { mxMatchesPolicy, type MtaStsPolicy } from './mta-sts.js';
import { orderByPreference, resolveHostAddresses, resolveMx, shuffleAddresses, type MxResolution } from './resolve-mx.js';
import type { SmtpTarget } from './smtp-client.js';

export /** What one attempt came to, before it is recorded. */
interface AttemptResult {
  reply: SmtpReply;
  mxHost: string | null;
  tls?: boolean;
  /** MTA-STS mode that applied to this attempt. */
  mtaSts?: MtaStsPolicy['mode'];
  /** The whole message was sent and no reply came: it may have been delivered. */
  unanswered?: boolean;
  /**
   * Nowhere to reach for now: every address tried failed its connection or session setup, or the DNS
   * lookup failed for now. Something of the destination's, not of this message's.
   */
  unreachable?: boolean;
  /**
   * The connection could not be opened for a reason of this process's own (out of file descriptors):
   * nothing of the destination's, whose hosts were not tried.
   */
  localFailure?: boolean;
  /** No host took the connection, and one refused it with 421 / 4.7.x (at its greeting, EHLO or STARTTLS): no transaction began. */
  refusedConnection?: boolean;
}

/** Usable addresses (of the MX hosts in preference order) one attempt may try: Postfix's smtp_mx_address_limit. */
const maxAddressesPerAttempt = 5;
/** MX hosts of a domain whose addresses are looked up (far more than any real domain lists). */
const maxMxHostsLookedUp = 20;

/** Where an attempt may connect, or the outcome when there is nowhere to: a bounce, or mail that waits. */
export type Destination = { targets: SmtpTarget[] } | { result: AttemptResult };

export interface TargetResolverDeps {
  resolver: Resolver;
  /** The relay host's resolver (`dns.servers` set); absent, the system's lookup at connect. */
  relayResolver?: Resolver;
  config: Config['delivery'];
  log: Logger;
  random?: () => number;
}

/** The resolve step of delivery (DESIGN "QUEUE" flow): MX and address lookups, cached (`delivery.dns_cache_ttl`). */
export function createTargetResolver(deps: TargetResolverDeps) {
  const { config, log } = deps;
  const mxCache = createTtlCache<MxResolution>(config.dns_cache_ttl);
  const addressCache = createTtlCache<Awaited<ReturnType<typeof resolveHostAddresses>>>(config.dns_cache_ttl);

  /** MX hosts in preference order and each host's addresses; or the outcome when there is nowhere to connect. */
  async function resolveTargets(domain: string, policy?: MtaStsPolicy): Promise<Destination> {
    const mx = await mxCache.get(domain, () => resolveMx(deps.resolver, domain, deps.random));
    if (mx.kind === 'bounce') return { result: { reply: dnsBounceReply(mx.message), mxHost: null } };
    if (mx.kind === 'defer') {
      // Out of file descriptors, the lookup failed on this side: no answer of the domain's (deferForLocalFailure).
      const why = mx.localFailure ? { localFailure: true } : { unreachable: true };
      return { result: { reply: { code: 0, message: mx.message }, mxHost: null, ...why } };
    }
    // Shuffled again for every message: the cached answer would send all mail to one of several
    // equal-preference hosts for as long as it is cached.
    const ordered = orderByPreference(mx.hosts, deps.random);
    const enforce = policy?.mode === 'enforce';
    const hosts = policy && policy.mode !== 'none' ? ordered.filter((host) => mxMatchesPolicy(host.name, policy.mx)) : ordered;
    if (policy?.mode === 'testing' && hosts.length < ordered.length) {
      log.warn('mta-sts testing: MX hosts outside the policy (enforce would skip them)', { domain, mx: ordered.map((h) => h.name), policy: policy.mx });
    }
    // RFC 8461 §5: in enforce mode an MX outside the policy is never used; with none left, the mail waits.
    if (enforce && hosts.length === 0) {
      const message = `MTA-STS policy of ${domain} (mx: ${policy.mx.join(', ')}) matches none of its MX hosts (${ordered.map((h) => h.name).join(', ')})`;
      return { result: { reply: { code: 0, message }, mxHost: null, mtaSts: 'enforce' } };
    }
    const targets: SmtpTarget[] = [];
    /**
     * Each address once, under its most preferred MX: several MX names often lead to the same
     * addresses (or one host is listed twice), and every repeat took one of the attempt's addresses
     * (another connect timeout on a dead one) from the backup MX behind them, which was never tried.
     */
    const seen = new Set<string>();
    const problems: string[] = [];
    let refusedPrivate = 0;
    let lookupMayRecover = false;
    let lookupFailedHere = false;
    // Every host looked up at once (one after the other, each lookup could wait out the resolver's
    // timeout); the attempt then tries the first 5 usable addresses in preference order below.
    const considered = (enforce ? hosts : ordered).slice(0, maxMxHostsLookedUp);
    // Told when an MX offers no STARTTLS: why this delivery insists on it.
    const tlsRequiredBy = enforce ? { tlsRequiredBy: `the MTA-STS policy of ${domain} is enforce (RFC 8461 §5)` } : {};
    const lookups = await Promise.all(considered.map((host) => addressCache.get(host.name.toLowerCase(), () => resolveHostAddresses(deps.resolver, host.name))));
    for (const [i, host] of considered.entries()) {
      const resolved = lookups[i];
      if (resolved.kind === 'none') {
        problems.push(resolved.message);
        lookupMayRecover ||= resolved.temporary;
        lookupFailedHere ||= resolved.localFailure === true;
        continue;
      }
      // IPv6 addresses not waited for: the ones the host has may be usable later.
      lookupMayRecover ||= resolved.incomplete === true;
      for (const address of shuffleAddresses(resolved.addresses, deps.random)) {
        if (seen.has(address)) continue;
        seen.add(address);
        if (!config.allow_private_mx && isPrivateAddress(address)) {
          refusedPrivate++;
          problems.push(`${host.name} (${address}) is a private address`);
          continue;
        }
        // RFC 8461 §4.2: enforce = STARTTLS required, certificate valid for the MX name (no plaintext fallback).
        targets.push({ host: host.name, address, port: config.port, secure: false, requireTls: enforce, verifyTls: enforce, dnsIdOnly: enforce, group: domain, ...tlsRequiredBy });
      }
    }
    // One attempt tried every address of every MX in turn: 6 hosts that never greet held its slot for 6
    // greeting timeouts. Hosts without a usable address take none of this budget (Postfix counts the same).
    if (targets.length > 0) return { targets: targets.slice(0, maxAddressesPerAttempt) };
    const detail = problems.join('; ');
    if (lookupFailedHere) return { result: { reply: { code: 0, message: detail }, mxHost: null, localFailure: true } };
    // A host whose lookup failed for now may have a usable address later: wait for it.
    if (lookupMayRecover) return { result: { reply: { code: 0, message: detail }, mxHost: null, unreachable: true } };
    // Pointing MX at internal addresses is how a sender gets turned against its own network: refuse for good.
    // The appliance's own rule, not the recipient's: the address is not suppressed (an operator who then
    // sets delivery.allow_private_mx for a LAN domain has nothing to clean up).
    if (refusedPrivate > 0) return { result: { reply: { code: 550, enhanced: '5.4.4', message: `Refusing to deliver to private addresses: ${detail}`, localPolicy: true }, mxHost: null } };
    // Every mail host of the domain answered for sure that it has no address (an MX name that does not
    // exist; no MX and no A/AAAA): undeliverable (RFC 5321 §5.1), as Postfix bounces "Host not found".
    return { result: { reply: { code: 550, enhanced: '5.4.4', message: `No address for the mail hosts of ${domain}: ${detail}` }, mxHost: null } };
  }

  /**
   * The relay's addresses through dns.servers when the operator set them (DESIGN convention 4): a relay
   * name only a CI job's own DNS server knows was looked up with the system's resolver, and every email
   * waited. Without dns.servers the system's lookup at connect stays, as it reads /etc/hosts and applies
   * the search list (`smtp://postfix:25` in Kubernetes), which a DNS query does not; literal addresses
   * and RFC 6761 localhost names never go to DNS. The relay is the operator's choice, not a tenant's: its
   * addresses are not held to allow_private_mx (a smarthost on loopback or the LAN is the usual case).
   * Each target keeps the name, for SNI and the certificate check.
   */
  async function resolveRelay(target: SmtpTarget): Promise<Destination> {
    const resolver = deps.relayResolver;
    if (!resolver || isIP(target.host) || isLocalhostName(target.host)) return { targets: [target] };
    const resolved = await addressCache.get(target.host.toLowerCase(), () => resolveHostAddresses(resolver, target.host));
    // Even a name that does not exist is the operator's to fix (delivery.relay_url, dns.servers): the mail waits.
    if (resolved.kind === 'none') {
      const why = resolved.localFailure ? { localFailure: true } : { unreachable: true };
      return { result: { reply: { code: 0, message: `relay ${resolved.message}` }, mxHost: target.host, ...why } };
    }
    const addresses = shuffleAddresses(resolved.addresses, deps.random).slice(0, maxAddressesPerAttempt);
    return { targets: addresses.map((address) => ({ ...target, address })) };
  }

  return { resolveTargets, resolveRelay };
}

/** RFC 7505 null MX answers 556 5.1.10; a domain that does not exist is 5.1.2 (bad destination system). */
function dnsBounceReply(message: string): SmtpReply {
  if (message.includes('null MX')) return { code: 556, enhanced: '5.1.10', message };
  return { code: 550, enhanced: '5.1.2', message };
}
