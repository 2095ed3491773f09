import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createPublicKey, createPrivateKey, createSign, createVerify } from 'node:crypto';
import { createSocket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { emails } from '../../src/db/schema/index.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { waitUntil } from '../helpers/wait-until.js';
import { selectorFor } from '../../src/domains/dkim-keys.js';
import { normalizeDomainName } from '../../src/domains/domain-name.js';
import { isSpfMechanism } from '../../src/domains/publishing-settings.js';
import { mailHost, publishRecords, recordOf } from './helpers.js';

let app: TestAppliance;
let dns: TestDnsServer;

before(async () => {
  dns = await startDnsServer();
  // The mail host has an address, as in every deployment: receivers' evaluation of SPF decides (verify.ts).
  dns.set(mailHost, 'A', ['192.0.2.25']);
  // Records owners include beside ours, there as they are in the world: an include of a name without one
  // is a permanent error for receivers.
  dns.set('_spf.google.com', 'TXT', ['v=spf1 ip4:35.190.247.0/24 ~all']);
  for (let i = 0; i < 11; i++) dns.set(`_spf${i}.example.org`, 'TXT', [`v=spf1 ip4:198.51.100.${i} -all`]);
  app = await startAppliance({ env: { POSTINO_DNS_SERVERS: dns.address, POSTINO_DOMAINS_MAIL_HOSTNAME: mailHost } });
});

after(async () => {
  await app?.stop();
  await dns?.stop();
});

describe('create', () => {
  test('answers a pending domain with a DKIM key and every record to publish', async () => {
    const res = await app.api('POST', '/v1/domains', { domain: 'Create.Example.COM.' });
    assert.equal(res.status, 200);
    const d = res.body;
    assert.match(d.id, /^[0-9a-f]{24}$/);
    assert.equal(d.domain, 'create.example.com');
    assert.equal(d.status, 'pending');
    assert.equal(d.dkim, false);
    assert.equal(d.mailFromDomain, 'bounce.create.example.com');
    assert.equal(d.mailFromStatus, 'pending');
    assert.equal(d.dcUrl, null);
    assert.equal(d.dkimTokens.length, 1);
    const selector = d.dkimTokens[0];
    assert.match(selector, /^postino\d{6}[0-9a-f]{6}$/);

    const dkim = recordOf(d, 'dkim');
    assert.equal(dkim.hostname, `${selector}._domainkey.create.example.com`);
    assert.equal(dkim.type, 'TXT');
    const p = /p=([A-Za-z0-9+/=]+)$/.exec(dkim.value)![1];
    const publicKey = createPublicKey({ key: Buffer.from(p, 'base64'), format: 'der', type: 'spki' });
    assert.equal(publicKey.asymmetricKeyDetails?.modulusLength, 2048);

    assert.deepEqual(
      d.dns.map((r: any) => [r.purpose, r.type, r.hostname, r.value, r.required]),
      [
        ['dkim', 'TXT', dkim.hostname, dkim.value, true],
        ['spf', 'TXT', 'create.example.com', `v=spf1 a:${mailHost} ~all`, true],
        ['mail-from-mx', 'MX', 'bounce.create.example.com', mailHost, true],
        ['mail-from-spf', 'TXT', 'bounce.create.example.com', `v=spf1 a:${mailHost} -all`, true],
        ['dmarc', 'TXT', '_dmarc.create.example.com', 'v=DMARC1; p=none; adkim=r; aspf=r', false],
        ['inbound-mx', 'MX', 'create.example.com', mailHost, false],
      ],
    );
    assert.match(d.zoneFile, /^bounce\.create\.example\.com\.\t3600\tIN\tMX\t10 mx\.postino\.test\.$/m);
    assert.match(d.zoneFile, new RegExp(`^${selector}\\._domainkey\\.create\\.example\\.com\\.\\t3600\\tIN\\tTXT\\t\\( "v=DKIM1; k=rsa; p=`, 'm'));
    // Pasted as is into a zone that already has mail, the optional records would break it: commented out.
    assert.match(d.zoneFile, /^; optional: .*\n; create\.example\.com\.\t3600\tIN\tMX\t10 mx\.postino\.test\.$/m);
    // No inbound routes in this build: the inbound MX says not to publish it (the domain's mail would bounce).
    assert.match(d.dns.find((r: any) => r.purpose === 'inbound-mx').note, /^Only to receive this domain's mail through inbound routes .* refused \(550 5\.1\.1\)/);
    assert.match(d.zoneFile, /^; optional: Only to receive this domain's mail through inbound routes/m);
    assert.match(d.zoneFile, /^; _dmarc\.create\.example\.com\.\t3600\tIN\tTXT\t"v=DMARC1; p=none; adkim=r; aspf=r"$/m);
    assert.doesNotMatch(d.zoneFile, /^create\.example\.com\.\t3600\tIN\tMX/m);
    // The SPF record comes with the reminder to merge it into an existing one.
    assert.match(d.zoneFile, /^; SPF for the domain\. If it already has a v=spf1 record.*\ncreate\.example\.com\.\t3600\tIN\tTXT\t"v=spf1 /m);
    // Verification ran right away against the (empty) DNS: it names the missing records, status stays pending.
    assert.equal(d.verification.result, 'failed');
    assert.ok(d.verification.failing.some((f: string) => f.includes(dkim.hostname)));
    assert.ok(!JSON.stringify(d).includes('PRIVATE KEY'));
  });

  test('accepts {name} too, and lists answer data and domains', async () => {
    const created = await app.api('POST', '/v1/domains', { name: 'by-name.example.org' });
    assert.equal(created.status, 200);
    assert.equal(created.body.domain, 'by-name.example.org');
    const list = await app.api('GET', '/v1/domains');
    assert.equal(list.status, 200);
    assert.ok(list.body.data.some((d: any) => d.id === created.body.id));
    assert.deepEqual(list.body.domains, list.body.data);
    const one = await app.api('GET', `/v1/domains/${created.body.id}`);
    assert.equal(one.status, 200);
    assert.equal(one.body.domain, 'by-name.example.org');
  });

  test('the field not given may be null (an optional null counts as not sent); both null is refused', async () => {
    const byName = await app.api('POST', '/v1/domains', { domain: null, name: 'null-domain.example.org' });
    assert.equal(byName.status, 200, JSON.stringify(byName.body));
    assert.equal(byName.body.domain, 'null-domain.example.org');
    const byDomain = await app.api('POST', '/v1/domains', { domain: 'null-name.example.org', name: null });
    assert.equal(byDomain.status, 200, JSON.stringify(byDomain.body));
    const neither = await app.api('POST', '/v1/domains', { domain: null, name: null });
    assert.equal(neither.status, 400);
    assert.equal(neither.body.errorCode, 'parameters-invalid');
    assert.match(neither.body.developerMessage, /domain: give the domain name as domain \(or name\)/);
  });

  test('domain and name naming two different domains is refused (domain was taken and name dropped unsaid); the same name twice is one', async () => {
    const both = await app.api('POST', '/v1/domains', { domain: 'first-of-two.example.org', name: 'second-of-two.example.org' });
    assert.equal(both.status, 400);
    assert.equal(both.body.errorCode, 'parameters-invalid');
    assert.equal(both.body.developerMessage, 'Invalid body. name: domain and name name different domains; give one of them');
    assert.equal((await app.api('GET', '/v1/domains')).body.data.some((d: any) => d.domain === 'first-of-two.example.org'), false);
    const same = await app.api('POST', '/v1/domains', { domain: 'Same-Twice.example.org.', name: 'same-twice.example.org' });
    assert.equal(same.status, 200, JSON.stringify(same.body));
    assert.equal(same.body.domain, 'same-twice.example.org');
  });

  test('each key gets its own selector: the same domain added again (or in another project) never shares one', async () => {
    const first = await app.api('POST', '/v1/domains', { domain: 'again.example.net' });
    assert.deepEqual((await app.api('DELETE', `/v1/domains/${first.body.id}`)).body, { deleted: true });
    const second = await app.api('POST', '/v1/domains', { domain: 'again.example.net' });
    const linked = await app.api('POST', '/v1/project', { name: 'Other project' });
    const third = await app.api('POST', '/v1/domains', { domain: 'again.example.net' }, { key: linked.body.apiKey });
    const selectors = [first, second, third].map((created) => created.body.dkimTokens[0] as string);
    assert.equal(new Set(selectors).size, 3, selectors.join(' '));
  });

  test('refuses invalid names with parameters-invalid', async () => {
    for (const body of [{ domain: 'not a domain' }, { domain: 'localhost' }, { domain: '1.2.3.4' }, { domain: '-bad.example.com' }, { domain: 'a@b.com' }, {}, { domain: 42 }]) {
      const res = await app.api('POST', '/v1/domains', body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(res.body.errorCode, 'parameters-invalid');
      assert.match(res.body.developerMessage, /domain/);
    }
    const address = await app.api('POST', '/v1/domains', { domain: 'news@shop.example.com' });
    assert.equal(address.status, 400);
    assert.match(address.body.developerMessage, /Give the domain of the address, "shop\.example\.com", not the address itself/);
    // Public suffixes (ICANN's and private ones): no one's zone to publish in.
    for (const suffix of ['co.uk', 'github.io']) {
      const res = await app.api('POST', '/v1/domains', { domain: suffix });
      assert.equal(res.status, 400, suffix);
      assert.match(res.body.developerMessage, new RegExp(`domain: ${suffix.replace('.', '\\.')} is a public suffix`));
    }
    assert.equal((await app.api('POST', '/v1/domains', { domain: 'shop.example.co.uk' })).status, 200, 'a domain under one is fine');
  });

  test('a duplicate in the same project is resource-duplicate (403)', async () => {
    assert.equal((await app.api('POST', '/v1/domains', { domain: 'dup.example.com' })).status, 200);
    const again = await app.api('POST', '/v1/domains', { domain: 'DUP.example.com' });
    assert.equal(again.status, 403);
    assert.equal(again.body.errorCode, 'resource-duplicate');
  });

  test("a domain's MAIL FROM domain is not a sending domain of the same project, either way round (409): their SPF records would conflict", async () => {
    const parent = await app.api('POST', '/v1/domains', { domain: 'clash.example.com' });
    assert.equal(parent.status, 200);
    const bounce = await app.api('POST', '/v1/domains', { domain: parent.body.mailFromDomain });
    assert.equal(bounce.status, 409, JSON.stringify(bounce.body));
    assert.match(bounce.body.developerMessage, /is the MAIL FROM \(bounce\) domain of clash\.example\.com/);
    assert.equal((await app.api('POST', '/v1/domains', { domain: 'sub.clash.example.com' })).status, 200, 'another subdomain is fine');
    const mailFromLabel = parent.body.mailFromDomain.split('.')[0];
    const inner = await app.api('POST', '/v1/domains', { domain: `${mailFromLabel}.taken.example.com` });
    assert.equal(inner.status, 200);
    const outer = await app.api('POST', '/v1/domains', { domain: 'taken.example.com' });
    assert.equal(outer.status, 409, JSON.stringify(outer.body));
    assert.match(outer.body.developerMessage, /would use .*taken\.example\.com as its MAIL FROM \(bounce\) domain, which is a sending domain of this project/);
  });

  test('a resolver that does not answer: the create answers without waiting out the lookups', async () => {
    // A DNS server that receives every query and answers none.
    const silent = createSocket('udp4');
    await new Promise<void>((resolve) => silent.bind(0, '127.0.0.1', resolve));
    const quiet = await startAppliance({ env: { POSTINO_DNS_SERVERS: `127.0.0.1:${(silent.address() as AddressInfo).port}` } });
    try {
      const res = await quiet.api('POST', '/v1/domains', { domain: 'silent.test' });
      assert.equal(res.status, 200);
      assert.equal(res.body.status, 'pending');
      // The lookups (5 s timeout, 2 tries) had not finished when the answer went out.
      assert.equal(res.body.lastCheckedAt, null);
    } finally {
      await quiet.stop();
      silent.close();
    }
  });

  test('the private key is never logged', () => {
    assert.ok(app.logs.some((line) => line.includes('domain created')));
    assert.ok(!app.logs.some((line) => line.includes('PRIVATE KEY') || line.includes('dkimPrivateKey')));
  });
});

describe('verification', () => {
  test('published records → success, dkim true, mailFromStatus success; signing key usable', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'good.example.net' })).body;
    publishRecords(dns, created.dns, ['dmarc', 'inbound-mx']);
    const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'success');
    assert.equal(res.body.dkim, true);
    assert.equal(res.body.mailFromStatus, 'success');
    assert.equal(res.body.verification.result, 'success');
    assert.deepEqual(res.body.verification.failing, []);
    assert.ok(res.body.verifiedAt);
    // Optional suggestions are reported but do not block verification.
    assert.equal(recordOf(res.body, 'dmarc').status, 'missing');
    assert.equal(recordOf(res.body, 'dkim').status, 'ok');

    const projectId = app.appliance.defaultProjectId;
    const service = app.appliance.context.domains;
    assert.equal(service.findVerifiedSendingDomain(projectId, 'hello@good.example.net')?.id, created.id);
    assert.equal(service.findVerifiedSendingDomain(projectId, 'hello@Mail.Good.Example.NET')?.id, created.id);
    assert.equal(service.findVerifiedSendingDomain(projectId, 'hello@notgood.example.net'), undefined);
    assert.equal(service.findVerifiedSendingDomain(projectId, 'hello@example.net'), undefined);

    const key = service.findSigningKey(projectId, 'news@mail.good.example.net')!;
    assert.equal(key.domain, 'good.example.net');
    assert.equal(key.selector, created.dkimTokens[0]);
    assert.equal(key.mailFromDomain, 'bounce.good.example.net');
    // The stored private key matches the published public key.
    const p = /p=([A-Za-z0-9+/=]+)$/.exec(recordOf(created, 'dkim').value)![1];
    const signature = createSign('sha256').update('x').sign(createPrivateKey(key.privateKeyPem));
    assert.ok(createVerify('sha256').update('x').verify(createPublicKey({ key: Buffer.from(p, 'base64'), format: 'der', type: 'spki' }), signature));
  });

  test('POST verify gets a check of its own, not the answer of one that looked before the records were published', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'late.example.net' })).body;
    assert.equal(created.status, 'pending');
    // The scheduler's re-check is under way: its DKIM lookup has come back missing, its SPF lookup hangs.
    dns.hold('late.example.net');
    const queriesBefore = dns.queries.length;
    const recheck = app.appliance.context.domains.reverifyAll(new Date(Date.now() + 86_400_000));
    const asked = (name: string) => dns.queries.slice(queriesBefore).some((q) => q.name === name);
    await waitUntil(() => asked(`${created.dkimTokens[0]}._domainkey.late.example.net`) && asked('late.example.net'), 'the re-check to look up the domain');
    // Meanwhile the owner publishes the records and asks.
    publishRecords(dns, created.dns, ['dmarc', 'inbound-mx']);
    const verifying = app.api('POST', `/v1/domains/${created.id}/verify`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    dns.release('late.example.net');
    const res = await verifying;
    await recheck;
    assert.equal(res.body.status, 'success', JSON.stringify(res.body.verification?.failing));
  });

  test('a wrong DKIM record → failed, naming the record with expected vs found', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'wrongkey.example.net' })).body;
    publishRecords(dns, created.dns);
    const dkim = recordOf(created, 'dkim');
    dns.set(dkim.hostname, 'TXT', ['v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrong']);
    const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
    assert.equal(res.body.status, 'failed');
    assert.equal(res.body.dkim, false);
    assert.equal(res.body.mailFromStatus, 'success');
    assert.deepEqual(res.body.verification.failing, [`TXT ${dkim.hostname} (dkim): mismatch`]);
    const check = res.body.verification.records.find((r: any) => r.purpose === 'dkim');
    assert.equal(check.expected, dkim.value);
    assert.deepEqual(check.found, ['v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrong']);
    assert.match(check.message, /p= differs/);
    assert.equal(app.appliance.context.domains.findVerifiedSendingDomain(app.appliance.defaultProjectId, 'a@wrongkey.example.net'), undefined);
  });

  test('a DKIM name published as a CNAME whose target has no TXT record says so', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'cnamed.example.net' })).body;
    publishRecords(dns, created.dns, ['dkim']);
    const dkim = recordOf(created, 'dkim');
    dns.set(dkim.hostname, 'CNAME', ['keys.provider.example.org']);
    const check = (await app.api('POST', `/v1/domains/${created.id}/verify`)).body.verification.records.find((r: any) => r.purpose === 'dkim');
    assert.equal(check.status, 'missing');
    assert.match(check.message, /is a CNAME to keys\.provider\.example\.org, which has no TXT record/);
  });

  test('the DKIM record is judged as a verifier reads it: right key but wrong algorithm, tag case or order fails', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'dkimrules.example.net' })).body;
    publishRecords(dns, created.dns);
    const dkim = recordOf(created, 'dkim');
    const key = /p=([^;]+)/.exec(dkim.value)![1];
    const verdict = async (values: string[]) => {
      dns.set(dkim.hostname, 'TXT', values);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      return res.body.verification.records.find((r: any) => r.purpose === 'dkim');
    };
    // Accepted: the same record with other spacing, without the optional tags.
    assert.equal((await verdict([`v=DKIM1;  k=rsa ;p=${key.slice(0, 100)} ${key.slice(100)}`])).status, 'ok');
    assert.equal((await verdict([`p=${key}`])).status, 'ok');
    const refused: [string[], RegExp][] = [
      [[`v=DKIM1; k=ed25519; p=${key}`], /k=ed25519/],
      [[`v=DKIM1; h=sha1; p=${key}`], /h=sha1/],
      [[`k=rsa; v=DKIM1; p=${key}`], /start with v=DKIM1/],
      [[`V=DKIM1; K=rsa; P=${key}`], /p= differs/],
      [[`v=DKIM1; p=${key}; p=${key}`], /tag is repeated/],
      [[`v=DKIM1; p=${key}`, 'v=DKIM1; p=MIIBother'], /2 TXT records/],
    ];
    for (const [values, message] of refused) {
      const check = await verdict(values);
      assert.equal(check.status, 'mismatch', values.join(' | '));
      assert.match(check.message, message);
    }
  });

  test('a missing MAIL FROM MX → failed with mailFromStatus failed, dkim still true', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'nomx.example.net' })).body;
    publishRecords(dns, created.dns, ['mail-from-mx']);
    const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
    assert.equal(res.body.status, 'failed');
    assert.equal(res.body.dkim, true);
    assert.equal(res.body.mailFromStatus, 'failed');
    assert.deepEqual(res.body.verification.failing, ['MX bounce.nomx.example.net (mail-from-mx): missing']);
  });

  test('SPF: an existing record merged with our mechanism passes; two SPF records fail', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spf.example.net' })).body;
    publishRecords(dns, created.dns);
    dns.set('spf.example.net', 'TXT', ['google-site-verification=abc', `v=spf1 include:_spf.google.com +a:${mailHost.toUpperCase()} ~all`]);
    assert.equal((await app.api('POST', `/v1/domains/${created.id}/verify`)).body.status, 'success');
    dns.set('spf.example.net', 'TXT', ['v=spf1 include:_spf.google.com ~all', `v=spf1 a:${mailHost} ~all`]);
    const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
    assert.equal(res.body.status, 'failed');
    assert.match(res.body.verification.records.find((r: any) => r.purpose === 'spf').message, /RFC 7208/);
  });

  test('SPF is read as a verifier evaluates it: mechanisms after all, a trailing dot, the lookup limit', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfrules.example.net' })).body;
    publishRecords(dns, created.dns);
    const verdict = async (value: string) => {
      dns.set('spfrules.example.net', 'TXT', [value]);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      return { status: res.body.status, check: res.body.verification.records.find((r: any) => r.purpose === 'spf') };
    };
    assert.equal((await verdict(`v=spf1 a:${mailHost}. ~all`)).status, 'success', 'an absolute name is the same name');
    assert.equal((await verdict(`v=spf1 ip4:192.0.2.1 A:${mailHost} -all redirect=_spf.example.net`)).status, 'success');
    const late = await verdict(`v=spf1 include:_spf.google.com -all a:${mailHost}`);
    assert.equal(late.status, 'failed');
    assert.match(late.check.message, /after "-all", where it is never tested \(RFC 7208 §5\.1\)/);
    const denied = await verdict(`v=spf1 -a:${mailHost} ~all`);
    assert.match(denied.check.message, /lacks a:/);
    const includes = Array.from({ length: 11 }, (_, i) => `include:_spf${i}.example.org`).join(' ');
    const tooMany = await verdict(`v=spf1 ${includes} a:${mailHost} ~all`);
    assert.equal(tooMany.status, 'failed');
    assert.match(tooMany.check.message, /12 DNS lookups .*RFC 7208 §4\.6\.4/);
    // The limit itself: ours at the eleventh lookup is already a permerror for receivers, so it fails here
    // too (guards the boundary, which 12 and 10 alone leave free to move).
    const ten = includes.split(' ').slice(1).join(' ');
    const eleven = await verdict(`v=spf1 ${ten} a:${mailHost} ~all`);
    assert.equal(eleven.status, 'failed');
    assert.match(eleven.check.message, /11 DNS lookups .*RFC 7208 §4\.6\.4/);
    const nine = includes.split(' ').slice(2).join(' ');
    assert.equal((await verdict(`v=spf1 ${nine} a:${mailHost} ~all`)).status, 'success', 'ten lookups, ours the tenth, are allowed');
    assert.equal((await verdict(`v=spf1 ${nine} a:${mailHost} include:_spf.example.org ~all`)).status, 'success', 'lookups after ours do not matter');
  });

  test('SPF: our mechanism reached through include: or redirect= authorises this appliance, as receivers evaluate it', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfvia.example.net' })).body;
    publishRecords(dns, created.dns);
    // A company keeps its senders in one record that every domain includes (or redirects to).
    dns.set('_spf.corp.example', 'TXT', [`v=spf1 ip4:192.0.2.0/24 a:${mailHost} -all`]);
    dns.set('_spf.nested.example', 'TXT', ['v=spf1 include:_spf.corp.example -all']);
    dns.set('_spf.others.example', 'TXT', ['v=spf1 ip4:198.51.100.0/24 -all']);
    const verdict = async (value: string) => {
      dns.set('spfvia.example.net', 'TXT', ['google-site-verification=abc', value]);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      return { status: res.body.status, check: res.body.verification.records.find((r: any) => r.purpose === 'spf') };
    };
    for (const value of ['v=spf1 include:_spf.corp.example -all', 'v=spf1 redirect=_spf.corp.example', 'v=spf1 include:_spf.others.example include:_spf.nested.example ~all']) {
      const { status, check } = await verdict(value);
      assert.equal(status, 'success', `${value}: ${check.message}`);
      assert.match(check.message, /SPF authorises this appliance \(through (include|redirect)/);
    }
    // RFC 7208 §5.2: a qualified include passes on nothing; §6.1: redirect is ignored when the record has "all".
    for (const value of ['v=spf1 ~include:_spf.corp.example -all', 'v=spf1 include:_spf.others.example -all', 'v=spf1 -all redirect=_spf.corp.example']) {
      const { status, check } = await verdict(value);
      assert.equal(status, 'failed', value);
      assert.match(check.message, new RegExp(`lacks a:${mailHost}`));
    }
    // An included record that cannot be read now: the answer is unknown, not "lacks".
    dns.fail('_spf.corp.example', 'SERVFAIL');
    try {
      const { check } = await verdict('v=spf1 include:_spf.corp.example -all');
      assert.equal(check.status, 'temporary-error', check.message);
      assert.match(check.message, /_spf\.corp\.example/);
    } finally {
      dns.clearFailure('_spf.corp.example');
    }
  });

  test("SPF is decided as receivers evaluate it for the mail host's address: an ip4: of it, mx, a:host/32 pass; a broken include before ours stops them", async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfeval.example.net' })).body;
    publishRecords(dns, created.dns);
    const bounce = recordOf(created, 'mail-from-spf').hostname;
    const verdict = async (value: string, name = 'spfeval.example.net') => {
      dns.set(name, 'TXT', [value]);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      const purpose = name === bounce ? 'mail-from-spf' : 'spf';
      return { res: res.body, check: res.body.verification.records.find((r: any) => r.purpose === purpose) };
    };
    // The records the owner was given (our mechanism alone, at the apex and the bounce subdomain) are read by their terms: no evaluation, no lookup
    // of the mail host's address (and mailauth stays unloaded).
    dns.queries.length = 0;
    assert.equal((await verdict(`v=spf1 a:${mailHost} ~all`)).check.status, 'ok');
    assert.deepEqual(dns.queries.filter((query) => query.name === mailHost), []);
    // Records that authorise the mail host (192.0.2.25) without naming it as we suggest: a comparison of
    // terms called each a mismatch, and the domain's sends were refused.
    for (const value of ['v=spf1 ip4:192.0.2.25 ~all', 'v=spf1 ip4:192.0.2.0/24 -all', `v=spf1 a:${mailHost}/32 -all`]) {
      const { res, check } = await verdict(value);
      assert.deepEqual([res.status, check.status], ['success', 'ok'], `${value}: ${check.message}`);
    }
    // The most common record on a bounce subdomain: its MX is the mail host.
    const { res: viaMx, check: mxCheck } = await verdict('v=spf1 mx -all', bounce);
    assert.deepEqual([viaMx.mailFromStatus, mxCheck.status], ['success', 'ok'], mxCheck.message);
    // A qualified term before ours that matches the mail host decides there (RFC 7208 §4.6.2): fail, or neutral.
    for (const value of [`v=spf1 -ip4:192.0.2.25 a:${mailHost} ~all`, `v=spf1 ?ip4:192.0.2.0/24 a:${mailHost} ~all`]) {
      const { res, check } = await verdict(value);
      assert.deepEqual([res.status, check.status], ['failed', 'mismatch'], `${value}: ${check.message}`);
      assert.match(check.message, /evaluate the SPF record at spfeval\.example\.net to (fail|neutral) for 192\.0\.2\.25/);
    }
    // One that matches another address changes nothing.
    assert.equal((await verdict(`v=spf1 -ip4:198.51.100.9 a:${mailHost} ~all`)).check.status, 'ok');
    // An address that is not the mail host's still fails, said in terms of the record.
    const other = await verdict('v=spf1 ip4:192.0.2.26 -all');
    assert.deepEqual([other.res.status, other.check.status], ['failed', 'mismatch']);
    assert.match(other.check.message, new RegExp(`lacks a:${mailHost}`));
    dns.set('spfeval.example.net', 'TXT', [`v=spf1 a:${mailHost} ~all`]);

    // An include before ours that is broken: receivers stop there (RFC 7208 §5.2), ours all present or not.
    dns.set('_spf.two.example', 'TXT', ['v=spf1 -all', 'v=spf1 ip4:192.0.2.9 -all']);
    for (const include of ['_spf.missing.example', '_spf.two.example']) {
      const { res, check } = await verdict(`v=spf1 include:${include} a:${mailHost} ~all`);
      assert.deepEqual([res.status, check.status], ['failed', 'mismatch'], `${include}: ${check.message}`);
      assert.match(check.message, /evaluate the SPF record at spfeval\.example\.net to permerror for 192\.0\.2\.25 .*before they reach this appliance's mechanisms/);
    }
    // The same, reached through redirect=: the redirected record is what receivers evaluate.
    dns.set('_spf.redirected.example', 'TXT', [`v=spf1 include:_spf.missing.example a:${mailHost} -all`]);
    const redirected = await verdict('v=spf1 redirect=_spf.redirected.example');
    assert.deepEqual([redirected.res.status, redirected.check.status], ['failed', 'mismatch'], redirected.check.message);
    assert.match(redirected.check.message, /permerror/);
    dns.fail('_spf.down.example', 'SERVFAIL');
    try {
      const { check } = await verdict(`v=spf1 include:_spf.down.example a:${mailHost} ~all`);
      assert.equal(check.status, 'temporary-error', check.message);
    } finally {
      dns.clearFailure('_spf.down.example');
    }
    // After ours, a broken include is never reached.
    assert.equal((await verdict(`v=spf1 a:${mailHost} include:_spf.missing.example ~all`)).res.status, 'success');
    // A name no resolver asks (a label over 63 characters) is a permanent error there, not a passing one.
    const badName = await verdict(`v=spf1 include:${'a'.repeat(64)}.example a:${mailHost} ~all`);
    assert.deepEqual([badName.res.status, badName.check.status], ['failed', 'mismatch'], badName.check.message);
    // Two mx of 10 hosts each before ours: within every limit of RFC 7208, so within the check's too.
    for (const zone of ['mx1.example', 'mx2.example']) {
      dns.set(zone, 'MX', Array.from({ length: 10 }, (_, i) => ({ preference: 10, exchange: `h${i}.${zone}` })));
      for (let i = 0; i < 10; i++) dns.set(`h${i}.${zone}`, 'A', [`198.51.100.${i + 1}`]);
    }
    const manyHosts = await verdict(`v=spf1 mx:mx1.example mx:mx2.example a:${mailHost} ~all`);
    assert.deepEqual([manyHosts.res.status, manyHosts.check.status], ['success', 'ok'], manyHosts.check.message);
  });

  test("SPF is evaluated for each of the mail host's addresses: a record that passes its IPv4 address and not its IPv6 one fails", async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfdual.example.net' })).body;
    publishRecords(dns, created.dns);
    const verdict = async (value: string) => {
      dns.set('spfdual.example.net', 'TXT', [value]);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      return { res: res.body, check: res.body.verification.records.find((r: any) => r.purpose === 'spf') };
    };
    dns.set(mailHost, 'AAAA', ['2001:db8::25']);
    try {
      const v4Only = await verdict('v=spf1 ip4:192.0.2.25 -all');
      assert.deepEqual([v4Only.res.status, v4Only.check.status], ['failed', 'mismatch'], v4Only.check.message);
      const both = await verdict('v=spf1 ip4:192.0.2.25 ip6:2001:db8::25 -all');
      assert.deepEqual([both.res.status, both.check.status], ['success', 'ok'], both.check.message);
    } finally {
      dns.set(mailHost, 'AAAA', []);
    }
  });

  test('SPF: a record with a space before v=spf1 is not one (receivers discard it), and says so', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfspace.example.net' })).body;
    publishRecords(dns, created.dns);
    // RFC 7208 §4.5: records that do not begin with exactly "v=spf1" are discarded; a pasted leading space does that.
    dns.set('spfspace.example.net', 'TXT', [` v=spf1 a:${mailHost} ~all`]);
    const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
    const check = res.body.verification.records.find((r: any) => r.purpose === 'spf');
    assert.equal(check.status, 'mismatch', check.message);
    assert.match(check.message, /begins with whitespace.*RFC 7208 §4\.5/);
    assert.equal(res.body.status, 'failed');
    dns.set('spfspace.example.net', 'TXT', [`v=spf1 a:${mailHost} ~all `]);
    assert.equal((await app.api('POST', `/v1/domains/${created.id}/verify`)).body.status, 'success', 'trailing space is allowed');
  });

  test('SPF lookup limit: a mechanism with a ~, - or ? qualifier costs its DNS lookup too', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfqual.example.net' })).body;
    publishRecords(dns, created.dns);
    // RFC 7208 §4.6.4: include, a, mx, ptr and exists count whatever their qualifier (§4.6.2).
    const qualified = ['?include:_spf0.example.org', '~include:_spf1.example.org', '-exists:%{i}._spf.example.org', '?mx'];
    const plain = Array.from({ length: 7 }, (_, i) => `include:_spf${i + 2}.example.org`);
    dns.set('spfqual.example.net', 'TXT', [`v=spf1 ${[...qualified, ...plain].join(' ')} a:${mailHost} ~all`]);
    const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
    const check = res.body.verification.records.find((r: any) => r.purpose === 'spf');
    assert.equal(check.status, 'mismatch', 'twelve lookups before ours: a receiver stops with permerror before reaching it');
    assert.match(check.message, /12 DNS lookups .*RFC 7208 §4\.6\.4/);
    assert.equal(res.body.status, 'failed');
  });

  test('MX: this appliance must be among the most preferred hosts of the MAIL FROM domain', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'mxpref.example.net' })).body;
    publishRecords(dns, created.dns);
    const bounce = recordOf(created, 'mail-from-mx').hostname;
    dns.set(bounce, 'MX', [{ preference: 5, exchange: 'mx.elsewhere.example' }, { preference: 10, exchange: mailHost }]);
    const worse = await app.api('POST', `/v1/domains/${created.id}/verify`);
    assert.equal(worse.body.mailFromStatus, 'failed');
    const check = worse.body.verification.records.find((r: any) => r.purpose === 'mail-from-mx');
    assert.equal(check.status, 'mismatch');
    assert.match(check.message, /prefer mx\.elsewhere\.example \(preference 5\)/);
    dns.set(bounce, 'MX', [{ preference: 10, exchange: 'mx.elsewhere.example' }, { preference: 10, exchange: `${mailHost}.` }]);
    assert.equal((await app.api('POST', `/v1/domains/${created.id}/verify`)).body.mailFromStatus, 'success', 'an equal preference shares the mail');
  });

  test('SPF: a record receivers cannot parse (a misspelt mechanism, "include: x") fails even with our mechanism in it', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'spfsyntax.example.net' })).body;
    publishRecords(dns, created.dns);
    const verdict = async (value: string) => {
      dns.set('spfsyntax.example.net', 'TXT', [value]);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      return { status: res.body.status, check: res.body.verification.records.find((r: any) => r.purpose === 'spf') };
    };
    // RFC 7208 §4.6: any syntax error makes the whole record a permerror: SPF then authorises no one.
    const broken: [string, RegExp][] = [
      [`v=spf1 a:${mailHost} inlcude:_spf.google.com ~all`, /"inlcude:_spf\.google\.com", which is not an SPF mechanism/],
      [`v=spf1 include: _spf.google.com a:${mailHost} ~all`, /"include:"/],
      [`v=spf1 ip4:192.0.2.300 a:${mailHost} -all`, /"ip4:192\.0\.2\.300"/],
      [`v=spf1 a:${mailHost} redirect=_spf.example.org redirect=_spf2.example.org`, /more than one redirect=/],
    ];
    for (const [value, message] of broken) {
      const { status, check } = await verdict(value);
      assert.equal(check.status, 'mismatch', value);
      assert.match(check.message, message);
      assert.match(check.message, /RFC 7208 §4\.6/);
      assert.equal(status, 'failed');
    }
    for (const value of [`v=spf1 ip6:2001:db8::/32 ?a:other.example mx/24//64 a:${mailHost} exp=explain._spf.%{d} -all`, `v=spf1 a:${mailHost} ptr:example.org ~ALL`]) {
      assert.equal((await verdict(value)).status, 'success', value);
    }
  });

  test('DMARC (a suggestion, not required) is judged as receivers read it', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'dmarcrules.example.net' })).body;
    publishRecords(dns, created.dns);
    const hostname = recordOf(created, 'dmarc').hostname;
    const verdict = async (values: string[]) => {
      dns.set(hostname, 'TXT', values);
      const res = await app.api('POST', `/v1/domains/${created.id}/verify`);
      assert.equal(res.body.status, 'success', 'DMARC does not decide verification');
      return res.body.verification.records.find((r: any) => r.purpose === 'dmarc');
    };
    assert.equal((await verdict(['v=DMARC1; p=reject; rua=mailto:d@example.net'])).status, 'ok');
    assert.equal((await verdict(['v=DMARC1;p=quarantine'])).status, 'ok');
    const refused: [string[], RegExp][] = [
      [['v=DMARC1; rua=mailto:d@example.net'], /no p= policy/],
      [['v=DMARC1; p=block'], /p=block/],
      [['v=dmarc1; p=none'], /must start with v=DMARC1/],
      [['v=DMARC1; p=none', 'v=DMARC1; p=reject'], /2 DMARC records/],
    ];
    for (const [values, message] of refused) {
      const check = await verdict(values);
      assert.equal(check.status, 'mismatch', values.join(' | '));
      assert.match(check.message, message);
    }
  });

  test("DMARC of a subdomain without its own record is its parent's policy, not missing", async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'mail.orgdmarc.example.net' })).body;
    publishRecords(dns, created.dns, ['dmarc']);
    const dmarcCheck = async () => (await app.api('POST', `/v1/domains/${created.id}/verify`)).body.verification.records.find((r: any) => r.purpose === 'dmarc');
    // RFC 7489 §6.6.3: receivers apply the organizational domain's record (its sp=) to the subdomain.
    dns.set('_dmarc.orgdmarc.example.net', 'TXT', ['v=DMARC1; p=reject; sp=quarantine']);
    const inherited = await dmarcCheck();
    assert.equal(inherited.status, 'ok', inherited.message);
    assert.match(inherited.message, /_dmarc\.orgdmarc\.example\.net \(p=quarantine for this subdomain\)/);
    dns.set('_dmarc.orgdmarc.example.net', 'TXT', ['v=DMARC1; p=block']);
    assert.equal((await dmarcCheck()).status, 'mismatch', "an invalid parent policy is reported as the parent's");
    dns.remove('_dmarc.orgdmarc.example.net');
    assert.equal((await dmarcCheck()).status, 'missing', 'no policy anywhere');
  });

  test('DMARC is inherited from the organizational domain, never from a public suffix above it', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'news.shop.example.co.uk' })).body;
    publishRecords(dns, created.dns, ['dmarc']);
    const dmarcCheck = async () => (await app.api('POST', `/v1/domains/${created.id}/verify`)).body.verification.records.find((r: any) => r.purpose === 'dmarc');
    dns.set('_dmarc.co.uk', 'TXT', ['v=DMARC1; p=reject']);
    try {
      const check = await dmarcCheck();
      assert.equal(check.status, 'missing', `a record at a public suffix is no one's policy: ${check.message}`);
      dns.set('_dmarc.example.co.uk', 'TXT', ['v=DMARC1; p=quarantine']);
      const inherited = await dmarcCheck();
      assert.equal(inherited.status, 'ok', inherited.message);
      assert.match(inherited.message, /_dmarc\.example\.co\.uk \(p=quarantine for this subdomain\)/);
    } finally {
      dns.remove('_dmarc.co.uk');
      dns.remove('_dmarc.example.co.uk');
    }
  });

  test('SERVFAIL keeps a verified domain verified and a pending domain pending', async () => {
    const verified = (await app.api('POST', '/v1/domains', { domain: 'flaky.example.net' })).body;
    publishRecords(dns, verified.dns);
    assert.equal((await app.api('POST', `/v1/domains/${verified.id}/verify`)).body.status, 'success');
    const dkimName = recordOf(verified, 'dkim').hostname;
    dns.fail(dkimName, 'SERVFAIL');
    try {
      const res = await app.api('POST', `/v1/domains/${verified.id}/verify`);
      assert.equal(res.body.status, 'success');
      assert.equal(res.body.dkim, true);
      assert.equal(res.body.verification.result, 'temporary-error');
      assert.deepEqual(res.body.verification.failing, [`TXT ${dkimName} (dkim): temporary-error`]);
      assert.ok(res.body.verification.temporaryFailureSince);
      assert.ok(app.appliance.context.domains.findVerifiedSendingDomain(app.appliance.defaultProjectId, 'x@flaky.example.net'));
    } finally {
      dns.clearFailure(dkimName);
    }
    const recovered = await app.api('POST', `/v1/domains/${verified.id}/verify`);
    assert.equal(recovered.body.verification.result, 'success');
    assert.equal(recovered.body.verification.temporaryFailureSince, null);

    // A pending domain whose only unknown answer is temporary stays pending even when the owner asks.
    const pending = (await app.api('POST', '/v1/domains', { domain: 'servfail-pending.example.net' })).body;
    assert.equal(pending.status, 'pending');
    publishRecords(dns, pending.dns);
    dns.fail('bounce.servfail-pending.example.net', 'SERVFAIL');
    try {
      const res = await app.api('POST', `/v1/domains/${pending.id}/verify`);
      assert.equal(res.body.status, 'pending');
      assert.equal(res.body.dkim, true);
      assert.equal(res.body.mailFromStatus, 'pending');
      assert.equal(res.body.verification.result, 'temporary-error');
      assert.equal(recordOf(res.body, 'mail-from-mx').status, 'temporary-error');
    } finally {
      dns.clearFailure('bounce.servfail-pending.example.net');
    }
  });

  test('a new domain stays pending on its creation check; an asked check fails it', async () => {
    const created = (await app.api('POST', '/v1/domains', { domain: 'unpublished.example.net' })).body;
    assert.equal(created.status, 'pending');
    assert.equal(created.verification.result, 'failed');
    assert.equal(recordOf(created, 'dkim').status, 'missing');
    const asked = await app.api('POST', `/v1/domains/${created.id}/verify`);
    assert.equal(asked.body.status, 'failed');
    assert.equal(asked.body.mailFromStatus, 'failed');
    assert.equal(asked.body.verification.failing.length, 4);
  });
});

