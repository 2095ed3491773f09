import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import { createHttpApp, startHttpServer } from '../../src/http/app.js';
import { createMetrics } from '../../src/http/metrics.js';
import { createRoutes } from '../../src/http/router.js';
import { createLogger } from '../../src/lib/logger.js';
import { createMemoryBudget } from '../../src/lib/memory-budget.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { openSmtpSession, type RawSmtpSession } from '../helpers/smtp-raw.js';
import { waitUntil } from '../helpers/wait-until.js';

test('body budget: small bodies pass uncounted, large ones wait in arrival order, a waiter that leaves frees its place', async () => {
  const budget = createMemoryBudget(1_000_000, 64 * 1024);
  const order: string[] = [];
  const small = budget.reserve(1_000);
  await small.granted;
  assert.equal(budget.bytesInFlight, 0, 'a small body is not counted');

  const a = budget.reserve(600_000);
  void a.granted.then(() => order.push('a'));
  const b = budget.reserve(600_000);
  void b.granted.then(() => order.push('b'));
  const c = budget.reserve(100_000); // would fit beside a, but b is ahead of it
  void c.granted.then(() => order.push('c'));
  const d = budget.reserve(200_000);
  void d.granted.then(() => order.push('d'));
  await Promise.resolve();
  assert.deepEqual(order, ['a']);
  assert.equal(budget.waiting, 3);

  d.release(); // its client went away while waiting
  assert.equal(budget.waiting, 2);
  a.release();
  await Promise.resolve();
  assert.deepEqual(order, ['a', 'b', 'c'], 'b, then c beside it');
  assert.equal(budget.bytesInFlight, 700_000);
  b.release();
  b.release(); // idempotent
  c.release();
  assert.equal(budget.bytesInFlight, 0);

  const huge = budget.reserve(5_000_000);
  await huge.granted; // larger than the whole budget: runs alone
  const next = budget.reserve(100_000);
  let nextGranted = false;
  void next.granted.then(() => (nextGranted = true));
  await Promise.resolve();
  assert.equal(nextGranted, false);
  huge.release();
  await next.granted;
  next.release();
  assert.equal(budget.bytesInFlight, 0);
});

/** A send whose JSON is exactly `size` bytes (an attachment pads it), as a raw request split in two. */
function largeSend(apiKey: string, size: number): { head: string; body: Buffer } {
  const email = { toAddress: 'ann@example.com', fromAddress: 'app@example.org', subject: 'big', text: 'hi', attachments: [{ name: 'pad.txt', content: '' }] };
  const bare = Buffer.byteLength(JSON.stringify(email));
  email.attachments[0].content = 'A'.repeat(Math.floor((size - bare) / 4) * 4);
  const body = Buffer.from(JSON.stringify(email).padEnd(size, ' '));
  const head = `POST /v1/email/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${apiKey}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  return { head, body };
}

/** Opens a connection, sends the head and the first `sentBytes` of the body; `finish()` sends the rest and resolves with the status. */
async function startUpload(app: TestAppliance, sentBytes: number, size = 700_000): Promise<{ socket: Socket; finish(): Promise<number> }> {
  const { head, body } = largeSend(app.apiKey, size);
  const socket = connect(Number(new URL(app.baseUrl).port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let answer = '';
  socket.on('data', (chunk) => (answer += chunk.toString('latin1')));
  const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(head);
  socket.write(body.subarray(0, sentBytes));
  return {
    socket,
    async finish() {
      socket.write(body.subarray(sentBytes));
      await ended;
      return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
    },
  };
}

async function gauge(app: TestAppliance, name: string): Promise<number> {
  const text = await (await fetch(`${app.baseUrl}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
}

test('a holder that keeps less than it reserved (a worst case, the real size known since) lets the next one in', async () => {
  const budget = createMemoryBudget(100, 0);
  const first = budget.reserve(80);
  await first.granted;
  let second = false;
  const next = budget.reserve(50);
  void next.granted.then(() => (second = true));
  await Promise.resolve();
  assert.equal(second, false);
  first.keep(90); // more than it holds: nothing changes
  await Promise.resolve();
  assert.deepEqual([second, budget.bytesInFlight], [false, 80]);
  first.keep(30);
  await Promise.resolve();
  assert.deepEqual([second, budget.bytesInFlight], [true, 80]);
  first.release();
  next.release();
  assert.equal(budget.bytesInFlight, 0, 'a release gives back what was kept, no more');
});

