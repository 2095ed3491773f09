import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { openSmtpSession } from '../helpers/smtp-raw.js';
import { waitUntil } from '../helpers/wait-until.js';
import { createSessionsPerAddress, maxSessionsPerAddress } from '../../src/smtp/session-limits.js';

// What both SMTP listeners (the inbound MX and submission) share: their certificate, their SIZE limit.
let t: TestAppliance;
const maxMessageBytes = 1024 * 1024;

before(async () => {
  t = await startAppliance({
    env: {
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      POSTINO_DELIVERY_MODE: 'capture',
      POSTINO_SUBMISSION_ALLOW_INSECURE_AUTH: 'true',
      POSTINO_SUBMISSION_MAX_MESSAGE_BYTES: String(maxMessageBytes),
    },
  });
});
after(() => t.stop());

test("both listeners offer STARTTLS with the appliance's certificate, not smtp-server's built-in one", async () => {
  const fingerprints: string[] = [];
  for (const port of [t.smtpPort, t.appliance.submissionPort]) {
    const session = await openSmtpSession(port);
    try {
      assert.match(await session.command('EHLO client.test'), /STARTTLS/);
      const certificate = await session.startTls();
      // smtp-server's fallback certificate is CN=localhost, expired in 2025, its key public in the package.
      assert.notEqual(certificate.subject.CN, 'localhost');
      assert.ok(new Date(certificate.valid_to).getTime() > Date.now(), `valid until ${certificate.valid_to}`);
      assert.match(await session.command('EHLO client.test'), /^250/);
      fingerprints.push(certificate.fingerprint256);
    } finally {
      session.close();
    }
  }
  assert.equal(fingerprints[0], fingerprints[1], 'one certificate for both listeners');
});

for (const listener of ['submission', 'inbound'] as const) {
  test(`a DATA stream past the SIZE limit is refused 552 5.3.4 and not held in memory meanwhile (${listener})`, async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const session = await openSmtpSession(listener === 'submission' ? t.appliance.submissionPort : t.smtpPort);
    try {
      await session.command('EHLO client.test');
      if (listener === 'submission') {
        assert.match(await session.command(`AUTH PLAIN ${Buffer.from(`\0app\0${t.apiKey}`).toString('base64')}`), /^235/);
      } else {
        assert.equal((await t.api('POST', '/v1/inbound/routes', { domain: 'size.test', localPart: 'big' })).status, 200);
      }
      assert.match(await session.command('MAIL FROM:<app@sender.test>'), /^250/);
      assert.match(await session.command(listener === 'submission' ? 'RCPT TO:<ann@rcpt.test>' : 'RCPT TO:<big@size.test>'), /^250/);
      assert.match(await session.command('DATA'), /^354/);
      gc();
      const before = process.memoryUsage().arrayBuffers;
      const line = Buffer.from(`${'x'.repeat(998)}\r\n`);
      const chunk = Buffer.concat(Array.from({ length: 1024 }, () => line));
      // ~200 MB: 200 times the submission limit, past the inbound one (smtp.max_message_bytes, 25 MiB) too.
      const streamedBytes = 200 * chunk.length;
      for (let written = 0; written < streamedBytes; written += chunk.length) await session.write(chunk);
      // Twice: on Node 24 one collection leaves buffers that are already garbage for the next to free.
      gc();
      gc();
      const held = process.memoryUsage().arrayBuffers - before;
      assert.ok(held < 50 * 1024 * 1024, `${(held / 1048576).toFixed(0)} MB held while streaming ${(streamedBytes / 1048576).toFixed(0)} MB`);
      const reply = session.reply();
      await session.write('\r\n.\r\n');
      assert.match(await reply, /^552 5\.3\.4 /);
    } finally {
      session.close();
    }
  });
}

