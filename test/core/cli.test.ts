import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startAppliance } from '../helpers/appliance.js';

function cli(dataDir: string, ...args: string[]) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], {
    env: { ...process.env, POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' },
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

test('operator CLI: keys create, list and revoke; projects list — against a running appliance', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-cli-'));
  const app = await startAppliance({ dataDir });
  try {
    const created = cli(dataDir, 'keys', 'create', '--name', 'deploy-bot');
    assert.equal(created.code, 0, created.stderr);
    const key = /^(pst_\S+)$/m.exec(created.stdout)?.[1];
    assert.ok(key, created.stdout);
    const keyId = /key id ([0-9a-f]{24})/.exec(created.stdout)?.[1];
    assert.equal((await app.api('GET', '/v1/project', undefined, { key })).status, 200);

    const listed = cli(dataDir, 'keys', 'list');
    assert.equal(listed.code, 0);
    assert.match(listed.stdout, new RegExp(`${keyId}\\t\\S+\\t${key!.slice(0, 10)}…\\tdeploy-bot\\tactive`));
    assert.doesNotMatch(listed.stdout, new RegExp(key!), 'never prints whole keys');

    const revoked = cli(dataDir, 'keys', 'revoke', keyId!);
    assert.equal(revoked.code, 0, revoked.stderr);
    const res = await app.api('GET', '/v1/project', undefined, { key });
    assert.equal(res.body.errorCode, 'authentication-failed');
    assert.equal(cli(dataDir, 'keys', 'revoke', keyId!).code, 1, 'revoking twice reports failure');

    const projects = cli(dataDir, 'projects', 'list');
    assert.match(projects.stdout, new RegExp(`${app.appliance.defaultProjectId}\\t-\\tdefault\\tactive\\tDefault project`));
    assert.equal(cli(dataDir, 'frobnicate').code, 2);
    // A flag without its value is a usage error, not a key for the default project.
    for (const args of [['keys', 'create', '--project'], ['keys', 'create', '--project', '--name', 'x'], ['keys', 'create', '--name=']]) {
      const refused = cli(dataDir, ...args);
      assert.equal(refused.code, 2, args.join(' '));
      assert.match(refused.stderr, /postino: --(project|name) needs a value\n\nUsage: postino/);
    }
    assert.match(cli(dataDir, 'keys', '--help').stdout, /^Usage: postino/);
    // An unknown project is said, as keys create says it; extra words are refused, not ignored.
    const unknownProject = cli(dataDir, 'keys', 'list', '--project', 'nope');
    assert.deepEqual([unknownProject.code, unknownProject.stderr], [1, 'postino: no project nope (see projects list)\n']);
    assert.equal(cli(dataDir, 'keys', 'list', 'extra').code, 2);
    // An option the command does not read, or one no command has, is a usage error, not ignored or taken
    // for a configuration key: `keys list --name x` listed every key.
    for (const [args, said] of [
      [['keys', 'list', '--name', 'deploy-bot'], 'keys list does not take --name'],
      [['projects', 'list', '--project', app.appliance.defaultProjectId], 'projects list does not take --project'],
      [['keys', 'list', '--bogus=1'], 'unknown option --bogus'],
    ] as const) {
      const refused = cli(dataDir, ...args);
      assert.deepEqual([refused.code, refused.stderr.split('\n')[0]], [2, `postino: ${said}`], args.join(' '));
      assert.match(refused.stderr, /\n\nUsage: postino/);
    }
    // Config flags before the command, as after it.
    const elsewhere = mkdtempSync(join(tmpdir(), 'postino-cli-other-'));
    const flagsFirst = cli(elsewhere, `--storage.data_dir=${dataDir}`, 'projects', 'list');
    assert.equal(flagsFirst.code, 0, flagsFirst.stderr);
    assert.match(flagsFirst.stdout, /^ID\tPARENT\tDEFAULT\tSTATE\tNAME\n/);
  } finally {
    await app.stop();
  }
});

test('operator CLI: a data directory without a database is an error, and none is created there', () => {
  const empty = mkdtempSync(join(tmpdir(), 'postino-cli-empty-'));
  const result = cli(empty, 'keys', 'list');
  assert.equal(result.code, 1);
  assert.match(result.stderr, /no database at .*postino\.sqlite\. Start the appliance once/);
  assert.equal(existsSync(join(empty, 'postino.sqlite')), false);
  // A mistyped command is said as such before any database is looked for.
  const typo = cli(empty, 'kyes', 'list');
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /^postino: unknown command "kyes list"/);
});

test('operator CLI: a database file that is not one is named, without a stack trace', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-cli-notadb-'));
  writeFileSync(join(dataDir, 'postino.sqlite'), 'garbage, not a SQLite file'.repeat(200));
  const result = cli(dataDir, 'keys', 'list');
  assert.equal(result.code, 1);
  assert.match(result.stderr, /^postino: .*postino\.sqlite cannot be read as a database \(SQLite: file is not a database\): restore it from a backup/);
  assert.doesNotMatch(result.stderr, /\n\s+at /);
});

