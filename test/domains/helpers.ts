import type { TestDnsServer } from '../helpers/dns-server.js';

export const mailHost = 'mx.postino.test';

interface DnsItem {
  hostname: string;
  value: string;
  type: 'TXT' | 'MX';
  priority?: number;
  purpose: string;
  status?: string;
}

/** Publishes every record a domain object asks for in the test DNS server, as an owner would. */
export function publishRecords(dns: TestDnsServer, records: DnsItem[], skip: string[] = []): void {
  for (const record of records) {
    if (skip.includes(record.purpose)) continue;
    if (record.type === 'MX') dns.set(record.hostname, 'MX', [{ preference: record.priority ?? 10, exchange: record.value }]);
    else dns.set(record.hostname, 'TXT', [record.value]);
  }
}

export function recordOf(domain: { dns: DnsItem[] }, purpose: string): DnsItem {
  const record = domain.dns.find((r) => r.purpose === purpose);
  if (!record) throw new Error(`no ${purpose} record`);
  return record;
}