test('the sessions of one IPv6 host are counted by its /64, as many addresses as it takes from it; an IPv4-mapped address is the IPv4 host', () => {
  // Loopback has one IPv6 address here: the counter alone, fed the addresses smtp-server would give it.
  const limits = createSessionsPerAddress(2);
  assert.deepEqual(['2001:db8:1:2::10', '2001:db8:1:2:ffff::1', '2001:0DB8:0001:0002::99'].map((address, i) => limits.admit(`v6-${i}`, address)), [true, true, false]);
  assert.equal(limits.admit('other-64', '2001:db8:1:3::1'), true, 'the next /64 is another host');
  assert.deepEqual(['192.0.2.1', '::ffff:192.0.2.1', '192.0.2.1'].map((address, i) => limits.admit(`v4-${i}`, address)), [true, true, false]);
  limits.release('v6-0', '2001:db8:1:2::10');
  assert.equal(limits.admit('v6-3', '2001:db8:1:2::77'), true, 'a closed session frees a place for its host');
  const refused: Error[] = [];
  limits.onConnect({ id: 'v6-4', remoteAddress: '2001:db8:1:2::78' }, (error) => void refused.push(error!));
  assert.match(refused[0]!.message, /^4\.7\.0 Too many connections from 2001:db8:1:2::\/64, try again later$/);
});

test(`the inbound listener takes at most ${maxSessionsPerAddress} sessions from one address; the next is told 421 4.7.0, and a closed one frees a place`, async () => {
  const sessions = [];
  try {
    for (let i = 0; i < maxSessionsPerAddress; i++) {
      const session = await openSmtpSession(t.smtpPort);
      sessions.push(session);
      assert.match(session.greeting, /^220 /);
    }
    const refused = await openSmtpSession(t.smtpPort);
    refused.close();
    assert.match(refused.greeting, /^421 4\.7\.0 Too many connections from 127\.0\.0\.1/);
    // The submission port counts its own sessions (test/submission: only those not yet authenticated).
    const app = await openSmtpSession(t.appliance.submissionPort);
    app.close();
    assert.match(app.greeting, /^220 /);

    sessions.pop()!.close();
    await waitUntil(async () => {
      const again = await openSmtpSession(t.smtpPort);
      again.close();
      return /^220 /.test(again.greeting);
    }, 'a place freed by the closed session');
  } finally {
    for (const session of sessions) session.close();
  }
});

test('a stored certificate made for another host name than the one configured now is kept, and said at boot', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-tls-name-'));
  const boot = async (name: string) => {
    const app = await startAppliance({ dataDir, env: { POSTINO_SMTP_HOSTNAME: name } });
    await app.stop();
    return app.logs.filter((line) => line.includes('does not name'));
  };
  assert.deepEqual(await boot('first.example.net'), [], 'generated for it');
  const certificate = readFileSync(join(dataDir, 'tls', 'submission-cert.pem'), 'utf8');
  assert.deepEqual(await boot('first.example.net'), [], 'stored, and it names it');
  const warned = await boot('second.example.net');
  assert.equal(warned.length, 1);
  assert.match(warned[0], /"level":"warn".*the generated TLS certificate in .*tls does not name second\.example\.net \(the host name configured now\); delete .*tls and restart/);
  assert.equal(readFileSync(join(dataDir, 'tls', 'submission-cert.pem'), 'utf8'), certificate, 'kept: clients may have pinned it');
});

test('a first start cut short while writing its TLS certificate (a full disk, a crash) does not keep every later start from booting', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-tls-half-'));
  try {
    // What a first boot on a full disk left behind: the key written, the certificate file created empty
    // (ENOSPC); a power loss before writeback leaves the same. No client can have pinned it.
    const tls = join(dataDir, 'tls');
    mkdirSync(tls);
    const whole = mkdtempSync(join(tmpdir(), 'postino-tls-whole-'));
    await (await startAppliance({ dataDir: whole })).stop();
    writeFileSync(join(tls, 'submission-key.pem'), readFileSync(join(whole, 'tls', 'submission-key.pem')), { mode: 0o600 });
    writeFileSync(join(tls, 'submission-cert.pem'), '');
    rmSync(whole, { recursive: true, force: true });

    const app = await startAppliance({ dataDir });
    await app.stop();
    const cert = readFileSync(join(tls, 'submission-cert.pem'), 'utf8');
    assert.ok(new X509Certificate(cert).publicKey, 'a whole certificate was generated in its place');
    // For the loopback addresses of both families: an app that pins it connects to ::1 as well as 127.0.0.1.
    assert.match(new X509Certificate(cert).subjectAltName!, /IP Address:127\.0\.0\.1, IP Address:0:0:0:0:0:0:0:1$/);
    assert.deepEqual(readdirSync(tls).sort(), ['submission-cert.pem', 'submission-key.pem'], 'no temporary files left');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
