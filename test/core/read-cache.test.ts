import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { createReadCache, readCachesStale } from '../../src/db/read-cache.js';
import { writeTransaction } from '../../src/db/client.js';
import { createWriteQueue } from '../../src/db/write-queue.js';
import { silentLogger } from '../../src/lib/logger.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { startDnsServer, type TestDnsServer } from '../helpers/dns-server.js';
import { publishRecords } from '../domains/helpers.js';
import { baseEmail } from '../emails/helpers.js';

/**
 * Rows kept between requests (db/read-cache.ts) must never outlive a change to the database, whichever
 * connection made it; and while nothing changes, they are not read again.
 */
describe('read cache on a real database file', () => {
  let dir: string;
  let main: Database.Database;
  let other: Database.Database;
  let reads = 0;
  const readValue = () => {
    reads++;
    return main.prepare('select value from kv where key = ?').pluck().get('a') as string | undefined;
  };

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'postino-read-cache-'));
    main = new Database(join(dir, 'db.sqlite'));
    main.pragma('journal_mode = WAL');
    main.exec(`create table kv (key text primary key, value text)`);
    main.prepare(`insert into kv values ('a', 'one')`).run();
    other = new Database(join(dir, 'db.sqlite'));
  });
  after(() => {
    other.close();
    main.close();
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

  test("another connection's commit (the writer thread, the operator CLI) is read from the next turn on", async () => {
    const cache = createReadCache<string>(main);
    reads = 0;
    assert.equal(cache.get('a', readValue), 'one');
    other.prepare(`update kv set value = 'two' where key = 'a'`).run();
    await nextTurn();
    assert.equal(cache.get('a', readValue), 'two');
    assert.equal(reads, 2);
    other.prepare(`update kv set value = 'one' where key = 'a'`).run();
    await nextTurn();
  });

  test("this connection's own write is read from the next turn on, in every cache of the connection", async () => {
    const first = createReadCache<string>(main);
    const second = createReadCache<string>(main);
    assert.equal(first.get('a', readValue), 'one');
    assert.equal(second.get('a', readValue), 'one');
    main.prepare(`update kv set value = 'three' where key = 'a'`).run();
    await nextTurn();
    assert.equal(first.get('a', readValue), 'three');
    assert.equal(second.get('a', readValue), 'three');
    main.prepare(`update kv set value = 'one' where key = 'a'`).run();
    await nextTurn();
  });

  test('a commit through the write queue is seen at once, in the same turn', async () => {
    // Without a WAL sync to await, the queue answers inside its flush: the caller resumes in the same
    // turn as the commit, before the turn's once-per-turn check comes round again.
    main.pragma('synchronous = NORMAL');
    const cache = createReadCache<string>(main);
    const writes = createWriteQueue(main, silentLogger);
    try {
      await nextTurn();
      const committed = writes.run(() => main.prepare(`update kv set value = 'four' where key = 'a'`).run());
      assert.equal(cache.get('a', readValue), 'one'); // the turn's check: its reset comes after the flush
      await committed;
      assert.equal(cache.get('a', readValue), 'four');
      await writes.run(() => main.prepare(`update kv set value = 'one' where key = 'a'`).run());
    } finally {
      await writes.close();
      main.pragma('synchronous = FULL');
    }
  });

  test('a writeTransaction commit (start-up, the CLI, key revocation) is seen at once, in the same turn', async () => {
    const cache = createReadCache<string>(main);
    await nextTurn();
    assert.equal(cache.get('a', readValue), 'one'); // this turn's check is done
    writeTransaction(main, () => main.prepare(`update kv set value = 'five' where key = 'a'`).run());
    assert.equal(cache.get('a', readValue), 'five');
    writeTransaction(main, () => main.prepare(`update kv set value = 'one' where key = 'a'`).run());
  });

  test('a miss is read again; a reported commit drops what was kept at once', async () => {
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
    readCachesStale(main);
    cache.get('a', readValue);
    assert.equal(reads, 2);
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