describe('isolation and deletion', () => {
  test("another project's domain answers exactly like a missing one", async () => {
    const linked = await app.api('POST', '/v1/project', { name: 'Other' });
    assert.equal(linked.status, 200);
    const otherKey = linked.body.apiKey;
    const mine = (await app.api('POST', '/v1/domains', { domain: 'isolated.example.com' })).body;
    // The same name is free in another project.
    const theirs = await app.api('POST', '/v1/domains', { domain: 'isolated.example.com' }, { key: otherKey });
    assert.equal(theirs.status, 200);
    assert.notEqual(theirs.body.id, mine.id);

    const missing = await app.api('GET', '/v1/domains/0123456789abcdef01234567', undefined, { key: otherKey });
    for (const [method, path] of [
      ['GET', `/v1/domains/${mine.id}`],
      ['POST', `/v1/domains/${mine.id}/verify`],
    ] as const) {
      const res = await app.api(method, path, undefined, { key: otherKey });
      assert.equal(res.status, 404, `${method} ${path}`);
      assert.deepEqual(res.body, missing.body);
    }
    // Deleting one is like deleting a missing one: nothing deleted, and it is still there for its owner.
    assert.deepEqual((await app.api('DELETE', `/v1/domains/${mine.id}`, undefined, { key: otherKey })).body, { deleted: false });
    assert.deepEqual((await app.api('DELETE', '/v1/domains/0123456789abcdef01234567', undefined, { key: otherKey })).body, { deleted: false });
    assert.equal((await app.api('GET', `/v1/domains/${mine.id}`)).status, 200);
    const theirList = (await app.api('GET', '/v1/domains', undefined, { key: otherKey })).body.data;
    assert.deepEqual(theirList.map((d: any) => d.id), [theirs.body.id]);
    assert.equal((await app.api('GET', '/v1/domains/not-an-id')).status, 404);
  });

  test('delete is refused while a scheduled email uses the domain, allowed otherwise', async () => {
    const ctx = app.appliance.context;
    const projectId = app.appliance.defaultProjectId;
    const domain = (await app.api('POST', '/v1/domains', { domain: 'busy.example.com' })).body;
    const now = ctx.clock.nowMs();
    const row = {
      projectId,
      toAddress: 'to@example.org',
      subject: 's',
      contentKind: 'text',
      text: 'hi',
      isOpenTracked: false,
      createdAt: now,
      updatedAt: now,
    };
    ctx.database.db.insert(emails).values({ ...row, id: 'aaaaaaaaaaaaaaaaaaaaaa01', status: 'scheduled', fromAddress: 'News@Mail.BUSY.example.com', scheduledAt: now + 60_000 }).run();
    // Neither a sent email nor a look-alike domain blocks the delete.
    ctx.database.db.insert(emails).values({ ...row, id: 'aaaaaaaaaaaaaaaaaaaaaa02', status: 'delivered', fromAddress: 'a@busy.example.com' }).run();
    ctx.database.db.insert(emails).values({ ...row, id: 'aaaaaaaaaaaaaaaaaaaaaa03', status: 'scheduled', fromAddress: 'a@notbusy.example.com', scheduledAt: now + 60_000 }).run();

    const refused = await app.api('DELETE', `/v1/domains/${domain.id}`);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.errorCode, 'conflict');
    assert.equal((await app.api('GET', `/v1/domains/${domain.id}`)).status, 200);

    ctx.database.sqlite.prepare("UPDATE emails SET status = 'queued' WHERE id = 'aaaaaaaaaaaaaaaaaaaaaa01'").run();
    const deleted = await app.api('DELETE', `/v1/domains/${domain.id}`);
    assert.equal(deleted.status, 200);
    assert.deepEqual(deleted.body, { deleted: true });
    assert.equal((await app.api('GET', `/v1/domains/${domain.id}`)).status, 404);
    // Spec: {deleted: boolean}; like an email or a template, a domain already gone answers false.
    const again = await app.api('DELETE', `/v1/domains/${domain.id}`);
    assert.equal(again.status, 200);
    assert.deepEqual(again.body, { deleted: false });
  });

  test('a scheduled email from a subdomain registered on its own blocks that subdomain, not its parent', async () => {
    const ctx = app.appliance.context;
    const now = ctx.clock.nowMs();
    const parent = (await app.api('POST', '/v1/domains', { domain: 'family.example.com' })).body;
    const child = (await app.api('POST', '/v1/domains', { domain: 'news.family.example.com' })).body;
    const verify = (id: string) => ctx.database.sqlite.prepare(`update domains set status = 'success', dkim_verified = 1 where id = ?`).run(id);
    verify(parent.id);
    verify(child.id);
    ctx.database.db
      .insert(emails)
      .values({ id: 'aaaaaaaaaaaaaaaaaaaaaa11', projectId: app.appliance.defaultProjectId, status: 'scheduled', toAddress: 'to@example.org', fromAddress: 'hi@news.family.example.com', subject: 's', contentKind: 'text', text: 'hi', isOpenTracked: false, scheduledAt: now + 60_000, createdAt: now, updatedAt: now })
      .run();
    // The subdomain signs and sends it: deleting the parent takes nothing from it.
    assert.deepEqual((await app.api('DELETE', `/v1/domains/${parent.id}`)).body, { deleted: true });
    const refused = await app.api('DELETE', `/v1/domains/${child.id}`);
    assert.equal(refused.status, 409);
    assert.match(refused.body.developerMessage, /news\.family\.example\.com is used by 1 scheduled email/);
    ctx.database.sqlite.prepare("delete from emails where id = 'aaaaaaaaaaaaaaaaaaaaaa11'").run();
    assert.deepEqual((await app.api('DELETE', `/v1/domains/${child.id}`)).body, { deleted: true });
  });

  test('a Messenger broadcast not sent yet (queued for later, or being expanded) blocks its sender\'s domain: deleted under it, the broadcast was stuck for good', async () => {
    const ctx = app.appliance.context;
    const domain = (await app.api('POST', '/v1/domains', { domain: 'bcast.example.com' })).body;
    ctx.database.sqlite.prepare(`update domains set status = 'success', dkim_verified = 1 where id = ?`).run(domain.id);
    const draft = await app.api('POST', '/v1/messenger', { fromAddress: 'news@bcast.example.com', subject: 'Monday news', html: '<p>hi</p>' });
    assert.equal(draft.status, 200, JSON.stringify(draft.body));
    const setStatus = (status: string) => ctx.database.sqlite.prepare('update messenger_drafts set status = ? where id = ?').run(status, draft.body.id);
    for (const status of ['queued', 'processing']) {
      setStatus(status);
      const refused = await app.api('DELETE', `/v1/domains/${domain.id}`);
      assert.equal(refused.status, 409, status);
      assert.equal(refused.body.developerMessage, 'The domain bcast.example.com is the sending domain of 1 Messenger broadcast(s) not sent yet (queued or processing); delete them first, or set a queued one back to draft.');
    }
    // A draft not queued, or a broadcast whose emails are made (they count as scheduled emails), does not.
    setStatus('draft');
    assert.deepEqual((await app.api('DELETE', `/v1/domains/${domain.id}`)).body, { deleted: true });
    assert.equal((await app.api('DELETE', `/v1/messenger/${draft.body.id}`)).status, 200);
  });
});

