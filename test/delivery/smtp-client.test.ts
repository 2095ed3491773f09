import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { createSmtpClient } from '../../src/delivery/smtp-client.js';
import { silentLogger } from '../../src/lib/logger.js';
import { createTestCa } from './test-ca.js';

/** How the fake server misbehaves: STARTTLS offered, then a hang-up or a stall; a reply trickled a line at a time. */
interface Misbehaviour {
  starttls?: 'hangup' | 'stall';
  trickle?: 'EHLO' | 'MAIL' | 'end of data';
  /** Replies to MAIL FROM and RCPT TO after `envelopeMs`, to the final dot after `finalMs`. */
  slow?: { envelopeMs: number; finalMs: number };
}

/** A bare SMTP server that greets after `greetingDelayMs` and accepts everything, unless told to misbehave. */
async function startSlowGreeter(greetingDelayMs: number, misbehaviour: Misbehaviour = {}): Promise<{ server: Server; port: number; received: string[]; connects: () => number }> {
  const received: string[] = [];
  let connects = 0;
  const server = createServer((socket) => {
    connects++;
    socket.on('error', () => {});
    const greet = setTimeout(() => socket.write('220 slow.test ESMTP\r\n'), greetingDelayMs);
    let trickling: NodeJS.Timeout | undefined;
    socket.on('close', () => {
      clearTimeout(greet);
      clearInterval(trickling);
    });
    // "250-" lines, one every 100 ms, and never the last one.
    const trickle = () => (trickling = setInterval(() => socket.write('250-still thinking\r\n'), 100));
    let buffer = '';
    let data: string[] | undefined;
    let silent = false;
    socket.on('data', (chunk) => {
      if (silent) return;
      buffer += chunk.toString('latin1');
      for (let end = buffer.indexOf('\r\n'); end >= 0 && !silent; end = buffer.indexOf('\r\n')) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (data) {
          if (line === '.') {
            received.push(data.join('\r\n'));
            data = undefined;
            if (misbehaviour.trickle === 'end of data') trickle();
            else if (misbehaviour.slow) setTimeout(() => socket.write('250 2.0.0 queued\r\n'), misbehaviour.slow.finalMs);
            else socket.write('250 2.0.0 queued\r\n');
          } else data.push(line);
        } else if (/^EHLO/i.test(line)) {
          if (misbehaviour.trickle === 'EHLO') trickle();
          else socket.write(misbehaviour.starttls ? '250-slow.test\r\n250 STARTTLS\r\n' : '250 slow.test\r\n');
        } else if (/^STARTTLS/i.test(line)) {
          socket.write('220 2.0.0 ready\r\n');
          // The client's handshake then goes unanswered, or the connection is cut under it.
          if (misbehaviour.starttls === 'hangup') socket.destroy();
          silent = true;
        } else if (/^MAIL/i.test(line) && misbehaviour.trickle === 'MAIL') trickle();
        else if (/^DATA/i.test(line)) {
          data = [];
          socket.write('354 go on\r\n');
        } else if (/^QUIT/i.test(line)) socket.end('221 bye\r\n');
        else if (misbehaviour.slow) setTimeout(() => socket.write('250 2.1.0 ok\r\n'), misbehaviour.slow.envelopeMs);
        else socket.write('250 2.1.0 ok\r\n');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, received, connects: () => connects };
}

const clientWith = (timeouts: { connectTimeoutMs: number; greetingTimeoutMs: number; socketTimeoutMs?: number }) =>
  createSmtpClient({ heloName: 'mta.postino.test', socketTimeoutMs: 10_000, ...timeouts, idleTimeoutMs: 1000, maxMessagesPerConnection: 10, log: silentLogger });
const targetAt = (port: number, host = 'slow.test') => ({ host, address: '127.0.0.1', port, secure: false, requireTls: false, verifyTls: false, group: host });
const message = Buffer.from('Subject: hi\r\n\r\nhello\r\n');

test('idle connections are forgotten with their target: nothing is kept per mail server once they close', async () => {
  const greeter = await startSlowGreeter(0);
  const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000 });
  try {
    // Three mail servers (one listener under three names): three idle connections, then none.
    for (const host of ['mx1.a.test', 'mx2.b.test', 'mx3.c.test']) {
      const outcome = await client.send(targetAt(greeter.port, host), { from: 'a@sender.test', to: `b@${host}` }, message);
      assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
    }
    assert.equal(client.idleTargets, 3);
    // Reused once: taken out and given back.
    assert.equal((await client.send(targetAt(greeter.port, 'mx1.a.test'), { from: 'a@sender.test', to: 'c@mx1.a.test' }, message)).kind, 'reply');
    assert.equal(client.openConnections, 3);
    // idle_connection_timeout (1 s here) closes them, and their targets go with them.
    const deadline = Date.now() + 5000;
    while (client.openConnections > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(client.openConnections, 0);
    assert.equal(client.idleTargets, 0);
  } finally {
    client.close();
    greeter.server.close();
  }
});

test('idle connections are capped across destinations: a burst to many mail servers keeps at most maxIdleConnections open', async () => {
  // One idle connection per mail server, for idle_connection_timeout: a burst to thousands of domains
  // held thousands of descriptors, and under a 256 or 1,024 open-file limit every new connection
  // (deliveries, the SMTP listeners, the API) failed with EMFILE.
  const greeter = await startSlowGreeter(0);
  const client = createSmtpClient({ heloName: 'mta.postino.test', connectTimeoutMs: 5000, greetingTimeoutMs: 5000, socketTimeoutMs: 10_000, idleTimeoutMs: 60_000, maxMessagesPerConnection: 10, maxIdleConnections: 3, log: silentLogger });
  try {
    for (let i = 0; i < 10; i++) {
      const host = `mx.d${i}.test`;
      const outcome = await client.send(targetAt(greeter.port, host), { from: 'a@sender.test', to: `b@d${i}.test` }, message);
      assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
    }
    assert.equal(client.idleTargets, 3);
    assert.equal(client.openConnections, 3, 'the longest idle ones were closed');
    // The newest kept are the ones reused: the next message to the last server opens nothing.
    const before = greeter.connects();
    assert.equal((await client.send(targetAt(greeter.port, 'mx.d9.test'), { from: 'a@sender.test', to: 'c@d9.test' }, message)).kind, 'reply');
    assert.equal(greeter.connects(), before);
    assert.equal(client.openConnections, 3);
  } finally {
    client.close();
    greeter.server.close();
  }
});

test('the greeting gets greeting_timeout, not what is left of connect_timeout', async () => {
  // RFC 5321 §4.5.3.2.1: 5 minutes for the 220. nodemailer's own connect timer also bounded the greeting.
  const greeter = await startSlowGreeter(1500);
  const client = clientWith({ connectTimeoutMs: 500, greetingTimeoutMs: 10_000 });
  try {
    const outcome = await client.send(targetAt(greeter.port), { from: 'a@sender.test', to: 'b@slow.test' }, message);
    assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
    assert.equal(outcome.reply.code, 250);
    assert.equal(greeter.received.length, 1);
  } finally {
    client.close();
    greeter.server.close();
  }
});

test('a greeting that never comes fails after greeting_timeout, as a connection failure', async () => {
  const greeter = await startSlowGreeter(60_000);
  const client = clientWith({ connectTimeoutMs: 10_000, greetingTimeoutMs: 300 });
  try {
    const outcome = await client.send(targetAt(greeter.port), { from: 'a@sender.test', to: 'b@slow.test' }, message);
    assert.equal(outcome.kind, 'connection-failed');
    assert.match(outcome.reply.message, /Greeting never received|Session setup .* not complete after 300 ms/);
    assert.equal(client.openConnections, 0);
  } finally {
    client.close();
    greeter.server.close();
    greeter.server.unref();
  }
});

test('a server that trickles its EHLO reply a line at a time is given up after greeting_timeout: it bounds the whole setup', async () => {
  const tarpit = await startSlowGreeter(0, { trickle: 'EHLO' });
  const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 600 });
  try {
    const outcome = await client.send(targetAt(tarpit.port, 'tarpit.test'), { from: 'a@sender.test', to: 'b@tarpit.test' }, message);
    assert.equal(outcome.kind, 'connection-failed', JSON.stringify(outcome));
    assert.match(outcome.reply.message, /Session setup .* not complete after 600 ms/);
    assert.equal(client.openConnections, 0);
  } finally {
    client.close();
    tarpit.server.close();
  }
});

