import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { cachedTables, createReadCache, readCachesStale } from '../../src/db/read-cache.js';
import { openDatabase, writeTransaction, type DatabaseHandle } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { silentLogger } from '../../src/lib/logger.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { publishRecords } from '../domains/helpers.js';
import { baseEmail } from '../emails/helpers.js';

/**
 * Rows kept between requests (db/read-cache.ts) must never outlive a change to a table they come from,
 * whichever connection made it; while none changes (other tables may, as the writer thread commits
 * accepted emails every turn), they are not read again.
 */
describe('read cache on a real database file', () => {
  let dir: string;
  let handle: DatabaseHandle;
  let main: Database.Database;
  let other: Database.Database;
  let reads = 0;
  const readValue = () => {
    reads++;
    return main.prepare(`select name from projects where id = 'p'`).pluck().get() as string | undefined;
  };
  const rename = (connection: Database.Database, name: string) => connection.prepare(`update projects set name = ? where id = 'p'`).run(name);
  const generation = () => other.prepare('select value from cache_generation where id = 1').pluck().get() as number;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'postino-read-cache-'));
    handle = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
    migrateDatabase(handle.db);
    main = handle.sqlite;
    main.prepare(`insert into projects (id, name, created_at, updated_at) values ('p', 'one', 0, 0)`).run();
    other = new Database(join(dir, 'postino.sqlite'));
  });
  after(() => {
    other.close();
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('kept across turns while nothing changes', async () => {
    const cache = createReadCache<string>(main);
    reads = 0;
    assert.equal(cache.get('a', readValue), 'one');
    assert.equal(cache.get('a', readValue), 'one');
    await nextTurn();
    await nextTurn();
    assert.equal(cache.get('a', readValue), 'one');
    assert.equal(reads, 1);
  });

  test('every insert, update and delete of each cached table raises the counter the caches watch, from any connection', () => {
    const rows: Record<(typeof cachedTables)[number], string> = {
      api_keys: `insert into api_keys (id, project_id, name, key_hash, key_prefix, created_at) values ('k', 'p', 'k', 'hash', 'pst_', 0)`,
      projects: `insert into projects (id, name, created_at, updated_at) values ('q', 'q', 0, 0)`,
      domains: `insert into domains (id, project_id, domain, status, dkim_selector, dkim_private_key, dkim_public_key, mail_from_domain, mail_from_status, created_at)
                values ('d', 'p', 'example.test', 'pending', 's', 'pem', 'pub', 'bounce.example.test', 'pending', 0)`,
      templates: `insert into templates (id, project_id, name, subject, content, created_at, updated_at) values ('t', 'p', 't', 's', '[]', 0, 0)`,
    };
    const id = { api_keys: 'k', projects: 'q', domains: 'd', templates: 't' };
    for (const table of cachedTables) {
      for (const [change, sql] of [
        ['insert', rows[table]],
        ['update', `update ${table} set id = id where id = '${id[table]}'`],
        ['delete', `delete from ${table} where id = '${id[table]}'`],
      ]) {
        const before = generation();
        other.prepare(sql).run();
        assert.equal(generation(), before + 1, `${change} on ${table}`);
      }
    }
  });

  test("another connection's change to a cached table (the operator CLI) is read from the next turn on", async () => {
    const cache = createReadCache<string>(main);
    reads = 0;
    assert.equal(cache.get('a', readValue), 'one');
    rename(other, 'two');
    await nextTurn();
    assert.equal(cache.get('a', readValue), 'two');
    assert.equal(reads, 2);
    rename(other, 'one');
    await nextTurn();
  });

  test("another connection's commits to other tables (the writer thread's accepted emails) keep what was read", async () => {
    const cache = createReadCache<string>(main);
    await nextTurn();
    reads = 0;
    assert.equal(cache.get('a', readValue), 'one');
    for (let i = 0; i < 3; i++) {
      other.prepare(`insert into settings (key, value) values (?, 'x')`).run(`unrelated-${i}`);
      await nextTurn();
      assert.equal(cache.get('a', readValue), 'one');
    }
    assert.equal(reads, 1);
  });

  test("this connection's own write is read from the next turn on, in every cache of the connection", async () => {
    const first = createReadCache<string>(main);
    const second = createReadCache<string>(main);
    assert.equal(first.get('a', readValue), 'one');
    assert.equal(second.get('a', readValue), 'one');
    rename(main, 'three');
    await nextTurn();
    assert.equal(first.get('a', readValue), 'three');
    assert.equal(second.get('a', readValue), 'three');
    rename(main, 'one');
    await nextTurn();
  });

  test('a commit through the write queue is seen at once, in the same turn; one that changes no cached table keeps what was read', async () => {
    // Without a WAL sync to await, the queue answers inside its flush: the caller resumes in the same
    // turn as the commit, before the turn's once-per-turn check comes round again.
    main.pragma('synchronous = NORMAL');
    const cache = createReadCache<string>(main);
    const writes = createWriteQueue(main, silentLogger);
    try {
      await nextTurn();
      const committed = writes.run(() => rename(main, 'four'));
      assert.equal(cache.get('a', readValue), 'one'); // the turn's check: its reset comes after the flush
      await committed;
      assert.equal(cache.get('a', readValue), 'four');
      reads = 0;
      await writes.run(() => main.prepare(`insert into settings (key, value) values ('delivery-outcome', 'x')`).run());
      assert.equal(cache.get('a', readValue), 'four');
      assert.equal(reads, 0, 'a commit of other tables (delivery outcomes) does not empty the caches');
      await writes.run(() => rename(main, 'one'));
    } finally {
      await writes.close();
      main.pragma('synchronous = FULL');
    }
  });

  test('a writeTransaction commit (start-up, the CLI, key revocation) is seen at once, in the same turn', async () => {
    const cache = createReadCache<string>(main);
    await nextTurn();
    assert.equal(cache.get('a', readValue), 'one'); // this turn's check is done
    writeTransaction(main, () => rename(main, 'five'));
    assert.equal(cache.get('a', readValue), 'five');
    writeTransaction(main, () => rename(main, 'one'));
  });

  test('a miss is read again; a reported commit of a cached table drops what was kept at once', async () => {
    const cache = createReadCache<string>(main);
    reads = 0;
    const missing = () => {
      reads++;
      return undefined;
    };
    assert.equal(cache.get('nothing', missing), undefined);
    assert.equal(cache.get('nothing', missing), undefined);
    assert.equal(reads, 2);
    reads = 0;
    cache.get('a', readValue);
    rename(main, 'six');
    readCachesStale(main);
    assert.equal(cache.get('a', readValue), 'six');
    assert.equal(reads, 2);
    rename(main, 'one');
    readCachesStale(main);
  });
});

