import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildJobs } from '../../src/appliance.js';
import { createDomainsService } from '../../src/domains/service.js';
import { ManualClock } from '../../src/lib/clock.js';
import { silentLogger } from '../../src/lib/logger.js';
import { createResolver } from '../../src/lib/resolver.js';
import type { Job } from '../../src/scheduler/index.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { waitUntil } from '../helpers/wait-until.js';
import { mailHost, publishRecords, recordOf } from './helpers.js';

const hour = 3_600_000;
let app: TestAppliance;
let dns: TestDnsServer;
let clock: ManualClock;
let job: Job;

before(async () => {
  dns = await startDnsServer();
  clock = new ManualClock('2026-03-01T00:00:00.000Z');
  app = await startAppliance({
    clock,
    env: {
      POSTINO_DNS_SERVERS: dns.address,
      POSTINO_DOMAINS_MAIL_HOSTNAME: mailHost,
      POSTINO_DOMAINS_SPF_MECHANISMS: 'ip4:203.0.113.5,include:_spf.postino.test',
      POSTINO_DOMAINS_DNS_FAILURE_GRACE: '36h',
      POSTINO_DOMAINS_DOMAIN_CONNECT_PROVIDER: 'postino.test/sending',
      POSTINO_DOMAINS_DOMAIN_CONNECT_UX_URL: 'https://dc.dns.test/',
      POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
    },
  });
  job = buildJobs(app.appliance.context).find((j) => j.name === 'domains.reverify')!;
  assert.ok(job, 'the re-verification job is registered');
});

after(async () => {
  await app?.stop();
  await dns?.stop();
});

const get = async (id: string) => (await app.api('GET', `/v1/domains/${id}`)).body;
const runJob = () => job.run(clock.now()) as Promise<{ checked: number }>;

test('the scheduler job re-checks pending domains often and verified ones daily, failing after the pending window', async () => {
  const good = (await app.api('POST', '/v1/domains', { domain: 'sched.example.com' })).body;
  const idle = (await app.api('POST', '/v1/domains', { domain: 'idle.example.com' })).body;
  assert.equal(good.status, 'pending');
  assert.equal(recordOf(good, 'spf').value, 'v=spf1 ip4:203.0.113.5 include:_spf.postino.test ~all');
  publishRecords(dns, good.dns);

  assert.deepEqual(await runJob(), { checked: 0 }, 'both were just checked on create');
  clock.advance(10 * 60_000);
  assert.deepEqual(await runJob(), { checked: 2 });
  assert.equal((await get(good.id)).status, 'success');
  assert.equal((await get(idle.id)).status, 'pending', 'missing records within the pending window are not a failure yet');

  // The owner removes the DKIM record: a verified domain is only re-checked daily.
  dns.remove(recordOf(good, 'dkim').hostname);
  clock.advance(hour);
  assert.deepEqual(await runJob(), { checked: 1 }, 'only the pending domain is due');
  assert.equal((await get(good.id)).status, 'success');
  clock.advance(24 * hour);
  await runJob();
  const failed = await get(good.id);
  assert.equal(failed.status, 'failed');
  assert.equal(failed.dkim, false);
  assert.equal(failed.mailFromStatus, 'success');

  clock.advance(48 * hour); // past the 72 h pending window
  await runJob();
  assert.equal((await get(idle.id)).status, 'failed');
});

test('temporary DNS failures keep a verified domain verified until the grace period has passed', async () => {
  const flaky = (await app.api('POST', '/v1/domains', { domain: 'grace.example.com' })).body;
  publishRecords(dns, flaky.dns);
  assert.equal((await app.api('POST', `/v1/domains/${flaky.id}/verify`)).body.status, 'success');
  dns.fail(recordOf(flaky, 'dkim').hostname, 'SERVFAIL');
  try {
    clock.advance(24 * hour);
    await runJob();
    let now = await get(flaky.id);
    assert.equal(now.status, 'success');
    assert.equal(now.verification.result, 'temporary-error');
    clock.advance(24 * hour); // 24 h of only temporary failures: still inside the 36 h grace
    await runJob();
    now = await get(flaky.id);
    assert.equal(now.status, 'success');
    clock.advance(24 * hour); // 48 h: past it
    await runJob();
    now = await get(flaky.id);
    assert.equal(now.status, 'failed');
    assert.equal(now.dkim, false);
  } finally {
    dns.clearFailure(recordOf(flaky, 'dkim').hostname);
  }
});

