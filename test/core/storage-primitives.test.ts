import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import Database from 'better-sqlite3';
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { commitReplayableBatch } from '../../src/db/batch-transaction.js';
import { openDatabase, storageFailureOf, writeTransaction } from '../../src/db/client.js';
import { createStorageHealth } from '../../src/db/storage-health.js';
import { walPathOf } from '../../src/db/wal-sync.js';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { ManualClock, systemClock } from '../../src/lib/clock.js';
import { newId, isId } from '../../src/lib/ids.js';
import { silentLogger } from '../../src/lib/logger.js';
import { withNoFileDescriptorsLeft } from '../helpers/no-file-descriptors.js';

function freshDb() {
  const handle = openDatabase({ path: join(mkdtempSync(join(tmpdir(), 'postino-prim-')), 'x.sqlite'), synchronous: 'FULL' });
  handle.sqlite.exec('create table t (id integer primary key, v text not null unique)');
  return handle;
}

test('ids are 24 lowercase hex characters and sort in creation order, even when the clock steps back', () => {
  const clock = new ManualClock('2026-03-01T00:00:00Z');
  const ids: string[] = [];
  for (let i = 0; i < 1000; i++) {
    if (i === 500) clock.advance(-60_000);
    if (i % 100 === 0) clock.advance(1000);
    ids.push(newId(clock));
  }
  for (const id of ids) assert.ok(isId(id), id);
  assert.deepEqual([...ids].sort(), ids);
  assert.equal(new Set(ids).size, ids.length);
  assert.equal(parseInt(ids[0].slice(0, 8), 16), Date.parse('2026-03-01T00:00:01Z') / 1000);
});

test('write queue: concurrent writes share a commit, a failing write rolls back alone', async () => {
  const handle = freshDb();
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  const results = await Promise.allSettled([
    queue.run(() => insert.run('a').lastInsertRowid),
    queue.run(() => {
      insert.run('b');
      insert.run('a'); // unique violation: 'b' must roll back with it
    }),
    queue.run(() => insert.run('c').lastInsertRowid),
  ]);
  assert.equal(results[0].status, 'fulfilled');
  assert.equal(results[1].status, 'rejected');
  assert.equal(results[2].status, 'fulfilled');
  const values = (handle.sqlite.prepare('select v from t order by v').all() as { v: string }[]).map((r) => r.v);
  assert.deepEqual(values, ['a', 'c']);
  await queue.drain();
  handle.close();
});

test('replayable batch: runs once without savepoints; a failing write sends the batch round again, where it rolls back alone', () => {
  const handle = freshDb();
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  const runs = { a: 0, bad: 0, c: 0 };
  const failures: unknown[] = [];
  const clean = commitReplayableBatch(handle.sqlite, [() => (runs.a++, insert.run('a').changes), () => (runs.c++, insert.run('c').changes)], (e) => failures.push(e));
  assert.deepEqual(clean, [{ ok: true, value: 1 }, { ok: true, value: 1 }]);
  assert.deepEqual(runs, { a: 1, bad: 0, c: 1 }, 'no failure: each write ran once');

  const outcomes = commitReplayableBatch(
    handle.sqlite,
    [
      () => (runs.a++, insert.run('d').changes),
      () => {
        runs.bad++;
        insert.run('e');
        insert.run('a'); // unique violation: 'e' must roll back with it
      },
      () => (runs.c++, insert.run('f').changes),
    ],
    (e) => failures.push(e),
  );
  assert.deepEqual(outcomes.map((o) => o.ok), [true, false, true]);
  assert.equal((outcomes[1] as { error: { code: string } }).error.code, 'SQLITE_CONSTRAINT_UNIQUE');
  assert.deepEqual(runs, { a: 3, bad: 2, c: 2 }, 'the first pass stopped at the failing write; the replay ran all three');
  assert.deepEqual((handle.sqlite.prepare('select v from t order by v').pluck().all()), ['a', 'c', 'd', 'f']);
  assert.equal(failures.length, 0, 'a failing write is not a failed commit');
  assert.equal(handle.sqlite.inTransaction, false);

  // The transaction cannot start (another connection holds the write lock): every write fails, none ran.
  const other = openDatabase({ path: handle.sqlite.name, synchronous: 'FULL' });
  other.sqlite.pragma('busy_timeout = 0');
  handle.sqlite.pragma('busy_timeout = 0');
  other.sqlite.prepare('BEGIN IMMEDIATE').run();
  const locked = commitReplayableBatch(handle.sqlite, [() => (runs.a++, insert.run('g'))], (e) => failures.push(e));
  assert.equal(locked[0].ok, false);
  assert.equal(failures.length, 1);
  assert.equal(runs.a, 3);
  other.sqlite.prepare('ROLLBACK').run();
  other.close();
  handle.close();
});