test('a server that trickles its replies during the transaction is given up after socket_timeout in all; after the message, the outcome is unknown', async () => {
  for (const [trickle, kind] of [['MAIL', 'connection-failed'], ['end of data', 'unknown']] as const) {
    const tarpit = await startSlowGreeter(0, { trickle });
    const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000, socketTimeoutMs: 600 });
    try {
      const outcome = await client.send(targetAt(tarpit.port, 'tarpit.test'), { from: 'a@sender.test', to: 'b@tarpit.test' }, message);
      assert.equal(outcome.kind, kind, `${trickle}: ${JSON.stringify(outcome)}`);
      assert.match(outcome.reply.message, /No complete reply within 600 ms/);
      assert.equal(client.openConnections, 0, 'closed, not left for QUIT to wait on');
    } finally {
      client.close();
      tarpit.server.close();
    }
  }
});

test('the reply to the final dot gets socket_timeout of its own, whatever the envelope took (RFC 5321 §4.5.3.2.6)', async () => {
  // MAIL FROM and RCPT TO answered after 350 ms each, the message after 800 ms: each within the 1 s
  // socket_timeout, the three together not. Cut at 1 s in all, the message the server was about to
  // accept was deferred as unanswered and sent again at the retry: a second copy to the recipient.
  const server = await startSlowGreeter(0, { slow: { envelopeMs: 350, finalMs: 800 } });
  const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000, socketTimeoutMs: 1000 });
  try {
    const outcome = await client.send(targetAt(server.port), { from: 'a@sender.test', to: 'b@slow.test' }, message);
    assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
    assert.equal(outcome.reply.code, 250);
    assert.equal(server.received.length, 1);
  } finally {
    client.close();
    server.server.close();
  }
});

