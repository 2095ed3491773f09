import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { apiCall } from '../helpers/appliance.js';
import { startChildAppliance } from '../helpers/child.js';
import { startDnsServer } from '../helpers/dns-server.js';
import { startSmtpSink } from '../helpers/smtp-sink.js';
import { waitUntil } from '../helpers/wait-until.js';

const key = 'pst_crash_test_key_0123456789abcdefghijklmnop';
const total = 400;
const concurrency = 20;

/**
 * kill -9 in the middle of a burst: after a restart on the same data dir every accepted email reaches a
 * final state, and only messages that were on the wire at the kill may arrive twice.
 */
test('kill -9 mid-delivery: every accepted email is delivered, at most one extra copy per message in flight', { timeout: 60_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-crash-'));
  const dns = await startDnsServer();
  const sink = await startSmtpSink();
  dns.set('burst.test', 'MX', [{ preference: 10, exchange: 'mx.burst.test' }]);
  dns.set('mx.burst.test', 'A', ['127.0.0.1']);
  const env = {
    POSTINO_STORAGE_DATA_DIR: dataDir,
    POSTINO_AUTH_API_KEY: key,
    POSTINO_DELIVERY_PORT: String(sink.port),
    POSTINO_DELIVERY_ALLOW_PRIVATE_MX: 'true',
    POSTINO_DELIVERY_CONCURRENCY: String(concurrency),
    POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: String(concurrency),
    POSTINO_DELIVERY_RETRY_SCHEDULE: '300ms',
    POSTINO_DNS_SERVERS: dns.address,
    POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
    POSTINO_SCHEDULER_ENABLED: 'false',
  };
  let child = await startChildAppliance(env);
  try {
    const base = `http://127.0.0.1:${child.httpPort}`;
    const accepted: string[] = [];
    const batches = [];
    for (let i = 0; i < total; i += 50) {
      const items = Array.from({ length: 50 }, (_, j) => ({ toAddress: `user${i + j}@burst.test`, fromAddress: 'app@sender.test', subject: `burst ${i + j}`, text: 'hello' }));
      batches.push(apiCall(base, 'POST', '/v1/email/send', items, key));
    }
    for (const response of await Promise.all(batches)) {
      assert.equal(response.status, 200, JSON.stringify(response.body));
      for (const item of response.body) accepted.push(item.id);
    }
    assert.equal(accepted.length, total);

    // Kill while the burst is being delivered.
    await waitUntil(() => sink.messages.length >= 40, '40 messages at the sink', 20_000);
    child.child.kill('SIGKILL');
    await child.exited;
    // A message whose final dot left before the kill may still be in the sink's socket buffer.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const beforeRestart = sink.messages.length;
    assert.ok(beforeRestart < total, `the kill landed mid-burst (${beforeRestart} of ${total} delivered)`);
    // "On the wire at the kill": received by the sink, its outcome not yet committed. Only those may come twice.
    const sentAtKill = new Set(sink.messages.map(emailIdOf));
    const atKill = new Database(join(dataDir, 'postino.sqlite'), { fileMustExist: true });
    const recordedAtKill = new Set(atKill.prepare(`select id from emails where status = 'delivered'`).pluck().all() as string[]);
    atKill.close();
    const unrecordedAtKill = [...sentAtKill].filter((id) => !recordedAtKill.has(id)).length;

    child = await startChildAppliance(env);
    const db = new Database(join(dataDir, 'postino.sqlite'), { readonly: true, fileMustExist: true });
    try {
      await waitUntil(() => (db.prepare(`select count(*) from emails where status = 'queued'`).pluck().get() as number) === 0, 'no email left queued', 30_000);
      const statuses = db.prepare(`select status, count(*) as n from emails group by status`).all() as { status: string; n: number }[];
      assert.deepEqual(statuses, [{ status: 'delivered', n: total }]);
      assert.equal(db.prepare(`select count(*) from delivery_jobs`).pluck().get(), 0);
    } finally {
      db.close();
    }

    const copies = new Map<string, number>();
    for (const message of sink.messages) copies.set(emailIdOf(message), (copies.get(emailIdOf(message)) ?? 0) + 1);
    assert.deepEqual([...copies.keys()].sort(), [...accepted].sort(), 'every accepted email reached the sink');
    const duplicated = [...copies].filter(([, n]) => n > 1);
    assert.ok(duplicated.every(([, n]) => n === 2), 'never more than one extra copy');
    for (const [id] of duplicated) {
      assert.ok(sentAtKill.has(id) && !recordedAtKill.has(id), `${id} arrived twice but was not on the wire at the kill`);
    }
    t.diagnostic(`delivered before the kill: ${beforeRestart}, of which not yet recorded: ${unrecordedAtKill}; duplicates after restart: ${duplicated.length}`);
  } finally {
    child.child.kill('SIGKILL');
    await child.exited;
    await sink.stop();
    await dns.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

/** The email id in the VERP envelope sender (`bounce-<id>-<signature>@…`). */
function emailIdOf(message: { mailFrom: string }): string {
  const id = /^bounce-([0-9a-f]{24})-[0-9a-f]{20}@/.exec(message.mailFrom)?.[1];
  assert.ok(id, `VERP sender ${message.mailFrom}`);
  return id;
}
