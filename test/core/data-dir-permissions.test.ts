import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { chmodSync, mkdtempSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { openDatabase } from '../../src/db/client.js';

// SQLite opens a file this user may not write read-only, without a word. Root writes anything, so the
// refusals are checked in a child process running as nobody (setpriv, util-linux); as any other user,
// as that user.

const asRoot = process.getuid?.() === 0;

/** Runs `source` (TypeScript, importing from the repository) as an unprivileged user; resolves with its output. */
function runUnprivileged(dir: string, source: string): Promise<string> {
  const script = join(dir, 'probe.ts');
  writeFileSync(script, source);
  chmodSync(script, 0o644);
  const command = asRoot ? 'setpriv' : process.execPath;
  const args = [...(asRoot ? ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath] : []), '--import', 'tsx', script];
  return new Promise((done) => execFile(command, args, { cwd: resolve('.'), timeout: 60_000 }, (error, stdout, stderr) => done(`${stdout}${stderr}${error && !stdout ? error.message : ''}`)));
}

/** A data directory anyone may enter and write, holding files only its creator may write. */
function sharedDirWithReadOnlyFile(name: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'postino-perm-'));
  chmodSync(dir, 0o777);
  writeFileSync(join(dir, name), '');
  chmodSync(join(dir, name), 0o644);
  if (!asRoot) chmodSync(join(dir, name), 0o444);
  return dir;
}

const src = resolve('src');

/** Whether nobody can reach the repository (every directory above it searchable by others). */
function repositoryReachableByOthers(): boolean {
  for (let dir = resolve('.'); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false;
    if (dir === dirname(dir)) return true;
  }
}

const unprivilegedUnavailable = asRoot && !repositoryReachableByOthers() ? `the repository at ${resolve('.')} is not reachable by other users, so the check cannot run as nobody` : false;

test('a lock file this user may not write is refused: its lock would exclude nobody, and a second appliance would start', { skip: unprivilegedUnavailable }, async () => {
  const dir = sharedDirWithReadOnlyFile('postino.lock');
  const output = await runUnprivileged(dir, `import { lockDataDir } from '${src}/db/data-dir-lock.ts';\ntry { lockDataDir('${dir}'); console.log('locked'); } catch (e) { console.log('refused:', e.message); }\n`);
  assert.match(output, /refused: storage\.data_dir: cannot use .*postino\.lock: .* is not writable by this user/);
});

test('a data directory this user may no longer write, holding the lock file of an earlier run, is refused naming it, not with a stack trace', { skip: unprivilegedUnavailable }, async () => {
  // As an earlier run left it (the lock file is the user's own), then made read-only: chmod, a restore.
  const dir = mkdtempSync(join(tmpdir(), 'postino-perm-'));
  writeFileSync(join(dir, 'postino.lock'), '');
  chmodSync(join(dir, 'postino.lock'), 0o666);
  chmodSync(dir, 0o555);
  const probeDir = mkdtempSync(join(tmpdir(), 'postino-probe-'));
  chmodSync(probeDir, 0o755);
  const output = await runUnprivileged(probeDir, `import { lockDataDir } from '${src}/db/data-dir-lock.ts';\ntry { lockDataDir('${dir}'); console.log('locked'); } catch (e) { console.log('refused:', e.name, e.message); }\n`);
  assert.match(output, /refused: StartupError storage\.data_dir: cannot use .*postino\.lock: .*\(the directory must exist or be creatable, and be writable by this user\)/);
});

test('a database file this user may not write is refused at open, instead of failing at its first write', { skip: unprivilegedUnavailable }, async () => {
  const dir = sharedDirWithReadOnlyFile('postino.sqlite');
  const output = await runUnprivileged(dir, `import { openDatabase } from '${src}/db/client.ts';\ntry { openDatabase({ path: '${dir}/postino.sqlite', synchronous: 'FULL' }); console.log('opened'); } catch (e) { console.log('refused:', e.code, e.message); }\n`);
  assert.match(output, /refused: EACCES .*postino\.sqlite is not writable by this user/);
});

test('the operator CLI run by another user than the appliance says so, not that there is no database', { skip: unprivilegedUnavailable || (!asRoot && 'needs root to make a directory another user cannot read') }, async () => {
  // As the appliance leaves it: a 0700 data directory holding the database, and the CLI run as another user.
  const dir = mkdtempSync(join(tmpdir(), 'postino-perm-'));
  writeFileSync(join(dir, 'postino.sqlite'), '');
  chmodSync(dir, 0o700);
  const output = await new Promise<string>((done) =>
    execFile('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '--import', 'tsx', 'src/cli.ts', 'keys', 'list'], { cwd: resolve('.'), env: { ...process.env, POSTINO_STORAGE_DATA_DIR: dir }, timeout: 60_000 }, (_error, stdout, stderr) => done(`${stdout}${stderr}`)),
  );
  assert.match(output, /^postino: cannot read .*postino\.sqlite \(EACCES\): run this as the user the appliance runs as\./m);
});

test('opening the database takes group and other bits away, and never adds write permission the operator took away', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-perm-'));
  const path = join(dir, 'postino.sqlite');
  openDatabase({ path, synchronous: 'FULL' }).close();
  chmodSync(path, 0o644);
  openDatabase({ path, synchronous: 'FULL' }).close();
  assert.equal(statSync(path).mode & 0o777, 0o600, 'group and other bits removed');
  if (!asRoot) return; // only root can open a file it made read-only
  chmodSync(path, 0o444);
  openDatabase({ path, synchronous: 'FULL' }).close();
  assert.equal(statSync(path).mode & 0o777, 0o400, 'still read-only for its owner');
});