test('write queue: when the disk fills under a write, SQLite rolls the batch back and every write in it fails with SQLITE_FULL', async () => {
  const handle = freshDb();
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  insert.run('seed');
  // The database may not grow by a page: a large row needs new pages and fails with SQLITE_FULL.
  handle.sqlite.pragma('wal_checkpoint(TRUNCATE)');
  handle.sqlite.pragma(`max_page_count = ${handle.sqlite.pragma('page_count', { simple: true })}`);
  const results = await Promise.allSettled([queue.run(() => insert.run('small')), queue.run(() => insert.run('x'.repeat(100_000))), queue.run(() => insert.run('other'))]);
  for (const result of results) {
    assert.equal(result.status, 'rejected');
    assert.equal((result as PromiseRejectedResult).reason.code, 'SQLITE_FULL');
  }
  assert.deepEqual(handle.sqlite.prepare('select v from t').pluck().all(), ['seed'], 'nothing of the batch committed');
  // With room again the queue goes on.
  handle.sqlite.pragma('max_page_count = 4294967294');
  await queue.run(() => insert.run('later'));
  assert.deepEqual(handle.sqlite.prepare('select v from t order by id').pluck().all(), ['seed', 'later']);
  await queue.drain();
  handle.close();
});

test('write queue: the first write after start, made with no file descriptor left (EMFILE), is stored and the queue goes on', async (t) => {
  // The WAL was opened for its sync at the first write: at an open-file limit (a burst of connections)
  // that open failed, was taken for a failed disk sync, and the appliance stored nothing until a restart.
  const handle = freshDb();
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  const settled = await withNoFileDescriptorsLeft(t, () => Promise.allSettled([queue.run(() => insert.run('during'))]));
  if (!settled) return handle.close();
  const [during] = settled;
  assert.equal(during.status, 'fulfilled', during.status === 'rejected' ? String(during.reason) : '');
  await queue.run(() => insert.run('after'));
  assert.deepEqual(handle.sqlite.prepare('select v from t order by id').pluck().all(), ['during', 'after']);
  await queue.close();
  handle.close();
});

test('write queue: at the open-file limit (EMFILE), a batch whose writes change the same pages again still commits', async (t) => {
  // Each write of a batch runs in a savepoint; pages an earlier write of the batch changed are copied to
  // the statement journal, a temp file once past 64 KiB. With no descriptor left that file could not be
  // opened: a delivered email's outcome was not recorded, and the email was sent again when its lease ran out.
  const handle = freshDb();
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  await queue.run(() => handle.sqlite.prepare('insert into t (v) values (?)').run('warm-up')); // the WAL's descriptor is open
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  const rewrite = handle.sqlite.prepare("update t set v = v || '!'");
  const outcomes = await withNoFileDescriptorsLeft(t, () =>
    Promise.allSettled([
      queue.run(() => {
        for (let i = 0; i < 400; i++) insert.run(`${i}:${'x'.repeat(1000)}`);
      }),
      queue.run(() => rewrite.run()), // every page the write before changed, again
    ]),
  );
  if (!outcomes) return handle.close();
  assert.deepEqual(outcomes.map((o) => (o.status === 'rejected' ? String(o.reason) : o.status)), ['fulfilled', 'fulfilled']);
  assert.equal(handle.sqlite.prepare("select count(*) from t where v like '%!'").pluck().get(), 401);
  await queue.close();
  handle.close();
});

test('write queue: a promise resolves only after its write is committed and visible to other connections', async () => {
  const handle = freshDb();
  const reader = openDatabase({ path: handle.sqlite.name, synchronous: 'FULL' });
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  await Promise.all(
    Array.from({ length: 200 }, (_, i) =>
      queue.run(() => insert.run(`v${i}`)).then(() => {
        const row = reader.sqlite.prepare('select v from t where v = ?').get(`v${i}`);
        assert.ok(row, `v${i} visible to another connection when its promise resolved`);
      }),
    ),
  );
  reader.close();
  handle.close();
});

test('writeTransaction nests as savepoints and never commits half of a failed unit', () => {
  const handle = freshDb();
  const insert = handle.sqlite.prepare('insert into t (v) values (?)');
  assert.throws(() =>
    writeTransaction(handle.sqlite, () => {
      insert.run('x');
      writeTransaction(handle.sqlite, () => insert.run('y'));
      throw new Error('abort');
    }),
  );
  assert.equal((handle.sqlite.prepare('select count(*) n from t').get() as { n: number }).n, 0);
  handle.close();
});