test('the bounce subdomain is the envelope sender only once its records check out; before, the domain itself', async () => {
  const created = await app.api('POST', '/v1/domains', { domain: 'envelope.example.net' });
  const { sqlite } = app.appliance.context.database;
  const set = (mailFromStatus: string) =>
    sqlite.prepare(`update domains set status = 'success', dkim_verified = 1, mail_from_status = ? where id = ?`).run(mailFromStatus, created.body.id);
  const signingKey = () => app.appliance.context.domains.findSigningKey(app.appliance.defaultProjectId, 'news@envelope.example.net');
  set('failed');
  assert.equal(signingKey()?.mailFromDomain, 'envelope.example.net');
  set('success');
  assert.equal(signingKey()?.mailFromDomain, 'bounce.envelope.example.net');
});

test('domains.spf_mechanisms: addresses and prefix lengths are checked as such, dual CIDR lengths are accepted', () => {
  const valid = ['ip4:203.0.113.5', 'ip4:203.0.113.0/24', '-ip6:2001:db8::/32', 'a', 'a//64', 'a/24//64', 'mx:mx.example.net/24//64', '~include:_spf.example.net', 'exists:%{i}.spf.example.net', 'ptr'];
  const invalid = ['ip4:1.2.3', 'ip4:999.1.1.1', 'ip4:10.0.0.0/33', 'ip6:2001:db8::/129', 'ip6:zz::1', 'a/24/64', 'a/33', 'mx//129', 'include _spf.example.net', '~all', 'redirect=_spf.example.net'];
  for (const mechanism of valid) assert.equal(isSpfMechanism(mechanism), true, mechanism);
  for (const mechanism of invalid) assert.equal(isSpfMechanism(mechanism), false, mechanism);
});

