import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { createMtaSts } from '../../src/delivery/mta-sts.js';
import { createResolver } from '../../src/lib/resolver.js';
import { createLogger } from '../../src/lib/logger.js';
import { startDnsServer } from '../helpers/dns-server.js';
import { createTestCa } from './test-ca.js';

test('a policy host answering 101 Switching Protocols is a failed fetch within delivery.mta_sts_timeout, not a delivery that waits forever', async () => {
  // Node's client destroys the socket of an upgrade nobody listens for without an 'error' on the request,
  // and the 'close' cleared the deadline: the fetch never settled, and every delivery to the domain (each
  // holding a delivery slot) waited on it for good.
  const ca = createTestCa();
  const cert = ca.issue(['mta-sts.upgrade.test']);
  const server: Server = createServer({ key: cert.key, cert: cert.cert }, (socket) => {
    socket.on('error', () => {});
    socket.once('data', () => socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const dns = await startDnsServer();
  try {
    dns.set('_mta-sts.upgrade.test', 'TXT', ['v=STSv1; id=1;']);
    dns.set('mta-sts.upgrade.test', 'A', ['127.0.0.1']);
    const warnings: string[] = [];
    const mtaSts = createMtaSts({
      resolver: createResolver({ servers: [dns.address] }),
      log: createLogger({ level: 'warn', write: (line) => warnings.push(line) }),
      nowMs: () => Date.now(),
      port: (server.address() as AddressInfo).port,
      timeoutMs: 500,
      ca: [ca.certPem],
      allowPrivate: true,
      recordTtlMs: 60_000,
    });
    const started = Date.now();
    const outcome = await Promise.race([
      mtaSts.policyFor('upgrade.test').then((policy) => ({ policy })),
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 3_000).unref()),
    ]);
    assert.notEqual(outcome, 'hung', 'the policy fetch never settled');
    assert.deepEqual(outcome, { policy: undefined });
    assert.ok(Date.now() - started < 1_000, `answered after ${Date.now() - started} ms`);
    assert.match(warnings.join('\n'), /mta-sts policy fetch failed.*101/);
  } finally {
    await dns.stop();
    await new Promise((resolve) => server.close(resolve));
  }
});
