import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { createServer as createHttpsServer } from 'node:https';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { createResolver } from '../../src/lib/resolver.js';
import { postWebhook } from '../../src/webhooks/post.js';
import { startDnsServer } from '../helpers/dns-server.js';
import { createTestCa } from '../delivery/test-ca.js';

test('a host name whose DNS never answers fails the attempt within webhooks.timeout, inside the dispatcher lease', async () => {
  // A real UDP socket on loopback that takes every query and answers none.
  const silentDns = createSocket('udp4');
  await new Promise<void>((resolve) => silentDns.bind(0, '127.0.0.1', resolve));
  let queries = 0;
  silentDns.on('message', () => queries++);
  try {
    // The resolver alone would wait 30 s per try, twice, for A and then AAAA: two minutes against a lease
    // of 2 × timeout + 5 s, after which a second dispatcher pass would POST the same delivery again.
    const resolver = createResolver({ servers: [`127.0.0.1:${silentDns.address().port}`], timeoutMs: 30_000, tries: 2 });
    const started = Date.now();
    const result = await postWebhook('http://hooks.example.test/in', {}, '{}', { resolver, allowPrivate: true, timeoutMs: 400 });
    const tookMs = Date.now() - started;
    assert.equal(result.ok, false);
    assert.match(result.error ?? '', /^DNS: timed out/);
    assert.ok(queries >= 1, 'the lookup went to the DNS server');
    assert.ok(tookMs >= 350 && tookMs < 2_000, `answered after ${tookMs} ms`);
  } finally {
    silentDns.close();
  }
});

/** A raw HTTP receiver: `answer(socket)` runs once the request has arrived. */
async function rawReceiver(answer: (socket: Socket) => void): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('data', () => answer(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/in`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** A receiver that sends its status line at once, then its body one byte every 100 ms, never ending. */
async function tricklingReceiver(statusLine: string): Promise<{ url: string; close(): Promise<void> }> {
  const trickles: NodeJS.Timeout[] = [];
  const receiver = await rawReceiver((socket) => {
    socket.write(`HTTP/1.1 ${statusLine}\r\nTransfer-Encoding: chunked\r\n\r\n`);
    trickles.push(setInterval(() => socket.write('1\r\nx\r\n'), 100));
  });
  return {
    url: receiver.url,
    close: () => {
      for (const trickle of trickles) clearInterval(trickle);
      return receiver.close();
    },
  };
}

test('a 2xx whose body still trickles in when webhooks.timeout runs out is delivered, not failed and sent again', async () => {
  const receiver = await tricklingReceiver('200 OK');
  try {
    const resolver = createResolver({ servers: ['127.0.0.1:9'] });
    const result = await postWebhook(receiver.url, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 500 });
    assert.deepEqual({ ok: result.ok, statusCode: result.statusCode }, { ok: true, statusCode: 200 });
  } finally {
    await receiver.close();
  }
});

test('a receiver that never sends its status line fails the attempt when webhooks.timeout runs out; a 500 trickling in stays a failure', async () => {
  const silent = await rawReceiver(() => {});
  const failing = await tricklingReceiver('500 Internal Server Error');
  try {
    const resolver = createResolver({ servers: ['127.0.0.1:9'] });
    const unanswered = await postWebhook(silent.url, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 400 });
    assert.equal(unanswered.ok, false);
    assert.match(unanswered.error ?? '', /timed out after 400 ms/);
    const refused = await postWebhook(failing.url, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 400 });
    assert.deepEqual({ ok: refused.ok, statusCode: refused.statusCode }, { ok: false, statusCode: 500 });
  } finally {
    await silent.close();
    await failing.close();
  }
});

test('localhost written with a final dot is loopback at delivery too: refused without allow_private, posted to 127.0.0.1 with it', async () => {
  const receiver = await rawReceiver((socket) => socket.end('HTTP/1.1 204 No Content\r\n\r\n'));
  try {
    const resolver = createResolver({ servers: ['127.0.0.1:9'], timeoutMs: 200, tries: 1 });
    const port = new URL(receiver.url).port;
    const refused = await postWebhook(`http://localhost.:${port}/in`, {}, '{}', { resolver, allowPrivate: false, timeoutMs: 1_000 });
    assert.equal(refused.ok, false);
    assert.match(refused.error ?? '', /127\.0\.0\.1.*private/);
    const posted = await postWebhook(`http://app.localhost.:${port}/in`, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 1_000 });
    assert.deepEqual({ ok: posted.ok, statusCode: posted.statusCode }, { ok: true, statusCode: 204 });
  } finally {
    await receiver.close();
  }
});