test('a domain name is refused when its DKIM record name would pass 253 characters', () => {
  const ofLength = (length: number) => `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(length - 196)}.com`;
  const longest = ofLength(222);
  assert.equal(normalizeDomainName(longest), longest);
  assert.equal(`${selectorFor(new Date('2026-11-26T00:00:00Z'), 'key')}._domainkey.${longest}`.length, 253);
  assert.equal(normalizeDomainName(ofLength(223)), undefined);
});

test('a domain name with a percent escape is refused, not decoded', () => {
  assert.equal(normalizeDomainName('ex%41mple.com'), undefined);
  assert.equal(normalizeDomainName('example.com'), 'example.com');
});

test('a trailing full stop typed as an ideographic or fullwidth one is the root, like a trailing "."', async () => {
  // UTS #46 (IDNA mapping) reads U+3002, U+FF0E and U+FF61 as label separators: "example.com。" is example.com.
  for (const typed of ['idot.example.com。', 'idot.example.com．', 'idot.example.com｡', 'idot.example.com.']) assert.equal(normalizeDomainName(typed), 'idot.example.com', typed);
  assert.equal(normalizeDomainName('idot.example.com.。'), undefined, 'one root, not two');
  const res = await app.api('POST', '/v1/domains', { domain: 'ＩＤＯＴ.example.com。' });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.domain, 'idot.example.com');
});

