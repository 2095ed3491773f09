import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import forge from 'node-forge';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { addSendingDomain, emailStatus, eventsOf, jobOf, routeToSink, send, startRig, waitForEvent, waitForFinal } from './harness.js';

/**
 * Transport details of outbound delivery, each against the real appliance and a real smtp-server on
 * loopback: implicit TLS and required STARTTLS to a relay, a DNS timeout, connection reuse and the
 * per-domain connection cap.
 */

/**
 * A CA and a server certificate for the IP address 127.0.0.1. test-ca.ts issues DNS names only, and a
 * relay URL naming 127.0.0.1 is verified against IP subjectAltNames (Node's checkServerIdentity).
 */
function ipCertificate(): { caPem: string; key: string; cert: string } {
  const keys = () => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    return {
      pem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      priv: forge.pki.privateKeyFromPem(privateKey.export({ type: 'pkcs1', format: 'pem' }).toString()),
      pub: forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString()),
    };
  };
  const dated = (cert: forge.pki.Certificate, serial: string) => {
    cert.serialNumber = serial;
    cert.validity.notBefore = new Date(Date.now() - 3_600_000);
    cert.validity.notAfter = new Date(Date.now() + 24 * 3_600_000);
  };
  const caKeys = keys();
  const ca = forge.pki.createCertificate();
  ca.publicKey = caKeys.pub;
  dated(ca, '01');
  const caSubject = [{ name: 'commonName', value: 'Postino Transport Test CA' }];
  ca.setSubject(caSubject);
  ca.setIssuer(caSubject);
  ca.setExtensions([{ name: 'basicConstraints', cA: true, critical: true }, { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true }, { name: 'subjectKeyIdentifier' }]);
  ca.sign(caKeys.priv, forge.md.sha256.create());
  const leafKeys = keys();
  const leaf = forge.pki.createCertificate();
  leaf.publicKey = leafKeys.pub;
  dated(leaf, '02');
  leaf.setSubject([{ name: 'commonName', value: '127.0.0.1' }]);
  leaf.setIssuer(caSubject);
  leaf.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames: [{ type: 7, ip: '127.0.0.1' }] },
    { name: 'authorityKeyIdentifier', keyIdentifier: ca.generateSubjectKeyIdentifier().getBytes() },
  ]);
  leaf.sign(caKeys.priv, forge.md.sha256.create());
  return { caPem: forge.pki.certificateToPem(ca), key: leafKeys.pem, cert: forge.pki.certificateToPem(leaf) };
}

const tls = ipCertificate();
const caDir = mkdtempSync(join(tmpdir(), 'postino-transport-ca-'));
const caFile = join(caDir, 'ca.pem');
writeFileSync(caFile, tls.caPem);
process.on('exit', () => rmSync(caDir, { recursive: true, force: true }));

interface Received {
  mailFrom: string;
  rcptTo: string[];
  secure: boolean;
  authUser?: string;
}

/** An smtp-server that counts connections, MAIL FROMs, and the most sessions / transactions open at once. */
interface CountingSink {
  port: number;
  messages: Received[];
  connects: number;
  mailFroms: number;
  maxOpenConnections: number;
  maxTransactions: number;
  stop(): Promise<void>;
}

