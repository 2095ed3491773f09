import assert from 'node:assert/strict';
import { statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { after, before, test } from 'node:test';
import nodemailer from 'nodemailer';
import { noRoomLeft } from '../../src/db/data-dir-lock.js';
import { createMetrics } from '../../src/http/metrics.js';
import { createStorageHealth, freshReadingMs, storageFullHoldMs } from '../../src/db/storage-health.js';
import { ManualClock } from '../../src/lib/clock.js';
import { StartupError, type AppError } from '../../src/lib/errors.js';
import { createLogger } from '../../src/lib/logger.js';
import { postfixHardBounce } from '../bounces/samples.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { fillDisk as fillDiskOf, freeDisk as freeDiskOf } from '../helpers/full-disk.js';

// A full disk as SQLite sees it (test/helpers/full-disk.ts). Writes run on the main connection here (the
// writer thread's connection is out of reach of the test); errors from the thread keep their SQLite code
// (writer-protocol.ts).
let t: TestAppliance;
const clock = new ManualClock(new Date().toISOString());

before(async () => {
  t = await startAppliance({
    clock,
    env: {
      POSTINO_STORAGE_WRITER_THREAD: 'false',
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      // Nothing is delivered meanwhile: the delivery worker's lookups go to a closed port and defer.
      POSTINO_DNS_SERVERS: '127.0.0.1:9',
    },
  });
});
after(() => t.stop());

const sqlite = () => t.appliance.context.database.sqlite;
const email = (subject: string) => ({ toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject, html: `<p>${'x'.repeat(20_000)}</p>` });
const emailCount = () => (sqlite().prepare('select count(*) as n from emails').get() as { n: number }).n;

const fillDisk = (emailId: string) => fillDiskOf(sqlite(), emailId, clock);
const freeDisk = () => freeDiskOf(sqlite());

/** Mails a report to the inbound listener as a remote MTA does; resolves with the SMTP reply code. */
async function deliverReport(to: string, raw: string): Promise<number> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: t.smtpPort, secure: false, ignoreTLS: true } as never);
  try {
    const info = await transport.sendMail({ envelope: { from: '', to: [to] }, raw });
    return Number(/^(\d{3})/.exec(info.response)?.[1]);
  } catch (error) {
    return (error as { responseCode: number }).responseCode;
  } finally {
    transport.close();
  }
}

test('a full disk: sends answer 507 storage-full, SMTP 452 4.3.1, healthz 503; all recover once there is room', async () => {
  const before = await t.api('POST', '/v1/email/send', email('before'));
  assert.equal(before.status, 200);
  const verp = t.appliance.context.bounces!.verp.address(before.body.id, 'sender.test');
  const health = await t.api('GET', '/healthz', undefined, { key: null });
  assert.equal(health.body.components.storage, 'up');

  fillDisk(before.body.id);
  const stored = emailCount();
  const refused = await t.api('POST', '/v1/email/send', email('refused'));
  assert.equal(refused.status, 507);
  assert.equal(refused.body.errorCode, 'storage-full');
  assert.match(refused.body.developerMessage, /out of storage space/);
  assert.equal(refused.body.moreInfo, 'docs/errors.md#storage-full');
  const batch = await t.api('POST', '/v1/email/send', [email('batch 1'), email('batch 2')]);
  assert.equal(batch.body.errorCode, 'storage-full');
  assert.equal(emailCount(), stored, 'nothing half-stored');

  const unhealthy = await t.api('GET', '/healthz', undefined, { key: null });
  assert.equal(unhealthy.status, 503);
  assert.equal(unhealthy.body.status, 'unavailable');
  assert.equal(unhealthy.body.components.storage, 'full');

  const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: t.appliance.submissionPort, secure: false, tls: { rejectUnauthorized: false }, auth: { user: 'app', pass: t.apiKey } } as never);
  const error = await smtp.sendMail({ from: 'app@sender.test', to: 'ann@example.com', subject: 'over SMTP', html: `<p>${'y'.repeat(20_000)}</p>` }).then(
    () => assert.fail('expected the SMTP transaction to fail'),
    (failure: { responseCode?: number; response?: string }) => failure,
  );
  assert.equal(error.responseCode, 452);
  assert.match(String(error.response), /4\.3\.1 Insufficient system storage/);
  // A full disk is an outage, said once (below) and per refusal at warn, as the API does: not an error with
  // its stack for every message an app retries.
  assert.deepEqual(t.logs.filter((line) => line.includes('"level":"error"') && line.includes('submission')), []);
  assert.ok(t.logs.some((line) => line.includes('"level":"warn"') && line.includes('storage full: submission refused')));
  // A bounce report for one of our emails, to the inbound listener: recording it is a write too.
  assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'ann@example.com' })), 452);
  // The inbound port too: a remote MTA retries its reports, and each was an error with its stack.
  assert.deepEqual(t.logs.filter((line) => line.includes('"level":"error"') && line.includes('inbound message not stored')), []);
  assert.ok(t.logs.some((line) => line.includes('"level":"warn"') && line.includes('storage full: inbound message refused')));
  assert.equal(t.logs.filter((line) => line.includes('storage full: writes are refused')).length, 1, 'the operator is told once, in the log');

  // Healthz stays `full` for a while after the last refusal (small writes that fit would make it flap).
  freeDisk();
  clock.advance(storageFullHoldMs);
  const accepted = await t.api('POST', '/v1/email/send', email('after'));
  assert.equal(accepted.status, 200);
  assert.equal(accepted.body.status, 'queued');
  assert.equal(emailCount(), stored + 1);
  const healthy = await t.api('GET', '/healthz', undefined, { key: null });
  assert.equal(healthy.status, 200);
  assert.equal(healthy.body.components.storage, 'up');
  assert.ok(t.logs.some((line) => line.includes('storage: writes commit again')));
  assert.equal(await deliverReport(verp, postfixHardBounce({ to: verp, rcpt: 'ann@example.com' })), 250, 'the report the sender retries is taken now');
});