test('with several address mechanisms of ours, a term between them that fails a later one is found: receivers evaluate the record for each address', async () => {
  const dual = await startAppliance({ env: { POSTINO_DNS_SERVERS: dns.address, POSTINO_DOMAINS_MAIL_HOSTNAME: mailHost, POSTINO_DOMAINS_SPF_MECHANISMS: 'ip4:192.0.2.25,ip6:2001:db8::25' } });
  try {
    const created = (await dual.api('POST', '/v1/domains', { domain: 'dualmech.example.net' })).body;
    publishRecords(dns, created.dns);
    const verdict = async (value: string) => {
      dns.set('dualmech.example.net', 'TXT', [value]);
      const res = await dual.api('POST', `/v1/domains/${created.id}/verify`);
      return { res: res.body, check: res.body.verification.records.find((r: any) => r.purpose === 'spf') };
    };
    const given = await verdict('v=spf1 ip4:192.0.2.25 ip6:2001:db8::25 ~all');
    assert.deepEqual([given.res.status, given.check.status], ['success', 'ok'], given.check.message);
    const between = await verdict('v=spf1 ip4:192.0.2.25 -ip6:2001:db8::25 ip6:2001:db8::25 ~all');
    assert.deepEqual([between.res.status, between.check.status], ['failed', 'mismatch'], between.check.message);
    assert.match(between.check.message, /to fail for 2001:db8::25/);
  } finally {
    await dual.stop();
  }
});

