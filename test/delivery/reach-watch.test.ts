import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createReachWatch, unreachedAttemptsToWarn } from '../../src/delivery/reach-watch.js';
import { createLogger } from '../../src/lib/logger.js';
import { waitUntil } from '../helpers/wait-until.js';
import { routeToSink, send, startRig, waitForFinal } from './harness.js';

const warning = 'no mail host answered the last';

test('mx mode: attempts to several domains that reach no host at all (port 25 blocked) are said once at warn, with the relay setting that avoids it; a host answering again is said too', async () => {
  const rig = await startRig({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_LOG_LEVEL: 'info', POSTINO_DELIVERY_RETRY_SCHEDULE: '1h' } });
  try {
    // Loopback addresses where nothing listens on the delivery port: every connection refused, as a blocked port 25 is.
    for (const domain of ['a.blocked.test', 'b.blocked.test', 'c.blocked.test']) {
      rig.dns.set(domain, 'MX', [{ preference: 10, exchange: `mx.${domain}` }]);
      rig.dns.set(`mx.${domain}`, 'A', ['127.0.0.2']);
    }
    for (let i = 0; i < unreachedAttemptsToWarn - 1; i++) await send(rig, { toAddress: `user${i}@${'abc'[i % 3]}.blocked.test`, fromAddress: 'app@sender.test' });
    await waitUntil(() => rig.app.logs.filter((line) => line.includes('"msg":"email deferred"')).length === unreachedAttemptsToWarn - 1, '9 deferrals');
    assert.ok(!rig.app.logs.some((line) => line.includes(warning)), 'not before the 10th');
    await send(rig, { toAddress: 'user9@a.blocked.test', fromAddress: 'app@sender.test' });
    await waitUntil(() => rig.app.logs.some((line) => line.includes(warning)), 'the warning');
    const line = rig.app.logs.find((entry) => entry.includes(warning))!;
    assert.match(line, /"level":"warn"/);
    assert.match(line, /outbound port 25 may be blocked .* \(delivery\.mode = \\"relay\\"/);
    assert.match(line, /"lastReason":".*ECONNREFUSED/);
    routeToSink(rig.dns, 'open.test');
    assert.equal(await waitForFinal(rig, await send(rig, { toAddress: 'bob@open.test', fromAddress: 'app@sender.test' })), 'delivered');
    await waitUntil(() => rig.app.logs.some((entry) => entry.includes('delivery reaches mail hosts again')), 'said when a host answers');
    assert.equal(rig.app.logs.filter((entry) => entry.includes(warning)).length, 1, 'said once');
  } finally {
    await rig.stop();
  }
});

test('one domain whose hosts are all down is that domain\'s trouble: no warning however many attempts', () => {
  const lines: string[] = [];
  const watch = createReachWatch(createLogger({ level: 'info', write: (line) => lines.push(line) }));
  for (let i = 0; i < 50; i++) watch.observe('down.example', false, 'connection refused');
  assert.ok(!lines.some((line) => line.includes(warning)));
  watch.observe('other.example', false, 'connection refused');
  watch.observe('third.example', false, 'connection refused');
  assert.equal(lines.filter((line) => line.includes(warning)).length, 1);
  // An attempt that got an SMTP reply anywhere resets the count: the next run of failures starts again.
  watch.observe('ok.example', true, '250 ok');
  for (let i = 0; i < unreachedAttemptsToWarn - 1; i++) watch.observe(`d${i % 3}.example`, false, 'timeout');
  assert.equal(lines.filter((line) => line.includes(warning)).length, 1);
});
