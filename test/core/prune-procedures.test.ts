import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type DatabaseHandle } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { createPruneCapturedProcedure } from '../../src/delivery/capture-retention.js';
import { createPruneFinishedEmailsProcedure } from '../../src/emails/retention.js';
import type { CursorStep } from '../../src/lib/batches.js';
import { ManualClock } from '../../src/lib/clock.js';
import { idLowerBound, newId } from '../../src/lib/ids.js';
import { createPurgeProjectRowsProcedure } from '../../src/projects/purge.js';
import { createPruneWebhookEventsProcedure } from '../../src/webhooks/prune.js';

// The hourly retention jobs run these write procedures on the writer thread, a batch per write, until a
// batch comes back short: each call must delete at most its limit, oldest first, and only what is due.

const clock = new ManualClock('2026-06-01T00:00:00Z');

function database(): DatabaseHandle {
  const handle = openDatabase({ path: join(mkdtempSync(join(tmpdir(), 'postino-prune-')), 'postino.sqlite'), synchronous: 'NORMAL' });
  migrateDatabase(handle.db);
  handle.sqlite.prepare("insert into projects (id, name, created_at, updated_at) values ('p', 'P', 0, 0)").run();
  return handle;
}

const drain = (prune: () => number) => {
  const batches: number[] = [];
  for (let n = prune(); ; n = prune()) {
    batches.push(n);
    if (n === 0) return batches;
  }
};

test('webhook events: a batch per call, only events whose deliveries are all final and older than the cut-off', () => {
  const { sqlite, close } = database();
  sqlite.prepare("insert into webhook_endpoints (id, project_id, url, secret, created_at, updated_at) values ('e', 'p', 'https://hooks.example.com', 's', 0, 0)").run();
  const event = sqlite.prepare(`insert into webhook_events (id, project_id, type, data, created_at) values (?, 'p', 'email.delivered', '{}', 0)`);
  const delivery = sqlite.prepare(`insert into webhook_deliveries (id, event_id, endpoint_id, project_id, status, created_at, updated_at) values (?, ?, 'e', 'p', ?, 0, 0)`);
  const attempt = sqlite.prepare(`insert into webhook_attempts (id, delivery_id, attempted_at, status_code, duration_ms) values (?, ?, 0, 200, 1)`);
  const add = (status: string) => {
    const eventId = newId(clock);
    const deliveryId = newId(clock);
    event.run(eventId);
    delivery.run(deliveryId, eventId, status);
    attempt.run(newId(clock), deliveryId);
    return eventId;
  };
  sqlite.transaction(() => {
    for (let i = 0; i < 1_200; i++) add(i % 2 ? 'delivered' : 'failed');
  })();
  const pending = add('pending');
  clock.advance(3_600_000);
  const recent = add('delivered');
  const prune = createPruneWebhookEventsProcedure(sqlite);
  const beforeId = idLowerBound(clock.nowMs() - 60_000);
  const steps: { pruned: number; next: string | null }[] = [];
  for (let afterId: string | null = ''; afterId !== null; afterId = steps[steps.length - 1].next) steps.push(prune({ afterId, beforeId, limit: 500 }));
  assert.deepEqual(steps.map((step) => step.pruned), [500, 500, 200], 'the last write looked at the 200 left and the pending event');
  assert.deepEqual(sqlite.prepare('select id from webhook_events order by id').pluck().all(), [pending, recent]);
  assert.equal(sqlite.prepare('select count(*) from webhook_deliveries').pluck().get(), 2, 'deliveries went with their events');
  assert.equal(sqlite.prepare('select count(*) from webhook_attempts').pluck().get(), 2, 'and their attempts');
  close();
});