test('a large request waits, unread, while others hold http.body_memory_bytes, and is answered once one of them is', { timeout: 60_000 }, async () => {
  const app = await startAppliance({ env: { POSTINO_HTTP_BODY_MEMORY_BYTES: '1048576', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
  try {
    const first = await startUpload(app, 1_000);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 700_000, 'the first body to hold its room');
    const second = await startUpload(app, 1_000);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 1, 'the second to wait');
    // One that gives up while waiting leaves the queue.
    const quitter = await startUpload(app, 10);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 2, 'a third to wait');
    quitter.socket.destroy();
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 1, 'the third to leave the queue');
    // A body over http.body_limit_bytes is refused at once, not after waiting its turn.
    const head = `POST /v1/email/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.apiKey}\r\nContent-Type: application/json\r\nContent-Length: 20000000\r\n\r\n`;
    const tooLarge = connect(Number(new URL(app.baseUrl).port), '127.0.0.1');
    let refusal = '';
    tooLarge.on('data', (chunk) => (refusal += chunk.toString('latin1')));
    tooLarge.write(head);
    await waitUntil(() => /^HTTP\/1\.1 413 /.test(refusal), 'the oversized body to be refused');
    tooLarge.destroy();
    // An ordinary send is not held back by any of them.
    const small = await app.api('POST', '/v1/email/send', { toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject: 'small', text: 'hi' });
    assert.equal(small.status, 200);

    assert.equal(await first.finish(), 200);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 0, 'the second to get room');
    assert.equal(await second.finish(), 200);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 0, 'every room given back');
    const stored = await app.api('POST', '/v1/email/search', { query: { subject: 'big' } });
    assert.equal(stored.body.data.length, 2);
  } finally {
    await app.stop();
  }
});

test('a large message on the submission port waits for room on disk, not in memory, in the same budget as API bodies', { timeout: 60_000 }, async () => {
  const app = await startAppliance({ env: { POSTINO_HTTP_BODY_MEMORY_BYTES: '1048576', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture' } });
  try {
    const upload = await startUpload(app, 1_000);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 700_000, 'the API body to hold its room');
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: app.appliance.submissionPort,
      secure: false,
      requireTLS: true,
      tls: { rejectUnauthorized: false },
      auth: { user: 'app', pass: app.apiKey },
    });
    const pads = ['B', 'C', 'D'].map((letter) => letter.repeat(450_000));
    const submitted = pads.map((pad, i) =>
      transport.sendMail({ from: 'app@example.org', to: `sub${i}@example.com`, subject: `submitted ${i}`, text: 'hi', attachments: [{ filename: 'pad.txt', content: pad }] }),
    );
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 3, 'the messages to wait');
    // Each waits as a file of the spool, the whole message in it (base64 makes 450,000 bytes ~600,000).
    const spooled = spoolFiles(app);
    assert.equal(spooled.length, 3);
    for (const file of spooled) assert.ok(file.size > 600_000, `a spool file holds the message (${file.size} bytes)`);

    assert.equal(await upload.finish(), 200);
    const replies = await Promise.all(submitted);
    for (const info of replies) assert.match(info.response, /^250 /);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 0, 'every room given back');
    assert.deepEqual(spoolFiles(app), [], 'each file removed once its message is sent');
    // The message came back from its file whole.
    const id = /Accepted (\S+)/.exec(replies[2].response)![1];
    const readCaptured = () => fetch(`${app.baseUrl}/v1/captured/${id}`, { headers: { authorization: `Bearer ${app.apiKey}` } });
    await waitUntil(async () => (await readCaptured()).status === 200, 'the message to be captured');
    const captured = await simpleParser(Buffer.from(await (await readCaptured()).arrayBuffer()));
    assert.equal(captured.attachments[0]?.content.toString(), pads[2]);
    transport.close();
  } finally {
    await app.stop();
  }
});

