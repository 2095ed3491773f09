import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { createHttpApp, startHttpServer } from '../../src/http/app.js';
import { createMetrics } from '../../src/http/metrics.js';
import { createRoutes } from '../../src/http/router.js';
import { createLogger } from '../../src/lib/logger.js';
import { waitUntil } from '../helpers/wait-until.js';

/**
 * A server with one public route answering downloads, as a signed attachment link does: the first is
 * larger than loopback's socket buffers can take (so it cannot leave while the client reads nothing).
 */
async function downloadServer(firstBytes: number, otherBytes: number, options: Parameters<typeof startHttpServer>[3] = {}) {
  const log = createLogger({ level: 'silent' });
  const metrics = createMetrics();
  const routes = createRoutes({ authenticate: () => ({ id: 'p1', parentId: null }), log, metrics, bodyLimitBytes: 1024 });
  let answered = 0;
  routes.public('get', '/file/:n', ({ params }) => {
    answered++;
    return { n: Number(params.n), data: 'x'.repeat(params.n === '0' ? firstBytes : otherBytes) };
  });
  const server = await startHttpServer(createHttpApp(routes, { log, metrics }), '127.0.0.1', 0, options);
  return { server, answered: () => answered };
}

test('requests pipelined on one connection by a client that does not read its answers are not all answered into memory at once', async () => {
  const { server, answered } = await downloadServer(32 * 1024 * 1024, 1024 * 1024);
  const socket = connect(server.port, '127.0.0.1');
  try {
    await once(socket, 'connect');
    socket.pause(); // reads nothing (yet)
    let pipelined = '';
    for (let n = 0; n < 40; n++) pipelined += `GET /file/${n} HTTP/1.1\r\nHost: x\r\n\r\n`;
    socket.write(pipelined);
    await waitUntil(() => answered() > 0, 'the first request answered');
    // Give the server every chance to run the others (it used to run all 40 at once: 70 MB held for a
    // client that reads nothing, and a few such connections exhausted the heap).
    await sleep(300);
    assert.ok(answered() <= 2, `answers built for a client that reads none: ${answered()}`);

    // Once the client reads, every answer comes, in order.
    let received = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk) => (received += chunk));
    socket.resume();
    await waitUntil(() => (received.match(/"n":\d+/g) ?? []).length === 40, 'all 40 answers', 30_000);
    assert.deepEqual(
      received.match(/"n":\d+/g)!.map((match) => Number(match.slice(4))),
      Array.from({ length: 40 }, (_, n) => n),
    );
  } finally {
    socket.destroy();
    await server.close();
  }
});

test('a pipelined request whose connection is gone before its turn is not run: nobody could read its answer', async () => {
  const { server, answered } = await downloadServer(32 * 1024 * 1024, 10);
  const socket = connect(server.port, '127.0.0.1');
  try {
    await once(socket, 'connect');
    socket.pause();
    socket.write('GET /file/0 HTTP/1.1\r\nHost: x\r\n\r\nGET /file/1 HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitUntil(() => answered() === 1, 'the first request answered');
    socket.destroy();
    await sleep(300);
    assert.equal(answered(), 1);
  } finally {
    socket.destroy();
    await server.close();
  }
});

test('an answer the client does not read is not kept, with its connection, for good: past the time its size allows, the connection is closed', async () => {
  // Node's HTTP server has no write timeout: 20 clients that asked for a 2 MB attachment and read nothing
  // held their connections and answers for as long as they kept them (still after 7 minutes).
  const { server, answered } = await downloadServer(32 * 1024 * 1024, 0, { answerPace: { graceMs: 100, minBytesPerSecond: 1024 * 1024 * 1024 } });
  const socket = connect(server.port, '127.0.0.1');
  let cut = false;
  socket.on('error', () => (cut = true)).on('close', () => (cut = true));
  try {
    await once(socket, 'connect');
    socket.pause(); // never reads
    socket.write('GET /file/0 HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitUntil(() => answered() === 1, 'the request answered');
    // The client is still there, and says so (empty lines between requests are allowed, RFC 9112 §2.2);
    // once the server has closed its side, writing fails.
    await waitUntil(() => {
      if (!socket.destroyed) socket.write('\r\n');
      return cut;
    }, 'the server closing the connection of the answer nobody reads');
  } finally {
    socket.destroy();
    await server.close();
  }
});