describe('cached reads of a send follow changes at once', () => {
  let dns: TestDnsServer;
  let app: TestAppliance;
  const send = (fields: Record<string, unknown>) => app.api('POST', '/v1/email/send', { ...baseEmail, ...fields });

  before(async () => {
    dns = await startDnsServer();
    app = await startAppliance({ env: { POSTINO_DNS_SERVERS: dns.address, POSTINO_DOMAINS_MAIL_HOSTNAME: 'mx.postino.test' } });
  });
  after(async () => {
    await app?.stop();
    await dns?.stop();
  });

  test("a sender domain's deletion and failed re-verification refuse the very next send", async () => {
    assert.equal(app.config.sending.require_verified_domain, true);
    const fromAddress = 'hello@cached.example.net';
    const created = (await app.api('POST', '/v1/domains', { domain: 'cached.example.net' })).body;
    publishRecords(dns, created.dns);
    assert.equal((await app.api('POST', `/v1/domains/${created.id}/verify`)).body.status, 'success');
    for (let i = 0; i < 3; i++) assert.equal((await send({ fromAddress })).status, 200);

    // Records gone: a re-verification fails the domain, and sends from it stop.
    for (const record of created.dns) dns.remove(record.hostname);
    assert.equal((await app.api('POST', `/v1/domains/${created.id}/verify`)).body.status, 'failed');
    assert.equal((await send({ fromAddress })).body.errorCode, 'from-address-unverified');

    publishRecords(dns, created.dns);
    assert.equal((await app.api('POST', `/v1/domains/${created.id}/verify`)).body.status, 'success');
    assert.equal((await send({ fromAddress })).status, 200);
    assert.deepEqual((await app.api('DELETE', `/v1/domains/${created.id}`)).body, { deleted: true });
    assert.equal((await send({ fromAddress })).body.errorCode, 'from-address-unverified');
  });

  test("a template's update, rename and deletion count for the very next send", async () => {
    const domain = (await app.api('POST', '/v1/domains', { domain: 'templates.example.net' })).body;
    publishRecords(dns, domain.dns);
    assert.equal((await app.api('POST', `/v1/domains/${domain.id}/verify`)).body.status, 'success');
    const fromAddress = 'hello@templates.example.net';
    const created = await app.api('POST', '/v1/templates', { name: 'Cached', subject: 'First subject', content: [{ type: 'text', text: 'Hi' }] });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const id = created.body.data.id;
    const subjectOf = async (fields: Record<string, unknown>) => {
      const sent = await send({ fromAddress, html: undefined, text: undefined, subject: undefined, ...fields });
      assert.equal(sent.status, 200, JSON.stringify(sent.body));
      return (await app.api('GET', `/v1/email/${sent.body.id}`)).body.email.subject;
    };
    assert.equal(await subjectOf({ templateName: 'Cached' }), 'First subject');
    assert.equal(await subjectOf({ templateId: id }), 'First subject');

    assert.equal((await app.api('PATCH', `/v1/templates/${id}`, { subject: 'Second subject', name: 'Renamed' })).status, 200);
    assert.equal(await subjectOf({ templateId: id }), 'Second subject');
    assert.equal(await subjectOf({ templateName: 'Renamed' }), 'Second subject');
    const byOldName = await send({ fromAddress, html: undefined, text: undefined, subject: undefined, templateName: 'Cached' });
    assert.equal(byOldName.body.errorCode, 'template-not-found');

    assert.deepEqual((await app.api('DELETE', `/v1/templates/${id}`)).body, { deleted: true });
    const afterDelete = await send({ fromAddress, html: undefined, text: undefined, subject: undefined, templateId: id });
    assert.equal(afterDelete.body.errorCode, 'template-not-found');
  });
});