test('submission spool: a client gone while its message waits sends nothing; one gone mid-DATA leaves no file; a spool that cannot be written answers 451, a removed one is made again', { timeout: 60_000 }, async () => {
  const app = await startAppliance({
    env: { POSTINO_HTTP_BODY_MEMORY_BYTES: '1048576', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture', POSTINO_SUBMISSION_ALLOW_INSECURE_AUTH: 'true' },
  });
  try {
    const upload = await startUpload(app, 1_000);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 700_000, 'the API body to hold its room');

    // Gone while waiting: it leaves the queue, its file goes, and it is never sent (it never heard 250).
    const leaver = await submissionSession(app, 'left@example.com');
    await leaver.write(largeMessage('left'));
    await leaver.write('.\r\n');
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 1, 'the message to wait');
    assert.equal(spoolFiles(app).length, 1);
    leaver.close();
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 0, 'the message to leave the queue');
    await waitUntil(() => spoolFiles(app).length === 0, 'its file to be removed');

    // Gone in the middle of DATA: the part already written is removed.
    const cut = await submissionSession(app, 'cut@example.com');
    await cut.write(largeMessage('cut'));
    await waitUntil(() => spoolFiles(app).length === 1, 'the partial message to reach the spool');
    cut.close();
    await waitUntil(() => spoolFiles(app).length === 0, 'the partial file to be removed');

    // A spool that cannot be written (here its directory replaced by a file): 451, retried later. Not
    // "452 insufficient storage": the disk is not full (that one is 452, test/core/storage-full.test.ts).
    const spool = join(app.dataDir, 'spool');
    rmSync(spool, { recursive: true });
    writeFileSync(spool, '');
    const refused = await submissionSession(app, 'later@example.com');
    await refused.write(largeMessage('later'));
    assert.match(await refused.command('.'), /^451 4\.3\.0 Local error: the message could not be written to disk/);
    refused.close();
    // Its directory removed (an operator's clean-up): made again, where every large message was refused until a restart.
    rmSync(spool);

    assert.equal(await upload.finish(), 200);
    const accepted = await submissionSession(app, 'later@example.com');
    await accepted.write(largeMessage('later'));
    assert.match(await accepted.command('.'), /^250 /);
    accepted.close();
    for (const [address, expected] of [['left@example.com', 0], ['cut@example.com', 0], ['later@example.com', 1]] as const) {
      const found = await app.api('POST', '/v1/email/search', { query: { toAddress: address } });
      assert.equal(found.body.data.length, expected, address);
    }
  } finally {
    await app.stop();
  }
});

test('a submitted message over submission.max_message_bytes is refused 552 and leaves no spool file', { timeout: 30_000 }, async () => {
  const app = await startAppliance({ env: { POSTINO_SUBMISSION_MAX_MESSAGE_BYTES: '100000', POSTINO_SUBMISSION_ALLOW_INSECURE_AUTH: 'true' } });
  try {
    const session = await submissionSession(app, 'big@example.com');
    await session.write(largeMessage('big'));
    assert.match(await session.command('.'), /^552 5\.3\.4 /);
    session.close();
    assert.deepEqual(spoolFiles(app), []);
  } finally {
    await app.stop();
  }
});

/** The files of the submission spool, with their sizes. */
function spoolFiles(app: TestAppliance): { name: string; size: number }[] {
  const spool = join(app.dataDir, 'spool');
  return readdirSync(spool).map((name) => ({ name, size: statSync(join(spool, name)).size }));
}

/** A session authenticated and at DATA for one recipient (AUTH in clear: allow_insecure_auth). */
async function submissionSession(app: TestAppliance, to: string): Promise<RawSmtpSession> {
  const session = await openSmtpSession(app.appliance.submissionPort);
  assert.match(await session.command('EHLO test'), /^250/);
  assert.match(await session.command(`AUTH PLAIN ${Buffer.from(`\0app\0${app.apiKey}`).toString('base64')}`), /^235/);
  assert.match(await session.command('MAIL FROM:<app@example.org>'), /^250/);
  assert.match(await session.command(`RCPT TO:<${to}>`), /^250/);
  assert.match(await session.command('DATA'), /^354/);
  return session;
}

