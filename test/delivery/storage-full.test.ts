import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { systemClock } from '../../src/lib/clock.js';
import { fillDisk, freeDisk } from '../helpers/full-disk.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, emailStatus, eventsOf, jobOf, routeToSink, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

// The disk fills while a message is on the wire: the receiver has the message, and the outcome cannot be
// written. Dropping the outcome would send the message again when its lease expires; the engine keeps
// writing it until there is room, so the recipient gets one copy.
let rig: DeliveryRig;
let filled = false;
const sqlite = () => rig.app.appliance.context.database.sqlite;

before(async () => {
  rig = await startRig({
    // The disk cap (full-disk.ts) holds for the main connection only.
    env: { POSTINO_STORAGE_WRITER_THREAD: 'false', POSTINO_LOG_LEVEL: 'debug' },
    sink: {
      beforeReply: async () => {
        if (filled) return;
        filled = true;
        const newest = sqlite().prepare('select id from emails order by id desc limit 1').pluck().get() as string;
        fillDisk(sqlite(), newest, systemClock);
      },
    },
  });
  await addSendingDomain(rig, 'shop.test');
  routeToSink(rig.dns, 'inbox.test');
});
after(() => rig.stop());

test('an outcome refused for lack of space is written once there is room: delivered, one copy', async () => {
  const id = await send(rig, { toAddress: 'ann@inbox.test', fromAddress: 'orders@shop.test' });
  await rig.sink.waitFor(1);
  // Refused more than once: the engine keeps trying while the disk stays full.
  const waits = () => rig.app.logs.filter((line) => line.includes('delivery outcome waits for storage space')).length;
  await waitUntil(() => waits() >= 2, 'the outcome write refused twice');
  assert.ok(rig.app.logs.some((line) => line.includes('storage full: writes are refused')));
  assert.equal(emailStatus(rig, id), 'queued');
  assert.ok(jobOf(rig, id), 'the job keeps its lease meanwhile');

  freeDisk(sqlite());
  assert.equal(await waitForFinal(rig, id), 'delivered');
  assert.equal(jobOf(rig, id), undefined);
  assert.deepEqual(eventsOf(rig, id).filter((event) => event.type !== 'filler').map((event) => event.type), ['queued', 'delivered']);
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(rig.sink.messages.length, 1, 'the recipient got one copy');
  assert.ok(!rig.app.logs.some((line) => line.includes('delivery attempt crashed')));
});