test('captured messages: a batch per call, oldest first, only those captured before the cut-off', () => {
  const { sqlite, close } = database();
  const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, 'p', 'delivered', 'a@example.com', 'b@example.com', 'Hi', 'text', 0, 0, 0)`);
  const captured = sqlite.prepare(`insert into captured_messages (email_id, project_id, mail_from, rcpt_to, raw, captured_at) values (?, 'p', 'b@example.com', 'a@example.com', ?, ?)`);
  const ids: string[] = [];
  sqlite.transaction(() => {
    for (let i = 0; i < 702; i++) {
      const id = newId(clock);
      ids.push(id);
      email.run(id);
      captured.run(id, Buffer.alloc(2_000, 'x'), i < 700 ? 1_000 + i : 10_000_000);
    }
  })();
  const prune = createPruneCapturedProcedure(sqlite);
  assert.equal(prune({ beforeMs: 5_000_000, limit: 500, maxBytes: 1e9 }), 500);
  assert.equal(sqlite.prepare('select min(captured_at) from captured_messages').pluck().get(), 1_500, 'the oldest went first');
  assert.deepEqual(drain(() => prune({ beforeMs: 5_000_000, limit: 500, maxBytes: 1e9 })), [200, 0]);
  assert.deepEqual(sqlite.prepare('select email_id from captured_messages order by email_id').pluck().all(), ids.slice(700));
  assert.equal(sqlite.prepare('select count(*) from emails').pluck().get(), 702, 'the email records stay');
  close();
});

test('captured messages: one call deletes at most maxBytes of messages (always at least one), so a write of large messages stays short', () => {
  const { sqlite, close } = database();
  const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, 'p', 'delivered', 'a@example.com', 'b@example.com', 'Hi', 'text', 0, 0, 0)`);
  const captured = sqlite.prepare(`insert into captured_messages (email_id, project_id, mail_from, rcpt_to, raw, captured_at) values (?, 'p', 'b@example.com', 'a@example.com', ?, ?)`);
  const megabyte = 1024 * 1024;
  sqlite.transaction(() => {
    for (let i = 0; i < 10; i++) {
      const id = newId(clock);
      email.run(id);
      captured.run(id, Buffer.alloc(megabyte, 'x'), 1_000 + i);
    }
    const huge = newId(clock);
    email.run(huge);
    captured.run(huge, Buffer.alloc(5 * megabyte, 'x'), 2_000);
  })();
  const prune = createPruneCapturedProcedure(sqlite);
  assert.equal(prune({ beforeMs: 5_000_000, limit: 500, maxBytes: 3 * megabyte }), 3, 'three 1 MB messages fill 3 MB');
  assert.equal(sqlite.prepare('select min(captured_at) from captured_messages').pluck().get(), 1_003, 'the oldest went first');
  assert.deepEqual(drain(() => prune({ beforeMs: 5_000_000, limit: 500, maxBytes: 3 * megabyte })), [3, 3, 1, 1, 0], 'a message larger than maxBytes goes alone');
  assert.equal(sqlite.prepare('select count(*) from captured_messages').pluck().get(), 0);
  close();
});

test('webhook events: a call looks at `limit` events at most, so events kept pending ahead of the old ones cost each write no more', () => {
  const { sqlite, close } = database();
  sqlite.prepare("insert into webhook_endpoints (id, project_id, url, secret, enabled, created_at, updated_at) values ('e', 'p', 'https://hooks.example.com', 's', 0, 0, 0)").run();
  const event = sqlite.prepare(`insert into webhook_events (id, project_id, type, data, created_at) values (?, 'p', 'email.delivered', '{}', 0)`);
  const delivery = sqlite.prepare(`insert into webhook_deliveries (id, event_id, endpoint_id, project_id, status, created_at, updated_at) values (?, ?, 'e', 'p', ?, 0, 0)`);
  const add = (status: string) => {
    const eventId = newId(clock);
    event.run(eventId);
    delivery.run(newId(clock), eventId, status);
    return eventId;
  };
  const pending: string[] = [];
  const final: string[] = [];
  sqlite.transaction(() => {
    for (let i = 0; i < 1_000; i++) pending.push(add('pending')); // a disabled endpoint's: kept until it is enabled
    for (let i = 0; i < 10; i++) final.push(add('delivered'));
  })();
  clock.advance(3_600_000);
  const prune = createPruneWebhookEventsProcedure(sqlite);
  const beforeId = idLowerBound(clock.nowMs() - 60_000);
  const first = prune({ afterId: '', beforeId, limit: 400 });
  assert.deepEqual(first, { pruned: 0, next: pending[399] }, 'the first 400 events, all pending: none deleted, the next write starts after them');
  const second = prune({ afterId: first.next!, beforeId, limit: 400 });
  assert.deepEqual(second, { pruned: 0, next: pending[799] });
  assert.deepEqual(prune({ afterId: second.next!, beforeId, limit: 400 }), { pruned: 10, next: null }, '200 pending, then the 10 final ones, and nothing after');
  assert.equal(sqlite.prepare('select count(*) from webhook_events').pluck().get(), 1_000, 'the pending ones stay');
  close();
});

