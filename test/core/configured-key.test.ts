import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { systemClock } from '../../src/lib/clock.js';
import { createLogger, silentLogger, type Logger } from '../../src/lib/logger.js';
import { hashApiKey } from '../../src/projects/keys.js';
import { createProjectsRepo } from '../../src/projects/repo.js';
import { createProjectsService } from '../../src/projects/service.js';

/**
 * The rules of `auth.api_key` across starts, on the projects service as the appliance's start-up calls
 * it (lifecycle.test.ts covers removal and restore with real processes): each `start` is what one boot
 * does with the configured value.
 */
const keyA = 'pst_configured_key_a_0123456789abcdefghijkl';
const keyB = 'pst_configured_key_b_0123456789abcdefghijkl';

function dataFile() {
  const path = join(mkdtempSync(join(tmpdir(), 'postino-configured-key-')), 'postino.sqlite');
  const start = (configuredKey: string, log: Logger = silentLogger) => {
    const database = openDatabase({ path, synchronous: 'FULL' });
    migrateDatabase(database.db);
    const writes = createWriteQueue(database.sqlite, silentLogger);
    const projects = createProjectsService({ repo: createProjectsRepo(database.db, database.sqlite), sqlite: database.sqlite, writes, clock: systemClock, log });
    const started = projects.ensureDefaultProject(configuredKey);
    const works = (key: string) => {
      try {
        projects.authenticate(`Bearer ${key}`);
        return true;
      } catch {
        return false;
      }
    };
    const keyIdOf = (key: string) => projects.listKeys(started.projectId).find((k) => k.keyHash === hashApiKey(key))?.id;
    const stop = async () => {
      // As main.ts does once it printed the key: a key never shown is revoked at the next start.
      if (started.generatedKey) await projects.generatedKeyShown();
      await writes.close();
      database.close();
    };
    /** A start that ends before main printed its key (kill -9): nothing records that it was shown. */
    const writesClosedWithoutShowing = async () => {
      await writes.close();
      database.close();
    };
    return { projects, started, works, keyIdOf, stop, writesClosedWithoutShowing };
  };
  return { start, path };
}

