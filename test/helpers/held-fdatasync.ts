import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * node:fs fdatasync (the write queue's WAL sync, wal-sync.ts) swapped for one that counts its calls and
 * holds each until the test runs it from `state.held` (failing it with `state.failWith` when set).
 * `releaseAll` runs what is held and lets later syncs through; `restore` does that and puts fdatasync back.
 */
export async function holdFdatasync() {
  const fs = (await import('node:fs')).default;
  const { syncBuiltinESMExports } = await import('node:module');
  const realFdatasync = fs.fdatasync;
  const state = { held: [] as (() => void)[], calls: 0, failWith: undefined as Error | undefined, holding: true };
  fs.fdatasync = ((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
    state.calls++;
    const sync = () => (state.failWith ? callback(state.failWith) : realFdatasync(fd, callback));
    if (state.holding) state.held.push(sync);
    else sync();
  }) as typeof fs.fdatasync;
  syncBuiltinESMExports();
  const releaseAll = () => {
    state.holding = false;
    for (const sync of state.held.splice(0)) sync();
  };
  const restore = () => {
    state.failWith = undefined;
    releaseAll();
    fs.fdatasync = realFdatasync;
    syncBuiltinESMExports();
  };
  const waitForHeld = async () => {
    for (let waited = 0; state.held.length === 0; waited += 5) {
      assert.ok(waited < 10_000, 'the write queue never synced the WAL');
      await sleep(5);
    }
  };
  return { state, waitForHeld, releaseAll, restore };
}
