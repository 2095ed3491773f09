import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test, type TestContext } from 'node:test';
import { withNoFileDescriptorsLeft } from '../helpers/no-file-descriptors.js';
import { waitUntil } from '../helpers/wait-until.js';
import { emailStatus, eventsOf, routeToSink, startRig, waitForFinal, type DeliveryRig } from './harness.js';

// At its open-file limit (EMFILE) this process cannot open a socket: the connection to the MX fails before
// the destination is reached. That was recorded as the destination's failure ("All mail hosts failed"),
// charged as an attempt, and the destination held off (its other mail waiting out a cool-down, an hour at
// most) for a problem of this side's.
test('a connection that fails for want of file descriptors (EMFILE) defers the email without blaming or holding off the destination', async (t) => {
  // The lookups of the first email are reused (no DNS socket needed at the limit); its connection is not.
  const rig = await startRigReachingDest('1h');
  try {
    const second = await sendAtFileLimit(t, rig);
    if (second === undefined) return;

    assert.deepEqual(eventsOf(rig, second).filter((e) => e.type === 'deferred'), [], 'no deferral blaming the mail hosts');
    assert.ok(rig.app.logs.some((line) => line.includes('out of file descriptors') && line.includes('"level":"warn"')), 'logged as this side\'s resource problem');
    // Descriptors are free again: the destination was not held off, so the email goes on the next try.
    await assertDeliveredOnFirstAttempt(rig, second, 'the failed connection was not charged as an attempt');
  } finally {
    await rig.stop();
  }
});

// A DNS lookup at the limit fails too: c-ares cannot open its socket and reports ECONNREFUSED, which read
// as the domain's DNS failing for now ("nothing answered"): a deferral, and the destination held off for
// a cool-down (an hour at most) for this side's problem.
test('a DNS lookup that fails for want of file descriptors defers the email without blaming or holding off the destination', async (t) => {
  // Every message looks its MX up again: the lookup itself meets the limit.
  const rig = await startRigReachingDest('0s');
  try {
    const second = await sendAtFileLimit(t, rig);
    if (second === undefined) return;

    const warning = rig.app.logs.find((line) => line.includes('out of file descriptors') && line.includes('"level":"warn"'));
    assert.ok(warning, 'logged as this side\'s resource problem');
    assert.match(JSON.parse(warning).reason, /DNS lookup of MX dest\.test failed: ECONNREFUSED/, 'the lookup is what failed');
    assert.deepEqual(eventsOf(rig, second).filter((e) => e.type === 'deferred'), [], 'no deferral blaming the domain');
    await assertDeliveredOnFirstAttempt(rig, second, 'the failed lookup was not charged as an attempt');
  } finally {
    await rig.stop();
  }
});

/**
 * A rig that has delivered one email to dest.test and whose connection to it has closed at both ends:
 * reused, it would carry the next email with no new socket, and nothing would meet the limit (a
 * descriptor freed after the limit is reached would be the next connection's). `dnsCacheTtl` says
 * whether the next email's lookups are the first's or made again.
 */
async function startRigReachingDest(dnsCacheTtl: string): Promise<DeliveryRig> {
  const rig = await startRig({
    env: {
      POSTINO_DELIVERY_DNS_CACHE_TTL: dnsCacheTtl,
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
    // In process, as the next one: an API request's keep-alive socket, closing a few seconds later while
    // the descriptors are used up, would free one for the next email's connection.
    const first = await sendInProcess(rig, 'ann@dest.test');
    assert.equal(await waitForFinal(rig, first), 'delivered');
    await waitUntil(() => openSocketsOnPort(rig.sink.port) === 0, 'the idle connection closed at both ends');
    return rig;
  } catch (error) {
    await rig.stop();
    throw error;
  }
}

/**
 * Sends an email to dest.test with no file descriptor left, and waits for its attempt at the limit. The
 * email's id; undefined when the test was skipped (withNoFileDescriptorsLeft). A descriptor the process
 * frees meanwhile on a schedule of its own (a socket of the resolver or of an earlier session closing)
 * can go to the attempt's connection, which then delivers the email: tried again with another email,
 * three times at most.
 */
async function sendAtFileLimit(t: TestContext, rig: DeliveryRig): Promise<string | undefined> {
  for (let tries = 1; ; tries++) {
    const outcome = await withNoFileDescriptorsLeft(t, async () => {
      // In process: an API request would need a socket too.
      const id = await sendInProcess(rig, `bob${tries}@dest.test`);
      await waitUntil(() => attemptMetTheLimit(rig, id) || emailStatus(rig, id) === 'delivered', 'the attempt at the open-file limit');
      return { id, metTheLimit: attemptMetTheLimit(rig, id) };
    });
    if (outcome === undefined || outcome.metTheLimit) return outcome?.id;
    assert.ok(tries < 3, 'each of three emails got a descriptor freed while the limit was reached, and was delivered');
    await waitUntil(() => openSocketsOnPort(rig.sink.port) === 0, 'the idle connection closed at both ends');
  }
}

/** Whether the email's attempt failed for want of descriptors: said in the log, or (the behaviour tested against) a deferral. */
function attemptMetTheLimit(rig: DeliveryRig, id: string): boolean {
  return rig.app.logs.some((line) => line.includes('out of file descriptors') && line.includes(id)) || eventsOf(rig, id).some((e) => e.type === 'deferred');
}

async function sendInProcess(rig: DeliveryRig, toAddress: string): Promise<string> {
  const { appliance } = rig.app;
  const { id } = await appliance.context.emails.send(appliance.defaultProjectId, { toAddress, fromAddress: 'app@sender.test', subject: 'Hello', text: 'Hello there' } as never);
  return id;
}

/** Descriptors free again, the destination not held off: the email goes on its next try, its first attempt. */
async function assertDeliveredOnFirstAttempt(rig: DeliveryRig, id: string, why: string): Promise<void> {
  assert.equal(await waitForFinal(rig, id, 20_000), 'delivered', 'the destination was not held off');
  const delivered = eventsOf(rig, id).find((e) => e.type === 'delivered');
  assert.equal((delivered?.data as { attempt?: number } | undefined)?.attempt, 1, why);
}

/** TCP sockets to or from `port` on this machine that still hold a descriptor (listening ones aside). */
function openSocketsOnPort(port: number): number {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const table = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(1) : []);
  return [...table('/proc/net/tcp'), ...table('/proc/net/tcp6')]
    .map((line) => line.trim().split(/\s+/))
    .filter(([, local, remote, state, , , , , , inode]) => state !== '0A' && inode !== undefined && inode !== '0' && (local?.endsWith(`:${hexPort}`) || remote?.endsWith(`:${hexPort}`))).length;
}