test("a deleted project's emails: one call deletes at most maxBytes of their bodies, attachments and captured messages (always one email)", () => {
  const { sqlite, close } = database();
  const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, html, is_open_tracked, created_at, updated_at) values (?, 'p', 'delivered', 'a@example.com', 'b@example.com', 'Hi', 'html', ?, 0, 0, 0)`);
  const attachment = sqlite.prepare(`insert into email_attachments (id, email_id, name, content_type, size, content) values (?, ?, 'a.pdf', 'application/pdf', ?, ?)`);
  const captured = sqlite.prepare(`insert into captured_messages (email_id, project_id, mail_from, rcpt_to, raw, captured_at) values (?, 'p', 'b@example.com', 'a@example.com', ?, 0)`);
  const megabyte = 1024 * 1024;
  const add = (parts: { html?: number; attachment?: number; captured?: number }) => {
    const id = newId(clock);
    email.run(id, 'x'.repeat(parts.html ?? 10));
    if (parts.attachment) attachment.run(newId(clock), id, parts.attachment, Buffer.alloc(parts.attachment, 'x'));
    if (parts.captured) captured.run(id, Buffer.alloc(parts.captured, 'x'));
  };
  sqlite.transaction(() => {
    for (let i = 0; i < 6; i++) add({ attachment: megabyte }); // 1 MB each, in its attachment
    add({ html: megabyte, captured: megabyte }); // 2 MB: its html and the captured message
    add({ attachment: 2 * megabyte, captured: 3 * megabyte }); // 5 MB, more than a write's share: alone
    for (let i = 0; i < 20; i++) add({}); // small ones
  })();
  const purge = createPurgeProjectRowsProcedure(sqlite);
  const batches = drain(() => sqlite.transaction(() => purge({ projectId: 'p', limit: 500, maxBytes: 3.5 * megabyte }))());
  assert.deepEqual(batches, [3, 3, 1, 1, 20, 0], 'three of 1 MB (and a little html), three more, the 2 MB one, the 5 MB one alone, then the small ones');
  for (const table of ['emails', 'email_attachments', 'captured_messages']) assert.equal(sqlite.prepare(`select count(*) from ${table}`).pluck().get(), 0, table);
  close();
});

/** Calls the email-retention procedure from the first email until it says none is left; each write's count. */
function pruneEmails(sqlite: DatabaseHandle['sqlite'], args: { beforeId: string; beforeMs: number; limit: number; maxBytes: number }): number[] {
  const prune = createPruneFinishedEmailsProcedure(sqlite);
  const steps: CursorStep[] = [];
  for (let afterId: string | null = ''; afterId !== null; afterId = steps[steps.length - 1].next) steps.push(prune({ afterId, ...args }));
  return steps.map((step) => step.pruned);
}

test('finished emails: a write looks at `limit` emails, deletes those finished and last changed before the cut-off, never one queued, scheduled or with a delivery job', () => {
  const { sqlite, close } = database();
  const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, 'p', ?, 'a@example.com', 'b@example.com', 'Hi', 'text', 0, 0, ?)`);
  const event = sqlite.prepare(`insert into email_events (id, email_id, type, time) values (?, ?, 'queued', 0)`);
  const job = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, lease_until, queued_at) values (?, 'p', 'example.com', 0, ?, 0)`);
  const kept: string[] = [];
  const add = (status: string, updatedAt = 1_000) => {
    const id = newId(clock);
    email.run(id, status, updatedAt);
    event.run(newId(clock), id);
    return id;
  };
  sqlite.transaction(() => {
    for (let i = 0; i < 1_200; i++) add(['delivered', 'open', 'bounce', 'complaint', 'error', 'suppressed'][i % 6]);
    kept.push(add('queued'), add('scheduled'));
    const leased = add('delivered'); // its outcome is final, but a delivery still holds a job for it
    job.run(leased, clock.nowMs() + 60_000);
    kept.push(leased, add('open', 9_000_000)); // opened after the cut-off: changed recently
  })();
  clock.advance(3_600_000);
  const young = add('delivered'); // created after the cut-off
  const beforeMs = 5_000_000;
  const batches = pruneEmails(sqlite, { beforeId: idLowerBound(clock.nowMs() - 60_000), beforeMs, limit: 500, maxBytes: 1e9 });
  assert.deepEqual(batches, [500, 500, 200], 'the last write looked at the 200 left and the four kept');
  assert.deepEqual(sqlite.prepare('select id from emails order by id').pluck().all(), [...kept, young]);
  assert.equal(sqlite.prepare('select count(*) from email_events').pluck().get(), 5, 'events went with their emails');
  close();
});

test('finished emails: one write deletes at most maxBytes of bodies, attachments and captured messages (always one email)', () => {
  const { sqlite, close } = database();
  const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, html, is_open_tracked, created_at, updated_at) values (?, 'p', ?, 'a@example.com', 'b@example.com', 'Hi', 'html', 'x', 0, 0, 0)`);
  const attachment = sqlite.prepare(`insert into email_attachments (id, email_id, name, content_type, size, content) values (?, ?, 'a.pdf', 'application/pdf', ?, ?)`);
  const megabyte = 1024 * 1024;
  const add = (status: string, bytes: number) => {
    const id = newId(clock);
    email.run(id, status);
    attachment.run(newId(clock), id, bytes, Buffer.alloc(bytes, 'x'));
    return id;
  };
  let queued = '';
  sqlite.transaction(() => {
    for (let i = 0; i < 4; i++) add('delivered', megabyte);
    queued = add('queued', megabyte); // looked at, kept, and not counted in a write's bytes
    add('delivered', 5 * megabyte);
    for (let i = 0; i < 3; i++) add('bounce', megabyte);
  })();
  clock.advance(3_600_000);
  const batches = pruneEmails(sqlite, { beforeId: idLowerBound(clock.nowMs()), beforeMs: 1_000, limit: 500, maxBytes: 2.5 * megabyte });
  assert.deepEqual(batches, [2, 2, 1, 2, 1], 'two of 1 MB a write, the 5 MB one alone, then the rest');
  assert.deepEqual(sqlite.prepare('select id from emails').pluck().all(), [queued]);
  assert.equal(sqlite.prepare('select count(*) from email_attachments').pluck().get(), 1);
  close();
});