test('STARTTLS offered, then the handshake cut or left unanswered: the mail goes in plaintext on a second connection (opportunistic TLS)', async () => {
  for (const starttls of ['hangup', 'stall'] as const) {
    const server = await startSlowGreeter(0, { starttls });
    const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 800 });
    try {
      const outcome = await client.send(targetAt(server.port, 'badtls.test'), { from: 'a@sender.test', to: 'b@badtls.test' }, message);
      assert.equal(outcome.kind, 'reply', `${starttls}: ${JSON.stringify(outcome)}`);
      assert.equal(outcome.reply.code, 250);
      assert.equal(outcome.tls, false);
      assert.equal(server.connects(), 2, `${starttls}: the failed upgrade, then the plaintext session`);
      assert.equal(server.received.length, 1);
    } finally {
      client.close();
      server.server.close();
    }
  }
});

test('a refused connection is a connection failure and leaves nothing open', async () => {
  const greeter = await startSlowGreeter(0);
  const { port } = greeter;
  await new Promise((resolve) => greeter.server.close(resolve));
  const client = clientWith({ connectTimeoutMs: 1000, greetingTimeoutMs: 1000 });
  const outcome = await client.send(targetAt(port, 'gone.test'), { from: 'a@sender.test', to: 'b@gone.test' }, message);
  assert.equal(outcome.kind, 'connection-failed');
  assert.match(outcome.reply.message, /ECONNREFUSED/);
  assert.equal(client.openConnections, 0);
});

/**
 * A listener whose accept queue is full (python3: backlog 0, never accepting, filled by its own
 * connections): the kernel drops further SYNs, so a connect neither succeeds nor fails, as with a
 * host that drops packets. Node accepts every connection itself and cannot play this part.
 */
const fullBacklog = `
import socket, time
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(0)
fillers = []
for _ in range(3):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(s.getsockname())
    except BlockingIOError: pass
    fillers.append(c)
print(s.getsockname()[1], flush=True)
time.sleep(60)
`;
const pythonMissing = await new Promise<boolean>((resolve) => execFile('python3', ['--version'], (error) => resolve(Boolean(error))));
if (pythonMissing && process.env.CI === 'true') throw new Error('python3 is required in CI');