test('a configured key revoked with the CLI stays revoked after auth.api_key is removed and set again', async () => {
  const file = dataFile();
  const first = file.start(keyA);
  assert.equal(first.works(keyA), true);
  // The operator revokes it (keys revoke), then removes it from the config.
  assert.equal(first.projects.revokeKey(first.keyIdOf(keyA)!), true);
  await first.stop();
  const removed = file.start('');
  assert.ok(removed.started.generatedKey, 'no key left: a new one is printed');
  await removed.stop();
  // Configured again: a key revoked on purpose is refused, not brought back.
  assert.throws(() => file.start(keyA), /auth\.api_key was revoked on \d{4}-\d\d-\d\d \(.*configure the current key/);
  const after = file.start('');
  assert.equal(after.works(keyA), false);
  assert.equal(after.works(removed.started.generatedKey!), true);
  await after.stop();
});

test('configuring another key after a removal ends the chance to restore the removed one', async () => {
  const file = dataFile();
  await file.start(keyA).stop();
  await file.start('').stop(); // keyA removed: revoked, remembered for a restore
  const other = file.start(keyB);
  assert.equal(other.works(keyB), true);
  assert.equal(other.works(keyA), false);
  await other.stop();
  // keyA again: the restore was cancelled by keyB, so keyA stays revoked and the start is refused.
  assert.throws(() => file.start(keyA), /auth\.api_key was revoked on \d{4}-\d\d-\d\d \(.*configure the current key/);
});

test('a removed configured key comes back when the same key is configured again', async () => {
  const file = dataFile();
  await file.start(keyA).stop();
  const removed = file.start('');
  assert.equal(removed.works(keyA), false);
  await removed.stop();
  const again = file.start(keyA);
  assert.equal(again.works(keyA), true);
  assert.equal(again.works(removed.started.generatedKey!), true, 'the key printed meanwhile is not taken away');
  await again.stop();
});

test("a removed configured key that comes back is still the config's own: a later change revokes it", async () => {
  const file = dataFile();
  await file.start(keyA).stop();
  await file.start('').stop();
  await file.start(keyA).stop(); // restored
  const changed = file.start(keyB);
  assert.equal(changed.works(keyB), true);
  assert.equal(changed.works(keyA), false);
  await changed.stop();
});

test('a key made with the CLI and then configured is not the config\'s: removed or replaced in the config, it keeps working', async () => {
  const file = dataFile();
  const first = file.start(keyA);
  const cliKey = first.projects.createKey(first.started.projectId, 'cli').key;
  await first.stop();
  await file.start(cliKey).stop();
  const removed = file.start('');
  assert.equal(removed.works(cliKey), true);
  assert.equal(removed.started.generatedKey, undefined);
  await removed.stop();
  await file.start(cliKey).stop();
  const changed = file.start(keyB);
  assert.equal(changed.works(cliKey), true);
  assert.equal(changed.works(keyA), false, 'the key the config created is revoked once it is replaced');
  await changed.stop();
});

test('a start that finds every key of the default project revoked says so (and leaves them revoked)', async () => {
  const file = dataFile();
  const first = file.start('');
  const generated = first.started.generatedKey!;
  assert.equal(first.projects.revokeKey(first.keyIdOf(generated)!), true);
  await first.stop();
  const lines: string[] = [];
  const next = file.start('', createLogger({ level: 'info', write: (line) => lines.push(line) }));
  assert.equal(next.started.generatedKey, undefined, 'revoked on purpose: no new key is made');
  assert.equal(next.works(generated), false);
  assert.ok(lines.some((line) => /"level":"warn".*the default project has no active API key: no client can use it; create one with `npm run postino -- keys create`/.test(line)), lines.join('\n'));
  await next.stop();
});

test('a short configured key is not kept in the clear as its listed prefix: the prefix shows at most a quarter of a key', async () => {
  const file = dataFile();
  // A homelab's own short key: a 10-character prefix was all of it (in `keys list`, in every backup).
  const shortKey = 'homelab-key1';
  const started = file.start(shortKey);
  const [row] = started.projects.listKeys(started.started.projectId);
  assert.ok(row.keyPrefix.length <= shortKey.length / 4, `prefix ${JSON.stringify(row.keyPrefix)} of ${JSON.stringify(shortKey)}`);
  assert.equal(started.works(shortKey), true);
  // A generated key (pst_ and 43 characters) keeps the prefix operators know it by.
  const created = started.projects.createKey(started.started.projectId, 'cli');
  assert.equal(started.projects.listKeys(started.started.projectId).find((k) => k.id === created.id)?.keyPrefix, created.key.slice(0, 10));
  await started.stop();
});

test('a short configured key listed in the clear by an earlier build loses that prefix at the next start', async () => {
  const file = dataFile();
  const shortKey = 'homelab-key1';
  const first = file.start(shortKey);
  await first.stop();
  // What builds before the quarter rule wrote for it, kept in the file across the upgrade.
  const old = openDatabase({ path: file.path, synchronous: 'FULL' });
  old.sqlite.prepare('update api_keys set key_prefix = ?').run(shortKey.slice(0, 10));
  old.close();
  const upgraded = file.start(shortKey);
  const [row] = upgraded.projects.listKeys(upgraded.started.projectId);
  assert.equal(row.keyPrefix, 'hom', 'the prefix is what this build stores for the key');
  assert.equal(upgraded.works(shortKey), true);
  await upgraded.stop();
});

test('a generated key whose start ended before it was printed is revoked at the next start, which prints a new one', async () => {
  const file = dataFile();
  // The first start is killed between the commit of its key and the print: nothing says it was shown.
  const killed = file.start('');
  const lost = killed.started.generatedKey!;
  await killed.writesClosedWithoutShowing();
  const lines: string[] = [];
  const next = file.start('', createLogger({ level: 'info', write: (line) => lines.push(line) }));
  assert.ok(next.started.generatedKey, 'a new key to print');
  assert.notEqual(next.started.generatedKey, lost);
  assert.equal(next.works(lost), false, 'a key nobody saw does not stay valid');
  assert.equal(next.works(next.started.generatedKey!), true);
  assert.ok(lines.some((line) => /"level":"warn".*the API key generated at the previous start was never printed/.test(line)), lines.join('\n'));
  await next.stop(); // printed: kept from now on
  const later = file.start('');
  assert.equal(later.started.generatedKey, undefined);
  assert.equal(later.works(next.started.generatedKey!), true);
  await later.stop();
});

test('a lost generated key is revoked without a new one when the operator made a key meanwhile, or configures one', async () => {
  for (const meanwhile of ['cli', 'configured'] as const) {
    const file = dataFile();
    const killed = file.start('');
    const lost = killed.started.generatedKey!;
    // No key printed: the operator makes one with the CLI (keys create), or sets auth.api_key.
    const cliKey = meanwhile === 'cli' ? killed.projects.createKey(killed.started.projectId, 'cli').key : keyA;
    await killed.writesClosedWithoutShowing();
    const next = file.start(meanwhile === 'cli' ? '' : keyA);
    assert.equal(next.started.generatedKey, undefined, meanwhile);
    assert.equal(next.works(lost), false, meanwhile);
    assert.equal(next.works(cliKey), true, meanwhile);
    await next.stop();
  }
});