test('close() checkpoints and leaves only the database file, with the checkpointer thread stopped first', async () => {
  for (let i = 0; i < 5; i++) {
    const dir = mkdtempSync(join(tmpdir(), 'postino-close-'));
    const handle = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
    handle.sqlite.exec('create table t (v text)');
    handle.sqlite.prepare('insert into t values (?)').run('kept');
    await new Promise((resolve) => setTimeout(resolve, i * 300)); // before and after the worker's first checkpoint
    handle.close();
    assert.deepEqual(readdirSync(dir), ['postino.sqlite'], 'no -wal/-shm left behind to race a cleanup');
    const reopened = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
    assert.equal((reopened.sqlite.prepare('select v from t').get() as { v: string }).v, 'kept');
    reopened.close();
  }
});

test('close() does not wait for a reader of another connection (a backup, an operator\'s sqlite3): the WAL is left for later, nothing is lost', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-close-reader-'));
  const path = join(dir, 'postino.sqlite');
  const handle = openDatabase({ path, synchronous: 'FULL' });
  handle.sqlite.exec('create table t (v text)');
  handle.sqlite.prepare('insert into t values (?)').run('before the reader');
  const reader = new Database(path, { readonly: true });
  reader.exec('BEGIN');
  assert.equal(reader.prepare('select count(*) from t').pluck().get(), 1); // its snapshot pins the WAL
  handle.sqlite.prepare('insert into t values (?)').run('after the reader');

  const started = performance.now();
  handle.close();
  const elapsed = performance.now() - started;
  // It waited busy_timeout (5 s) for the reader, on top of the rest of the stop: past the README's 10 s.
  assert.ok(elapsed < 1_000, `close took ${Math.round(elapsed)} ms`);

  reader.exec('COMMIT');
  reader.close();
  const reopened = openDatabase({ path, synchronous: 'FULL' });
  assert.deepEqual(reopened.sqlite.prepare('select v from t order by rowid').pluck().all(), ['before the reader', 'after the reader']);
  reopened.close();
  rmSync(dir, { recursive: true, force: true });
});

test('write queue: a write after close() is refused with an error, never run against a closed database', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-wq-closed-'));
  const handle = openDatabase({ path: join(dir, 'db.sqlite'), synchronous: 'FULL' });
  handle.sqlite.exec('create table t (v integer)');
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  await queue.run(() => handle.sqlite.prepare('insert into t values (1)').run());
  await queue.close();
  handle.close();
  await assert.rejects(queue.run(() => 1), /database is closed/);

  // The database closed under a queue that was not closed (a component outlived shutdown): refused too.
  const other = openDatabase({ path: join(dir, 'other.sqlite'), synchronous: 'FULL' });
  const orphan = createWriteQueue(other.sqlite, silentLogger);
  other.close();
  await assert.rejects(orphan.run(() => 1), /database is closed/);
  rmSync(dir, { recursive: true, force: true });
});

