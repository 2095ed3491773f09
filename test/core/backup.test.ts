import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startAppliance } from '../helpers/appliance.js';

/** The operator CLI in a child process, without blocking this one: the appliance here goes on answering. */
function cli(dataDir: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'src/cli.ts', ...args],
      { env: { ...process.env, POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' }, encoding: 'utf8', timeout: 60_000 },
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
    assert.equal(email.status, 200, JSON.stringify(email.body));
  } finally {
    await restored.stop();
  }
});