test('a receiver answering 101 Switching Protocols (or closing under an upgrade) fails the attempt within webhooks.timeout, never hangs it', async () => {
  // Node's client destroys the socket of an upgrade nobody listens for without an 'error' on the request:
  // the POST never settled, so its dispatcher slot was held for good (eight such receivers stopped every
  // project's webhooks) and a stop waited for it forever.
  const receiver = await rawReceiver((socket) => socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'));
  try {
    const resolver = createResolver({ servers: ['127.0.0.1:9'] });
    const started = Date.now();
    const outcome = await Promise.race([
      postWebhook(receiver.url, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 500 }),
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 3_000).unref()),
    ]);
    assert.notEqual(outcome, 'hung', 'the POST never settled');
    if (outcome === 'hung') return;
    assert.equal(outcome.ok, false);
    assert.equal(outcome.statusCode, 101);
    assert.ok(Date.now() - started < 1_000, `answered after ${Date.now() - started} ms`);
  } finally {
    await receiver.close();
  }
});

test('a host name with several addresses, the first refusing connections, is posted to the next one (as browsers and curl do)', async () => {
  // A receiver behind round-robin DNS with one node down: only the first address was ever tried, so
  // every attempt failed (and the event was given up after a day) while the other nodes were up.
  const receiver = await rawReceiver((socket) => socket.end('HTTP/1.1 204 No Content\r\n\r\n'));
  const dns = await startDnsServer();
  try {
    const resolver = createResolver({ servers: [dns.address] });
    const port = new URL(receiver.url).port;
    // Nothing listens on 127.0.0.2 or 127.0.0.3 at that port: those connections are refused.
    dns.set('hooks.example.test', 'A', ['127.0.0.2', '127.0.0.1']);
    const posted = await postWebhook(`http://hooks.example.test:${port}/in`, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 2_000 });
    assert.deepEqual({ ok: posted.ok, statusCode: posted.statusCode }, { ok: true, statusCode: 204 });

    dns.set('down.example.test', 'A', ['127.0.0.2', '127.0.0.3']);
    const down = await postWebhook(`http://down.example.test:${port}/in`, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 2_000 });
    assert.equal(down.ok, false);
    assert.match(down.error ?? '', /127\.0\.0\.2.*127\.0\.0\.3/, 'the error names every address tried');

    // The private guard still holds for every address: none of them is connected to.
    dns.set('mixed.example.test', 'A', ['10.0.0.1', '127.0.0.1']);
    const refused = await postWebhook(`http://mixed.example.test:${port}/in`, {}, '{}', { resolver, allowPrivate: false, timeoutMs: 2_000 });
    assert.equal(refused.ok, false);
    assert.match(refused.error ?? '', /private address/);
    // Its AAAA records too, now that they are tried beside the A records.
    dns.set('dual.example.test', 'A', ['10.0.0.1']);
    dns.set('dual.example.test', 'AAAA', ['::1']);
    const refusedBoth = await postWebhook(`http://dual.example.test:${port}/in`, {}, '{}', { resolver, allowPrivate: false, timeoutMs: 2_000 });
    assert.equal(refusedBoth.ok, false);
    assert.match(refusedBoth.error ?? '', /private address/);
  } finally {
    await dns.stop();
    await receiver.close();
  }
});