test('a connection that is never established fails after connect_timeout', { skip: pythonMissing ? 'python3 not installed' : false }, async () => {
  const listener = spawn('python3', ['-c', fullBacklog], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const [line] = (await once(listener.stdout!, 'data')) as [Buffer];
    const client = clientWith({ connectTimeoutMs: 300, greetingTimeoutMs: 10_000 });
    const outcome = await client.send(targetAt(Number(line.toString().trim()), 'dropped.test'), { from: 'a@sender.test', to: 'b@dropped.test' }, message);
    assert.equal(outcome.kind, 'connection-failed');
    assert.match(outcome.reply.message, /ETIMEDOUT: Connection timeout after 300 ms/);
    assert.equal(client.openConnections, 0, 'the connection being opened is counted no more');
  } finally {
    listener.kill();
  }
});

/**
 * A bare SMTP server whose replies to each command (by verb, "." for the final dot) are given as raw
 * text, or as a function that answers on the socket itself (late, or after pausing its reading).
 */
type ScriptedReply = string | ((socket: Socket) => void);

async function startScripted(replies: Record<string, ScriptedReply>): Promise<{ server: Server; port: number; received: () => number }> {
  let received = 0;
  const server = createServer((socket) => {
    socket.on('error', () => {});
    socket.write((replies.greeting as string | undefined) ?? '220 scripted.test ESMTP\r\n');
    let buffer = '';
    let inData = false;
    socket.on('data', (chunk) => {
      buffer += chunk.toString('latin1');
      for (let end = buffer.indexOf('\r\n'); end >= 0; end = buffer.indexOf('\r\n')) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (inData && line !== '.') continue;
        const verb = inData ? '.' : line.split(/[ :]/)[0].toUpperCase();
        if (verb === '.') (inData = false), received++;
        if (verb === 'DATA') inData = true;
        const defaults: Record<string, string> = { EHLO: '250 scripted.test\r\n', DATA: '354 go on\r\n', QUIT: '221 bye\r\n' };
        const reply = replies[verb] ?? defaults[verb] ?? '250 ok\r\n';
        if (typeof reply === 'function') reply(socket);
        else socket.write(reply);
        if (verb === 'QUIT') socket.end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, received: () => received };
}

test('a reply that is a bare code without text (RFC 5321 §4.2: the text is optional) is read as that code, not as no reply', async () => {
  const cases: { replies: Record<string, string>; code: number; command: string }[] = [
    { replies: { RCPT: '550\r\n' }, code: 550, command: 'RCPT TO' },
    { replies: { RCPT: '452\r\n' }, code: 452, command: 'RCPT TO' },
    { replies: { '.': '554\r\n' }, code: 554, command: 'DATA' },
  ];
  for (const { replies, code, command } of cases) {
    const server = await startScripted(replies);
    const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000 });
    try {
      const outcome = await client.send(targetAt(server.port, 'bare.test'), { from: 'a@sender.test', to: 'b@bare.test' }, message);
      assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
      assert.equal(outcome.reply.code, code, JSON.stringify(outcome));
      assert.equal(outcome.reply.command, command);
    } finally {
      client.close();
      server.server.close();
    }
  }
  // A bare 421 ends the session: the destination's answer (back off), not a host to skip for the next MX.
  const closing = await startScripted({ MAIL: '421\r\n' });
  const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000 });
  try {
    const outcome = await client.send(targetAt(closing.port, 'bare.test'), { from: 'a@sender.test', to: 'b@bare.test' }, message);
    assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
    assert.equal(outcome.reply.code, 421);
    assert.equal(closing.received(), 0);
  } finally {
    client.close();
    closing.server.close();
  }
});

test('a large message the server reads slowly still gets socket_timeout for the reply after its final dot (RFC 5321 §4.5.3.2.6)', async () => {
  // The server stops reading for `stallMs` after its 354 (a busy content scanner), then replies `replyMs`
  // after the final dot: each step within socket_timeout, both together past it.
  const [stallMs, replyMs, socketTimeoutMs] = [1500, 1500, 2000];
  const server = await startScripted({
    DATA: (socket) => {
      socket.write('354 go on\r\n');
      socket.pause();
      setTimeout(() => socket.resume(), stallMs);
    },
    '.': (socket) => setTimeout(() => socket.write('250 2.0.0 queued\r\n'), replyMs),
  });
  // Larger than what the socket buffers hold: the last of it goes only once the server reads again.
  const large = Buffer.concat([Buffer.from('Subject: big\r\n\r\n'), Buffer.alloc(32 * 1024 * 1024, 'x'.repeat(76) + '\r\n')]);
  const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000, socketTimeoutMs });
  try {
    const outcome = await client.send(targetAt(server.port, 'slowreader.test'), { from: 'a@sender.test', to: 'b@slowreader.test' }, large);
    assert.equal(outcome.kind, 'reply', JSON.stringify(outcome));
    assert.equal(outcome.reply.code, 250);
    assert.equal(server.received(), 1);
  } finally {
    client.close();
    server.server.close();
  }
});

