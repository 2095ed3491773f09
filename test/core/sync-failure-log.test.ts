import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { holdFdatasync } from '../helpers/held-fdatasync.js';
import { startAppliance } from '../helpers/appliance.js';

test('after a failed sync of the database the log says so once, not an error with its stack from every delivery and webhook pass', async (t) => {
  const sync = await holdFdatasync();
  sync.releaseAll();
  const app = await startAppliance({
    env: { POSTINO_LOG_LEVEL: 'info', POSTINO_SCHEDULER_ENABLED: 'true', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture' },
  });
  t.after(async () => {
    await app.stop().catch(() => undefined);
    sync.restore();
  });
  sync.state.failWith = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
  const refused = await app.api('POST', '/v1/email/send', { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Hi', text: 'Hi' });
  assert.equal(refused.status, 500);
  sync.state.failWith = undefined;
  const errors = () => app.logs.filter((line) => line.includes('"level":"error"'));
  assert.equal(errors().filter((line) => line.includes('a sync of the database failed')).length, 1, 'the operator is told, once');
  // Passes under way when the sync failed may report it; from then on every pass is refused the same way.
  await sleep(1_000);
  const before = errors().length;
  await sleep(3_000);
  assert.deepEqual(errors().slice(before), [], 'no error line per pass while the appliance waits for its restart');
  assert.equal((await app.api('GET', '/healthz', undefined, { key: null })).body.components.storage, 'failed', '/healthz says it');
});
