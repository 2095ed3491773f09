import { eq, or, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { domains } from '../db/schema/index.js';
import { readSetting, writeSetting } from '../db/settings.js';
import type { Logger } from '../lib/logger.js';
import { spfMechanismsFor } from './dns-records.js';
import type { PublishingSettings } from './publishing-settings.js';

/** What every domain's MX and SPF records name, as of the last start (settings row). */
interface RecordsBasis {
  mailHost: string;
  spf: string[];
}

const settingKey = 'domain_records_basis';

/**
 * The MX and SPF records every sending domain publishes name the mail host and SPF mechanisms of the
 * configuration, and `domains.mail_hostname` falls back to `delivery.helo_name`, `smtp.hostname` and the
 * machine name. A start on other values changes what every existing domain must publish: its next check
 * (within `domains.recheck_verified_every`) finds the records its owner published, marks it failed, and
 * its sends are refused (from-address-unverified). Setting `delivery.helo_name` to the PTR name, as the
 * README's VPS setup says, did that to every verified domain without a word at the restart. The start
 * that changes them says so once, with the values that keep the published records.
 */
export function noteRecordsBasisChange(db: Db, publishing: PublishingSettings, log: Logger): void {
  const now: RecordsBasis = { mailHost: publishing.mailHost, spf: spfMechanismsFor(publishing) };
  const stored = readSetting(db, settingKey);
  const was = stored ? (JSON.parse(stored) as RecordsBasis) : undefined;
  if (was && sameBasis(was, now)) return;
  if (was) warnIfDomainsPublishedIt(db, was, now, log);
  writeSetting(db, settingKey, JSON.stringify(now));
}

function sameBasis(a: RecordsBasis, b: RecordsBasis): boolean {
  return a.mailHost === b.mailHost && sameSpf(a, b);
}

function warnIfDomainsPublishedIt(db: Db, was: RecordsBasis, now: RecordsBasis, log: Logger): void {
  const verified = db
    .select({ count: sql<number>`count(*)` })
    .from(domains)
    .where(or(eq(domains.status, 'success'), eq(domains.mailFromStatus, 'success')))
    .get()!.count;
  if (verified === 0) return;
  const keep = [`domains.mail_hostname = "${was.mailHost}"`, ...(sameSpf(was, now) ? [] : [`domains.spf_mechanisms = ${JSON.stringify(was.spf)}`])].join(' and ');
  log.warn(
    `the MX and SPF records of sending domains changed since the last start (domains.mail_hostname, or the delivery.helo_name, smtp.hostname or machine name it defaults to; domains.spf_mechanisms): each verified domain fails its next check (within domains.recheck_verified_every) and its sends are refused until its owner publishes the new records (GET /v1/domains/{id}); to keep the published ones, set ${keep}`,
    { was, now, verifiedDomains: verified },
  );
}

function sameSpf(a: RecordsBasis, b: RecordsBasis): boolean {
  return a.spf.join(' ') === b.spf.join(' ');
}