test('a lookup timeout is temporary too', async () => {
  const ctx = app.appliance.context;
  const domains = createDomainsService({
    db: ctx.database.db,
    sqlite: ctx.database.sqlite,
    writes: ctx.writes,
    clock,
    log: silentLogger,
    config: ctx.config,
    // Short timeouts so the test does not wait for the production 5 s × 2 tries.
    resolver: createResolver({ servers: [dns.address], timeoutMs: 150, tries: 1 }),
  });
  const projectId = app.appliance.defaultProjectId;
  const created = await domains.create(projectId, 'timeout.example.com');
  publishRecords(dns, created.dns);
  assert.equal((await domains.verify(projectId, created.id)).status, 'success');
  dns.fail('bounce.timeout.example.com', 'timeout');
  try {
    const after = await domains.verify(projectId, created.id);
    assert.equal(after.status, 'success');
    assert.equal(after.mailFromStatus, 'success');
    const check = after.verification!.records.find((r) => r.purpose === 'mail-from-mx')!;
    assert.equal(check.status, 'temporary-error');
    assert.match(check.message, /ETIMEOUT/);
  } finally {
    dns.clearFailure('bounce.timeout.example.com');
  }
});

test('dcUrl is a Domain Connect apply URL when a template is configured', async () => {
  const created = (await app.api('POST', '/v1/domains', { domain: 'dc.example.com' })).body;
  const url = new URL(created.dcUrl);
  assert.equal(url.origin + url.pathname, 'https://dc.dns.test/v2/domainTemplates/providers/postino.test/services/sending/apply');
  assert.equal(url.searchParams.get('domain'), 'example.com');
  assert.equal(url.searchParams.get('host'), 'dc');
  assert.equal(url.searchParams.get('selector'), created.dkimTokens[0]);
  assert.equal(url.searchParams.get('mailfrom'), 'bounce');
  assert.equal(url.searchParams.get('mailhost'), mailHost);
  assert.ok(recordOf(created, 'dkim').value.endsWith(url.searchParams.get('dkimpublickey')!));
});

test('dcUrl of a subdomain names the zone as domain and the subdomain as host (Domain Connect sync apply)', async () => {
  const created = (await app.api('POST', '/v1/domains', { domain: 'mail.dcsub.example.co.uk' })).body;
  const url = new URL(created.dcUrl);
  // The DNS provider looks the zone up by `domain`: a sending subdomain is `host` within it.
  assert.equal(url.searchParams.get('domain'), 'example.co.uk');
  assert.equal(url.searchParams.get('host'), 'mail.dcsub');
  assert.equal(url.searchParams.get('mailfrom'), 'bounce', 'template hosts stay relative to domain + host');
  const apex = new URL((await app.api('POST', '/v1/domains', { domain: 'dcapex-example.org' })).body.dcUrl);
  assert.equal(apex.searchParams.get('domain'), 'dcapex-example.org');
  assert.equal(apex.searchParams.has('host'), false);
});

