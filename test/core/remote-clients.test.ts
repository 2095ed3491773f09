import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { readFileSync } from 'node:fs';
import nodemailer from 'nodemailer';
import { createHttpApp, startHttpServer } from '../../src/http/app.js';
import { defaultConnectionLimits, maxHttpConnectionsPerHost, type HttpConnectionLimits } from '../../src/http/connection-limits.js';
import { createMetrics } from '../../src/http/metrics.js';
import { createRoutes } from '../../src/http/router.js';
import { parseTrustedProxies } from '../../src/http/trusted-proxies.js';
import { createLogger } from '../../src/lib/logger.js';
import { startAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';

/** A server with one route that counts the requests it ran, under `limits`. */
async function limitedServer(limits: HttpConnectionLimits) {
  const log = createLogger({ level: 'silent' });
  const metrics = createMetrics();
  const routes = createRoutes({ authenticate: () => ({ id: 'p1', parentId: null }), log, metrics, bodyLimitBytes: 1024 });
  let handled = 0;
  routes.public('get', '/ping', () => {
    handled++;
    return { ok: true };
  });
  const server = await startHttpServer(createHttpApp(routes, { log, metrics }), '127.0.0.1', 0, { connectionLimits: limits });
  return { server, handled: () => handled };
}

async function openConnection(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  return socket;
}

/** Sends one GET on the socket and resolves with everything the server wrote until it closed or a full answer came. */
function request(socket: Socket, path = '/ping'): Promise<string> {
  return new Promise((resolve) => {
    let received = '';
    socket.on('data', (chunk) => {
      received += chunk.toString();
      const [head, body = ''] = received.split('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(head)?.[1];
      if (length !== undefined && Buffer.byteLength(body) >= Number(length)) resolve(received);
    });
    socket.on('close', () => resolve(received));
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
  });
}

const counted = (perHost: number, total = 10_000): HttpConnectionLimits => ({ perHost, total, uncounted: () => false });

test('a client host past its share of API connections is answered 429 rate-limited with Retry-After, and its request is never run', async () => {
  const { server, handled } = await limitedServer(counted(3));
  const held: Socket[] = [];
  try {
    for (let i = 0; i < 3; i++) held.push(await openConnection(server.port));
    const extra = await openConnection(server.port);
    const answer = await request(extra);
    assert.match(answer, /^HTTP\/1\.1 429 /);
    assert.match(answer, /\r\nretry-after: 10\r\n/i);
    assert.match(answer, /\r\nconnection: close\r\n/i);
    const body = JSON.parse(answer.split('\r\n\r\n')[1]);
    assert.equal(body.errorCode, 'rate-limited');
    assert.match(body.developerMessage, /^Too many connections from 127\.0\.0\.1: at most 3 at once/);
    assert.equal(handled(), 0, 'the refused request did not run');
    // The held ones work; once one closes, a new connection is taken again.
    assert.match(await request(held[0]), /^HTTP\/1\.1 200 /);
    assert.equal(handled(), 1);
    held.shift()!.destroy();
    await waitUntil(async () => /^HTTP\/1\.1 200 /.test(await request(await openConnection(server.port))), 'a connection taken once one of the 3 closed');
  } finally {
    for (const socket of held) socket.destroy();
    await server.close();
  }
});

test('a refused connection that sends no request (a header trickle) is closed after 5 s instead of holding a descriptor', async () => {
  const { server } = await limitedServer(counted(1));
  const held = await openConnection(server.port);
  try {
    const silent = await openConnection(server.port);
    const started = performance.now();
    await once(silent, 'close');
    const waited = performance.now() - started;
    assert.ok(waited >= 4_000 && waited < 15_000, `closed after ${Math.round(waited)} ms`);
    assert.ok(!held.destroyed, 'the admitted connection stays');
  } finally {
    held.destroy();
    await server.close();
  }
});

test('past 8 refused connections of a host waiting for their answer, its next ones are closed unanswered: reopened as fast as they closed, refused ones filled the total alone', async () => {
  const { server } = await limitedServer(counted(1));
  const sockets: Socket[] = [await openConnection(server.port)];
  try {
    for (let i = 0; i < 8; i++) sockets.push(await openConnection(server.port));
    const ninth = await openConnection(server.port);
    const started = performance.now();
    const received: Buffer[] = [];
    ninth.on('data', (chunk) => received.push(chunk));
    await once(ninth, 'close');
    assert.ok(performance.now() - started < 4_000, 'closed at once, not after the 5 s grace');
    assert.equal(Buffer.concat(received).length, 0);
    // The 8 waiting ones still get their answer.
    assert.match(await request(sockets[1]), /^HTTP\/1\.1 429 /);
  } finally {
    for (const socket of sockets) socket.destroy();
    await server.close();
  }
});

test('uncounted peers (loopback, trusted proxies) are not limited per host; all connections are capped by total', async () => {
  const free = await limitedServer({ perHost: 1, total: 10_000, uncounted: () => true });
  const sockets: Socket[] = [];
  try {
    for (let i = 0; i < 5; i++) sockets.push(await openConnection(free.server.port));
    for (const socket of sockets) assert.match(await request(socket), /^HTTP\/1\.1 200 /);
  } finally {
    for (const socket of sockets.splice(0)) socket.destroy();
    await free.server.close();
  }
  const capped = await limitedServer({ perHost: 100, total: 2, uncounted: () => true });
  try {
    for (let i = 0; i < 2; i++) sockets.push(await openConnection(capped.server.port));
    const third = await openConnection(capped.server.port);
    assert.equal(await request(third), '', 'dropped unanswered: past the total there is no descriptor to spare');
    assert.equal(capped.handled(), 0);
  } finally {
    for (const socket of sockets) socket.destroy();
    await capped.server.close();
  }
});

test('production limits: loopback and trusted proxies are uncounted, other hosts counted per IPv6 /64; the API gets half the descriptors', () => {
  const limits = defaultConnectionLimits(parseTrustedProxies(['10.0.0.0/8']));
  assert.equal(limits.perHost, maxHttpConnectionsPerHost);
  for (const address of ['127.0.0.1', '127.3.2.1', '::1', '::ffff:127.0.0.1', '10.1.2.3', '::ffff:10.1.2.3']) assert.ok(limits.uncounted(address), address);
  for (const address of ['192.0.2.7', '2001:db8::1', '::ffff:192.0.2.7']) assert.ok(!limits.uncounted(address), address);
  const openFiles = Number(/^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'))![1]);
  assert.equal(limits.total, Math.max(512, Math.floor(openFiles / 2)), 'half the open-file limit');
});

test('a configured short key is refused once a reverse proxy or a public URL makes the API reachable from other machines; a loopback public URL is a sandbox', async () => {
  await assert.rejects(
    startAppliance({ env: { POSTINO_AUTH_API_KEY: 'test', POSTINO_HTTP_TRUSTED_PROXIES: '127.0.0.1' } }),
    /auth\.api_key must have at least 16 characters when a reverse proxy passes other machines' requests to the API \(http\.trusted_proxies is set\)/,
  );
  await assert.rejects(
    startAppliance({ env: { POSTINO_HTTP_METRICS_TOKEN: 'm', POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test' } }),
    /http\.metrics_token must have at least 16 characters when other machines reach the API at http\.public_url \(https:\/\/mail\.example\.test\)/,
  );
  for (const publicUrl of ['http://localhost:8025', 'http://127.0.0.1:8025', 'http://[::1]:8025']) {
    const sandbox = await startAppliance({ env: { POSTINO_AUTH_API_KEY: 'test', POSTINO_HTTP_PUBLIC_URL: publicUrl } });
    await sandbox.stop();
  }
});

test('the start warns of an open /metrics reachable from other machines, and of a short key that submission takes from loopback only', async () => {
  const exposed = await startAppliance({ env: { POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test', POSTINO_DELIVERY_MODE: 'capture' } });
  await exposed.stop();
  assert.ok(exposed.logs.some((line) => line.includes('http.metrics_token is not set while other machines reach the API at http.public_url')));
  const guarded = await startAppliance({ env: { POSTINO_HTTP_PUBLIC_URL: 'https://mail.example.test', POSTINO_HTTP_METRICS_TOKEN: 'm'.repeat(16), POSTINO_DELIVERY_MODE: 'capture' } });
  await guarded.stop();
  assert.ok(!guarded.logs.some((line) => line.includes('http.metrics_token is not set')));
  const sandbox = await startAppliance({ env: { POSTINO_AUTH_API_KEY: 'test', POSTINO_SUBMISSION_HOST: '0.0.0.0' } });
  await sandbox.stop();
  assert.ok(sandbox.logs.some((line) => line.includes('auth.api_key has fewer than 16 characters: SMTP submission takes it from loopback clients only')));
  assert.ok(!sandbox.logs.some((line) => line.includes('http.metrics_token is not set')), 'a loopback API: /metrics is not reachable');
});

/** An address of this machine that is not loopback: connecting to it from here comes from it, never leaving the machine. */
function thisMachinesNonLoopbackAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flat()
    .find((entry) => entry && !entry.internal && entry.family === 'IPv4')?.address;
}

const localAddress = thisMachinesNonLoopbackAddress();
const noNonLoopbackAddress = localAddress === undefined && process.env.CI !== 'true' ? 'this machine has no non-loopback IPv4 address to connect from' : false;

test('submission takes a short configured key from loopback clients only: from another address it fails as a wrong key would (535)', { skip: noNonLoopbackAddress }, async () => {
  assert.ok(localAddress, 'CI=true: a non-loopback IPv4 address is needed to connect from');
  const t = await startAppliance({ env: { POSTINO_AUTH_API_KEY: 'test', POSTINO_SUBMISSION_HOST: '0.0.0.0', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DELIVERY_MODE: 'capture' } });
  const transport = (host: string) =>
    nodemailer.createTransport({ host, port: t.appliance.submissionPort, secure: false, requireTLS: true, tls: { rejectUnauthorized: false }, auth: { user: 'app', pass: 'test' } });
  const message = { from: 'app@sender.test', to: 'alice@rcpt.test', subject: 'short key', text: 'hi' };
  try {
    const local = await transport('127.0.0.1').sendMail(message);
    assert.match(local.response, /^250 /);
    const padded = nodemailer.createTransport({ host: localAddress!, port: t.appliance.submissionPort, secure: false, requireTLS: true, tls: { rejectUnauthorized: false }, auth: { user: 'app', pass: `test${' '.repeat(12)}` } });
    for (const remote of [transport(localAddress!), padded]) {
      await assert.rejects(remote.sendMail(message), (error: { responseCode?: number; response?: string }) => {
        assert.equal(error.responseCode, 535);
        assert.match(error.response ?? '', /^535 5\.7\.8 Authentication failed/);
        return true;
      });
    }
    assert.ok(t.logs.some((line) => line.includes('submission auth refused: a key this short authenticates from loopback only')), 'the log says why');
  } finally {
    await t.stop();
  }
});