test('a project has at most 1,000 sending domains (409 past them; each costs a key pair and DNS checks)', async () => {
  const tenant = await app.api('POST', '/v1/project', { name: 'Many domains' });
  const insert = app.appliance.context.database.sqlite.prepare(
    `insert into domains (id, project_id, domain, status, dkim_selector, dkim_private_key, dkim_public_key, mail_from_domain, mail_from_status, created_at)
     values (?, ?, ?, 'pending', 's', 'k', 'k', ?, 'pending', 0)`,
  );
  for (let i = 0; i < 999; i++) insert.run(`cap${String(i).padStart(21, '0')}`, tenant.body.id, `d${i}.cap.example`, `bounce.d${i}.cap.example`);
  const last = await app.api('POST', '/v1/domains', { domain: 'last.cap.example' }, { key: tenant.body.apiKey });
  assert.equal(last.status, 200, JSON.stringify(last.body));
  const refused = await app.api('POST', '/v1/domains', { domain: 'one-more.cap.example' }, { key: tenant.body.apiKey });
  assert.equal(refused.status, 409);
  assert.equal(refused.body.developerMessage, 'A project has at most 1000 sending domains; delete one first.');
  assert.deepEqual((await app.api('DELETE', '/v1/project', { id: tenant.body.id })).body, { deleted: true });
});