test('status changes are recorded as domain.verified / domain.failed webhook events without the key', async () => {
  const hook = await app.api('POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['domain.verified', 'domain.failed'] });
  assert.ok(hook.status < 300, JSON.stringify(hook.body));
  const created = (await app.api('POST', '/v1/domains', { domain: 'hooked.example.com' })).body;
  publishRecords(dns, created.dns);
  await app.api('POST', `/v1/domains/${created.id}/verify`);
  dns.remove(recordOf(created, 'dkim').hostname);
  await app.api('POST', `/v1/domains/${created.id}/verify`);
  const events = app.appliance.context.database.sqlite
    .prepare("SELECT type, data FROM webhook_events WHERE type LIKE 'domain.%' ORDER BY id")
    .all() as { type: string; data: string }[];
  const mine = events.filter((e) => JSON.parse(e.data).id === created.id);
  assert.deepEqual(mine.map((e) => e.type), ['domain.verified', 'domain.failed']);
  assert.ok(!mine.some((e) => e.data.includes('PRIVATE KEY')));
});

test('a verified domain whose DKIM record disappears: the re-check fails it, and a send refused for it says why', async () => {
  const gone = (await app.api('POST', '/v1/domains', { domain: 'keygone.example.com' })).body;
  publishRecords(dns, gone.dns);
  assert.equal((await app.api('POST', `/v1/domains/${gone.id}/verify`)).body.status, 'success');
  const send = () => app.api('POST', '/v1/email/send', { fromAddress: 'news@keygone.example.com', toAddress: 'reader@example.org', subject: 'Hi', text: 'Hello' });
  assert.equal((await send()).status, 200);

  const dkimName = recordOf(gone, 'dkim').hostname;
  dns.remove(dkimName);
  clock.advance(25 * hour);
  await runJob();
  assert.equal((await get(gone.id)).status, 'failed');
  const refused = await send();
  assert.equal(refused.status, 400);
  assert.equal(refused.body.errorCode, 'from-address-unverified');
  // The owner sees the domain in their list: the refusal names it, its state and the record at fault.
  assert.match(refused.body.developerMessage, /^fromAddress news@keygone\.example\.com is not on a verified sending domain of this project\. /);
  assert.match(refused.body.developerMessage, new RegExp(`keygone\\.example\\.com failed verification: TXT ${dkimName.replace(/\./g, '\\.')} \\(dkim\\): missing`));
  assert.match(refused.body.developerMessage, new RegExp(`GET /v1/domains/${gone.id}`));

  // A pending domain says so too; for an address no domain covers, what to do (a CI sandbox that forgot
  // the setting for it read only that its sender was not verified).
  const pending = (await app.api('POST', '/v1/domains', { domain: 'notyet.example.com' })).body;
  const early = await app.api('POST', '/v1/email/send', { fromAddress: 'a@mail.notyet.example.com', toAddress: 'reader@example.org', subject: 'Hi', text: 'Hello' });
  assert.match(early.body.developerMessage, new RegExp(`notyet\\.example\\.com is pending verification: .*GET /v1/domains/${pending.id}`));
  const stranger = await app.api('POST', '/v1/email/send', { fromAddress: 'a@stranger.example.com', toAddress: 'reader@example.org', subject: 'Hi', text: 'Hello' });
  assert.match(stranger.body.developerMessage, /^fromAddress a@stranger\.example\.com is not on a verified sending domain of this project\. Add its domain with POST \/v1\/domains .*POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN=false/);
});

test('SPF: an ip4/ip6 mechanism that holds the configured address (ip4:…/32, a wider range) authorises this appliance', async () => {
  const created = (await app.api('POST', '/v1/domains', { domain: 'spfnet.example.com' })).body;
  publishRecords(dns, created.dns);
  const verdict = async (value: string) => {
    dns.set('spfnet.example.com', 'TXT', [value]);
    return (await app.api('POST', `/v1/domains/${created.id}/verify`)).body.verification.records.find((r: any) => r.purpose === 'spf');
  };
  // Configured: ip4:203.0.113.5 include:_spf.postino.test. Receivers match the sending IP against each network.
  for (const value of ['v=spf1 ip4:203.0.113.5/32 include:_spf.postino.test ~all', 'v=spf1 ip4:203.0.113.0/24 include:_spf.postino.test -all', 'v=spf1 ip4:0.0.0.0/0 include:_spf.postino.test -all']) {
    const check = await verdict(value);
    assert.equal(check.status, 'ok', `${value}: ${check.message}`);
  }
  for (const value of ['v=spf1 ip4:203.0.112.0/24 include:_spf.postino.test -all', 'v=spf1 ~ip4:203.0.113.0/24 include:_spf.postino.test -all', 'v=spf1 ip6:::ffff:203.0.113.5 include:_spf.postino.test -all']) {
    const check = await verdict(value);
    assert.equal(check.status, 'mismatch', value);
    assert.match(check.message, /lacks ip4:203\.0\.113\.5$|lacks ip4:203\.0\.113\.5\./);
  }
});

test('a re-check whose lookups took a moment keeps its cadence: the next one comes at the tick recheck_unverified_every later', async () => {
  const slow = (await app.api('POST', '/v1/domains', { domain: 'cadence.example.com' })).body;
  const dkimName = recordOf(slow, 'dkim').hostname;
  // The scheduler ticks on the minute; this tick's lookups take 1.5 s to answer.
  clock.advance(10 * 60_000);
  const tick = clock.nowMs();
  dns.hold(dkimName);
  const queriesBefore = dns.queries.length;
  const run = runJob();
  try {
    await waitUntil(() => dns.queries.slice(queriesBefore).some((q) => q.name.toLowerCase() === dkimName), 'the held DKIM lookup');
    clock.advance(1_500);
  } finally {
    dns.release(dkimName);
  }
  await run;
  assert.equal((await get(slow.id)).lastCheckedAt, new Date(tick + 1_500).toISOString());

  // The tick 10 minutes after the last one: the domain is due (it was checked 10 minutes ago, give or
  // take its lookups), not left for the tick after, 11 minutes on.
  clock.set(tick + 10 * 60_000);
  await runJob();
  assert.equal((await get(slow.id)).lastCheckedAt, new Date(tick + 10 * 60_000).toISOString());
});

test("the scheduler job leaves the domains of a project being deleted alone: their check's write would be refused, and they go with the project", async () => {
  const linked = (await app.api('POST', '/v1/project', { name: 'Leaving' })).body;
  const leaving = (await app.api('POST', '/v1/domains', { domain: 'leaving.example.com' }, { key: linked.apiKey })).body;
  const { sqlite } = app.appliance.context.database;
  const lastChecked = () => sqlite.prepare('select last_checked_at from domains where id = ?').pluck().get(leaving.id);
  const checkedBefore = lastChecked();
  // What DELETE /v1/project's first write leaves while its purge has not reached the domain yet.
  sqlite.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${linked.id}`);
  const queriesBefore = dns.queries.length;
  clock.advance(10 * 60_000);
  await runJob();
  assert.ok(!dns.queries.slice(queriesBefore).some((query) => query.name.endsWith('leaving.example.com')), 'not looked up');
  assert.equal(lastChecked(), checkedBefore);
  assert.ok(!app.logs.some((line) => line.includes('domain re-check failed to run')));
  await app.appliance.context.projects.resumeDeletions();
  assert.equal(sqlite.prepare('select count(*) from domains where id = ?').pluck().get(leaving.id), 0);
});
