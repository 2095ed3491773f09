import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import nodemailer from 'nodemailer';
import { createMemoryBudget } from '../../src/lib/memory-budget.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
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

test('a large message on the submission port waits for room before it is parsed, in the same budget as API bodies', { timeout: 60_000 }, async () => {
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
    const submitted = transport.sendMail({ from: 'app@example.org', to: 'sub@example.com', subject: 'submitted', text: 'hi', attachments: [{ filename: 'pad.txt', content: 'B'.repeat(450_000) }] });
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_waiting')) === 1, 'the message to wait');
    assert.equal(await upload.finish(), 200);
    const info = await submitted;
    assert.match(info.response, /^250 /);
    await waitUntil(async () => (await gauge(app, 'postino_body_memory_bytes_in_flight')) === 0, 'every room given back');
    transport.close();
  } finally {
    await app.stop();
  }
});
