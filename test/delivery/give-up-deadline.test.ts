import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ManualClock } from '../../src/lib/clock.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, emailStatus, eventsOf, routeToSink, send, startRig } from './harness.js';

const dayMs = 86_400_000;

test('mail first tried just before give_up_after (the host was down) gets its greylisted retry after the schedule\'s delay, as mail first tried just after it does', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-give-up-'));
  const clock = new ManualClock('2026-03-01T12:00:00Z');
  // Postgrey's wording and default: a sender is refused for 5 minutes after its first attempt.
  const firstSeen = new Map<string, number>();
  const onRcpt = (address: string) => {
    if (!firstSeen.has(address)) firstSeen.set(address, clock.nowMs());
    return clock.nowMs() - firstSeen.get(address)! < 300_000 ? { code: 450, message: '4.2.0 Greylisted, see http://postgrey.schweikert.ch/help/inbox.test.html' } : undefined;
  };
  let rig = await startRig({ app: { dataDir, clock } });
  let early = '';
  let late = '';
  try {
    await addSendingDomain(rig, 'sender.test');
    const later = new Date(clock.nowMs() + 3_600_000).toISOString();
    early = await send(rig, { toAddress: 'early@inbox.test', fromAddress: 'hello@sender.test', scheduledAt: later });
    late = await send(rig, { toAddress: 'late@inbox.test', fromAddress: 'hello@sender.test', scheduledAt: later });
  } finally {
    await rig.stop();
  }
  // Both were accepted just before the host went down for five days, and never tried.
  const db = new Database(join(dataDir, 'postino.sqlite'));
  const projectId = db.prepare('select project_id from emails where id = ?').pluck().get(early);
  db.prepare("update emails set status = 'queued' where id in (?, ?)").run(early, late);
  const insertJob = db.prepare('insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at) values (?, ?, ?, 0, 0, ?)');
  insertJob.run(early, projectId, 'inbox.test', clock.nowMs() - 5 * dayMs - 10_000); // 10 s past give_up_after
  insertJob.run(late, projectId, 'inbox.test', clock.nowMs() - 5 * dayMs + 10_000); // 10 s before it
  db.close();

  rig = await startRig({ app: { dataDir, clock }, env: { POSTINO_DELIVERY_RETRY_SCHEDULE: '5m' }, sink: { onRcpt } });
  try {
    routeToSink(rig.dns, 'inbox.test');
    const deferred = (id: string) => eventsOf(rig, id).some((e) => e.type === 'deferred');
    await waitUntil(() => deferred(early) && deferred(late), 'both first attempts');
    // The minutes pass (the worker polls every second of real time).
    for (let minute = 0; minute < 6; minute++) {
      clock.advance(60_000);
      await new Promise((resolve) => setTimeout(resolve, 1200));
    }
    await waitUntil(() => emailStatus(rig, early) !== 'queued' && emailStatus(rig, late) !== 'queued', 'both outcomes');
    assert.equal(emailStatus(rig, early), 'delivered');
    assert.equal(emailStatus(rig, late), 'delivered', `events: ${JSON.stringify(eventsOf(rig, late))}`);
  } finally {
    await rig.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a message delivered on a retry days later keeps the Date of when it was queued (RFC 5322 §3.6.1: the origination date)', async () => {
  const clock = new ManualClock('2026-03-01T12:00:00Z');
  let refused = false;
  // The destination is unavailable at the first attempt and takes the message two days later.
  const onRcpt = () => {
    if (refused) return undefined;
    refused = true;
    return { code: 421, message: '4.3.2 Service not available, try again later' };
  };
  const rig = await startRig({ app: { clock }, sink: { onRcpt } });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    const id = await send(rig, { toAddress: 'reader@inbox.test', fromAddress: 'hello@sender.test' });
    await waitUntil(() => eventsOf(rig, id).some((e) => e.type === 'deferred'), 'the first attempt');
    clock.advance(2 * dayMs);
    await waitUntil(() => emailStatus(rig, id) === 'delivered', 'the retry');
    const raw = rig.sink.messages.find((m) => m.rcptTo[0] === 'reader@inbox.test')!.raw.toString();
    assert.match(raw, /\r\nDate: Sun, 01 Mar 2026 12:00:00 \+0000\r\n/);
  } finally {
    await rig.stop();
  }
});
