import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { publishRecords } from './helpers.js';

/**
 * The MX and SPF records every sending domain publishes name domains.mail_hostname, which defaults to
 * delivery.helo_name: a restart with another HELO name (the README's VPS setup sets it to the PTR name)
 * changed what every verified domain must publish, and each failed at its next daily check, its sends
 * refused, with nothing said at the restart.
 */
let dns: TestDnsServer;
let dataDir: string;
before(async () => {
  dns = await startDnsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'postino-mail-host-'));
});
after(async () => {
  await dns?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

const warningsAbout = (logs: string[], text: string) => logs.filter((line) => line.includes('"level":"warn"') && line.includes(text));

test('a restart that changes the host verified domains publish says so, naming the old one to keep them', async () => {
  const env = { POSTINO_DNS_SERVERS: dns.address, POSTINO_DELIVERY_HELO_NAME: 'old-mta.postino.test' };
  let app = await startAppliance({ dataDir, env });
  const domain = (await app.api('POST', '/v1/domains', { domain: 'shop.example.com' })).body;
  publishRecords(dns, domain.dns);
  assert.equal((await app.api('POST', `/v1/domains/${domain.id}/verify`)).body.status, 'success');
  await app.stop();

  app = await startAppliance({ dataDir, env });
  assert.deepEqual(warningsAbout(app.logs, 'records'), [], 'the same settings again: nothing to say');
  await app.stop();

  app = await startAppliance({ dataDir, env: { ...env, POSTINO_DELIVERY_HELO_NAME: 'new-mta.postino.test' } });
  try {
    const [warning] = warningsAbout(app.logs, 'old-mta.postino.test');
    assert.ok(warning, `a warning names the host the domains published: ${app.logs.join('\n')}`);
    const fields = JSON.parse(warning);
    assert.equal(fields.verifiedDomains, 1);
    assert.deepEqual(fields.was, { mailHost: 'old-mta.postino.test', spf: ['a:old-mta.postino.test'] });
    assert.deepEqual(fields.now, { mailHost: 'new-mta.postino.test', spf: ['a:new-mta.postino.test'] });
    assert.match(fields.msg, /domains\.mail_hostname/);
    // What the warning is about: the domain's published records no longer pass its check.
    assert.equal((await app.api('POST', `/v1/domains/${domain.id}/verify`)).body.status, 'failed');
  } finally {
    await app.stop();
  }

  app = await startAppliance({ dataDir, env: { ...env, POSTINO_DELIVERY_HELO_NAME: 'new-mta.postino.test' } });
  assert.deepEqual(warningsAbout(app.logs, 'old-mta.postino.test'), [], 'said once, at the start that changed it');
  await app.stop();
});

test('an appliance with no verified domain changes its mail host without a warning', async () => {
  const fresh = mkdtempSync(join(tmpdir(), 'postino-mail-host-'));
  try {
    let app = await startAppliance({ dataDir: fresh, env: { POSTINO_DELIVERY_HELO_NAME: 'a.postino.test' } });
    await app.stop();
    app = await startAppliance({ dataDir: fresh, env: { POSTINO_DELIVERY_HELO_NAME: 'b.postino.test' } });
    assert.deepEqual(warningsAbout(app.logs, 'a.postino.test'), []);
    await app.stop();
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
});