async function startCountingSink(options: Partial<SMTPServerOptions> & { users?: Record<string, string>; holdMs?: number; host?: string; port?: number } = {}): Promise<CountingSink> {
  const { users, holdMs = 0, host = '127.0.0.1', port = 0, ...serverOptions } = options;
  const state = { messages: [] as Received[], connects: 0, mailFroms: 0, open: 0, maxOpenConnections: 0, maxTransactions: 0 };
  const inTransaction = new Set<string>();
  const server = new SMTPServer({
    logger: false,
    disableReverseLookup: true,
    hideSTARTTLS: !serverOptions.key,
    authOptional: !users,
    authMethods: ['PLAIN', 'LOGIN'],
    allowInsecureAuth: true,
    ...serverOptions,
    onConnect(_session, callback) {
      state.connects++;
      state.open++;
      state.maxOpenConnections = Math.max(state.maxOpenConnections, state.open);
      callback();
    },
    onClose(session) {
      state.open--;
      inTransaction.delete(session.id);
    },
    onAuth(auth, _session, callback) {
      if (users?.[auth.username ?? ''] !== undefined && users[auth.username!] === auth.password) return callback(null, { user: auth.username });
      return callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
    },
    onMailFrom(_address, session, callback) {
      state.mailFroms++;
      inTransaction.add(session.id);
      state.maxTransactions = Math.max(state.maxTransactions, inTransaction.size);
      callback();
    },
    onData(stream, session, callback) {
      stream.on('data', () => {});
      stream.on('end', () => {
        setTimeout(() => {
          inTransaction.delete(session.id);
          state.messages.push({
            mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
            rcptTo: session.envelope.rcptTo.map((r) => r.address),
            secure: Boolean(session.secure),
            authUser: session.user as string | undefined,
          });
          callback(null, `Queued as counting-${state.messages.length}`);
        }, holdMs);
      });
    },
  });
  server.on('error', () => {});
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  return {
    port: (server.server.address() as AddressInfo).port,
    get messages() {
      return state.messages;
    },
    get connects() {
      return state.connects;
    },
    get mailFroms() {
      return state.mailFroms;
    },
    get maxOpenConnections() {
      return state.maxOpenConnections;
    },
    get maxTransactions() {
      return state.maxTransactions;
    },
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('relay over TLS', () => {
  test('smtps:// relay: implicit TLS verified through delivery.extra_ca_file, with AUTH', async () => {
    const relay = await startCountingSink({ secure: true, key: tls.key, cert: tls.cert, users: { relayuser: 's3cret' } });
    const rig = await startRig({
      env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtps://relayuser:s3cret@127.0.0.1:${relay.port}`, POSTINO_DELIVERY_EXTRA_CA_FILE: caFile },
    });
    try {
      await addSendingDomain(rig, 'sender.test');
      const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id), 'delivered');
      assert.equal(relay.messages.length, 1);
      assert.equal(relay.messages[0].secure, true, 'the session ran over TLS');
      assert.equal(relay.messages[0].authUser, 'relayuser');
      assert.deepEqual(relay.messages[0].rcptTo, ['lee@anywhere.example']);
      const delivered = eventsOf(rig, id).find((e) => e.type === 'delivered')!;
      assert.equal(delivered.data?.tls, true);
      assert.equal(delivered.data?.mxHost, '127.0.0.1');
      assert.match(String(delivered.data?.smtpResponse), /^250 .*counting-1/);
      assert.equal(rig.sink.connections, 0, 'nothing went to the MX port');
    } finally {
      await rig.stop();
      await relay.stop();
    }
  });

  test('smtps:// relay whose certificate is not trusted (no extra_ca_file): deferred, nothing sent', async () => {
    const relay = await startCountingSink({ secure: true, key: tls.key, cert: tls.cert, users: { relayuser: 's3cret' } });
    const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtps://relayuser:s3cret@127.0.0.1:${relay.port}` } });
    try {
      await addSendingDomain(rig, 'sender.test');
      const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
      const deferred = await waitForEvent(rig, id, 'deferred');
      assert.equal(emailStatus(rig, id), 'queued');
      assert.match(String(deferred.data?.smtpResponse), /certificate/i);
      assert.equal(relay.mailFroms, 0);
      assert.equal(relay.messages.length, 0);
    } finally {
      await rig.stop();
      await relay.stop();
    }
  });

  /** Sends one message through `?starttls=required` to a relay built with `sinkOptions`; returns its first deferral. */
  async function deferredByRequiredStarttls(
    sinkOptions: Parameters<typeof startCountingSink>[0],
    relayUrl = (port: number) => `smtp://127.0.0.1:${port}?starttls=required`,
  ) {
    const relay = await startCountingSink(sinkOptions);
    const rig = await startRig({
      env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: relayUrl(relay.port), POSTINO_DELIVERY_EXTRA_CA_FILE: caFile },
    });
    try {
      await addSendingDomain(rig, 'sender.test');
      const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
      const deferred = await waitForEvent(rig, id, 'deferred');
      return { deferred, status: emailStatus(rig, id), bounced: eventsOf(rig, id).some((e) => e.type === 'bounce'), connects: relay.connects, mailFroms: relay.mailFroms, received: relay.messages.length };
    } finally {
      await rig.stop();
      await relay.stop();
    }
  }

  test('?starttls=required against a relay without STARTTLS: never sent in plain text, deferred', async () => {
    // No STARTTLS at all (the command is refused), and STARTTLS only left out of EHLO: smtp-server then still
    // upgrades when asked, with its built-in certificate, which is not trusted.
    for (const sinkOptions of [{ hideSTARTTLS: true, disabledCommands: ['STARTTLS'] }, { hideSTARTTLS: true }]) {
      const outcome = await deferredByRequiredStarttls(sinkOptions);
      const label = JSON.stringify(sinkOptions);
      assert.equal(outcome.status, 'queued', label);
      assert.ok(outcome.connects >= 1, `${label}: the relay was contacted`);
      assert.equal(outcome.mailFroms, 0, `${label}: no transaction started in plain text`);
      assert.equal(outcome.received, 0, label);
      assert.equal(outcome.bounced, false, label);
      assert.equal(outcome.deferred.data?.tls, false, label);
      assert.ok(outcome.deferred.data?.nextAttemptAt, `${label}: a retry is scheduled`);
      assert.match(String(outcome.deferred.data?.smtpResponse), /^All mail hosts failed: 127\.0\.0\.1\[127\.0\.0\.1\]: /, label);
    }
  });

  test('?starttls=required against a relay without STARTTLS: the deferral says STARTTLS was required', async () => {
    const outcome = await deferredByRequiredStarttls({ hideSTARTTLS: true, disabledCommands: ['STARTTLS'] });
    assert.equal(outcome.received, 0);
    assert.match(String(outcome.deferred.data?.smtpResponse), /upgrading connection with STARTTLS: 500/);
    assert.match(String(outcome.deferred.data?.smtpResponse), /127\.0\.0\.1 offered no STARTTLS: delivery\.relay_url requires it \(\?starttls=required\)/);
  });

  test('credentials in the relay URL and a relay without STARTTLS: the deferral says the password is never sent in clear, and which option sends it anyway', async () => {
    const outcome = await deferredByRequiredStarttls({ hideSTARTTLS: true, disabledCommands: ['STARTTLS'], users: { relayuser: 's3cret' } }, (port) => `smtp://relayuser:s3cret@127.0.0.1:${port}`);
    assert.equal(outcome.mailFroms, 0);
    assert.equal(outcome.received, 0);
    const told = String(outcome.deferred.data?.smtpResponse);
    assert.match(told, /127\.0\.0\.1 offered no STARTTLS/);
    assert.match(told, /credentials, which are never sent in clear/);
    // The option that does send them to such a relay, said as what it does.
    assert.match(told, /\?starttls=optional .*without TLS/);
    // The relay's own answer is kept.
    assert.match(told, /STARTTLS: 500/);
  });

  test('?starttls=required against a relay offering STARTTLS: delivered over TLS', async () => {
    const relay = await startCountingSink({ key: tls.key, cert: tls.cert });
    const rig = await startRig({
      env: { POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: `smtp://127.0.0.1:${relay.port}?starttls=required`, POSTINO_DELIVERY_EXTRA_CA_FILE: caFile },
    });
    try {
      await addSendingDomain(rig, 'sender.test');
      const id = await send(rig, { toAddress: 'lee@anywhere.example', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id), 'delivered');
      assert.equal(relay.messages.length, 1);
      assert.equal(relay.messages[0].secure, true, 'upgraded with STARTTLS before MAIL FROM');
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.tls, true);
    } finally {
      await rig.stop();
      await relay.stop();
    }
  });
});

