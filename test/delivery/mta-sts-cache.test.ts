import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { createMtaSts, type MtaSts } from '../../src/delivery/mta-sts.js';
import { createResolver } from '../../src/lib/resolver.js';
import { createLogger } from '../../src/lib/logger.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { createTestCa } from './test-ca.js';

/**
 * The policy cache (RFC 8461 §3.3, §5.1) against real DNS and a real HTTPS policy host on loopback, with
 * a manual clock: which answer a delivery gets when the policy host or the TXT record stops answering.
 */
describe('MTA-STS policy cache', () => {
  const day = 86_400_000;
  let dns: TestDnsServer;
  let server: Server;
  let ca: ReturnType<typeof createTestCa>;
  const policies = new Map<string, string>();
  const requests: string[] = [];
  let now = Date.UTC(2030, 0, 1);

  before(async () => {
    ca = createTestCa();
    const names = ['refresh', 'rotate', 'stripped', 'servfail', 'dupes', 'popular', 'failing', 'republished'].map((d) => `mta-sts.${d}.test`);
    const cert = ca.issue(names);
    server = createServer({ key: cert.key, cert: cert.cert }, (req, res) => {
      const host = String(req.headers.host ?? '').replace(/:\d+$/, '');
      requests.push(host);
      const policy = policies.get(host);
      if (!policy) return res.writeHead(503).end();
      res.writeHead(200, { 'content-type': 'text/plain' }).end(policy);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    dns = await startDnsServer();
  });
  after(async () => {
    await dns.stop();
    await new Promise((resolve) => server.close(resolve));
  });

  function mtaStsAt(): MtaSts {
    return createMtaSts({
      resolver: createResolver({ servers: [dns.address], timeoutMs: 500 }),
      log: createLogger({ level: 'silent' }),
      nowMs: () => now,
      port: (server.address() as AddressInfo).port,
      timeoutMs: 2_000,
      ca: [ca.certPem],
      allowPrivate: true,
      recordTtlMs: 30_000,
    });
  }

  function publish(domain: string, id: string, body: string) {
    dns.set(`_mta-sts.${domain}`, 'TXT', [`v=STSv1; id=${id};`]);
    dns.set(`mta-sts.${domain}`, 'A', ['127.0.0.1']);
    policies.set(`mta-sts.${domain}`, body);
  }
  const enforce = (maxAgeSeconds: number) => `version: STSv1\r\nmode: enforce\r\nmx: mx.example.test\r\nmax_age: ${maxAgeSeconds}\r\n`;

  test('a failed fetch after the TXT id changed keeps the cached policy', async () => {
    const sts = mtaStsAt();
    publish('rotate.test', 'one', enforce(7 * 86_400));
    assert.equal((await sts.policyFor('rotate.test'))?.mode, 'enforce');
    dns.set('_mta-sts.rotate.test', 'TXT', ['v=STSv1; id=two;']);
    policies.delete('mta-sts.rotate.test');
    now += day;
    assert.equal((await sts.policyFor('rotate.test'))?.id, 'one');
  });

  test('a stripped TXT record or a failing resolver keeps the cached policy', async () => {
    const sts = mtaStsAt();
    publish('stripped.test', 'one', enforce(7 * 86_400));
    publish('servfail.test', 'one', enforce(7 * 86_400));
    assert.equal((await sts.policyFor('stripped.test'))?.mode, 'enforce');
    assert.equal((await sts.policyFor('servfail.test'))?.mode, 'enforce');
    dns.remove('_mta-sts.stripped.test');
    dns.fail('_mta-sts.servfail.test', 'SERVFAIL');
    now += day;
    assert.equal((await sts.policyFor('stripped.test'))?.mode, 'enforce');
    assert.equal((await sts.policyFor('servfail.test'))?.mode, 'enforce');
  });

  test('a cached policy is refreshed before it expires, so blocking the policy host at its expiry does not drop it (§3.3)', async () => {
    const sts = mtaStsAt();
    publish('refresh.test', 'one', enforce(2 * 86_400));
    assert.equal((await sts.policyFor('refresh.test'))?.mode, 'enforce');
    // A day and a half later mail goes to the domain again: same TXT id, the policy host answers.
    now += 1.5 * day;
    assert.equal((await sts.policyFor('refresh.test'))?.mode, 'enforce');
    assert.equal(requests.filter((host) => host === 'mta-sts.refresh.test').length, 2, 'fetched again, though its id is unchanged');
    // Then an attacker blocks the policy host just after the first fetch's max_age ran out.
    policies.delete('mta-sts.refresh.test');
    now += 0.5 * day + 60_000;
    assert.equal((await sts.policyFor('refresh.test'))?.mode, 'enforce', 'the policy refreshed at 1.5 days is still valid');
  });

  test('a failed fetch is not tried again for five minutes for the same policy id, at every TXT check (§3.3); a new id is fetched at once', async () => {
    const sts = mtaStsAt();
    const fetches = (domain: string) => requests.filter((host) => host === `mta-sts.${domain}`).length;
    dns.set('_mta-sts.failing.test', 'TXT', ['v=STSv1; id=one;']);
    dns.set('mta-sts.failing.test', 'A', ['127.0.0.1']);
    assert.equal(await sts.policyFor('failing.test'), undefined, 'the policy host answers 503: no policy');
    assert.equal(fetches('failing.test'), 1);
    policies.set('mta-sts.failing.test', enforce(86_400));
    now += 60_000; // past the TXT record's 30 s: looked up again, same id
    assert.equal(await sts.policyFor('failing.test'), undefined);
    now += 3 * 60_000;
    assert.equal(await sts.policyFor('failing.test'), undefined);
    assert.equal(fetches('failing.test'), 1, 'not fetched again within five minutes');
    now += 60_000 + 1;
    assert.equal((await sts.policyFor('failing.test'))?.mode, 'enforce', 'fetched again after five minutes');
    assert.equal(fetches('failing.test'), 2);

    dns.set('_mta-sts.republished.test', 'TXT', ['v=STSv1; id=one;']);
    dns.set('mta-sts.republished.test', 'A', ['127.0.0.1']);
    assert.equal(await sts.policyFor('republished.test'), undefined);
    // The domain fixes its policy host and publishes a new id: fetched at the next TXT check.
    policies.set('mta-sts.republished.test', enforce(86_400));
    dns.set('_mta-sts.republished.test', 'TXT', ['v=STSv1; id=two;']);
    now += 31_000;
    assert.equal((await sts.policyFor('republished.test'))?.id, 'two');
  });

  test('a failed refresh keeps the cached policy without asking the policy host again at every TXT check (§3.3, §5.1)', async () => {
    const sts = mtaStsAt();
    publish('refresh.test', 'again', enforce(2 * 86_400));
    assert.equal((await sts.policyFor('refresh.test'))?.id, 'again');
    const before = requests.filter((host) => host === 'mta-sts.refresh.test').length;
    policies.delete('mta-sts.refresh.test');
    now += 1.5 * day; // due for its refresh, which fails
    assert.equal((await sts.policyFor('refresh.test'))?.id, 'again');
    now += 60_000;
    assert.equal((await sts.policyFor('refresh.test'))?.id, 'again', 'the cached policy still applies');
    assert.equal(requests.filter((host) => host === 'mta-sts.refresh.test').length, before + 1, 'one failed refresh, not one per TXT check');
  });

  test('a field given twice counts once, as its first occurrence (§3.1): a second mode line does not turn enforce into testing', async () => {
    const sts = mtaStsAt();
    publish('dupes.test', 'first', ['version: STSv1', 'mode: enforce', 'mx: mx.example.test', 'max_age: 604800', 'mode: testing', 'max_age: 60', 'mx: *.example.test', ''].join('\r\n'));
    dns.set('_mta-sts.dupes.test', 'TXT', ['v=STSv1; id=first; id=second;']);
    const policy = await sts.policyFor('dupes.test');
    assert.deepEqual(policy, { id: 'first', mode: 'enforce', mx: ['mx.example.test', '*.example.test'], maxAgeSeconds: 604800 });
  });

  test('mail to many other domains does not push out an unexpired policy, which a failed fetch then could not fall back on (§5.1)', async () => {
    const sts = mtaStsAt();
    publish('popular.test', 'one', enforce(7 * 86_400));
    assert.equal((await sts.policyFor('popular.test'))?.mode, 'enforce');
    // A broadcast to a long list: past the cache's 10,000 domains, most of them without MTA-STS.
    for (let i = 0; i < 10_050; i += 200) {
      await Promise.all(Array.from({ length: 200 }, (_, j) => sts.policyFor(`d${i + j}.example`)));
    }
    policies.delete('mta-sts.popular.test');
    now += 60_000;
    assert.equal((await sts.policyFor('popular.test'))?.mode, 'enforce', 'the cached policy still applies');
  });
});
