import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { test } from 'node:test';
import { createResolver } from '../../src/lib/resolver.js';
import { postWebhook } from '../../src/webhooks/post.js';

test('a host name whose DNS never answers fails the attempt within webhooks.timeout, inside the dispatcher lease', async () => {
  // A real UDP socket on loopback that takes every query and answers none.
  const silentDns = createSocket('udp4');
  await new Promise<void>((resolve) => silentDns.bind(0, '127.0.0.1', resolve));
  let queries = 0;
  silentDns.on('message', () => queries++);
  try {
    // The resolver alone would wait 30 s per try, twice, for A and then AAAA: two minutes against a lease
    // of 2 × timeout + 5 s, after which a second dispatcher pass would POST the same delivery again.
    const resolver = createResolver({ servers: [`127.0.0.1:${silentDns.address().port}`], timeoutMs: 30_000, tries: 2 });
    const started = Date.now();
    const result = await postWebhook('http://hooks.example.test/in', {}, '{}', { resolver, allowPrivate: true, timeoutMs: 400 });
    const tookMs = Date.now() - started;
    assert.equal(result.ok, false);
    assert.match(result.error ?? '', /^DNS: timed out/);
    assert.ok(queries >= 1, 'the lookup went to the DNS server');
    assert.ok(tookMs >= 350 && tookMs < 2_000, `answered after ${tookMs} ms`);
  } finally {
    silentDns.close();
  }
});
