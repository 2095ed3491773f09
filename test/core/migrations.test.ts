import { test } from 'node:test';
import { spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../src/db/client.js';
import { defaultMigrationsFolder, migrateDatabase } from '../../src/db/migrate.js';
import { createDeliveryRepo } from '../../src/delivery/repo.js';
import { ManualClock } from '../../src/lib/clock.js';

const tables = (sqlite: ReturnType<typeof openDatabase>['sqlite']) =>
  (sqlite.prepare("select name from sqlite_master where type = 'table' order by name").all() as { name: string }[]).map((r) => r.name);

/** A copy of the migrations folder that stops after the first `count` migrations: an "older build". */
function olderMigrations(count: number): string {
  const folder = mkdtempSync(join(tmpdir(), 'postino-old-migrations-'));
  cpSync(defaultMigrationsFolder(), folder, { recursive: true });
  const journalPath = join(folder, 'meta', '_journal.json');
  const journal = JSON.parse(readFileSync(journalPath, 'utf8'));
  journal.entries = journal.entries.slice(0, count);
  writeFileSync(journalPath, JSON.stringify(journal));
  return folder;
}

test('a fresh database gets every table, WAL and the pragmas', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-'));
  const handle = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
  try {
    migrateDatabase(handle.db);
    const names = tables(handle.sqlite);
    for (const table of ['projects', 'api_keys', 'emails', 'delivery_jobs', 'settings']) assert.ok(names.includes(table), table);
    assert.equal(handle.sqlite.pragma('journal_mode', { simple: true }), 'wal');
    assert.equal(handle.sqlite.pragma('synchronous', { simple: true }), 2, 'FULL');
    assert.equal(handle.sqlite.pragma('foreign_keys', { simple: true }), 1);
    assert.equal(handle.sqlite.pragma('busy_timeout', { simple: true }), 5000);
    migrateDatabase(handle.db); // idempotent on an up-to-date file
  } finally {
    handle.close();
  }
});

test('a database created by an older build migrates forward and keeps its data', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-old-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(1));
  assert.ok(!tables(old.sqlite).includes('emails'), 'the old build had no emails table');
  old.sqlite.prepare("insert into projects (id, name, is_default, created_at, updated_at) values ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Old', 1, 1, 1)").run();
  old.close();

  const current = openDatabase({ path, synchronous: 'FULL' });
  try {
    migrateDatabase(current.db);
    assert.ok(tables(current.sqlite).includes('emails'));
    const journalSize = JSON.parse(readFileSync(join(defaultMigrationsFolder(), 'meta', '_journal.json'), 'utf8')).entries.length;
    const applied = current.sqlite.prepare('select count(*) as n from __drizzle_migrations').get() as { n: number };
    assert.equal(applied.n, journalSize);
    const row = current.sqlite.prepare('select name from projects where id = ?').get('aaaaaaaaaaaaaaaaaaaaaaaa') as { name: string };
    assert.equal(row.name, 'Old');
  } finally {
    current.close();
  }
});