describe('opportunistic STARTTLS', () => {
  test('a server whose TLS handshake fails still gets its mail, in plaintext on a second connection', async () => {
    // Offers STARTTLS but speaks only TLS 1.0, which Node's client refuses: the handshake fails.
    const sink = await startCountingSink({ key: tls.key, cert: tls.cert, maxVersion: 'TLSv1' });
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(sink.port) } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'oldtls.test');
      const id = await send(rig, { toAddress: 'ola@oldtls.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id), 'delivered');
      assert.equal(sink.connects, 2, 'the failed TLS attempt, then the plaintext one');
      assert.equal(sink.messages.length, 1);
      assert.equal(sink.messages[0].secure, false);
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.tls, false);
    } finally {
      await rig.stop();
      await sink.stop();
    }
  });
});

describe('dns timeout', () => {
  test('an MX lookup that times out defers (not bounced, not suppressed) and delivers once DNS answers', async () => {
    const sink = await startCountingSink();
    // dns.timeout / dns.tries: one short try, where the default (5 s × 2) would take ~12 s per lookup here.
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(sink.port), POSTINO_DNS_TIMEOUT: '150ms', POSTINO_DNS_TRIES: '1' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'slowdns.test');
      rig.dns.fail('slowdns.test', 'timeout');
      const started = Date.now();
      const id = await send(rig, { toAddress: 'tim@slowdns.test', fromAddress: 'hello@sender.test' });
      const deferred = await waitForEvent(rig, id, 'deferred');
      assert.ok(Date.now() - started < 3000, 'the short resolver timeout applied');
      assert.equal(emailStatus(rig, id), 'queued');
      assert.match(String(deferred.data?.smtpResponse), /DNS lookup of MX slowdns\.test failed: ETIMEOUT/);
      assert.equal(deferred.data?.mxHost, null);
      assert.equal(deferred.data?.attempt, 1);
      assert.ok(deferred.data?.nextAttemptAt, 'a retry is scheduled');
      assert.ok(jobOf(rig, id), 'still in the queue');
      assert.ok(rig.dns.queries.some((q) => q.name === 'slowdns.test' && q.type === 'MX'), 'the MX query went to the DNS server');
      assert.equal(eventsOf(rig, id).some((e) => e.type === 'bounce'), false);
      const suppressions = await rig.app.api('GET', '/v1/suppressions');
      assert.equal(suppressions.status, 200);
      assert.equal(suppressions.body.data.some((s: { emailAddress: string }) => s.emailAddress === 'tim@slowdns.test'), false);
      assert.equal(sink.connects, 0);

      rig.dns.clearFailure('slowdns.test');
      assert.equal(await waitForFinal(rig, id), 'delivered');
      assert.equal(sink.messages.length, 1);
      assert.deepEqual(sink.messages[0].rcptTo, ['tim@slowdns.test']);
    } finally {
      await rig.stop();
      await sink.stop();
    }
  });
});

