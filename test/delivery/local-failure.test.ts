import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
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
      // The writer thread starts at the first write; on a loaded machine it can still be starting when the
      // descriptors run out, and its failed start frees the ones it held: the connection would get one.
      POSTINO_STORAGE_WRITER_THREAD: 'false',
    },
  });
  try {
    routeToSink(rig.dns, 'dest.test');
    const first = await send(rig, { toAddress: 'ann@dest.test', fromAddress: 'app@sender.test' });
    assert.equal(await waitForFinal(rig, first), 'delivered');
    // Its idle connection closes (idle_connection_timeout): reused, it would carry the next email with
    // no new socket, and nothing would meet the limit. Both ends, since a descriptor freed after the
    // limit is reached would be the next connection's.
    await waitUntil(() => openSocketsOnPort(rig.sink.port) === 0, 'the idle connection closed at both ends');

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

// A DNS lookup at the limit fails too: c-ares cannot open its socket and reports ECONNREFUSED, which read
// as the domain's DNS failing for now ("nothing answered"): a deferral, and the destination held off for
// a cool-down (an hour at most) for this side's problem.
test('a DNS lookup that fails for want of file descriptors defers the email without blaming or holding off the destination', async (t) => {
  const rig = await startRig({
    env: {
      // Every message looks its MX up again: the lookup itself meets the limit.
      POSTINO_DELIVERY_DNS_CACHE_TTL: '0s',
      POSTINO_DELIVERY_IDLE_CONNECTION_TIMEOUT: '10ms',
      POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '1h',
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      POSTINO_LOG_LEVEL: 'debug',
      POSTINO_STORAGE_WRITER_THREAD: 'false',
    },
  });
  try {
    routeToSink(rig.dns, 'dest.test');
    const first = await send(rig, { toAddress: 'ann@dest.test', fromAddress: 'app@sender.test' });
    assert.equal(await waitForFinal(rig, first), 'delivered');
    await waitUntil(() => openSocketsOnPort(rig.sink.port) === 0, 'the idle connection closed at both ends');

    const { appliance } = rig.app;
    let second = '';
    const ran = await withNoFileDescriptorsLeft(t, async () => {
      ({ id: second } = await appliance.context.emails.send(appliance.defaultProjectId, { toAddress: 'bob@dest.test', fromAddress: 'app@sender.test', subject: 'Hello', text: 'Hello there' } as never));
      await waitUntil(() => rig.app.logs.some((line) => line.includes('out of file descriptors')) || eventsOf(rig, second).some((e) => e.type === 'deferred'), 'the attempt at the open-file limit');
      return true;
    });
    if (!ran) return;

    const warning = rig.app.logs.find((line) => line.includes('out of file descriptors') && line.includes('"level":"warn"'));
    assert.ok(warning, 'logged as this side\'s resource problem');
    assert.match(JSON.parse(warning).reason, /DNS lookup of MX dest\.test failed: ECONNREFUSED/, 'the lookup is what failed');
    assert.deepEqual(eventsOf(rig, second).filter((e) => e.type === 'deferred'), [], 'no deferral blaming the domain');
    assert.equal(await waitForFinal(rig, second, 20_000), 'delivered', 'the destination was not held off');
    const delivered = eventsOf(rig, second).find((e) => e.type === 'delivered');
    assert.equal((delivered?.data as { attempt?: number } | undefined)?.attempt, 1, 'the failed lookup was not charged as an attempt');
  } finally {
    await rig.stop();
  }
});

/** TCP sockets to or from `port` on this machine that still hold a descriptor (listening ones aside). */
function openSocketsOnPort(port: number): number {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const table = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(1) : []);
  return [...table('/proc/net/tcp'), ...table('/proc/net/tcp6')]
    .map((line) => line.trim().split(/\s+/))
    .filter(([, local, remote, state, , , , , , inode]) => state !== '0A' && inode !== undefined && inode !== '0' && (local?.endsWith(`:${hexPort}`) || remote?.endsWith(`:${hexPort}`))).length;
}