/** A ~400,000-byte message (with the upload's 700,000 over the 1 MiB budget), a text and an attachment, without its final dot. */
function largeMessage(subject: string): string {
  const padding = `${'QUFB'.repeat(19)}\r\n`.repeat(5_200);
  return [
    'From: app@example.org',
    `Subject: ${subject}`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="part"',
    '',
    '--part',
    'Content-Type: text/plain',
    '',
    'hi',
    '--part',
    'Content-Type: text/plain; name="pad.txt"',
    'Content-Disposition: attachment; filename="pad.txt"',
    'Content-Transfer-Encoding: base64',
    '',
    `${padding}--part--`,
    '',
  ].join('\r\n');
}

test('a body holding room that stops arriving is answered 408 after 10 s without a byte, and its room goes to the next', { timeout: 60_000 }, async () => {
  const app = await startAppliance({ env: { POSTINO_HTTP_BODY_MEMORY_BYTES: '1048576', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
  try {
    // Sends its head and 1,000 bytes, then nothing: before, it held its room for Node's requestTimeout (5 minutes).
    const stalled = await startUpload(app, 1_000);
    let answer = '';
    stalled.socket.on('data', (chunk) => (answer += chunk.toString('latin1')));
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 700_000, 'the stalled body to hold its room');
    const waiting = await startUpload(app, 700_000);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 1, 'the next body to wait');
    const started = performance.now();
    const closed = new Promise<void>((resolve) => stalled.socket.once('close', () => resolve()));
    await closed;
    assert.match(answer, /^HTTP\/1\.1 408 /);
    assert.match(answer, /"errorCode":"request-timeout"/);
    assert.ok(performance.now() - started < 15_000, 'cut after about 10 s');
    // The waiting body, sent whole, now gets the room and is answered.
    assert.equal(await waiting.finish(), 200);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 0, 'every room given back');
  } finally {
    await app.stop();
  }
});

test('a body holding room that trickles (a byte every 300 ms, never 10 s idle) is answered 408 once it falls behind the minimum rate, and its room is given back at once', { timeout: 20_000 }, async () => {
  const log = createLogger({ level: 'silent' });
  const metrics = createMetrics();
  const memoryBudget = createMemoryBudget(1_048_576);
  // The production pace (30 s, then 8 kB/s) scaled down: 1 s of grace, then 50 kB/s.
  const bodyPace = { stalledAfterMs: 10_000, graceMs: 1_000, minBytesPerSecond: 50_000 };
  const routes = createRoutes({ authenticate: () => ({ id: 'p1', parentId: null }), log, metrics, bodyLimitBytes: 1_048_576, memoryBudget, bodyPace });
  routes.post('/upload', async ({ json }) => ({ size: JSON.stringify(await json()).length }));
  const server = await startHttpServer(createHttpApp(routes, { log, metrics }), '127.0.0.1', 0);
  const body = Buffer.from(JSON.stringify({ pad: 'A'.repeat(100_000) }));
  const head = `POST /upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  const open = async () => {
    const socket = connect(server.port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    let answer = '';
    socket.on('data', (chunk) => (answer += chunk.toString('latin1')));
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(head);
    return { socket, closed, answer: () => answer };
  };
  let trickle: NodeJS.Timeout | undefined;
  try {
    // Slow but steady (about 70 kB/s) passes, although it takes longer than the grace.
    const steady = await open();
    for (let sent = 0; sent < body.length; sent += 10_000) {
      steady.socket.write(body.subarray(sent, sent + 10_000));
      await new Promise((resolve) => setTimeout(resolve, 140));
    }
    await steady.closed;
    assert.match(steady.answer(), /^HTTP\/1\.1 200 /);

    const slow = await open();
    let sent = 0;
    trickle = setInterval(() => slow.socket.write(body.subarray(sent, ++sent)), 300);
    await waitUntil(() => memoryBudget.bytesInFlight === body.length, 'the trickled body to hold its room');
    await Promise.race([slow.closed, new Promise((resolve) => setTimeout(resolve, 4_000))]);
    assert.match(slow.answer(), /^HTTP\/1\.1 408 /, 'answered 408 within 4 s, not after the 5 minutes of Node\'s requestTimeout');
    assert.match(slow.answer(), /"errorCode":"request-timeout"/);
    assert.equal(memoryBudget.bytesInFlight, 0, 'its room given back');
  } finally {
    clearInterval(trickle);
    await server.close();
  }
});
