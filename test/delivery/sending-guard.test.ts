import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type DatabaseHandle } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { ManualClock } from '../../src/lib/clock.js';
import { countOutcome, createSendingGuard, loadSendingStats, type SuspensionPolicy } from '../../src/delivery/reputation.js';

const policy: SuspensionPolicy = { enabled: true, windowMs: 7 * 86_400_000, minVolume: 1000, youngMaxBounces: 1, youngMaxComplaints: 5 };
let dir: string;
let handle: DatabaseHandle;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'postino-sending-guard-'));
  handle = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
  migrateDatabase(handle.db);
  const project = handle.sqlite.prepare(`insert into projects (id, name, created_at, updated_at) values (?, ?, 0, 0)`);
  for (const id of ['busy', 'tenant-49999', 'window-start']) project.run(id, id);
});
after(() => {
  handle.close();
  rmSync(dir, { recursive: true, force: true });
});

test('the suspension verdict is cached per project for 2 s, and the cache does not grow with every project that ever sent', () => {
  const clock = new ManualClock();
  const guard = createSendingGuard({ sqlite: handle.sqlite, clock, policy });

  // What the cache is for: a verdict is read once per 2 s, not on every send.
  assert.equal(guard.verdict('busy').paused, false);
  countOutcome(handle.sqlite, 'busy', clock.nowMs(), 'bounced');
  countOutcome(handle.sqlite, 'busy', clock.nowMs(), 'bounced');
  clock.advance(1_000);
  assert.equal(guard.verdict('busy').paused, false, 'still the cached verdict');
  clock.advance(1_000);
  assert.equal(guard.verdict('busy').paused, true, 'read again once 2 s have passed');

  // An integration that makes a linked project per customer: 50,000 projects send over the months
  // (here one every 10 ms), each only for a while, most of them deleted since.
  for (let i = 0; i < 50_000; i++) {
    clock.advance(10);
    guard.verdict(`tenant-${i}`);
  }
  // 200 projects sent within the last 2 s; expired verdicts must not be kept for the others.
  assert.ok(guard.cachedVerdicts <= 1_000, `verdicts kept: ${guard.cachedVerdicts}`);
  // Recent ones are still served from the cache.
  countOutcome(handle.sqlite, 'tenant-49999', clock.nowMs(), 'bounced');
  countOutcome(handle.sqlite, 'tenant-49999', clock.nowMs(), 'bounced');
  assert.equal(guard.verdict('tenant-49999').paused, false, 'a verdict of 10 ms ago is still cached');
});

test('the window counts the whole UTC day it starts in, and not the day before', () => {
  // Guards the window's first day (docs/delivery.md: whole UTC days, up to a day longer than the window):
  // counting from the day after would drop bounces still inside the window, and a 1 d window would forget
  // all of yesterday's bounces at 00:00 UTC.
  const clock = new ManualClock('2026-03-10T10:00:00.000Z');
  const guard = createSendingGuard({ sqlite: handle.sqlite, clock, policy });
  const windowStart = clock.nowMs() - policy.windowMs; // 2026-03-03T10:00Z
  countOutcome(handle.sqlite, 'window-start', windowStart, 'bounced');
  countOutcome(handle.sqlite, 'window-start', windowStart + 4 * 3_600_000, 'bounced');
  // 2026-03-02T23:00Z: the UTC day before the window's first, out of it.
  countOutcome(handle.sqlite, 'window-start', windowStart - 11 * 3_600_000, 'bounced');
  assert.deepEqual({ ...loadSendingStats(handle.sqlite, 'window-start', windowStart) }, { sent: 2, bounces: 2, complaints: 0 });
  const verdict = guard.verdict('window-start');
  assert.equal(verdict.paused, true, 'two bounces inside the window are over youngMaxBounces = 1');
  assert.match(verdict.paused ? verdict.reason : '', /^2 bounces/);
});