/**
 * A server offering STARTTLS whose handshake completes, but whose session then dies: it hangs up, or
 * refuses EHLO and HELO over TLS. In plaintext it takes the mail.
 */
async function startBrokenAfterTls(after: 'hangup' | 'refuse' | 'busy'): Promise<{ server: Server; port: number; connects: () => number; received: () => number }> {
  const { key, cert } = createTestCa().issue(['mx.brokentls.test']);
  let connects = 0;
  let received = 0;
  const serve = (socket: Socket | TLSSocket, secure: boolean) => {
    let buffer = '';
    let inData = false;
    const onData = (chunk: Buffer) => {
      buffer += chunk.toString('latin1');
      for (let end = buffer.indexOf('\r\n'); end >= 0; end = buffer.indexOf('\r\n')) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (inData) {
          if (line === '.') (inData = false), received++, socket.write('250 2.0.0 queued\r\n');
          continue;
        }
        const verb = line.split(/[ :]/)[0].toUpperCase();
        if (secure && after === 'busy') socket.end('421 4.3.2 busy\r\n');
        else if (secure && (verb === 'EHLO' || verb === 'HELO')) socket.write('554 5.7.0 not over TLS\r\n');
        else if (verb === 'EHLO') socket.write('250-mx.brokentls.test\r\n250 STARTTLS\r\n');
        else if (verb === 'STARTTLS') {
          socket.write('220 2.0.0 ready\r\n');
          socket.off('data', onData);
          const tls = new TLSSocket(socket, { isServer: true, key, cert });
          tls.on('error', () => {});
          if (after === 'hangup') tls.once('secure', () => tls.destroy());
          else serve(tls, true);
        } else if (verb === 'DATA') (inData = true), socket.write('354 go on\r\n');
        else if (verb === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    };
    socket.on('data', onData);
  };
  const server = createServer((socket) => {
    connects++;
    socket.on('error', () => {});
    socket.write('220 mx.brokentls.test ESMTP\r\n');
    serve(socket, false);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, connects: () => connects, received: () => received };
}

test('STARTTLS completed, then the session dies before EHLO over TLS is answered, or EHLO is refused: the mail goes in plaintext on a second connection', async () => {
  for (const after of ['hangup', 'refuse'] as const) {
    const server = await startBrokenAfterTls(after);
    const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000 });
    try {
      const outcome = await client.send(targetAt(server.port, 'mx.brokentls.test'), { from: 'a@sender.test', to: 'b@brokentls.test' }, message);
      assert.equal(outcome.kind, 'reply', `${after}: ${JSON.stringify(outcome)}`);
      assert.equal(outcome.reply.code, 250);
      assert.equal(outcome.tls, false);
      assert.equal(server.connects(), 2, `${after}: the TLS session, then the plaintext one`);
      assert.equal(server.received(), 1);
    } finally {
      client.close();
      server.server.close();
    }
  }
  // A 421 over TLS is the server closing (busy), not its TLS failing: no plaintext session for it.
  const busy = await startBrokenAfterTls('busy');
  const client = clientWith({ connectTimeoutMs: 5000, greetingTimeoutMs: 5000 });
  try {
    const outcome = await client.send(targetAt(busy.port, 'mx.brokentls.test'), { from: 'a@sender.test', to: 'b@brokentls.test' }, message);
    assert.equal(outcome.kind, 'connection-failed', JSON.stringify(outcome));
    assert.equal(outcome.reply.sessionReply?.code, 421);
    assert.equal(busy.connects(), 1);
  } finally {
    client.close();
    busy.server.close();
  }
});
