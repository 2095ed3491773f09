import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:https';
import { createSecureContext } from 'node:tls';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js';
import { createTestCa } from './test-ca.js';
import { addSendingDomain, emailStatus, eventsOf, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

/**
 * MTA-STS (RFC 8461) end to end: a real HTTPS policy server on loopback with a certificate from a test CA
 * that the appliance trusts through delivery.extra_ca_file, real DNS (_mta-sts TXT, MX, A), and SMTP sinks
 * with and without STARTTLS. 127.0.0.1 runs the TLS sink, 127.0.0.2 a plain one on the same port.
 */
describe('MTA-STS', () => {
  let rig: DeliveryRig;
  let plainSink: SmtpSink;
  let cnOnlySink: SmtpSink;
  let policyServer: Server;
  const policies = new Map<string, string>();
  const policyRequests: string[] = [];
  const domains = ['enforce.test', 'elsewhere.test', 'notls.test', 'trial.test', 'cnonly.test'];

  before(async () => {
    const ca = createTestCa();
    // mx.wrongcert.test is deliberately absent: its MX presents a certificate for other names.
    const names = [...domains.flatMap((d) => [`mta-sts.${d}`, `mx.${d}`]), 'mta-sts.wrongcert.test'];
    const serverCert = ca.issue(names);
    const dir = mkdtempSync(join(tmpdir(), 'postino-mta-sts-'));
    const caFile = join(dir, 'ca.pem');
    writeFileSync(caFile, ca.certPem);

    // Certificates that name their host in the subject CN only, without a subjectAltName.
    const cnOnlyMx = ca.issue(['mx.cnonly.test'], { cnOnly: true });
    const cnOnlyPolicyHost = createSecureContext(ca.issue(['mta-sts.cnpolicy.test'], { cnOnly: true }));
    const SNICallback = (name: string, done: (error: Error | null, context?: ReturnType<typeof createSecureContext>) => void) =>
      done(null, name === 'mta-sts.cnpolicy.test' ? cnOnlyPolicyHost : undefined);
    policyServer = createServer({ key: serverCert.key, cert: serverCert.cert, SNICallback }, (req, res) => {
      const host = String(req.headers.host ?? '').replace(/:\d+$/, '');
      policyRequests.push(`${host}${req.url}`);
      const policy = req.url === '/.well-known/mta-sts.txt' ? policies.get(host) : undefined;
      if (!policy) return res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'text/plain' }).end(policy);
    });
    await new Promise<void>((resolve) => policyServer.listen(0, '127.0.0.1', resolve));
    const policyPort = (policyServer.address() as AddressInfo).port;

    rig = await startRig({
      sink: { tls: { key: serverCert.key, cert: serverCert.cert } },
      env: { POSTINO_DELIVERY_MTA_STS_PORT: String(policyPort), POSTINO_DELIVERY_EXTRA_CA_FILE: caFile },
    });
    plainSink = await startSmtpSink({ host: '127.0.0.2', port: rig.sink.port });
    cnOnlySink = await startSmtpSink({ host: '127.0.0.3', port: rig.sink.port, tls: cnOnlyMx });
    await addSendingDomain(rig, 'sender.test');
  });
  after(async () => {
    await rig.stop();
    await plainSink.stop();
    await cnOnlySink.stop();
    await new Promise((resolve) => policyServer.close(resolve));
  });

  /** Publishes a policy for `domain` (TXT + HTTPS) and points its MX `mxHost` at `address`. */
  function publish(domain: string, policy: { id: string; mode: string; mx: string[] }, mxHost: string, address: string) {
    rig.dns.set(`_mta-sts.${domain}`, 'TXT', [`v=STSv1; id=${policy.id};`]);
    rig.dns.set(`mta-sts.${domain}`, 'A', ['127.0.0.1']);
    policies.set(`mta-sts.${domain}`, ['version: STSv1', `mode: ${policy.mode}`, ...policy.mx.map((mx) => `mx: ${mx}`), 'max_age: 86400', ''].join('\r\n'));
    rig.dns.set(domain, 'MX', [{ preference: 10, exchange: mxHost }]);
    rig.dns.set(mxHost, 'A', [address]);
  }

  async function waitForEvent(id: string, type: string, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const event = eventsOf(rig, id).find((e) => e.type === type);
      if (event) return event;
      if (Date.now() > deadline) throw new Error(`no ${type} event for ${id}: ${JSON.stringify(eventsOf(rig, id))}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  test('enforce + listed MX + certificate valid for the MX name → delivered over verified TLS; policy cached by id', async () => {
    publish('enforce.test', { id: 'pol1', mode: 'enforce', mx: ['*.enforce.test'] }, 'mx.enforce.test', '127.0.0.1');
    const id = await send(rig, { toAddress: 'ann@enforce.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const message = rig.sink.messages.find((m) => m.rcptTo[0] === 'ann@enforce.test');
    assert.ok(message, 'the TLS sink received it');
    assert.equal(message.secure, true, 'STARTTLS was used');
    const delivered = eventsOf(rig, id).find((e) => e.type === 'delivered')!;
    assert.equal(delivered.data?.mtaSts, 'enforce');
    assert.equal(delivered.data?.tls, true);

    const fetches = policyRequests.filter((r) => r.startsWith('mta-sts.enforce.test/')).length;
    assert.equal(fetches, 1);
    const second = await send(rig, { toAddress: 'bea@enforce.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, second), 'delivered');
    assert.equal(policyRequests.filter((r) => r.startsWith('mta-sts.enforce.test/')).length, 1, 'same id: the cached policy is reused');
  });

  test('enforce + MX not matching the policy → deferred without connecting anywhere', async () => {
    publish('elsewhere.test', { id: 'pol2', mode: 'enforce', mx: ['mail.provider.test'] }, 'mx.elsewhere.test', '127.0.0.1');
    const connectionsBefore = rig.sink.connections + plainSink.connections;
    const id = await send(rig, { toAddress: 'cid@elsewhere.test', fromAddress: 'hello@sender.test' });
    const deferred = await waitForEvent(id, 'deferred');
    assert.match(String(deferred.data?.smtpResponse), /MTA-STS policy of elsewhere\.test .*matches none of its MX hosts/);
    assert.equal(deferred.data?.mtaSts, 'enforce');
    assert.equal(emailStatus(rig, id), 'queued', 'deferred, not bounced');
    assert.equal(rig.sink.connections + plainSink.connections, connectionsBefore, 'no SMTP connection was opened');
  });

  test('enforce + MX without STARTTLS → deferred, never sent in plaintext', async () => {
    publish('notls.test', { id: 'pol3', mode: 'enforce', mx: ['mx.notls.test'] }, 'mx.notls.test', '127.0.0.2');
    const connectionsBefore = plainSink.connections;
    const id = await send(rig, { toAddress: 'dan@notls.test', fromAddress: 'hello@sender.test' });
    const deferred = await waitForEvent(id, 'deferred');
    assert.match(String(deferred.data?.smtpResponse), /mx\.notls\.test.*(STARTTLS|TLS|SSL)/);
    assert.equal(emailStatus(rig, id), 'queued');
    assert.ok(plainSink.connections > connectionsBefore, 'the MX was tried');
    assert.equal(plainSink.messages.filter((m) => m.rcptTo[0] === 'dan@notls.test').length, 0, 'nothing sent without TLS');
  });

  test('enforce + certificate not valid for the MX name → deferred', async () => {
    publish('wrongcert.test', { id: 'pol5', mode: 'enforce', mx: ['*.wrongcert.test'] }, 'mx.wrongcert.test', '127.0.0.1');
    const id = await send(rig, { toAddress: 'fay@wrongcert.test', fromAddress: 'hello@sender.test' });
    const deferred = await waitForEvent(id, 'deferred');
    assert.match(String(deferred.data?.smtpResponse), /mx\.wrongcert\.test.*(altnames|certificate)/i);
    assert.equal(emailStatus(rig, id), 'queued');
    assert.equal(rig.sink.messages.filter((m) => m.rcptTo[0] === 'fay@wrongcert.test').length, 0);
  });

  test('testing mode only reports: delivered in plaintext to an MX outside the policy', async () => {
    publish('trial.test', { id: 'pol4', mode: 'testing', mx: ['mail.provider.test'] }, 'mx.trial.test', '127.0.0.2');
    const id = await send(rig, { toAddress: 'eve@trial.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const message = plainSink.messages.find((m) => m.rcptTo[0] === 'eve@trial.test');
    assert.ok(message);
    assert.equal(message.secure, false);
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.mtaSts, 'testing');
    assert.ok(policyRequests.includes('mta-sts.trial.test/.well-known/mta-sts.txt'), 'the policy was fetched');
  });

  test('a certificate naming its host only in the subject CN (no subjectAltName) is not valid, for the MX or the policy host (RFC 8461 §3.3, §4.2: DNS-ID only)', async () => {
    publish('cnonly.test', { id: 'pol6', mode: 'enforce', mx: ['mx.cnonly.test'] }, 'mx.cnonly.test', '127.0.0.3');
    const id = await send(rig, { toAddress: 'gus@cnonly.test', fromAddress: 'hello@sender.test' });
    const deferred = await waitForEvent(id, 'deferred');
    assert.match(String(deferred.data?.smtpResponse), /mx\.cnonly\.test.*subjectAltName/);
    assert.equal(emailStatus(rig, id), 'queued');
    assert.equal(cnOnlySink.messages.length, 0, 'nothing sent to the MX');

    // The policy host's certificate is not valid either: no policy, so its MX outside the listed ones is used.
    publish('cnpolicy.test', { id: 'pol7', mode: 'enforce', mx: ['mail.provider.test'] }, 'mx.cnpolicy.test', '127.0.0.2');
    const second = await send(rig, { toAddress: 'hal@cnpolicy.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, second), 'delivered');
    assert.equal(eventsOf(rig, second).find((e) => e.type === 'delivered')!.data?.mtaSts, undefined, 'no policy applied');
  });
});
