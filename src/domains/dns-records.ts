import { getDomain } from 'tldts';
/** What a sending domain's owner must publish; pure, derived from the domain row and config. */
export type RecordPurpose = 'dkim' | 'spf' | 'mail-from-mx' | 'mail-from-spf' | 'dmarc' | 'inbound-mx';

export interface ExpectedRecord {
  purpose: RecordPurpose;
  type: 'TXT' | 'MX';
  /** Fully qualified name, no trailing dot. */
  hostname: string;
  /** TXT content, or the MX exchange host. */
  value: string;
  priority?: number;
  /** Required records decide `status`; the others are suggestions that are checked and reported only. */
  required: boolean;
  note: string;
}

export interface DnsSettings {
  /** Host published as MX exchange and in the default SPF mechanism. */
  mailHost: string;
  spfMechanisms: string[];
  mailFromDomain: string;
  dmarcRua: string;
}

export interface DomainKeyFacts {
  domain: string;
  selector: string;
  publicKeyBase64: string;
}

export function spfMechanismsFor(settings: Pick<DnsSettings, 'spfMechanisms' | 'mailHost'>): string[] {
  return settings.spfMechanisms.length > 0 ? settings.spfMechanisms : [`a:${settings.mailHost}`];
}

export function dkimRecordValue(publicKeyBase64: string): string {
  return `v=DKIM1; k=rsa; p=${publicKeyBase64}`;
}

export function buildExpectedRecords(facts: DomainKeyFacts, settings: DnsSettings): ExpectedRecord[] {
  const mechanisms = spfMechanismsFor(settings).join(' ');
  const dmarcRua = settings.dmarcRua ? ` rua=mailto:${settings.dmarcRua};` : '';
  return [
    {
      purpose: 'dkim',
      type: 'TXT',
      hostname: `${facts.selector}._domainkey.${facts.domain}`,
      value: dkimRecordValue(facts.publicKeyBase64),
      required: true,
      note: 'DKIM public key; messages from this domain are signed with the matching private key.',
    },
    {
      purpose: 'spf',
      type: 'TXT',
      hostname: facts.domain,
      value: `v=spf1 ${mechanisms} ~all`,
      required: true,
      note: 'SPF for the domain. If it already has a v=spf1 record, add the mechanisms to it: a domain may have only one (RFC 7208 §4.5).',
    },
    {
      purpose: 'mail-from-mx',
      type: 'MX',
      hostname: settings.mailFromDomain,
      value: settings.mailHost,
      priority: 10,
      required: true,
      note: 'Bounces to the MAIL FROM (Return-Path) domain come back to this appliance.',
    },
    {
      purpose: 'mail-from-spf',
      type: 'TXT',
      hostname: settings.mailFromDomain,
      value: `v=spf1 ${mechanisms} -all`,
      required: true,
      note: 'SPF for the MAIL FROM domain; it aligns with the From domain under relaxed DMARC alignment.',
    },
    {
      purpose: 'dmarc',
      type: 'TXT',
      hostname: `_dmarc.${facts.domain}`,
      value: `v=DMARC1; p=none;${dmarcRua} adkim=r; aspf=r`,
      required: false,
      note: 'Suggested DMARC policy; start with p=none, tighten once reports look clean. Keep an existing record.',
    },
    {
      purpose: 'inbound-mx',
      type: 'MX',
      hostname: facts.domain,
      value: settings.mailHost,
      priority: 10,
      required: false,
      // Publishing it moves the domain's mail here: only the addresses its inbound routes take are accepted.
      note: 'Only to receive this domain\'s mail through inbound routes (/v1/inbound/routes). It replaces the current mail host: addresses without a route (or a catch-all) are refused (550 5.1.1).',
    },
  ];
}

/**
 * A BIND zone-file snippet of the records, ready to paste: the required ones as records, the optional
 * ones (the DMARC suggestion, the inbound MX) commented out, since pasted beside a domain's own they
 * would break its mail (a second MX takes part of its inbound mail; a second DMARC record voids both),
 * and the SPF record preceded by a reminder to merge it into an existing one (two SPF records are a
 * permanent error, RFC 7208 §4.5).
 */
export function renderZoneFile(records: ExpectedRecord[], ttl = 3600): string {
  const lines = records.flatMap((record) => {
    const name = `${record.hostname}.`;
    const line = record.type === 'MX' ? `${name}\t${ttl}\tIN\tMX\t${record.priority ?? 10} ${record.value}.` : `${name}\t${ttl}\tIN\tTXT\t${quoteTxt(record.value)}`;
    if (!record.required) return [`; optional: ${record.note}`, `; ${line}`];
    if (record.purpose === 'spf') return [`; ${record.note}`, line];
    return [line];
  });
  return lines.join('\n') + '\n';
}

/** One TXT character-string holds at most 255 bytes (RFC 1035 §3.3.14): split long values (DKIM keys). */
function quoteTxt(value: string): string {
  const parts: string[] = [];
  for (let i = 0; i < value.length; i += 255) parts.push(`"${value.slice(i, i + 255).replace(/(["\\])/g, '\\$1')}"`);
  return parts.length > 1 ? `( ${parts.join(' ')} )` : parts[0] ?? '""';
}

export interface DomainConnectSettings {
  /** `providerId/serviceId` of the template. */
  provider: string;
  /** urlSyncUX of the DNS provider that applies it. */
  uxUrl: string;
}

/**
 * Domain Connect synchronous apply URL (Domain Connect spec §5.2): the DNS provider shows the owner the
 * template's records filled with these variables and applies them in one click. Null when unconfigured.
 */
export function buildDomainConnectUrl(facts: DomainKeyFacts, settings: DnsSettings, dc: DomainConnectSettings): string | null {
  const [providerId, serviceId] = dc.provider.split('/');
  if (!providerId || !serviceId || !dc.uxUrl) return null;
  const base = dc.uxUrl.replace(/\/+$/, '');
  const mailFromLabel = settings.mailFromDomain.slice(0, -(facts.domain.length + 1));
  // `domain` is the zone the DNS provider holds, `host` the subdomain the template applies to (spec §5.2):
  // a sending domain mail.example.com is host `mail` of example.com, whose zone is not named
  // mail.example.com. The zone is taken to be the registrable domain (Public Suffix List), as Domain
  // Connect's own client libraries do.
  const zone = getDomain(facts.domain) ?? facts.domain;
  const host = zone === facts.domain ? '' : facts.domain.slice(0, -(zone.length + 1));
  const params = new URLSearchParams({
    domain: zone,
    ...(host && { host }),
    selector: facts.selector,
    dkimpublickey: facts.publicKeyBase64,
    mailfrom: mailFromLabel,
    mailhost: settings.mailHost,
    spfmechanisms: spfMechanismsFor(settings).join(' '),
  });
  return `${base}/v2/domainTemplates/providers/${encodeURIComponent(providerId)}/services/${encodeURIComponent(serviceId)}/apply?${params}`;
}