test('operator CLI: a reader holding the database open (a backup, a long search) does not hold the CLI, nor the writers behind it', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-cli-reader-'));
  const app = await startAppliance({ dataDir });
  const reader = new Database(join(dataDir, 'postino.sqlite'), { readonly: true });
  try {
    const timed = () => {
      const started = performance.now();
      const listed = cli(dataDir, 'keys', 'list');
      assert.equal(listed.code, 0, listed.stderr);
      return performance.now() - started;
    };
    const alone = timed();
    reader.exec('BEGIN');
    reader.prepare('select count(*) from projects').get();
    // A commit after the reader's snapshot: the reader now holds back a full checkpoint.
    assert.equal((await app.api('POST', '/v1/webhooks', { url: 'https://example.com/hook', enabled: false })).status, 201);
    // Closing with a TRUNCATE checkpoint waited out busy_timeout (5 s) for this reader, holding the write
    // lock all along: every send stalled with it.
    const beside = timed();
    assert.ok(beside < alone + 3000, `the CLI took ${Math.round(beside)} ms beside a reader, ${Math.round(alone)} ms alone`);
  } finally {
    reader.close();
    await app.stop();
  }
});

test('operator CLI: projects delete removes a linked project by its exact id, as DELETE /v1/project does, beside a running appliance', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-cli-delete-'));
  const app = await startAppliance({ dataDir, env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
  try {
    const linked = await app.api('POST', '/v1/project', { name: 'shop' });
    assert.equal(linked.status, 200, JSON.stringify(linked.body));
    const { id, apiKey } = linked.body;
    const sent = await app.api('POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject: 'Hi', text: 'x' }, { key: apiKey });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));

    // Nothing but the exact id: a prefix names no project.
    assert.deepEqual(pick(cli(dataDir, 'projects', 'delete', id.slice(0, 12))), [1, `postino: no project ${id.slice(0, 12)} (see projects list)\n`]);
    assert.equal(cli(dataDir, 'projects', 'delete').code, 2, 'an id is needed');
    // The API's rules: a top-level project stays.
    const topLevel = cli(dataDir, 'projects', 'delete', app.appliance.defaultProjectId);
    assert.equal(topLevel.code, 1);
    assert.match(topLevel.stderr, /^postino: Only linked projects can be deleted/);

    const deleted = cli(dataDir, 'projects', 'delete', id);
    assert.deepEqual(pick(deleted), [0, ''], deleted.stderr);
    assert.equal(deleted.stdout, `deleted project ${id} (shop)\n`);
    assert.equal((await app.api('GET', '/v1/project', undefined, { key: apiKey })).body.errorCode, 'authentication-failed');
    assert.doesNotMatch(cli(dataDir, 'projects', 'list').stdout, new RegExp(id));
    const db = new Database(join(dataDir, 'postino.sqlite'), { readonly: true });
    try {
      assert.equal(db.prepare('select count(*) from emails where project_id = ?').pluck().get(id), 0);
    } finally {
      db.close();
    }
    assert.equal(cli(dataDir, 'projects', 'delete', id).code, 1, 'gone');
  } finally {
    await app.stop();
  }
});

function pick(result: { code: number | null; stderr: string }) {
  return [result.code, result.stderr];
}

test('keys create refuses a project whose deletion is under way (interrupted: it goes on at the next start), instead of printing a key that works until then', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-cli-deleting-'));
  const app = await startAppliance({ dataDir });
  try {
    const linked = await app.api('POST', '/v1/project', { name: 'Half deleted' });
    const projectId: string = linked.body.id;
    // What `projects delete` leaves when it is stopped during its purge: keys revoked, the mark set.
    const other = new Database(join(dataDir, 'postino.sqlite'));
    try {
      other.prepare('update api_keys set revoked_at = 1 where project_id = ?').run(projectId);
      other.prepare(`insert into settings (key, value) values (?, '1')`).run(`deleting:${projectId}`);
    } finally {
      other.close();
    }
    // Listed as what it is: the next start finishes the deletion.
    assert.match(cli(dataDir, 'projects', 'list').stdout, new RegExp(`^${projectId}\\t${app.appliance.defaultProjectId}\\t\\tdeleting\\tHalf deleted$`, 'm'));
    const created = cli(dataDir, 'keys', 'create', '--project', projectId);
    const key = /^(pst_\S+)$/m.exec(created.stdout)?.[1];
    if (key) assert.equal((await app.api('GET', '/v1/project', undefined, { key })).status, 401, 'the printed key works on a project being deleted');
    assert.equal(created.code, 1, created.stdout);
    assert.match(created.stderr, /^postino: project \S+ is being deleted/);
    assert.equal(app.appliance.context.database.sqlite.prepare('select count(*) from api_keys where project_id = ? and revoked_at is null').pluck().get(projectId), 0);
  } finally {
    await app.stop();
  }
});