test('the free-space reserve: below storage.min_free_mb new mail (sends, submission, inbound routes) is refused (507, 452 4.3.1) and healthz is 503; other writes go on', async () => {
  const reserveMb = 1_048_576; // the largest reserve the config accepts, 1 TiB: more than this disk has free
  const stats = statfsSync(tmpdir());
  assert.ok(stats.bavail * stats.bsize < reserveMb * 1_048_576, 'this test needs a disk with less than 1 TiB free');
  const low = await startAppliance({ env: { POSTINO_STORAGE_MIN_FREE_MB: String(reserveMb), POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
  try {
    const refused = await low.api('POST', '/v1/email/send', email('refused'));
    assert.equal(refused.status, 507);
    assert.equal(refused.body.errorCode, 'storage-full');
    assert.match(refused.body.developerMessage, /storage\.min_free_mb = 1048576 MB/);
    const health = await low.api('GET', '/healthz', undefined, { key: null });
    assert.equal(health.status, 503);
    assert.equal(health.body.components.storage, 'full');
    const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: low.appliance.submissionPort, secure: false, tls: { rejectUnauthorized: false }, auth: { user: 'app', pass: low.apiKey } } as never);
    const error = await smtp.sendMail({ from: 'app@sender.test', to: 'ann@example.com', subject: 'over SMTP', text: 'hi' }).then(
      () => assert.fail('expected the SMTP transaction to fail'),
      (failure: { responseCode?: number; response?: string }) => failure,
    );
    assert.equal(error.responseCode, 452);
    assert.match(String(error.response), /4\.3\.1 The appliance is low on storage space/);
    // Not new mail: the rest of the API still writes.
    const template = await low.api('POST', '/v1/templates', { name: 'Kept', subject: 'Hi', content: [{ type: 'text', text: 'Hello' }] });
    assert.ok(template.status < 300, JSON.stringify(template.body));
    // Mail for an inbound route is new mail too: the sender hears 452 and retries later.
    assert.equal((await low.api('POST', '/v1/inbound/routes', { domain: 'inbox.test' })).status, 200);
    const inbound = nodemailer.createTransport({ host: '127.0.0.1', port: low.smtpPort, secure: false, ignoreTLS: true });
    const received = await inbound.sendMail({ from: 'ann@remote.test', to: 'help@inbox.test', subject: 'to a route', text: 'hi' }).then(
      () => assert.fail('expected the inbound transaction to fail'),
      (failure: { responseCode?: number; response?: string }) => failure,
    );
    assert.equal(received.responseCode, 452);
    assert.match(String(received.response), /4\.3\.1 /);
    assert.equal(low.appliance.context.database.sqlite.prepare('select count(*) from received_emails').pluck().get(), 0);
    assert.ok(low.logs.some((line) => line.includes('storage low: new mail is refused')));
  } finally {
    await low.stop();
  }
});

test('the reserve follows the free space: refused below it, accepted again above it, each change logged once', () => {
  const lines: string[] = [];
  let free = 10 * 1_048_576;
  const health = createStorageHealth({
    log: createLogger({ level: 'info', write: (line) => lines.push(line) }),
    clock: new ManualClock(),
    dataDir: '/data',
    minFreeBytes: 64 * 1_048_576,
    freeBytes: () => free,
  });
  health.checkFreeSpace();
  health.checkFreeSpace();
  assert.equal(health.state, 'full');
  assert.throws(() => health.assertRoomForNewMail(), (error: AppError) => error.code === 'storage-full');
  free = 100 * 1_048_576;
  health.checkFreeSpace();
  assert.equal(health.state, 'up');
  assert.doesNotThrow(() => health.assertRoomForNewMail());
  assert.equal(lines.filter((line) => line.includes('storage low')).length, 1);
  assert.equal(lines.filter((line) => line.includes('new mail is accepted')).length, 1);
});

test('new mail reads the free space again once the last reading is 50 ms old: a burst of large sends between the appliance\'s readings went past the reserve to a full disk', () => {
  let free = 500 * 1_048_576;
  let nowMs = 0;
  const health = createStorageHealth({ log: createLogger({ level: 'silent' }), clock: new ManualClock(), dataDir: '/data', minFreeBytes: 64 * 1_048_576, freeBytes: () => free, monotonicNowMs: () => nowMs });
  health.checkFreeSpace();
  free = 10 * 1_048_576; // filled since, by the mail the reserve let in
  nowMs += freshReadingMs - 1;
  assert.doesNotThrow(() => health.assertRoomForNewMail(), 'a reading of a moment ago stands');
  nowMs += 1;
  assert.throws(() => health.assertRoomForNewMail(), (error: AppError) => error.code === 'storage-full');
  assert.equal(health.freeBytes, free);
  // Hovering at the reserve does not turn the refusal on and off: accepted again a little above it.
  free = 64 * 1_048_576 + 1;
  nowMs += freshReadingMs;
  assert.throws(() => health.assertRoomForNewMail(), (error: AppError) => error.code === 'storage-full');
  free = 80 * 1_048_576;
  nowMs += freshReadingMs;
  assert.doesNotThrow(() => health.assertRoomForNewMail());
});

test('/metrics free space with no reading yet is NaN, not 0 (a low-space alert would fire on it); with one, the bytes', async () => {
  const metrics = createMetrics();
  const storage: { state: 'up'; freeBytes: number | undefined } = { state: 'up', freeBytes: undefined };
  metrics.watchStorage(storage);
  assert.match(await metrics.registry.metrics(), /^postino_storage_free_bytes Nan$/m);
  storage.freeBytes = 123_456;
  assert.match(await metrics.registry.metrics(), /^postino_storage_free_bytes 123456$/m);
});

test('a full disk freed: full ends once a reading shows room and no write was refused for a few seconds, not a minute later; refusals going on keep it (a quota statfs does not show)', () => {
  const clock = new ManualClock();
  let free = 0;
  const health = createStorageHealth({ log: createLogger({ level: 'silent' }), clock, dataDir: '/data', minFreeBytes: 0, freeBytes: () => free });
  const refused = { ok: false as const, error: Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' }) };
  health.observe([refused]);
  assert.equal(health.state, 'full');
  free = 500 * 1_048_576;
  health.checkFreeSpace();
  assert.equal(health.state, 'full', 'refused a moment ago');
  clock.advance(6_000);
  health.observe([refused]); // still refused (a quota): full stays
  health.checkFreeSpace();
  assert.equal(health.state, 'full');
  clock.advance(6_000);
  health.checkFreeSpace();
  assert.equal(health.state, 'up', `room, and nothing refused for 6 s (the hold is ${storageFullHoldMs / 1000} s)`);
});

test('a boot step\'s "disk I/O error" on a nearly full file system (SQLite cannot grow the -shm file) is named as the full disk; with room it passes as it is', () => {
  const shmsize = Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_SHMSIZE' });
  const named = noRoomLeft(shmsize, '/data', () => 16 * 1024);
  assert.ok(named instanceof StartupError);
  assert.match(named.message, /^storage\.data_dir: the file system of \/data is full \(16 kB free; SQLite: disk I\/O error\)/);
  assert.equal(noRoomLeft(shmsize, '/data', () => 500 * 1_048_576), shmsize, 'with room, a disk error is one');
  const other = new Error('not an I/O error');
  assert.equal(noRoomLeft(other, '/data', () => 0), other, 'only an I/O error is put down to the full disk');
});

test('/metrics carries the storage state /healthz reports, and the free space', async () => {
  const text = await (await fetch(`${t.baseUrl}/metrics`)).text();
  assert.match(text, /^postino_storage_state\{state="up"\} 1$/m);
  assert.match(text, /^postino_storage_state\{state="full"\} 0$/m);
  assert.match(text, /^postino_storage_free_bytes \d+$/m);
});

test('a free-space reading that keeps failing is logged once until one succeeds, not at every new mail (20 times a second)', () => {
  const lines: string[] = [];
  let failing = true;
  let nowMs = 0;
  const health = createStorageHealth({
    log: createLogger({ level: 'info', write: (line) => lines.push(line) }),
    clock: new ManualClock(),
    dataDir: '/data',
    minFreeBytes: 64 * 1_048_576,
    freeBytes: () => {
      if (failing) throw new Error('EIO');
      return 500 * 1_048_576;
    },
    monotonicNowMs: () => nowMs,
  });
  for (let i = 0; i < 5; i++, nowMs += freshReadingMs) health.assertRoomForNewMail();
  const said = () => lines.filter((line) => line.includes('cannot read the free space')).length;
  assert.equal(said(), 1);
  failing = false;
  health.checkFreeSpace();
  failing = true;
  health.checkFreeSpace();
  assert.equal(said(), 2, 'said again after a reading succeeded in between');
});