test('0014 rebuilds email_events and delivery_jobs WITHOUT ROWID and keeps their rows', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-rowid-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(14));
  old.sqlite.exec(`
    insert into projects (id, name, is_default, created_at, updated_at) values ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Old', 1, 1, 1);
    insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
      values ('bbbbbbbbbbbbbbbbbbbbbbbb', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'queued', 'ann@example.com', 'app@sender.test', 'Hi', 'text', 0, 5, 5);
    insert into email_events (id, email_id, type, time) values ('cccccccccccccccccccccccc', 'bbbbbbbbbbbbbbbbbbbbbbbb', 'queued', 5),
      ('dddddddddddddddddddddddd', 'bbbbbbbbbbbbbbbbbbbbbbbb', 'deferred', 7);
    insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at)
      values ('bbbbbbbbbbbbbbbbbbbbbbbb', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'example.com', 9, 1, 5);
  `);
  old.close();

  const current = openDatabase({ path, synchronous: 'FULL' });
  try {
    migrateDatabase(current.db);
    const sqlOf = (table: string) => current.sqlite.prepare('select sql from sqlite_master where name = ?').pluck().get(table) as string;
    assert.match(sqlOf('email_events'), /WITHOUT ROWID/);
    assert.match(sqlOf('delivery_jobs'), /WITHOUT ROWID/);
    assert.deepEqual(current.sqlite.prepare('select id, type, time from email_events order by email_id, time, id').all(), [
      { id: 'cccccccccccccccccccccccc', type: 'queued', time: 5 },
      { id: 'dddddddddddddddddddddddd', type: 'deferred', time: 7 },
    ]);
    assert.deepEqual(current.sqlite.prepare('select email_id, next_attempt_at, attempts from delivery_jobs').all(), [
      { email_id: 'bbbbbbbbbbbbbbbbbbbbbbbb', next_attempt_at: 9, attempts: 1 },
    ]);
    assert.ok(current.sqlite.prepare("select 1 from sqlite_master where name = 'delivery_jobs_lane_due_idx'").get(), 'the due index is back (by lane since 0026)');
    // The foreign keys still cascade: deleting the email removes its events and job.
    current.sqlite.prepare("delete from emails where id = 'bbbbbbbbbbbbbbbbbbbbbbbb'").run();
    assert.equal(current.sqlite.prepare('select count(*) from email_events').pluck().get(), 0);
    assert.equal(current.sqlite.prepare('select count(*) from delivery_jobs').pluck().get(), 0);
    assert.deepEqual(current.sqlite.pragma('foreign_key_check'), []);
  } finally {
    current.close();
  }
});

test("0034 moves each received email's raw message and bodies to received_messages, and a message goes with the last email that names it", () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-received-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(34));
  old.sqlite.exec(`insert into projects (id, name, is_default, created_at, updated_at) values ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Old', 1, 1, 1)`);
  const received = old.sqlite.prepare(
    `insert into received_emails (id, project_id, inbound_route_id, destination, subject, addresses, text, html, attachments, headers, auth, spam, envelope, raw, received_at)
     values (?, 'aaaaaaaaaaaaaaaaaaaaaaaa', 'r', ?, 'Hi', '{}', ?, ?, '[]', '{}', '{}', '{}', '{}', ?, 5)`,
  );
  received.run('bbbbbbbbbbbbbbbbbbbbbbbb', 'ann@in.test', 'text one', '<p>one</p>', Buffer.from('raw one'));
  received.run('cccccccccccccccccccccccc', 'bob@in.test', 'text two', null, Buffer.from('raw two'));
  old.close();

  const current = openDatabase({ path, synchronous: 'FULL' });
  try {
    migrateDatabase(current.db);
    const rows = current.sqlite
      .prepare('select e.id, e.destination, m.raw, m.text, m.html from received_emails e join received_messages m on m.id = e.message_id order by e.id')
      .all() as { id: string; destination: string; raw: Buffer; text: string; html: string | null }[];
    assert.deepEqual(
      rows.map((row) => [row.id, row.destination, row.raw.toString(), row.text, row.html]),
      [
        ['bbbbbbbbbbbbbbbbbbbbbbbb', 'ann@in.test', 'raw one', 'text one', '<p>one</p>'],
        ['cccccccccccccccccccccccc', 'bob@in.test', 'raw two', 'text two', null],
      ],
    );
    // Two recipients of one message, as the appliance stores them now; the message outlives the first.
    current.sqlite.exec(`
      insert into received_messages (id, raw, text) values ('dddddddddddddddddddddddd', 'shared', 'shared text');
      insert into received_emails (id, project_id, inbound_route_id, destination, subject, addresses, message_id, attachments, headers, auth, spam, envelope, received_at)
        values ('eeeeeeeeeeeeeeeeeeeeeeee', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'r', 'x@in.test', 'S', '{}', 'dddddddddddddddddddddddd', '[]', '{}', '{}', '{}', '{}', 6),
               ('ffffffffffffffffffffffff', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'r', 'y@in.test', 'S', '{}', 'dddddddddddddddddddddddd', '[]', '{}', '{}', '{}', '{}', 6);
    `);
    const messages = () => current.sqlite.prepare('select id from received_messages order by id').pluck().all();
    current.sqlite.prepare("delete from received_emails where id = 'eeeeeeeeeeeeeeeeeeeeeeee'").run();
    assert.ok(messages().includes('dddddddddddddddddddddddd'), 'still named by the other recipient');
    current.sqlite.prepare("delete from received_emails where id = 'ffffffffffffffffffffffff'").run();
    assert.ok(!messages().includes('dddddddddddddddddddddddd'));
    // A project's deletion cascades to its received emails, and their messages go with them.
    current.sqlite.prepare("delete from projects where id = 'aaaaaaaaaaaaaaaaaaaaaaaa'").run();
    assert.deepEqual(messages(), []);
    assert.deepEqual(current.sqlite.pragma('foreign_key_check'), []);
  } finally {
    current.close();
  }
});

