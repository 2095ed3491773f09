import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { createDomainsRepo } from '../../src/domains/repo.js';
import { earliestQueuedStep, pruneRetiredSigningKeys, type EarliestQueuedStepResult } from '../../src/domains/retired-keys.js';
import { silentLogger } from '../../src/lib/logger.js';
import { bindProcedures } from '../../src/write-procedures.js';
import { openMigratedDatabase } from '../helpers/migrated-database.js';

test('the kept keys of deleted domains are pruned by a walk of the queue in bounded steps, not a read of every queued job per key in one write', async () => {
  // One statement per key read every queued job of its project on the event loop: 10 keys of a project
  // with 100,000 queued jobs held it ~0.6 s.
  const busy = 'a'.repeat(24);
  const held = 'b'.repeat(24);
  const idle = 'c'.repeat(24);
  const handle = openMigratedDatabase('retired-keys', [busy, held, idle]);
  try {
    const { sqlite, db } = handle;
    const now = 1_800_000_000_000;
    const dayMs = 86_400_000;
    const retiredBefore = now - 6 * dayMs;
    const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, ?, 'queued', 'x@r.test', 'a@s.test', 'S', 'text', 0, 0, 0)`);
    const job = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at) values (?, ?, 'r.test', ?, 0, ?)`);
    const key = sqlite.prepare(`insert into retired_signing_keys (project_id, domain, selector, private_key, mail_from_domain, retired_at) values (?, ?, 's1', 'pem', 'bounce.d.test', ?)`);
    const queued = 100_000;
    sqlite.transaction(() => {
      // The busy project's whole queue was accepted after its domains were deleted.
      for (let i = 0; i < queued; i++) {
        const id = `1${String(i).padStart(23, '0')}`;
        email.run(id, busy);
        job.run(id, busy, now + i, now - dayMs);
      }
      // The held project still has one email queued before its domain's deletion (paused by the suspension rule).
      email.run('2'.padEnd(24, '0'), held);
      job.run('2'.padEnd(24, '0'), held, now + 600_000, retiredBefore - dayMs - 1);
      for (let k = 0; k < 10; k++) key.run(busy, `old${k}.test`, retiredBefore - dayMs);
      key.run(busy, 'recent.test', now - dayMs); // deleted yesterday: its mail may still be on a retry
      key.run(held, 'held.test', retiredBefore - dayMs);
      key.run(idle, 'idle.test', retiredBefore - 1); // no mail queued at all
    })();

    const queue = createWriteQueue(sqlite, silentLogger, { procedures: bindProcedures(sqlite) });
    const steps: EarliestQueuedStepResult[] = [];
    const runs: number[] = [];
    const writes = {
      async call(name: string, args: unknown) {
        const result = await queue.call(name as 'domains.earliest-queued', args as never);
        if (name === 'domains.earliest-queued') steps.push(result as EarliestQueuedStepResult);
        return result;
      },
      run<T>(work: () => T) {
        runs.push(1);
        return queue.run(work);
      },
    } as Parameters<typeof pruneRetiredSigningKeys>[0]['writes'];

    const pruned = await pruneRetiredSigningKeys({ writes, repo: createDomainsRepo(db) }, retiredBefore);
    await queue.close();

    assert.equal(pruned, 11, "the busy project's ten old keys and the idle project's key");
    const left = sqlite.prepare('select project_id, domain from retired_signing_keys order by domain').raw().all();
    assert.deepEqual(left, [[held, 'held.test'], [busy, 'recent.test']], 'kept: the key held mail was queued under, and the key retired yesterday');
    // The queue was read once for every key, in steps of at most earliestQueuedStep jobs.
    assert.equal(steps.reduce((sum, step) => sum + step.looked, 0), queued + 1, 'every queued job read once, not once per key');
    assert.ok(steps.length >= Math.ceil((queued + 1) / earliestQueuedStep), `${steps.length} steps`);
    assert.ok(steps.every((step) => step.looked <= earliestQueuedStep), 'no step reads more than its limit');
    assert.equal(runs.length, 1, 'one write on the main connection: the delete of the keys');
  } finally {
    handle.close();
  }
});

test('no key old enough: nothing of the queue is read', async () => {
  const handle = openMigratedDatabase('retired-keys', ['a'.repeat(24)]);
  try {
    const { sqlite, db } = handle;
    sqlite.prepare(`insert into retired_signing_keys (project_id, domain, selector, private_key, mail_from_domain, retired_at) values (?, 'd.test', 's1', 'pem', 'bounce.d.test', 5000)`).run('a'.repeat(24));
    let calls = 0;
    const writes = {
      call: () => Promise.reject(new Error(`walked (${++calls})`)),
      run: () => Promise.reject(new Error('wrote')),
    } as unknown as Parameters<typeof pruneRetiredSigningKeys>[0]['writes'];
    assert.equal(await pruneRetiredSigningKeys({ writes, repo: createDomainsRepo(db) }, 5000), 0);
    assert.equal(calls, 0);
  } finally {
    handle.close();
  }
});
