import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { apiCall, startAppliance, testApiKey } from '../helpers/appliance.js';
import { startChildAppliance } from '../helpers/child.js';

/** The operator CLI in a child process, without blocking this one: the appliance here goes on answering. */
function cli(dataDir: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return cliFrom(undefined, dataDir, ...args);
}

/** As `npm run postino` runs it: in the package's folder, the operator's own in INIT_CWD. */
function cliFrom(initCwd: string | undefined, dataDir: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'src/cli.ts', ...args],
      { env: { ...process.env, POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '', ...(initCwd ? { INIT_CWD: initCwd } : {}) }, encoding: 'utf8', timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const captureEnv = { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' };
const body = 'lorem ipsum dolor sit amet '.repeat(600);

test('operator CLI: backup writes a consistent copy while sends commit, its owner only, never over an existing file; the copy starts an appliance', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-backup-'));
  const app = await startAppliance({ dataDir, env: captureEnv });
  const send = async (subject: string) => {
    const res = await app.api('POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject, text: body });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body.id as string;
  };
  let backupFile = '';
  let sentBefore: string[] = [];
  try {
    // A few MB: SQLite's backup API copies 100 pages per step and starts over at every commit in between.
    sentBefore = await Promise.all(Array.from({ length: 300 }, (_, i) => send(`before-${i}`)));
    let sending = true;
    let sentDuring = 0;
    const load = (async () => {
      while (sending) {
        await send(`during-${sentDuring}`);
        sentDuring++;
      }
    })();
    backupFile = join(mkdtempSync(join(tmpdir(), 'postino-backup-target-')), 'postino-backup.sqlite');
    const backup = await cli(dataDir, 'backup', backupFile);
    sending = false;
    await load;
    assert.equal(backup.code, 0, backup.stderr);
    assert.match(backup.stdout, /^backed up .*postino\.sqlite to .*postino-backup\.sqlite \(\d+\.\d MB\)\n$/);
    assert.ok(sentDuring > 0, 'sends committed while the backup ran');
    // It holds the DKIM private keys and every secret, as the database does.
    assert.equal(statSync(backupFile).mode & 0o777, 0o600);
    assert.equal(existsSync(`${backupFile}.partial`), false);
    const copy = new Database(backupFile, { readonly: true });
    try {
      assert.equal(copy.pragma('quick_check', { simple: true }), 'ok');
      assert.ok((copy.prepare('select count(*) from emails').pluck().get() as number) >= sentBefore.length);
    } finally {
      copy.close();
    }

    // An existing file may be the only good backup: refused, unchanged.
    const before = readFileSync(backupFile);
    const again = await cli(dataDir, 'backup', backupFile);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /already exists: give the backup a new name/);
    assert.ok(readFileSync(backupFile).equals(before));
    assert.equal((await cli(dataDir, 'backup')).code, 2, 'a backup without a file is a usage error');
  } finally {
    await app.stop();
  }

  // Restored into a fresh data directory, the copy is the appliance's database: the emails are there.
  const restoredDir = mkdtempSync(join(tmpdir(), 'postino-backup-restored-'));
  copyFileSync(backupFile, join(restoredDir, 'postino.sqlite'));
  const restored = await startAppliance({ dataDir: restoredDir, env: captureEnv });
  try {
    const email = await restored.api('GET', `/v1/email/${sentBefore[0]}`);
    assert.equal(email.body.email?.id, sentBefore[0], JSON.stringify(email.body));
  } finally {
    await restored.stop();
  }
});

test('operator CLI: restore puts a backup in place over a database a kill -9 left with its WAL (replayed over a copied-in backup, it broke the start); refused while the appliance runs', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-restore-'));
  const backupFile = join(mkdtempSync(join(tmpdir(), 'postino-restore-backup-')), 'backup.sqlite');
  const env = { ...captureEnv, POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: testApiKey, POSTINO_SUBMISSION_ENABLED: 'false' };
  const first = await startChildAppliance(env);
  const base = `http://127.0.0.1:${first.httpPort}`;
  const send = async (subject: string) => (await apiCall(base, 'POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject, text: body }, testApiKey)).body.id as string;
  let kept = '';
  let lost: string[] = [];
  // A reader that stays in its read transaction (a long backup, an operator's sqlite3 session): the
  // checkpointer cannot pass it, so what is committed meanwhile is in the WAL only at the crash.
  const reader = new Database(join(dataDir, 'postino.sqlite'), { readonly: true });
  try {
    kept = await send('in the backup');
    assert.equal((await cli(dataDir, 'backup', backupFile)).code, 0);
    reader.prepare('BEGIN').run();
    reader.prepare('select count(*) from emails').get();
    lost = await Promise.all(Array.from({ length: 100 }, (_, i) => send(`after the backup ${i}`)));
    const refused = await cli(dataDir, 'restore', backupFile);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^postino: Another Postino is already running on the data directory .*Stop it first: a restore replaces the database it has open\.\n$/);
  } finally {
    first.child.kill('SIGKILL');
    await first.exited;
    reader.close(); // read-only: closing it checkpoints nothing
  }
  assert.ok(statSync(join(dataDir, 'postino.sqlite-wal')).size > 0, 'the crash left a WAL');
  const mainOnlyPath = join(mkdtempSync(join(tmpdir(), 'postino-restore-main-')), 'main-only.sqlite');
  copyFileSync(join(dataDir, 'postino.sqlite'), mainOnlyPath);
  const mainOnly = new Database(mainOnlyPath);
  assert.equal(mainOnly.prepare('select count(*) from emails where id = ?').pluck().get(lost[0]), 0, 'the commits after the backup are in the WAL only');
  mainOnly.close();

  const restored = await cli(dataDir, 'restore', backupFile);
  assert.equal(restored.code, 0, restored.stderr);
  assert.match(restored.stdout, /^restored .*backup\.sqlite to .*postino\.sqlite; the database it replaced is .*postino\.sqlite\.replaced/);
  assert.equal(existsSync(join(dataDir, 'postino.sqlite-wal')), false);
  assert.equal(statSync(join(dataDir, 'postino.sqlite')).mode & 0o777, 0o600);

  const second = await startChildAppliance(env);
  try {
    const secondBase = `http://127.0.0.1:${second.httpPort}`;
    const emailOf = async (id: string) => (await apiCall(secondBase, 'GET', `/v1/email/${id}`, undefined, testApiKey)).body.email;
    assert.equal((await emailOf(kept))?.id, kept);
    assert.equal(await emailOf(lost[0]), null, 'the database is the backup');
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
  }
  // The database replaced is kept with its WAL: what was sent after the backup can still be read.
  const replacedPath = join(dataDir, 'postino.sqlite.replaced');
  const countOf = (path: string, id: string) => {
    const db = new Database(path, { readonly: true });
    try {
      return db.prepare('select count(*) from emails where id = ?').pluck().get(id);
    } finally {
      db.close();
    }
  };
  assert.equal(countOf(replacedPath, lost[0]), 1);
  assert.ok(statSync(`${replacedPath}-wal`).size > 0, 'its commits after the backup are in its WAL still');

  // Undoing the restore by restoring what it replaced brings those commits back: the source is read with
  // its WAL (a copy of the file alone left them out, and the undo then deleted that WAL).
  const undone = await cli(dataDir, 'restore', replacedPath);
  assert.equal(undone.code, 0, undone.stderr);
  const databasePath = join(dataDir, 'postino.sqlite');
  assert.deepEqual(lost.map((id) => countOf(databasePath, id)), lost.map(() => 1));
  // The restored backup is kept aside too, beside the first: a restore never deletes a database.
  assert.match(undone.stdout, /the database it replaced is .*postino\.sqlite\.replaced\.2 /);
  assert.equal(countOf(`${replacedPath}.2`, kept), 1);
  assert.equal(countOf(`${replacedPath}.2`, lost[0]), 0, 'the backup restored before');
  assert.equal(countOf(replacedPath, lost[0]), 1, 'the first one kept aside is still there');
  const third = await cli(dataDir, 'restore', backupFile);
  assert.equal(third.code, 0, third.stderr);
  assert.deepEqual(lost.map((id) => countOf(`${replacedPath}.3`, id)), lost.map(() => 1), 'the undone database kept aside as .3: nothing accepted is ever deleted by a restore');
});

test('operator CLI: restore into a data directory where a WAL was left without its database moves that WAL aside (replayed over the backup, it broke the start)', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-restore-orphan-'));
  const backupFile = join(mkdtempSync(join(tmpdir(), 'postino-restore-orphan-backup-')), 'backup.sqlite');
  const env = { ...captureEnv, POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: testApiKey, POSTINO_SUBMISSION_ENABLED: 'false' };
  const first = await startChildAppliance(env);
  const base = `http://127.0.0.1:${first.httpPort}`;
  try {
    assert.equal((await cli(dataDir, 'backup', backupFile)).code, 0);
    for (let i = 0; i < 50; i++) await apiCall(base, 'POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject: `s${i}`, text: body }, testApiKey);
  } finally {
    first.child.kill('SIGKILL');
    await first.exited;
  }
  assert.ok(statSync(join(dataDir, 'postino.sqlite-wal')).size > 0, 'the crash left a WAL');
  // The operator moves the crashed database away and leaves its WAL behind.
  copyFileSync(join(dataDir, 'postino.sqlite'), join(dataDir, '..', `${dataDir.split('/').pop()}-moved.sqlite`));
  rmSync(join(dataDir, 'postino.sqlite'));
  const restored = await cli(dataDir, 'restore', backupFile);
  assert.equal(restored.code, 0, restored.stderr);
  assert.match(restored.stdout, /a log left there without its database \(it does not belong to the one restored\) is now .*postino\.sqlite\.replaced-wal\n$/);
  assert.equal(existsSync(join(dataDir, 'postino.sqlite-wal')), false);
  const second = await startChildAppliance(env);
  try {
    const health = await apiCall(`http://127.0.0.1:${second.httpPort}`, 'GET', '/healthz', undefined, testApiKey);
    assert.equal(health.status, 200, JSON.stringify(health.body));
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
  }
});

test('operator CLI: restore refuses a file that is not a whole Postino database of this build or older, changing nothing', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-restore-refused-'));
  const app = await startAppliance({ dataDir, env: captureEnv });
  const backupFile = join(mkdtempSync(join(tmpdir(), 'postino-restore-refused-backup-')), 'backup.sqlite');
  try {
    assert.equal((await cli(dataDir, 'backup', backupFile)).code, 0);
  } finally {
    await app.stop();
  }
  const before = readFileSync(join(dataDir, 'postino.sqlite'));
  const other = join(tmpdir(), `not-postino-${process.pid}.sqlite`);
  new Database(other).exec('create table notes (text)');
  const newer = `${backupFile}.newer`;
  copyFileSync(backupFile, newer);
  const newerDb = new Database(newer);
  newerDb.prepare('insert into __drizzle_migrations (hash, created_at) values (?, ?)').run('a-later-build', Date.now());
  newerDb.close();
  const garbage = join(tmpdir(), `garbage-${process.pid}.sqlite`);
  writeFileSync(garbage, 'not a database at all'.repeat(100));
  for (const [file, said] of [
    [garbage, /cannot be read as a database .*nothing was changed/],
    [other, /is not a Postino database; nothing was changed/],
    [newer, /written by a newer Postino .*Nothing was changed/],
    [join(tmpdir(), 'no-such-backup.sqlite'), /^postino: .*no-such-backup\.sqlite: no such file; nothing was changed\n$/],
    [tmpdir(), /^postino: .* is not a file \(a backup is one file, made by backup\); nothing was changed\n$/],
  ] as const) {
    const refused = await cli(dataDir, 'restore', file);
    assert.equal(refused.code, 1, file);
    assert.match(refused.stderr, said);
    assert.ok(readFileSync(join(dataDir, 'postino.sqlite')).equals(before), file);
    assert.equal(existsSync(join(dataDir, 'postino.sqlite.restoring')), false);
  }
  const noFolder = await cli(dataDir, 'backup', join(tmpdir(), 'no-such-folder', 'x.sqlite'));
  assert.match(noFolder.stderr, /^postino: .*no-such-folder: no such folder for the backup; nothing was written\n$/);
  // A relative FILE is the operator's: `npm run postino` runs in the package's folder, so from INIT_CWD.
  const operatorDir = mkdtempSync(join(tmpdir(), 'postino-operator-'));
  const relative = await cliFrom(operatorDir, dataDir, 'backup', 'relative.sqlite');
  assert.equal(relative.code, 0, relative.stderr);
  assert.ok(existsSync(join(operatorDir, 'relative.sqlite')));
  assert.match(relative.stdout, new RegExp(`to ${join(operatorDir, 'relative.sqlite').replace(/[.]/g, '\\.')} `));
  // On a new machine: a data directory with no database yet.
  const fresh = join(mkdtempSync(join(tmpdir(), 'postino-restore-new-')), 'data');
  const onNew = await cli(fresh, 'restore', backupFile);
  assert.equal(onNew.code, 0, onNew.stderr);
  assert.match(onNew.stdout, /^restored .* to .*postino\.sqlite\n$/);
});