test('the backlog queued before the lanes (0026) is bulk mail: a single send after the upgrade is not held up behind it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-lanes-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(24)); // the build before 0024-0026
  old.sqlite.prepare("insert into projects (id, name, is_default, created_at, updated_at) values ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Old', 1, 1, 1)").run();
  const insertEmail = old.sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
     values (?, 'aaaaaaaaaaaaaaaaaaaaaaaa', 'queued', ?, 'app@sender.test', 'Hi', 'text', 0, 1, 1)`,
  );
  const insertJob = old.sqlite.prepare(
    `insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at) values (?, 'aaaaaaaaaaaaaaaaaaaaaaaa', 'example.com', ?, 0, 1)`,
  );
  for (let i = 0; i < 3; i++) {
    const id = `bbbbbbbbbbbbbbbbbbbbbbb${i}`;
    insertEmail.run(id, `n${i}@example.com`);
    insertJob.run(id, 1000 + i); // a newsletter's backlog, queued before the upgrade
  }
  old.close();

  const current = openDatabase({ path, synchronous: 'FULL' });
  try {
    migrateDatabase(current.db);
    // A password reset sent after the upgrade, through today's path: the single-send lane.
    current.sqlite
      .prepare(
        `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
         values ('cccccccccccccccccccccccc', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'queued', 'ann@example.com', 'app@sender.test', 'Reset', 'text', 0, 5000, 5000)`,
      )
      .run();
    current.sqlite
      .prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at, bulk) values ('cccccccccccccccccccccccc', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'example.com', 5000, 0, 5000, 0)`)
      .run();
    const repo = createDeliveryRepo(current.sqlite, current.db, new ManualClock(10_000));
    const claimed = repo.claimDue(10_000, 2, 60_000).map((c) => c.job.emailId);
    assert.ok(claimed.includes('cccccccccccccccccccccccc'), `the reset is in the first claim of two, beside the backlog: ${claimed.join(', ')}`);
    assert.deepEqual(current.sqlite.prepare('select bulk, count(*) as n from delivery_jobs group by bulk order by bulk').all(), [
      { bulk: 0, n: 1 },
      { bulk: 1, n: 3 },
    ]);
  } finally {
    current.close();
  }
});

test('0016 counts the outcomes of the last 8 days per project and day for the suspension rule', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-stats-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(16));
  const day = 86_400_000;
  const today = Math.floor(Date.now() / day);
  const insert = old.sqlite.prepare(
    `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
     values (?, 'aaaaaaaaaaaaaaaaaaaaaaaa', ?, 'ann@example.com', 'app@sender.test', 'Hi', 'text', 0, 1, ?)`,
  );
  old.sqlite.prepare("insert into projects (id, name, is_default, created_at, updated_at) values ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Old', 1, 1, 1)").run();
  const rows: [status: string, dayNumber: number][] = [
    ['delivered', today], ['open', today], ['bounce', today], ['complaint', today - 1],
    ['queued', today], ['suppressed', today], ['error', today], // never left: not counted
    ['delivered', today - 20], // before the window
  ];
  rows.forEach(([status, dayNumber], i) => insert.run(`bbbbbbbbbbbbbbbbbbbbbb${String(i).padStart(2, '0')}`, status, dayNumber * day + 1000));
  old.close();

  const current = openDatabase({ path, synchronous: 'FULL' });
  try {
    migrateDatabase(current.db);
    assert.deepEqual(current.sqlite.prepare('select day, sent, bounces, complaints from project_sending_stats order by day').all(), [
      { day: today - 1, sent: 1, bounces: 0, complaints: 1 },
      { day: today, sent: 3, bounces: 1, complaints: 0 },
    ]);
  } finally {
    current.close();
  }
});

