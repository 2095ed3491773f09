import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import { openDatabase, type DatabaseHandle } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { createStorageHealth } from '../../src/db/storage-health.js';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { createWriterThread, type WriterThread } from '../../src/db/writer-thread.js';
import { withNoFileDescriptorsLeft } from '../helpers/no-file-descriptors.js';
import type { AcceptArgs } from '../../src/emails/accept-procedure.js';
import { ManualClock, systemClock } from '../../src/lib/clock.js';
import { silentLogger } from '../../src/lib/logger.js';
import { bindProcedures } from '../../src/write-procedures.js';
import { acceptArgs as sharedAcceptArgs } from '../helpers/accept-args.js';
import { holdFdatasync } from '../helpers/held-fdatasync.js';

// The writer thread commits accepted email from its own connection (src/db/writer-thread.ts). These
// tests run it on a real database file and tell the two connections apart with PRAGMA data_version,
// which changes for a connection only when *another* connection commits.

const clock = new ManualClock('2026-06-01T00:00:00Z');
const projectId = 'aaaaaaaaaaaaaaaaaaaaaaaa';

function migratedDatabase(path = join(mkdtempSync(join(tmpdir(), 'postino-writer-')), 'postino.sqlite')): DatabaseHandle {
  const handle = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(handle.db);
  handle.sqlite.prepare('insert into projects (id, name, is_default, created_at, updated_at) values (?, ?, 1, 1, 1)').run(projectId, 'Writer');
  return handle;
}

function acceptArgs(toAddress: string, forProject = projectId): AcceptArgs {
  return sharedAcceptArgs(clock, forProject, toAddress);
}

async function startedWriter(handle: DatabaseHandle): Promise<WriterThread> {
  const writer = createWriterThread(handle.sqlite, silentLogger);
  assert.ok(writer, 'a database file gets a writer thread');
  writer.start();
  for (let waited = 0; !writer.ready; waited += 20) {
    assert.ok(waited < 20_000, 'the writer thread did not come up');
    await sleep(20);
  }
  return writer;
}

/** A database file, its writer thread (up) and a write queue that uses it; `close` ends all three. */
async function writerQueue() {
  const handle = migratedDatabase();
  const writer = await startedWriter(handle);
  const storage = createStorageHealth({ log: silentLogger, clock: systemClock, dataDir: dirname(handle.sqlite.name), minFreeBytes: 0 });
  const queue = createWriteQueue(handle.sqlite, silentLogger, { procedures: bindProcedures(handle.sqlite), writer, storage });
  const close = async () => {
    await queue.close();
    handle.close();
  };
  return { handle, writer, queue, storage, close };
}

const dataVersion = (handle: DatabaseHandle) => handle.sqlite.prepare('PRAGMA data_version').pluck().get() as number;
const count = (handle: DatabaseHandle, table: string) => handle.sqlite.prepare(`select count(*) from ${table}`).pluck().get() as number;

test('writer thread: accepted email is committed by the thread, with its attachment, event and delivery job', async () => {
  const { handle, queue, close } = await writerQueue();
  const before = dataVersion(handle);
  const [result] = await queue.call('emails.accept', acceptArgs('ann@example.com'));
  assert.equal(result.status, 'queued');
  assert.notEqual(dataVersion(handle), before, 'another connection (the thread) committed');
  assert.equal(count(handle, 'emails'), 1);
  const attachment = handle.sqlite.prepare('select content from email_attachments').get() as { content: Buffer };
  assert.equal(attachment.content.toString(), 'hi', 'a Buffer survives the trip to the thread');
  assert.equal(count(handle, 'email_events'), 1);
  assert.equal(count(handle, 'delivery_jobs'), 1);
  await close();
});

