import { isIPv4, isIPv6 } from 'node:net';
import { ConfigError } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { normalizeDomainName } from './domain-name.js';

/**
 * What every sending domain's records are built from ([domains] settings), read once at boot with the
 * rules of DNS: these values go into records owners publish, and a wrong one (a mistyped mechanism, a
 * host name without its domain) would only show up later, as every domain failing verification or as
 * records that verify and still point nowhere.
 */
export interface PublishingSettings {
  /** Host published as the MX exchange and in the default SPF mechanism. */
  mailHost: string;
  /** True when it came from the fallbacks and is not a fully qualified name (warned about when a domain is added). */
  mailHostUnqualified: boolean;
  spfMechanisms: string[];
  mailFromSubdomain: string;
  dmarcRua: string;
}

/**
 * RFC 7208 §5 mechanisms, with an optional qualifier (`all` belongs to the published record, not here).
 * Addresses and prefix lengths are checked as such: a value this accepts goes into every sending domain's
 * SPF record, and one a receiver cannot parse is a permanent SPF error for all of them (our own check,
 * comparing the record to what we asked for, would not notice).
 */
export function isSpfMechanism(mechanism: string): boolean {
  const text = mechanism.replace(/^[+?~-]/, '');
  const prefixWithin = (bits: string | undefined, max: number) => bits === undefined || Number(bits) <= max;
  const ip4 = /^ip4:([0-9.]+)(?:\/(\d{1,2}))?$/i.exec(text);
  if (ip4) return isIPv4(ip4[1]) && prefixWithin(ip4[2], 32);
  const ip6 = /^ip6:([0-9a-f:.]+)(?:\/(\d{1,3}))?$/i.exec(text);
  if (ip6) return isIPv6(ip6[1]) && prefixWithin(ip6[2], 128);
  // a and mx take dual-cidr-length: /ip4-cidr, //ip6-cidr, or both (`a/24//64`).
  const host = /^(?:a|mx)(?::[^\s/]+)?(?:\/(\d{1,2}))?(?:\/\/(\d{1,3}))?$/i.exec(text);
  if (host) return prefixWithin(host[1], 32) && prefixWithin(host[2], 128);
  return /^(?:include:\S+|exists:\S+|ptr(?::\S+)?)$/i.test(text);
}
const dnsLabels = /^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))*$/;
const mailbox = /^[^\s@<>(),;:"]+@[^\s@<>(),;:"]+\.[^\s@<>(),;:"]+$/;

export function readPublishingSettings(config: Config, machineName: string): PublishingSettings {
  const { mail_hostname: configured, spf_mechanisms, mail_from_subdomain, dmarc_rua } = config.domains;
  let mailHost: string;
  let mailHostUnqualified = false;
  if (configured) {
    const normalized = normalizeDomainName(configured);
    if (!normalized) throw new ConfigError(`domains.mail_hostname must be a fully qualified host name such as mx.example.net, got ${JSON.stringify(configured)}`);
    mailHost = normalized;
  } else {
    // An address literal ([203.0.113.5]) is a valid HELO name but no MX target or SPF a: host.
    const fallback = [config.delivery.helo_name, config.smtp.hostname].find((name) => name && !name.startsWith('[')) || machineName;
    const normalized = normalizeDomainName(fallback);
    mailHost = normalized ?? fallback;
    mailHostUnqualified = normalized === undefined;
  }
  for (const mechanism of spf_mechanisms) {
    if (!isSpfMechanism(mechanism)) throw new ConfigError(`domains.spf_mechanisms: ${JSON.stringify(mechanism)} is not an SPF mechanism (ip4:203.0.113.5, ip6:2001:db8::5, a:mx.example.net, include:_spf.example.net, mx, …)`);
  }
  const mailFromSubdomain = mail_from_subdomain.trim().toLowerCase();
  if (!dnsLabels.test(mailFromSubdomain)) throw new ConfigError(`domains.mail_from_subdomain must be DNS labels such as bounce, got ${JSON.stringify(mail_from_subdomain)}`);
  if (dmarc_rua && !mailbox.test(dmarc_rua)) throw new ConfigError(`domains.dmarc_rua must be an email address such as dmarc@example.net (without mailto:), got ${JSON.stringify(dmarc_rua)}`);
  assertDomainConnect(config.domains.domain_connect_provider, config.domains.domain_connect_ux_url);
  return { mailHost, mailHostUnqualified, spfMechanisms: spf_mechanisms.map((m) => m.trim()), mailFromSubdomain, dmarcRua: dmarc_rua };
}

/**
 * Domain Connect (docs/domains.md): both settings or neither. Unchecked, a template that is not
 * providerId/serviceId or a missing half gave every domain dcUrl null, and a UX URL that is not one a
 * broken link, with nothing said at boot.
 */
function assertDomainConnect(provider: string, uxUrl: string): void {
  if (!provider && !uxUrl) return;
  if (!provider || !uxUrl) throw new ConfigError('domains.domain_connect_provider and domains.domain_connect_ux_url go together: set both for a dcUrl on every domain, or neither');
  if (!/^[^\s/]+\/[^\s/]+$/.test(provider)) throw new ConfigError(`domains.domain_connect_provider must be providerId/serviceId such as example.net/sending, got ${JSON.stringify(provider)}`);
  if (!isHttpUrl(uxUrl)) throw new ConfigError(`domains.domain_connect_ux_url must be an http(s) URL such as https://domainconnect.example-dns.com, got ${JSON.stringify(uxUrl)}`);
}

function isHttpUrl(value: string): boolean {
  try {
    const { protocol } = new URL(value);
    return protocol === 'https:' || protocol === 'http:';
  } catch {
    return false;
  }
}