test('a 2xx whose headers Node would refuse to parse (over 16 kB, bare LF line ends, Content-Length with chunked) is delivered, not sent again for a day', async () => {
  // The receiver took the event and said so; a strict parse error made it a failed attempt, retried about
  // thirty times over webhooks.give_up_after, each one processed again by a receiver that does not dedupe.
  const answers = [
    `HTTP/1.1 200 OK\r\nSet-Cookie: session=${'a'.repeat(20_000)}\r\nContent-Length: 0\r\n\r\n`,
    'HTTP/1.1 200 OK\nContent-Length: 2\n\nok',
    'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n',
  ];
  const resolver = createResolver({ servers: ['127.0.0.1:9'] });
  for (const answer of answers) {
    const receiver = await rawReceiver((socket) => socket.end(answer));
    try {
      const result = await postWebhook(receiver.url, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 2_000 });
      assert.deepEqual({ ok: result.ok, statusCode: result.statusCode, error: result.error }, { ok: true, statusCode: 200, error: undefined }, JSON.stringify(answer.slice(0, 40)));
    } finally {
      await receiver.close();
    }
  }
  // Headers up to 64 kB are read, but a redirect's Location is stored with every attempt: only its start is kept.
  const redirect = await rawReceiver((socket) => socket.end(`HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example/${'x'.repeat(30_000)}\r\nContent-Length: 0\r\n\r\n`));
  try {
    const result = await postWebhook(redirect.url, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 2_000 });
    assert.equal(result.statusCode, 302);
    assert.match(result.error ?? '', /^HTTP 302 redirect not followed \(to https:\/\/elsewhere\.example\/x+…\)$/);
    assert.ok((result.error ?? '').length < 1_000, `error of ${result.error?.length} characters`);
  } finally {
    await redirect.close();
  }
});

test('a URL whose host ends in a dot sends the name without it in SNI (RFC 6066), and the certificate is checked against that name', async () => {
  const ca = createTestCa();
  const dns = await startDnsServer();
  dns.set('hooks.example.test', 'A', ['127.0.0.1']);
  const resolver = createResolver({ servers: [dns.address] });
  const trusted = await tlsReceiver(ca.issue(['hooks.example.test']));
  const otherName = await tlsReceiver(ca.issue(['other.example.test']));
  try {
    const posted = await postWebhook(`https://hooks.example.test.:${trusted.port}/in`, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 2_000, ca: ca.certPem });
    assert.deepEqual({ ok: posted.ok, statusCode: posted.statusCode, error: posted.error }, { ok: true, statusCode: 204, error: undefined });
    assert.deepEqual(trusted.serverNames, ['hooks.example.test']);

    // Still checked: a certificate for another name is refused (the period after the name is Node's message's).
    const refused = await postWebhook(`https://hooks.example.test.:${otherName.port}/in`, {}, '{}', { resolver, allowPrivate: true, timeoutMs: 2_000, ca: ca.certPem });
    assert.equal(refused.ok, false);
    assert.match(refused.error ?? '', /^Hostname\/IP does not match certificate's altnames: Host: hooks\.example\.test\. is not in the cert's altnames: DNS:other\.example\.test$/);
    assert.deepEqual(otherName.serverNames, ['hooks.example.test']);
  } finally {
    await trusted.close();
    await otherName.close();
    await dns.stop();
  }
});

/** An HTTPS receiver on loopback answering 204, keeping the name each client sent in SNI. */
async function tlsReceiver(credentials: { key: string; cert: string }): Promise<{ port: number; serverNames: string[]; close(): Promise<void> }> {
  const serverNames: string[] = [];
  // Called with the ClientHello's name before the handshake goes on, so a certificate the client then
  // refuses still shows what it asked for; the default context (this certificate) answers every name.
  const SNICallback = (name: string, done: (error: Error | null) => void) => {
    serverNames.push(name);
    done(null);
  };
  const server = createHttpsServer({ ...credentials, SNICallback }, (_req, res) => res.writeHead(204).end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    serverNames,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
