import { hostname as machineHostname } from 'node:os';
import { getDomain } from 'tldts';
import type { Config } from '../config/schema.js';
import type { Db, Sqlite } from '../db/client.js';
import { createReadCache } from '../db/read-cache.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import { AppError, invalid, notFound } from '../lib/errors.js';
import { isId, newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';
import { waitAtMost } from '../lib/wait-at-most.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import { generateDkimKeyPair, selectorFor } from './dkim-keys.js';
import { buildDomainConnectUrl, buildExpectedRecords, renderZoneFile, type DnsSettings, type ExpectedRecord } from './dns-records.js';
import { candidateDomains, domainOfAddress, normalizeDomainName } from './domain-name.js';
import { readPublishingSettings, type PublishingSettings } from './publishing-settings.js';
import { recordWebhookEvent } from '../webhooks/outbox.js';
import { createDomainsRepo, type DomainRow } from './repo.js';
import { pruneRetiredSigningKeys } from './retired-keys.js';
import { checkRecords, decideOutcome, type CheckStatus, type DomainStatus, type VerificationState } from './verify.js';
import { cutToLength } from '../lib/text.js';

export type { DomainRow } from './repo.js';

export interface DomainsServiceDeps {
  db: Db;
  /** The connection `db` wraps: the send API's check is cached on it (db/read-cache.ts). */
  sqlite: Sqlite;
  /** Write procedures: the retired keys' prune walks the delivery queue on the writer thread (retired-keys.ts). */
  writes: WritesWithProcedures;
  clock: Clock;
  log: Logger;
  resolver: Resolver;
  config: Config;
  /** The [domains] settings as checked at boot (appliance.ts); read from `config` when absent. */
  publishing?: PublishingSettings;
}

/** The API domain object (§2.11) plus extension fields `zoneFile`, `verification`, timestamps. */
export interface DomainView {
  id: string;
  domain: string;
  status: DomainStatus;
  dkim: boolean;
  dkimTokens: string[];
  mailFromDomain: string;
  mailFromStatus: DomainStatus;
  dns: DnsRecordView[];
  dcUrl: string | null;
  zoneFile: string;
  verification: VerificationState | null;
  createdAt: string;
  lastCheckedAt: string | null;
  verifiedAt: string | null;
}

export interface DnsRecordView {
  hostname: string;
  value: string;
  type: 'TXT' | 'MX';
  priority?: number;
  purpose: ExpectedRecord['purpose'];
  required: boolean;
  /** Result of the last check of this record; `unchecked` before the first. */
  status: CheckStatus | 'unchecked';
  note: string;
}

export interface SigningKey {
  domain: string;
  selector: string;
  privateKeyPem: string;
  mailFromDomain: string;
  /**
   * Set for the key of a deleted domain (kept for mail accepted under it): it signs only mail queued
   * before this time.
   */
  retiredAt?: number;
}

/** A retired key outlives the mail it was kept for by a day (give-up of held mail can run late). */
const retiredKeyMarginMs = 24 * 60 * 60 * 1000;

/** How long a create waits for the first DNS check before it answers (the check goes on). */
const createWaitsForChecksMs = 3_000;

/** Sending domains per project: far past real use (the list has no pages), and a bound on key generation and DNS checks. */
export const maxDomainsPerProject = 1000;
/** Due domains checked per scheduler run, and checks in flight at once (DNS is slow, SQLite is not). */
const recheckBatch = 200;
const recheckConcurrency = 4;
/**
 * A domain is due at the scheduler tick nearest its interval (the job ticks every minute, appliance.ts):
 * its last check is stamped when its lookups answered, a moment after the tick that started it, so the
 * tick one interval later found it not quite due and it waited a whole minute more, every time (a
 * 10 minute re-check came every 11 minutes, a 1 minute one every 2, and the daily one a minute later
 * each day).
 */
const recheckTickSlackMs = 30_000;

export function createDomainsService(deps: DomainsServiceDeps) {
  const { writes, clock, log, resolver, config } = deps;
  const repo = createDomainsRepo(deps.db);
  const publishing = deps.publishing ?? readPublishingSettings(config, machineHostname());
  const { mailHost } = publishing;
  let warnedUnqualified = false;
  /** Said when a domain is added (a sandbox that never adds one has no use for the warning). */
  const warnIfUnqualified = () => {
    if (!publishing.mailHostUnqualified || warnedUnqualified) return;
    warnedUnqualified = true;
    log.warn('domains.mail_hostname is not set and the fallback host name is not fully qualified: the MX and SPF records of sending domains point to it; set domains.mail_hostname', { mailHost });
  };
  const inFlight = new Map<string, { done: Promise<void>; asked: boolean }>();

  function dnsSettings(row: DomainRow): DnsSettings {
    return { mailHost, spfMechanisms: publishing.spfMechanisms, mailFromDomain: row.mailFromDomain, dmarcRua: publishing.dmarcRua };
  }

  function expectedRecords(row: DomainRow): ExpectedRecord[] {
    return buildExpectedRecords({ domain: row.domain, selector: row.dkimSelector, publicKeyBase64: row.dkimPublicKey }, dnsSettings(row));
  }

  function present(row: DomainRow): DomainView {
    const records = expectedRecords(row);
    const verification = (row.verification as VerificationState | null) ?? null;
    const facts = { domain: row.domain, selector: row.dkimSelector, publicKeyBase64: row.dkimPublicKey };
    const dc = { provider: config.domains.domain_connect_provider, uxUrl: config.domains.domain_connect_ux_url };
    return {
      id: row.id,
      domain: row.domain,
      status: row.status,
      dkim: row.dkimVerified,
      dkimTokens: [row.dkimSelector],
      mailFromDomain: row.mailFromDomain,
      mailFromStatus: row.mailFromStatus,
      dns: records.map((record) => presentRecord(record, verification)),
      dcUrl: buildDomainConnectUrl(facts, dnsSettings(row), dc),
      zoneFile: renderZoneFile(records),
      verification,
      createdAt: isoTime(row.createdAt),
      lastCheckedAt: row.lastCheckedAt === null ? null : isoTime(row.lastCheckedAt),
      verifiedAt: row.verifiedAt === null ? null : isoTime(row.verifiedAt),
    };
  }

  /** Another project's id answers exactly like a missing one. */
  const findDomain = (projectId: string, id: string): DomainRow | undefined => (isId(id) ? repo.findById(projectId, id) : undefined);

  function requireDomain(projectId: string, id: string): DomainRow {
    const row = findDomain(projectId, id);
    if (!row) throw notFound('Domain');
    return row;
  }

  async function create(projectId: string, name: string): Promise<DomainView> {
    const domain = normalizeDomainName(name);
    if (!domain) throw invalid(`Invalid body. domain: "${cutToLength(name, 300)}" is not a valid domain name (e.g. example.com).${emailAddressHint(name)}`);
    // A suffix under which anyone registers (co.uk, github.io) is no one's to publish records in; verified
    // by some means, it would cover every sender under it.
    if (getDomain(domain, { allowPrivateDomains: true }) === null) throw invalid(`Invalid body. domain: ${domain} is a public suffix (Public Suffix List): add your domain under it, e.g. example.${domain}`);
    const mailFromDomain = `${publishing.mailFromSubdomain}.${domain}`;
    throwIfNameTaken(projectId, domain, mailFromDomain);
    throwIfAtDomainCap(projectId);
    warnIfUnqualified();
    const keys = await generateDkimKeyPair();
    const row: DomainRow = {
      id: newId(clock),
      projectId,
      domain,
      status: 'pending',
      dkimSelector: selectorFor(clock.now(), keys.publicKeyBase64),
      dkimPrivateKey: keys.privateKeyPem,
      dkimPublicKey: keys.publicKeyBase64,
      dkimVerified: false,
      mailFromDomain,
      mailFromStatus: 'pending',
      verification: null,
      lastCheckedAt: null,
      verifiedAt: null,
      createdAt: clock.nowMs(),
    };
    // Checked again inside the write lock: two concurrent creates of one name must not both pass.
    await writes.run(() => {
      refuseWhileProjectDeleting(deps.db, projectId);
      throwIfNameTaken(projectId, domain, mailFromDomain);
      throwIfAtDomainCap(projectId);
      repo.insert(row);
    });
    log.info('domain created', { projectId, domainId: row.id, domain, selector: row.dkimSelector });
    // Setup begins now; a DNS problem shows up in `verification`, it never fails the create. A resolver
    // that does not answer would hold the request for its timeouts (10 s and more): the answer goes out
    // after createWaitsForChecksMs with the domain still pending, and the check stores its result later.
    const checked = verifyRow(row, false).catch((error) => log.warn('domain verification failed to run', { domainId: row.id, error }));
    await waitAtMost(checked, createWaitsForChecksMs);
    return present(repo.findById(projectId, row.id) ?? row);
  }

  /** Each create costs an RSA key pair (~250 ms of a thread) and the domain a DNS check per interval while pending. */
  function throwIfAtDomainCap(projectId: string): void {
    if (repo.countByProject(projectId) >= maxDomainsPerProject) {
      throw new AppError('conflict', `A project has at most ${maxDomainsPerProject} sending domains; delete one first.`);
    }
  }

  /**
   * The same name again, or one domain's MAIL FROM domain added as a sending domain of its own (or the
   * other way round): each would want its own SPF record at that one name, `~all` and `-all`, and two SPF
   * records fail both (RFC 7208 §4.5), the one already verified included.
   */
  function throwIfNameTaken(projectId: string, domain: string, mailFromDomain: string): void {
    if (repo.findByName(projectId, domain)) throw new AppError('resource-duplicate', `The domain ${domain} already exists in this project.`);
    for (const other of repo.listByProject(projectId)) {
      if (other.mailFromDomain === domain) {
        throw new AppError('conflict', `${domain} is the MAIL FROM (bounce) domain of ${other.domain} in this project: its records are ${other.domain}'s, and those it would need of its own conflict with them. Send from ${other.domain}, or from another subdomain.`);
      }
      if (other.domain === mailFromDomain) {
        throw new AppError('conflict', `${domain} would use ${mailFromDomain} as its MAIL FROM (bounce) domain, which is a sending domain of this project: their SPF records would conflict. Delete ${mailFromDomain} first, or send from it.`);
      }
    }
  }

  /**
   * One check at a time per domain: concurrent callers share it instead of racing their writes. An
   * owner's request (`asked`) shares only another asked check: one under way for the create or the
   * scheduler may have looked before they fixed their records, and its negative answer is not final, so
   * theirs runs after it.
   */
  function verifyRow(row: DomainRow, asked: boolean): Promise<void> {
    const running = inFlight.get(row.id);
    if (running && (running.asked || !asked)) return running.done;
    const check = { asked, done: Promise.resolve() };
    check.done = (running ? running.done.catch(() => undefined) : Promise.resolve())
      .then(() => checkAndStore(row, asked))
      .finally(() => {
        if (inFlight.get(row.id) === check) inFlight.delete(row.id);
      });
    inFlight.set(row.id, check);
    return check.done;
  }

  /** `asked`: the owner requested this check (POST .../verify), so a negative answer is final at once. */
  async function checkAndStore(row: DomainRow, asked: boolean): Promise<void> {
    const checks = await checkRecords(resolver, expectedRecords(row));
    const current = repo.findById(row.projectId, row.id);
    if (!current) return; // deleted while we were looking
    const now = clock.nowMs();
    const previous = { status: current.status, dkimVerified: current.dkimVerified, mailFromStatus: current.mailFromStatus, verification: current.verification as VerificationState | null };
    const decision = decideOutcome(previous, checks, now, config.domains.dns_failure_grace);
    if (!asked && current.status === 'pending' && now - current.createdAt < config.domains.pending_window) keepPending(decision);
    const becameVerified = decision.status === 'success' && current.status !== 'success';
    const changed = decision.status !== current.status;
    // The status change and its webhook event commit together (DESIGN convention 6).
    await writes.run(() => {
      // POST .../verify of a project being deleted is refused like any other write of it.
      refuseWhileProjectDeleting(deps.db, row.projectId);
      repo.update(row.id, { ...decision, lastCheckedAt: now, verifiedAt: becameVerified ? now : current.verifiedAt });
      if (changed) recordStatusEvent(row.projectId, row.id);
    });
    log.debug('domain checked', { domainId: row.id, result: decision.verification.result, status: decision.status });
    if (changed) {
      const { projectId, id: domainId, domain } = current;
      log.info('domain status changed', { projectId, domainId, domain, from: current.status, to: decision.status, failing: decision.verification.failing });
    }
  }

  /** The owner is probably still adding records: missing ones are reported, but no `failed` yet. */
  function keepPending(decision: { status: DomainStatus; mailFromStatus: DomainStatus }): void {
    if (decision.status === 'failed') decision.status = 'pending';
    if (decision.mailFromStatus === 'failed') decision.mailFromStatus = 'pending';
  }

  /** `domain.verified` / `domain.failed` webhooks (COMPAT.md "Webhooks"); the key never leaves, `present` omits it. */
  function recordStatusEvent(projectId: string, id: string): void {
    const after = repo.findById(projectId, id);
    if (!after || after.status === 'pending') return;
    recordWebhookEvent(deps.db, clock, { projectId, type: after.status === 'success' ? 'domain.verified' : 'domain.failed', data: { ...present(after) } });
  }

  async function verify(projectId: string, id: string): Promise<DomainView> {
    await verifyRow(requireDomain(projectId, id), true);
    return present(requireDomain(projectId, id));
  }

  /** Scheduler job: pending/failed domains every `recheck_unverified_every`, verified ones every `recheck_verified_every`. */
  async function reverifyAll(now: Date): Promise<{ checked: number }> {
    const dueBy = now.getTime() + recheckTickSlackMs;
    const due = repo.listDueForCheck(dueBy - config.domains.recheck_unverified_every, dueBy - config.domains.recheck_verified_every, recheckBatch);
    let next = 0;
    const worker = async () => {
      while (next < due.length) {
        const row = due[next++];
        await verifyRow(row, false).catch((error) => log.warn('domain re-check failed to run', { domainId: row.id, error }));
      }
    };
    await Promise.all(Array.from({ length: Math.min(recheckConcurrency, due.length) }, worker));
    return { checked: due.length };
  }

  /** Like deleting an email or a template (spec: `{deleted: boolean}`): an unknown id is `{deleted: false}`. */
  function remove(projectId: string, id: string): Promise<{ deleted: boolean }> {
    return writes.run(() => {
      const row = findDomain(projectId, id);
      if (!row) return { deleted: false };
      const scheduled = countSendersUsing(projectId, row, repo.listScheduledSenders(projectId, row.domain));
      if (scheduled > 0) throw new AppError('conflict', `The domain ${row.domain} is used by ${scheduled} scheduled email(s); delete or send them first.`);
      // A queued broadcast's emails are made only at its time: deleted under it, the domain left it stuck
      // in processing for good (its sender refused, and a processing draft cannot be changed).
      const broadcasts = countSendersUsing(projectId, row, repo.listBroadcastSenders(projectId, row.domain));
      if (broadcasts > 0) throw new AppError('conflict', `The domain ${row.domain} is the sending domain of ${broadcasts} Messenger broadcast(s) not sent yet (queued or processing); delete them first, or set a queued one back to draft.`);
      // Mail accepted under this domain and still queued (a retry behind a slow destination) would
      // otherwise go out unsigned, hours later, from a domain whose DNS still names this key.
      const keyKept = canSign(row);
      if (keyKept) {
        const { selector, privateKeyPem, mailFromDomain } = signingKeyOf(row);
        repo.retireKey({ projectId, domain: row.domain, selector, privateKey: privateKeyPem, mailFromDomain, retiredAt: clock.nowMs() });
      }
      repo.delete(projectId, id);
      log.info('domain deleted', { projectId, domainId: id, domain: row.domain, ...(keyKept && { dkimKeyKeptForQueuedMail: true }) });
      return { deleted: true };
    });
  }

  /**
   * Mail still to go (scheduled emails, broadcasts) that would go out under `row`: from it or a subdomain,
   * unless another verified domain of the project serves that sender (a subdomain registered on its own
   * is the one that signs). With no verified domain at all it counts too: `row` may be the one whose DKIM
   * key signs it.
   */
  function countSendersUsing(projectId: string, row: DomainRow, senders: { fromAddress: string; count: number }[]): number {
    let count = 0;
    for (const sender of senders) {
      const servedBy = verifiedDomainServing(projectId, sender.fromAddress);
      if (servedBy === undefined || servedBy.id === row.id) count += sender.count;
    }
    return count;
  }

  /** The project's domains that cover the address's domain (itself or a parent), most specific first. */
  function coveringDomains(projectId: string, address: string): DomainRow[] {
    const domain = domainOfAddress(address);
    if (!domain) return [];
    return repo.findByNames(projectId, candidateDomains(domain)).sort((a, b) => b.domain.length - a.domain.length);
  }

  /** The verified domain that `address` may be sent from, read now. */
  function verifiedDomainServing(projectId: string, address: string): DomainRow | undefined {
    return coveringDomains(projectId, address).find((row) => row.status === 'success');
  }

  // Every send asks (with domain verification on, the default): the read was a third of an accepted
  // send's event-loop time. The answer changes only with a domain's status or its deletion, and the cache
  // forgets on any change of the domains table (db/read-cache.ts).
  const verifiedForSend = createReadCache<DomainRow>(deps.sqlite);

  /** For the send API (`from-address-unverified`): the verified domain the address may be sent from. */
  function findVerifiedSendingDomain(projectId: string, address: string): DomainRow | undefined {
    return verifiedForSend.get(`${projectId}\n${domainOfAddress(address) ?? ''}`, () => verifiedDomainServing(projectId, address));
  }

  /**
   * For the send API's refusal (`from-address-unverified`): the project's domain that would serve the
   * address once verified, its status and what its last check found. An owner whose domain was verified
   * yesterday and lost a record overnight otherwise reads only "not on a verified sending domain" while
   * the domain is right there in their list. When no domain of the project covers the address, what to
   * do: a CI sandbox that forgot the setting for it read only that its sender was not verified.
   */
  function explainUnverifiedSender(projectId: string, address: string): string | undefined {
    const [row] = coveringDomains(projectId, address);
    if (!row) return noSendingDomainHint;
    if (row.status === 'success') return undefined;
    const failing = (row.verification as VerificationState | null)?.failing ?? [];
    const state = row.status === 'pending' ? 'is pending verification' : 'failed verification';
    const found = failing.length > 0 ? failing.join('; ') : 'not checked yet';
    return `The domain ${row.domain} ${state}: ${found}; see GET /v1/domains/${row.id}.`;
  }

  /**
   * For the delivery engine: the DKIM key to sign a message from `fromAddress` and the MAIL FROM domain.
   * A verified domain first; otherwise one whose DKIM record was seen published (canSign); otherwise the
   * key kept from a deleted domain that covered the sender (`retiredAt` set: the caller uses it only for
   * mail queued before then).
   */
  function findSigningKey(projectId: string, fromAddress: string): SigningKey | undefined {
    const rows = coveringDomains(projectId, fromAddress);
    const row = rows.find((r) => r.status === 'success') ?? rows.find(canSign);
    return row ? signingKeyOf(row) : findRetiredKey(projectId, fromAddress);
  }

  /** The most specific deleted domain's kept key covering the address (the latest one of that domain). */
  function findRetiredKey(projectId: string, fromAddress: string): SigningKey | undefined {
    const domain = domainOfAddress(fromAddress);
    if (!domain) return undefined;
    const [kept] = repo.findRetiredKeys(projectId, candidateDomains(domain)).sort((a, b) => b.domain.length - a.domain.length);
    if (!kept) return undefined;
    return { domain: kept.domain, selector: kept.selector, privateKeyPem: kept.privateKey, mailFromDomain: kept.mailFromDomain, retiredAt: kept.retiredAt };
  }

  /**
   * Scheduler job: forgets the keys whose queued mail has been delivered or has given up by now (none of
   * it still queued), the queue read in short steps on the writer thread (retired-keys.ts).
   */
  async function pruneRetiredKeys(now: Date): Promise<{ pruned: number }> {
    const retiredBefore = now.getTime() - config.delivery.give_up_after - retiredKeyMarginMs;
    const pruned = await pruneRetiredSigningKeys({ writes, repo }, retiredBefore);
    if (pruned > 0) log.info('kept signing keys of deleted domains pruned', { count: pruned });
    return { pruned };
  }

  return {
    create,
    pruneRetiredKeys,
    list: (projectId: string) => repo.listByProject(projectId).map(present),
    get: (projectId: string, id: string) => present(requireDomain(projectId, id)),
    delete: remove,
    verify,
    reverifyAll,
    findVerifiedSendingDomain,
    findSendingDomain: (projectId: string, address: string): DomainRow | undefined => coveringDomains(projectId, address)[0],
    explainUnverifiedSender,
    findSigningKey,
  };
}

export type DomainsService = ReturnType<typeof createDomainsService>;

const noSendingDomainHint =
  'Add its domain with POST /v1/domains and publish the DNS records it lists; a sandbox that delivers nowhere (delivery.mode = "capture") can skip this with sending.require_verified_domain = false (POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN=false).';

/**
 * A verified domain signs; so does one whose DKIM record was seen published (a key that is not in DNS
 * would only produce a failing signature).
 */
const canSign = (row: DomainRow) => row.status === 'success' || row.dkimVerified;

function signingKeyOf(row: DomainRow): SigningKey {
  // The bounce subdomain only once its MX and SPF check out: before that, bounces to it would go nowhere
  // and SPF would be checked against a name without a record. The domain itself is the fallback.
  const mailFromDomain = row.mailFromStatus === 'success' ? row.mailFromDomain : row.domain;
  return { domain: row.domain, selector: row.dkimSelector, privateKeyPem: row.dkimPrivateKey, mailFromDomain };
}

function presentRecord(record: ExpectedRecord, verification: VerificationState | null): DnsRecordView {
  const check = verification?.records.find((c) => c.purpose === record.purpose);
  return {
    hostname: record.hostname,
    value: record.value,
    type: record.type,
    ...(record.priority === undefined ? {} : { priority: record.priority }),
    purpose: record.purpose,
    required: record.required,
    // A check made against other expected values (config changed since) says nothing about this one.
    status: check && check.expected === record.value && check.hostname === record.hostname ? check.status : 'unchecked',
    note: record.note,
  };
}

function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

/** Pasting the sender's address where its domain is asked for is the usual slip: name the part to give. */
function emailAddressHint(name: string): string {
  const at = name.lastIndexOf('@');
  const domainPart = name.slice(at + 1).trim();
  return at >= 0 && domainPart ? ` Give the domain of the address, "${cutToLength(domainPart, 300)}", not the address itself.` : '';
}