test('writer thread: a failing call rolls back alone, with its SQLite code, and main-connection writes interleave', async () => {
  const { handle, queue, close } = await writerQueue();
  const setting = handle.sqlite.prepare("insert into settings (key, value) values (?, '1')");
  const outcomes = await Promise.allSettled([
    queue.call('emails.accept', acceptArgs('one@example.com')),
    queue.call('emails.accept', acceptArgs('orphan@example.com', 'bbbbbbbbbbbbbbbbbbbbbbbb')), // no such project
    queue.run(() => setting.run('main-connection-write')),
    queue.call('emails.accept', acceptArgs('two@example.com')),
  ]);
  assert.deepEqual(outcomes.map((o) => o.status), ['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
  const failure = (outcomes[1] as PromiseRejectedResult).reason as Error & { code?: string };
  assert.equal(failure.code, 'SQLITE_CONSTRAINT_FOREIGNKEY');
  const addresses = handle.sqlite.prepare('select to_address from emails order by to_address').pluck().all();
  assert.deepEqual(addresses, ['one@example.com', 'two@example.com']);
  assert.equal(count(handle, 'email_attachments'), 2, "the failed email's attachment rolled back with it");
  assert.equal(handle.sqlite.prepare("select count(*) from settings where key = 'main-connection-write'").pluck().get(), 1);
  await close();
});

test('writer thread: calls before the thread is up, and in a memory database, run on the main connection', async () => {
  const handle = migratedDatabase();
  const writer = createWriterThread(handle.sqlite, silentLogger)!;
  const queue = createWriteQueue(handle.sqlite, silentLogger, { procedures: bindProcedures(handle.sqlite), writer });
  const before = dataVersion(handle);
  const [first] = await queue.call('emails.accept', acceptArgs('early@example.com')); // starts the thread
  assert.equal(first.status, 'queued');
  assert.equal(dataVersion(handle), before, 'committed on this connection: the thread was not up yet');
  await queue.close();
  handle.close();

  const memory = openDatabase({ path: ':memory:', synchronous: 'FULL' });
  migrateDatabase(memory.db);
  memory.sqlite.prepare('insert into projects (id, name, is_default, created_at, updated_at) values (?, ?, 1, 1, 1)').run(projectId, 'Memory');
  assert.equal(createWriterThread(memory.sqlite, silentLogger), undefined, 'another connection would open another memory database');
  const memoryQueue = createWriteQueue(memory.sqlite, silentLogger, { procedures: bindProcedures(memory.sqlite) });
  const [stored] = await memoryQueue.call('emails.accept', acceptArgs('memory@example.com'));
  assert.equal(stored.status, 'queued');
  assert.equal(count(memory, 'emails'), 1);
  await memoryQueue.close();
  memory.close();
});

test('writer thread: a thread that could not start (no file descriptor left, EMFILE) is started again by a later write', async (t) => {
  // Started on the first write after boot: at an open-file limit (a burst of connections), the thread
  // failed to initialize and every write ran on the main connection, the event loop, until a restart.
  const handle = migratedDatabase();
  const writer = createWriterThread(handle.sqlite, silentLogger)!;
  const queue = createWriteQueue(handle.sqlite, silentLogger, { procedures: bindProcedures(handle.sqlite), writer });
  const ran = await withNoFileDescriptorsLeft(t, async () => {
    const [during] = await queue.call('emails.accept', acceptArgs('during@example.com')); // starts the thread: it cannot
    assert.equal(during.status, 'queued', 'the write itself runs on the main connection');
    await sleep(200); // the failed start reports itself
    return true;
  });
  if (!ran) return handle.close();
  assert.equal(writer.ready, false);
  // Descriptors are free again: later writes start the thread, and it takes the batches.
  for (let waited = 0; !writer.ready; waited += 50) {
    assert.ok(waited < 10_000, 'the writer thread was never started again');
    const [later] = await queue.call('emails.accept', acceptArgs(`later${waited}@example.com`));
    assert.equal(later.status, 'queued');
    await sleep(50);
  }
  const before = dataVersion(handle);
  await queue.call('emails.accept', acceptArgs('on-thread@example.com'));
  assert.notEqual(dataVersion(handle), before, 'committed by the thread');
  await queue.close();
  handle.close();
});

test('writer thread: a suppressed address is recorded as suppressed and not queued', async () => {
  const { handle, queue, close } = await writerQueue();
  handle.sqlite
    .prepare("insert into suppressions (project_id, email_address, reason, created_at) values (?, 'gone@example.com', 'hard-bounce', 1)")
    .run(projectId);
  const [result] = await queue.call('emails.accept', acceptArgs('Gone@example.com'));
  assert.equal(result.status, 'suppressed');
  assert.equal(count(handle, 'delivery_jobs'), 0);
  assert.equal(handle.sqlite.prepare('select status from emails').pluck().get(), 'suppressed');
  await close();
});

test('writer thread: a batch that cannot be sent (arguments not cloneable) fails alone and the queue goes on', async () => {
  const { handle, queue, close } = await writerQueue();
  const unsendable = { ...acceptArgs('fn@example.com'), nowMs: (() => 1) as unknown as number };
  await assert.rejects(queue.call('emails.accept', unsendable), /could not be cloned/);
  const [after] = await queue.call('emails.accept', acceptArgs('after@example.com'));
  assert.equal(after.status, 'queued');
  await queue.run(() => handle.sqlite.prepare("insert into settings (key, value) values ('still-writable', '1')").run());
  assert.deepEqual(handle.sqlite.prepare('select to_address from emails').pluck().all(), ['after@example.com']);
  await close();
});

test('writer thread: when the thread dies with a batch in flight, that batch fails and writing goes on on the main connection', async (t) => {
  const { handle, writer, queue, close } = await writerQueue();
  const [before] = await queue.call('emails.accept', acceptArgs('before@example.com'));
  assert.equal(before.status, 'queued');

  // The thread is terminated as the next batch is posted, as if it had crashed with it: terminated
  // first, because the thread answers as soon as its transaction is over and could beat a terminate
  // sent after the batch.
  const postMessage = Worker.prototype.postMessage;
  t.mock.method(Worker.prototype, 'postMessage', function (this: Worker, message: unknown) {
    if (typeof message === 'object' && message !== null && 'calls' in message) void this.terminate();
    postMessage.call(this, message);
  });
  await assert.rejects(queue.call('emails.accept', acceptArgs('in-flight@example.com')), /writer thread exited/);
  t.mock.restoreAll();
  assert.equal(writer.ready, false);

  // Not stalled, and the write lock is free: procedures and plain writes run on the main connection.
  const [after] = await queue.call('emails.accept', acceptArgs('after@example.com'));
  assert.equal(after.status, 'queued');
  await queue.run(() => handle.sqlite.prepare("insert into settings (key, value) values ('after-crash', '1')").run());
  const addresses = handle.sqlite.prepare('select to_address from emails order by to_address').pluck().all() as string[];
  // The batch in flight may or may not have committed before the thread died (its caller got an error,
  // as after a crash); either way the others are there and the database is whole.
  assert.ok(addresses.includes('before@example.com') && addresses.includes('after@example.com'), addresses.join());
  assert.equal(handle.sqlite.pragma('integrity_check', { simple: true }), 'ok');
  await close();
});

test('writer thread: a batch is answered only after the WAL sync that covers it, and fails when that sync fails', async (t) => {
  // The thread commits without the fsync; the write queue's WAL sync (wal-sync.ts, node:fs fdatasync on
  // this thread) must finish before any caller hears of the batch. The test holds that sync, then fails it.
  const { state, waitForHeld, releaseAll, restore } = await holdFdatasync();
  const { handle, queue, storage, close } = await writerQueue();
  t.after(async () => {
    restore();
    await close();
  });

  let answered = false;
  const accepted = queue.call('emails.accept', acceptArgs('ann@example.com')).then((results) => {
    answered = true;
    return results;
  });
  await waitForHeld();
  assert.equal(count(handle, 'emails'), 1, 'the thread committed');
  await sleep(50);
  assert.equal(answered, false, 'not answered while its WAL sync is held');
  state.held.shift()!();
  const [result] = await accepted;
  assert.equal(result.status, 'queued');

  state.failWith = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
  const failed = queue.call('emails.accept', acceptArgs('bob@example.com'));
  await waitForHeld();
  state.held.shift()!();
  await assert.rejects(failed, /sync the database log \(EIO\)/, 'a batch whose sync failed is not acknowledged');

  // The disk answers again, but the pages whose writeback failed are not covered by a later sync: the
  // queue acknowledges nothing more, on either connection, until a restart.
  state.failWith = undefined;
  const syncsBefore = state.calls;
  releaseAll();
  const refused = /The disk failed to sync the database log, so the appliance stores nothing more until it is restarted/;
  await assert.rejects(queue.call('emails.accept', acceptArgs('cy@example.com')), refused);
  await assert.rejects(queue.run(() => handle.sqlite.prepare("insert into settings (key, value) values ('after-eio', '1')").run()), refused);
  await assert.rejects(queue.synced(), refused);
  assert.equal(count(handle, 'emails'), 2, 'nothing more was committed');
  assert.equal(state.calls, syncsBefore, 'nor synced');
  assert.equal(storage.state, 'failed', '/healthz says so');
});

test('synced(): syncs once at start; then no fdatasync while every commit is synced; waits for a batch whose sync is held; refuses after a failed sync', async (t) => {
  // An Idempotency-Key replay calls synced() before answering from a row it read: the row may come from
  // a batch whose WAL sync is still running.
  const { state, waitForHeld, restore } = await holdFdatasync();
  const { queue, close } = await writerQueue();
  t.after(async () => {
    restore();
    await close();
  });
  const releaseUntil = async (done: () => boolean) => {
    for (let waited = 0; !done(); waited += 5) {
      assert.ok(waited < 10_000, 'never settled');
      for (const release of state.held.splice(0)) release();
      await sleep(5);
    }
  };
  const settled = <T>(promise: Promise<T>) => {
    const progress = { done: false };
    void promise.then(() => (progress.done = true), () => (progress.done = true));
    return progress;
  };

  // A new queue syncs once: the WAL may hold frames a killed process committed and never synced.
  const atStart = settled(queue.synced());
  await waitForHeld();
  await releaseUntil(() => atStart.done);

  const first = settled(queue.call('emails.accept', acceptArgs('ann@example.com')));
  await releaseUntil(() => first.done);
  const before = state.calls;
  const nothingToWait = settled(queue.synced());
  await sleep(20);
  assert.equal(state.calls, before, 'everything committed was synced: no fdatasync');
  assert.equal(nothingToWait.done, true);

  const second = settled(queue.call('emails.accept', acceptArgs('bob@example.com')));
  await waitForHeld();
  const replay = settled(queue.synced());
  await sleep(50);
  assert.equal(replay.done, false, 'waits while a committed batch is not synced');
  await releaseUntil(() => second.done && replay.done);

  state.failWith = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
  const failed = queue.call('emails.accept', acceptArgs('carol@example.com'));
  await waitForHeld();
  state.held.shift()!();
  await assert.rejects(failed, /EIO/);
  state.failWith = undefined;
  const afterFailure = state.calls;
  // A later sync would not cover the pages whose writeback failed: an answer read back is refused too.
  await assert.rejects(queue.synced(), /stores nothing more until it is restarted/);
  assert.equal(state.calls, afterFailure);
});

test('a failed WAL sync started by synced() stops the queue: the thread batch whose sync followed it is refused, not acknowledged', async (t) => {
  // An Idempotency-Key replay's synced() can start the fdatasync a writer-thread batch's frames depend
  // on; the batch's own sync then follows it. Linux reports a writeback error once, so that follow-up
  // succeeds without covering the failed pages.
  const { state, waitForHeld, restore } = await holdFdatasync();
  const { handle, queue, storage, close } = await writerQueue();
  t.after(async () => {
    restore();
    await close();
  });
  const accepted = queue.call('emails.accept', acceptArgs('ann@example.com'));
  await new Promise((resolve) => setImmediate(resolve));
  const replay = queue.synced();
  await waitForHeld();
  for (let waited = 0; count(handle, 'emails') === 0; waited += 5) {
    assert.ok(waited < 10_000, 'the thread never committed');
    await sleep(5);
  }
  await sleep(50);
  state.failWith = Object.assign(new Error('ENOSPC: no space left on device, fdatasync'), { code: 'ENOSPC' });
  state.held.shift()!();
  state.failWith = undefined;
  state.holding = false;
  for (const sync of state.held.splice(0)) sync();

  const syncRefusal = /The disk failed to sync the database log \(ENOSPC\), so this write may not have been stored/;
  await assert.rejects(replay, syncRefusal);
  // Not storage-full: a 507 tells the client to retry once there is room, but nothing is stored until a restart.
  await assert.rejects(accepted, (error: { code?: string; message: string }) => error.code === 'internal-error' && syncRefusal.test(error.message));
  assert.equal(storage.state, 'failed');
  await assert.rejects(queue.call('emails.accept', acceptArgs('bob@example.com')), /stores nothing more until it is restarted/);
});

test('writer thread: a thread started after the database file was removed does not make a new, empty one there (a restart would have begun on it as a fresh install)', async () => {
  const handle = migratedDatabase();
  const path = handle.sqlite.name;
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
  const writer = createWriterThread(handle.sqlite, silentLogger)!;
  writer.start();
  await sleep(500); // its failed start reports itself
  assert.equal(writer.ready, false);
  assert.equal(existsSync(path), false);
  await writer.close();
  handle.close();
});