test('two data directories whose postino.sqlite links to the same file cannot both run: the file has its own lock', async () => {
  const { lockDataDir } = await import('../../src/db/data-dir-lock.js');
  const shared = mkdtempSync(join(tmpdir(), 'postino-shared-'));
  const target = join(shared, 'mail.sqlite');
  openDatabase({ path: target, synchronous: 'FULL' }).close();
  const dirs = [0, 1].map(() => mkdtempSync(join(tmpdir(), 'postino-linked-')));
  for (const dir of dirs) symlinkSync(target, join(dir, 'postino.sqlite'));
  const first = lockDataDir(dirs[0]);
  try {
    assert.throws(() => lockDataDir(dirs[1]), /Another Postino is already running on the database .*mail\.sqlite, which .*postino\.sqlite links to/);
  } finally {
    first.release();
  }
  lockDataDir(dirs[1]).release();

  // One data directory holds the file itself, the other links to it.
  const owner = mkdtempSync(join(tmpdir(), 'postino-owner-'));
  openDatabase({ path: join(owner, 'postino.sqlite'), synchronous: 'FULL' }).close();
  const linked = mkdtempSync(join(tmpdir(), 'postino-linked-'));
  symlinkSync(join(owner, 'postino.sqlite'), join(linked, 'postino.sqlite'));
  const ownerLock = lockDataDir(owner);
  try {
    assert.throws(() => lockDataDir(linked), /Another Postino is already running on the database .*postino\.sqlite, which .*links to/);
  } finally {
    ownerLock.release();
  }
});

test('a data directory whose postino.sqlite links to a file not created yet locks that file too, from either side', async () => {
  const { lockDataDir } = await import('../../src/db/data-dir-lock.js');
  // A fresh install or a restore under way: SQLite creates the target through the link.
  const owner = mkdtempSync(join(tmpdir(), 'postino-owner-'));
  const linked = mkdtempSync(join(tmpdir(), 'postino-linked-'));
  symlinkSync(join(owner, 'postino.sqlite'), join(linked, 'postino.sqlite'));
  const linkedLock = lockDataDir(linked);
  try {
    assert.throws(() => lockDataDir(owner), /Another Postino is already running on the database .*postino\.sqlite \(/);
  } finally {
    linkedLock.release();
  }
  const ownerLock = lockDataDir(owner);
  try {
    assert.throws(() => lockDataDir(linked), /Another Postino is already running on the database .*postino\.sqlite, which .*links to/);
  } finally {
    ownerLock.release();
  }
  // A link whose folder does not exist is refused as a data directory that cannot be used.
  const broken = mkdtempSync(join(tmpdir(), 'postino-broken-'));
  symlinkSync(join(broken, 'missing', 'postino.sqlite'), join(broken, 'postino.sqlite'));
  assert.throws(() => lockDataDir(broken), /storage\.data_dir: .*postino\.sqlite links to .*missing\/postino\.sqlite, in a folder that does not exist/);
});

test('an appliance starting at the same moment as another is not refused for the instant the other reads the lock file', async () => {
  const { lockDataDir } = await import('../../src/db/data-dir-lock.js');
  const { Worker } = await import('node:worker_threads');
  const dir = mkdtempSync(join(tmpdir(), 'postino-together-'));
  // What the other start does on its way to the exclusive lock: a shared lock on the fresh file, for a moment.
  const other = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const Database = require(workerData.sqlite);
     const db = new Database(workerData.path);
     db.exec('BEGIN');
     db.prepare('select count(*) from sqlite_master').get();
     parentPort.postMessage('reading');
     Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
     db.exec('COMMIT');
     db.close();`,
    { eval: true, workerData: { sqlite: createRequire(import.meta.url).resolve('better-sqlite3'), path: join(dir, 'postino.lock') } },
  );
  // Listened for at once: a worker that exits while this thread is busy (the lock below, a loaded machine)
  // may have its exit delivered before a listener added later, which then waited for the test's timeout.
  const exited = new Promise((resolve) => other.once('exit', resolve));
  await new Promise((resolve) => other.once('message', resolve));
  const lock = lockDataDir(dir);
  lock.release();
  await exited;
});