test('under a steady stream of commits the WAL restarts from its beginning instead of growing with every write', async () => {
  // A checkpoint can only let the WAL restart when it has copied every frame; with a commit every
  // millisecond a checkpoint once a second never got there and the file grew by everything written.
  const dir = mkdtempSync(join(tmpdir(), 'postino-wal-'));
  const path = join(dir, 'x.sqlite');
  const handle = openDatabase({ path, synchronous: 'FULL' });
  try {
    handle.sqlite.exec('create table blobs (id integer primary key, payload blob not null)');
    const insert = handle.sqlite.prepare('insert into blobs (payload) values (?)');
    const queue = createWriteQueue(handle.sqlite, silentLogger);
    const payload = Buffer.alloc(4000, 7);
    // For 4 s, the checkpointer's rounds taking turns with the commits, and at least 20 MB: a loaded
    // machine wrote 13.9 MB in 4 s, too little to tell a WAL that restarts from one that grows.
    const enoughToTell = 20 * 1024 * 1024;
    const until = Date.now() + 4000;
    let written = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (Date.now() < until || written < enoughToTell) {
          await queue.run(() => insert.run(payload));
          written += payload.length;
        }
      }),
    );
    const wal = statSync(`${path}-wal`).size;
    assert.ok(wal < written / 2, `WAL is ${wal} bytes after ${written} bytes were written: it never restarted`);
    await queue.close();
  } finally {
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a database opened through a symlink has its WAL synced where SQLite writes it, beside the target', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-symlink-'));
  mkdirSync(join(dir, 'real'));
  const seeded = openDatabase({ path: join(dir, 'real', 'x.sqlite'), synchronous: 'FULL' });
  seeded.sqlite.exec('create table t (id integer primary key, v text not null)');
  seeded.close();
  symlinkSync(join(dir, 'real', 'x.sqlite'), join(dir, 'link.sqlite'));
  const handle = openDatabase({ path: join(dir, 'link.sqlite'), synchronous: 'FULL' });
  const realWal = join(dir, 'real', 'x.sqlite-wal');
  assert.equal(walPathOf(handle.sqlite), realWal);
  // Descriptors on the real WAL: SQLite's own, then the syncer's (opened with the write queue). Before,
  // the syncer looked for link.sqlite-wal, found none, and acknowledged the write without a sync.
  const openOnRealWal = () => readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`) === realWal;
    } catch {
      return false;
    }
  }).length;
  const before = openOnRealWal();
  const queue = createWriteQueue(handle.sqlite, silentLogger);
  await queue.run(() => handle.sqlite.prepare('insert into t (v) values (?)').run('durable'));
  assert.equal(openOnRealWal(), before + 1, 'the syncer holds the real WAL open');
  await queue.close();
  handle.close();
});

test('a checkpoint that fails with an I/O error stops the write queue for good, and close leaves the WAL for the next start to recover', async () => {
  // A partial checkpoint pass moves the WAL's checkpointed mark without syncing the database file; if a
  // later fsync of that file fails, pages of earlier passes may be lost, and a next pass whose fsync
  // succeeds would let the WAL restart over their only good copy. A failing disk cannot be made here:
  // the checkpointer is told to fail as SQLite reports a failed fsync.
  const dir = mkdtempSync(join(tmpdir(), 'postino-ckpt-fail-'));
  const path = join(dir, 'x.sqlite');
  const handle = openDatabase({ path, synchronous: 'FULL', checkpointFaultForTests: 'SQLITE_IOERR_FSYNC' });
  handle.sqlite.exec('create table t (id integer primary key, v text not null)');
  const storage = createStorageHealth({ log: silentLogger, clock: systemClock, dataDir: dir, minFreeBytes: 0 });
  const queue = createWriteQueue(handle.sqlite, silentLogger, { storage });
  await queue.run(() => handle.sqlite.prepare("insert into t (v) values ('before')").run());
  for (let waited = 0; !storageFailureOf(handle.sqlite); waited += 10) {
    assert.ok(waited < 10_000, 'the checkpointer never reported its failure');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.match(storageFailureOf(handle.sqlite)!.message, /checkpoint of the database file failed \(SQLITE_IOERR_FSYNC/);
  const refused = /stores nothing more until it is restarted/;
  await assert.rejects(queue.run(() => handle.sqlite.prepare("insert into t (v) values ('after')").run()), refused);
  await assert.rejects(queue.synced(), refused);
  assert.equal(storage.state, 'failed');
  await queue.close();
  handle.close();
  assert.ok(readdirSync(dir).includes('x.sqlite-wal'), 'the WAL is kept: no checkpoint, no close');
});

test('a checkpointer thread that ends by itself is reported, and commits checkpoint from then on (the WAL does not grow until a restart)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-ckpt-lost-'));
  let lost: Error | undefined;
  const handle = openDatabase({ path: join(dir, 'x.sqlite'), synchronous: 'FULL', checkpointFaultForTests: 'exit', onCheckpointerLost: (error) => (lost = error) });
  try {
    assert.equal(handle.sqlite.pragma('wal_autocheckpoint', { simple: true }), 0, 'the thread checkpoints while it runs');
    for (let waited = 0; !lost; waited += 10) {
      assert.ok(waited < 10_000, 'the end of the thread was never reported');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.match(lost.message, /checkpointer thread exited/);
    assert.equal(handle.sqlite.pragma('wal_autocheckpoint', { simple: true }), 4000);
    // Past 4,000 pages of log, a commit checkpoints and the log starts over.
    handle.sqlite.exec('create table t (v blob not null)');
    const insert = handle.sqlite.prepare('insert into t (v) values (randomblob(4000))');
    for (let i = 0; i < 5_000; i++) insert.run();
    const [{ log }] = handle.sqlite.pragma('wal_checkpoint(PASSIVE)') as { log: number }[];
    assert.ok(log < 4_000, `the WAL holds ${log} frames`);
  } finally {
    handle.close();
  }
});

test('an open database never keeps a process alive: a script that opens one and ends exits (its checkpointer thread is unref-ed)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-exit-'));
  const script = join(dir, 'open-and-end.ts');
  writeFileSync(script, `import { openDatabase } from '${join(process.cwd(), 'src/db/client.ts')}';\nopenDatabase({ path: '${join(dir, 'x.sqlite')}', synchronous: 'FULL' }).sqlite.exec('create table t (v)');\n`);
  const child = spawn(process.execPath, ['--import', 'tsx', script], { stdio: 'ignore' });
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  clearTimeout(timer);
  assert.equal(signal, null, 'still running after 20 s');
  assert.equal(code, 0);
});
