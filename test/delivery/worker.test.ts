import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createDeliveryWorker } from '../../src/delivery/worker.js';
import { silentLogger } from '../../src/lib/logger.js';
import { waitUntil } from '../helpers/wait-until.js';

// The loop around a delivery pass: a pass that handled nothing sleeps for the idle delay (a minute
// here), unless new mail was queued meanwhile.
function startWorker() {
  const passes: { finish: (foundWork: boolean) => void }[] = [];
  const worker = createDeliveryWorker({
    log: silentLogger,
    idleDelayMs: 60_000,
    tick: () => new Promise<boolean>((resolve) => passes.push({ finish: resolve })),
  });
  worker.start();
  return { worker, passes };
}

test('a poke during a pass that found nothing runs another pass at once: the new job may have committed after its claim', async () => {
  const { worker, passes } = startWorker();
  try {
    assert.equal(passes.length, 1);
    worker.poke(); // an accept committed while the pass was claiming
    passes[0]!.finish(false);
    await waitUntil(() => passes.length === 2, 'a second pass without the idle delay', 2000);
    passes[1]!.finish(false);
  } finally {
    await worker.stop();
  }
});

test('without a poke, a pass that found nothing waits for the idle delay; a poke while idle wakes it', async () => {
  const { worker, passes } = startWorker();
  try {
    passes[0]!.finish(false);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(passes.length, 1, 'asleep');
    worker.poke();
    await waitUntil(() => passes.length === 2, 'the poke to wake it', 2000);
    passes[1]!.finish(false);
  } finally {
    await worker.stop();
  }
});