test('0019 sets the text index to merge in larger steps, on an index that already holds rows; search still finds them', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-fts-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(19));
  old.sqlite.prepare("insert into projects (id, name, is_default, created_at, updated_at) values ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Old', 1, 1, 1)").run();
  old.sqlite
    .prepare(
      `insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at)
       values ('bbbbbbbbbbbbbbbbbbbbbbbb', 'aaaaaaaaaaaaaaaaaaaaaaaa', 'queued', 'ann@example.com', 'app@sender.test', 'Quarterly invoice', 'text', 0, 1, 1)`,
    )
    .run();
  old.sqlite.prepare("insert into emails_fts(rowid, to_address, from_address, from_name, subject) select rowid, to_address, from_address, from_name, subject from emails").run();
  const config = (sqlite: typeof old.sqlite) => Object.fromEntries(sqlite.prepare('select k, v from emails_fts_config').all().map((r: any) => [r.k, r.v]));
  assert.equal(config(old.sqlite).automerge, undefined, 'before: FTS5 defaults');
  old.close();

  const current = openDatabase({ path, synchronous: 'FULL' });
  try {
    migrateDatabase(current.db);
    assert.equal(config(current.sqlite).automerge, 16);
    assert.equal(config(current.sqlite).crisismerge, 64);
    assert.equal(current.sqlite.prepare(`select count(*) from emails_fts where emails_fts match '"invoice"'`).pluck().get(), 1);
    current.sqlite.prepare("insert into emails_fts(emails_fts) values ('integrity-check')").run();
  } finally {
    current.close();
  }
});

test('the appliance says when it migrated an existing database, and how far', async () => {
  const { startAppliance } = await import('../helpers/appliance.js');
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-mig-log-'));
  const old = openDatabase({ path: join(dataDir, 'postino.sqlite'), synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(3));
  old.close();
  const journalSize = JSON.parse(readFileSync(join(defaultMigrationsFolder(), 'meta', '_journal.json'), 'utf8')).entries.length;
  const app = await startAppliance({ dataDir, keepDataDir: true });
  await app.stop();
  assert.ok(app.logs.some((line) => line.includes('"msg":"database migrated"') && line.includes(`"applied":${journalSize - 3}`) && line.includes(`"migrations":${journalSize}`)), app.logs.join('\n').slice(0, 2000));
  // Up to date: nothing to say.
  const again = await startAppliance({ dataDir });
  await again.stop();
  assert.ok(!again.logs.some((line) => line.includes('"msg":"database migrated"')));
});

test('a database written by a newer build is refused, and left as it was', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-new-'));
  const path = join(dir, 'postino.sqlite');
  const newer = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(newer.db);
  newer.close();
  const older = openDatabase({ path, synchronous: 'FULL' });
  try {
    const before = older.sqlite.prepare('select count(*) as n from __drizzle_migrations').get();
    assert.throws(() => migrateDatabase(older.db, olderMigrations(3)), /written by a newer Postino \(\d+ migration\(s\) this build does not know\)/);
    assert.deepEqual(older.sqlite.prepare('select count(*) as n from __drizzle_migrations').get(), before);
  } finally {
    older.close();
  }
});

test('the operator CLI never migrates (the appliance may have the file open): an older database is refused, unchanged', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-mig-cli-'));
  const path = join(dir, 'postino.sqlite');
  const old = openDatabase({ path, synchronous: 'FULL' });
  migrateDatabase(old.db, olderMigrations(2));
  old.close();
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'keys', 'list'], { env: { ...process.env, POSTINO_STORAGE_DATA_DIR: dir, POSTINO_AUTH_API_KEY: '' }, encoding: 'utf8' });
  assert.equal(result.status, 1);
  assert.match(result.stderr, /^postino: the database is older than this build \(\d+ migration\(s\) to apply\): start the appliance of this build once/);
  const after = openDatabase({ path, synchronous: 'FULL', guest: true });
  try {
    assert.equal((after.sqlite.prepare('select count(*) as n from __drizzle_migrations').get() as { n: number }).n, 2, 'not migrated');
  } finally {
    after.close();
  }
});