describe('connections to one destination', () => {
  test('4 sequential messages to one domain share 1 SMTP connection', async () => {
    const sink = await startCountingSink();
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(sink.port), POSTINO_DELIVERY_IDLE_CONNECTION_TIMEOUT: '5s' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'reuse.test');
      for (let i = 0; i < 4; i++) {
        const id = await send(rig, { toAddress: `r${i}@reuse.test`, fromAddress: 'hello@sender.test' });
        assert.equal(await waitForFinal(rig, id), 'delivered');
      }
      assert.equal(sink.messages.length, 4);
      assert.deepEqual(sink.messages.map((m) => m.rcptTo[0]), ['r0@reuse.test', 'r1@reuse.test', 'r2@reuse.test', 'r3@reuse.test']);
      assert.equal(sink.mailFroms, 4);
      assert.equal(sink.connects, 1, 'one connection carried all four transactions');
    } finally {
      await rig.stop();
      await sink.stop();
    }
  });

  test('a burst of 8 with per_domain_concurrency 2 never has more than 2 sessions at once', async () => {
    // Each DATA reply is held so sessions overlap: without the cap all 8 would run together (concurrency 20).
    const sink = await startCountingSink({ holdMs: 200 });
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(sink.port), POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '2', POSTINO_DELIVERY_CONCURRENCY: '20' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'capped.test');
      const ids = await Promise.all(Array.from({ length: 8 }, (_, i) => send(rig, { toAddress: `c${i}@capped.test`, fromAddress: 'hello@sender.test' })));
      for (const id of ids) assert.equal(await waitForFinal(rig, id), 'delivered');
      assert.equal(sink.messages.length, 8);
      assert.equal(sink.maxTransactions, 2, 'the cap was reached and never exceeded');
      assert.ok(sink.maxOpenConnections <= 2, `at most 2 connections open at once, saw ${sink.maxOpenConnections}`);
      assert.ok(sink.connects <= 2, `connections were reused, saw ${sink.connects}`);
    } finally {
      await rig.stop();
      await sink.stop();
    }
  });

  test('with three equal MX hosts, per_domain_concurrency 2 still means at most 2 connections open, idle ones included', async () => {
    const sink = await startCountingSink({ holdMs: 100 });
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(sink.port), POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '2', POSTINO_DELIVERY_CONCURRENCY: '20' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      // Shuffled equal preferences spread the mail over the hosts; each host's idle connections count too.
      rig.dns.set('spread.test', 'MX', [1, 2, 3].map((i) => ({ preference: 10, exchange: `mx${i}.spread.test` })));
      for (const i of [1, 2, 3]) rig.dns.set(`mx${i}.spread.test`, 'A', ['127.0.0.1']);
      const ids = await Promise.all(Array.from({ length: 16 }, (_, i) => send(rig, { toAddress: `s${i}@spread.test`, fromAddress: 'hello@sender.test' })));
      for (const id of ids) assert.equal(await waitForFinal(rig, id), 'delivered');
      assert.equal(sink.messages.length, 16);
      assert.ok(sink.maxOpenConnections <= 2, `at most 2 connections open at once, saw ${sink.maxOpenConnections}`);
    } finally {
      await rig.stop();
      await sink.stop();
    }
  });
});

