import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import nodemailer from 'nodemailer';
import { apiCall } from '../helpers/appliance.js';
import { startChildAppliance } from '../helpers/child.js';
import { startDnsServer } from '../helpers/dns-server.js';

const key = 'pst_inbound_bundle_key_abcdefghijklmnopqrstuvwxyz0';

/**
 * The bundle (`npm start`'s dist/main.js) loads mailauth from node_modules with the first inbound message
 * (build.mjs keeps it external): a received email checked there has real verdicts, not temperror.
 */
test('the bundle checks a received email\'s SPF with mailauth loaded at its first message', async () => {
  const build = spawnSync(process.execPath, ['build.mjs', '--quiet'], { encoding: 'utf8' });
  assert.equal(build.status, 0, build.stderr);
  const dns = await startDnsServer();
  dns.set('remote.test', 'TXT', ['v=spf1 ip4:127.0.0.1 -all']);
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-bundle-inbound-'));
  const app = await startChildAppliance(
    { POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key, POSTINO_DNS_SERVERS: dns.address, POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' },
    20_000,
    ['dist/main.js'],
  );
  try {
    const base = `http://127.0.0.1:${app.httpPort}`;
    assert.equal((await apiCall(base, 'POST', '/v1/inbound/routes', { domain: 'inbox.test' }, key)).status, 200);
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: app.smtpPort, secure: false, ignoreTLS: true, name: 'mta.remote.test' });
    await transport.sendMail({ from: 'ann@remote.test', to: 'help@inbox.test', subject: 'through the bundle', text: 'hi' });
    const list = await apiCall(base, 'GET', '/v1/inbound/emails', undefined, key);
    const email = (await apiCall(base, 'GET', `/v1/inbound/emails/${list.body.data[0].id}`, undefined, key)).body;
    assert.deepEqual([email.subject, email.auth.spf.result], ['through the bundle', 'pass']);
    assert.doesNotMatch(app.output(), /authentication checks failed/);
  } finally {
    app.child.kill('SIGTERM');
    await app.exited;
    await dns.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
