import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { withNoFileDescriptorsLeft } from '../helpers/no-file-descriptors.js';
import { waitUntil } from '../helpers/wait-until.js';
import { eventsOf, routeToSink, send, startRig, waitForFinal } from './harness.js';

// At its open-file limit (EMFILE) this process cannot open a socket: the connection to the MX fails before
// the destination is reached. That was recorded as the destination's failure ("All mail hosts failed"),
// charged as an attempt, and the destination held off (its other mail waiting out a cool-down, an hour at
// most) for a problem of this side's.
test('a connection that fails for want of file descriptors (EMFILE) defers the email without blaming or holding off the destination', async (t) => {
  const rig = await startRig({
    env: {
      // The lookups of the first email are reused (no DNS socket needed at the limit); its connection is not.
      POSTINO_DELIVERY_DNS_CACHE_TTL: '1h',
      POSTINO_DELIVERY_IDLE_CONNECTION_TIMEOUT: '10ms',
      // Held off, the destination's mail would wait this long: far past this test.
      POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '1h',
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      POSTINO_LOG_LEVEL: 'debug',
    },
  });
  try {
    routeToSink(rig.dns, 'dest.test');
    const first = await send(rig, { toAddress: 'ann@dest.test', fromAddress: 'app@sender.test' });
    assert.equal(await waitForFinal(rig, first), 'delivered');
    await sleep(100); // its idle connection closes (idle_connection_timeout)

    const { appliance } = rig.app;
    let second = '';
    const ran = await withNoFileDescriptorsLeft(t, async () => {
      // In process: an API request would need a socket too.
      ({ id: second } = await appliance.context.emails.send(appliance.defaultProjectId, { toAddress: 'bob@dest.test', fromAddress: 'app@sender.test', subject: 'Hello', text: 'Hello there' } as never));
      await waitUntil(() => rig.app.logs.some((line) => line.includes('out of file descriptors')) || eventsOf(rig, second).some((e) => e.type === 'deferred'), 'the attempt at the open-file limit');
      return true;
    });
    if (!ran) return;

    assert.deepEqual(eventsOf(rig, second).filter((e) => e.type === 'deferred'), [], 'no deferral blaming the mail hosts');
    assert.ok(rig.app.logs.some((line) => line.includes('out of file descriptors') && line.includes('"level":"warn"')), 'logged as this side\'s resource problem');
    // Descriptors are free again: the destination was not held off, so the email goes on the next try.
    assert.equal(await waitForFinal(rig, second, 20_000), 'delivered');
    const delivered = eventsOf(rig, second).find((e) => e.type === 'delivered');
    assert.equal((delivered?.data as { attempt?: number } | undefined)?.attempt, 1, 'the failed connection was not charged as an attempt');
  } finally {
    await rig.stop();
  }
});