describe('messages a server cannot or did not answer', () => {
  test("a message larger than the server's SIZE bounces at once (552 5.3.4) and the address is not suppressed", async () => {
    const sink = await startCountingSink({ size: 2000 });
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(sink.port) } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'small.test');
      const big = await send(rig, { toAddress: 'big@small.test', fromAddress: 'hello@sender.test', text: 'x'.repeat(70).concat('\n').repeat(100) });
      assert.equal(await waitForFinal(rig, big), 'bounce');
      const attempts = eventsOf(rig, big).filter((e) => e.type !== 'queued');
      assert.deepEqual(attempts.map((e) => e.type), ['bounce'], 'one attempt, no retries');
      assert.match(String(attempts[0].data?.smtpResponse), /^552 5\.3\.4 message of \d+ bytes is larger than mx\.small\.test accepts \(SIZE 2000\)$/);
      assert.equal(sink.mailFroms, 0, 'nothing was sent');
      // The message was too big, not the address: the next one to it goes out.
      const small = await send(rig, { toAddress: 'big@small.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, small), 'delivered');
    } finally {
      await rig.stop();
      await sink.stop();
    }
  });

  test('a message sent but unanswered (timeout after the final dot) is deferred, not sent to the next MX at once', async () => {
    // The first MX never answers the final dot in time; the second, on another loopback address, would accept.
    // It offers STARTTLS: the deferral records that the session was encrypted.
    const silent = await startCountingSink({ holdMs: 3000, key: tls.key, cert: tls.cert });
    const backup = await startCountingSink({ host: '127.0.0.2', port: silent.port });
    const rig = await startRig({ env: { POSTINO_DELIVERY_PORT: String(silent.port), POSTINO_DELIVERY_SOCKET_TIMEOUT: '1s', POSTINO_DELIVERY_RETRY_SCHEDULE: '1h' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      rig.dns.set('slow.test', 'MX', [{ preference: 10, exchange: 'mx1.slow.test' }, { preference: 20, exchange: 'mx2.slow.test' }]);
      rig.dns.set('mx1.slow.test', 'A', ['127.0.0.1']);
      rig.dns.set('mx2.slow.test', 'A', ['127.0.0.2']);
      const id = await send(rig, { toAddress: 'patient@slow.test', fromAddress: 'hello@sender.test' });
      const deferred = await waitForEvent(rig, id, 'deferred', 8000);
      assert.equal(deferred.data?.mxHost, 'mx1.slow.test');
      assert.match(String(deferred.data?.smtpResponse), /no reply after the message was sent, so it may have been delivered/);
      assert.equal(deferred.data?.tls, true);
      assert.equal(emailStatus(rig, id), 'queued');
      assert.equal(backup.mailFroms, 0, 'no second copy went to the other MX');
    } finally {
      await rig.stop();
      await silent.stop();
      await backup.stop();
    }
  });
});
