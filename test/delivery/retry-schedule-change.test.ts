import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ManualClock } from '../../src/lib/clock.js';
import { addSendingDomain, emailStatus, jobOf, routeToSink, send, startRig, waitForEvent, waitForFinal, type DeliveryRig } from './harness.js';

const hourMs = 3_600_000;
const minuteMs = 60_000;

/**
 * delivery.retry_schedule says the delays between attempts. An operator who shortens it (a relay outage
 * over, mail deferred for hours) restarted the appliance and the deferred mail still waited out the
 * delay the old schedule had given it: hours, with nothing to say why.
 */
test('a shortened retry_schedule applies at the restart to mail already deferred under the longer one', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-retry-change-'));
  const clock = new ManualClock('2026-03-01T12:00:00Z');
  let refuse = true;
  const onRcpt = () => (refuse ? { code: 451, message: '4.3.0 Temporary local problem, try again later' } : undefined);
  let rig: DeliveryRig | undefined;
  try {
    rig = await startRig({ app: { dataDir, clock }, env: { POSTINO_DELIVERY_RETRY_SCHEDULE: '4h' }, sink: { onRcpt } });
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    const id = await send(rig, { toAddress: 'bob@inbox.test', fromAddress: 'hello@sender.test' });
    await waitForEvent(rig, id, 'deferred');
    assert.equal(jobOf(rig, id)?.nextAttemptAt, clock.nowMs() + 4 * hourMs, 'the old schedule: 4 h');
    // Held past the schedule for another reason (as a destination's cool-down holds it), then a restart on
    // the same schedule: nothing is moved, the queue not even read.
    const heldUntil = clock.nowMs() + 10 * hourMs;
    rig.app.appliance.context.database.sqlite.prepare('update delivery_jobs set next_attempt_at = ? where email_id = ?').run(heldUntil, id);
    await rig.stop();
    rig = await startRig({ app: { dataDir, clock }, env: { POSTINO_DELIVERY_RETRY_SCHEDULE: '4h' }, sink: { onRcpt } });
    assert.equal(jobOf(rig, id)?.nextAttemptAt, heldUntil, 'a restart on the same schedule moves nothing');
    await rig.stop();
    rig = undefined;

    refuse = false;
    rig = await startRig({ app: { dataDir, clock }, env: { POSTINO_DELIVERY_RETRY_SCHEDULE: '5m' }, sink: { onRcpt } });
    routeToSink(rig.dns, 'inbox.test');
    assert.equal(jobOf(rig, id)?.nextAttemptAt, clock.nowMs() + 5 * minuteMs, 'the new schedule\'s delay, counted from the restart');
    clock.advance(5 * minuteMs);
    assert.equal(await waitForFinal(rig, id), 'delivered');
    assert.equal(emailStatus(rig, id), 'delivered');
  } finally {
    await rig?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
