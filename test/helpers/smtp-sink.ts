import { SMTPServer } from 'smtp-server';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A real SMTP server on loopback that records what it receives. Tests decide replies per stage to
 * simulate greylisting (4xx), hard bounces (5xx) and outages.
 */
export interface ReceivedMessage {
  mailFrom: string;
  /** The MAIL FROM parameters, upper-case names (`BODY: '8BITMIME'`, `SIZE`). */
  mailFromParams: Record<string, string>;
  rcptTo: string[];
  raw: Buffer;
  /** TLS was negotiated (STARTTLS) for this transaction. */
  secure: boolean;
  authUser?: string;
  heloName: string;
}

export type Reply = { code: number; message: string } | undefined;

export interface SmtpSinkOptions {
  port?: number;
  host?: string;
  /** Reply to MAIL FROM; undefined accepts. */
  onMail?: (address: string) => Reply;
  /** Reply to RCPT TO; undefined accepts. */
  onRcpt?: (address: string) => Reply;
  /** Reply after DATA; undefined accepts. */
  onData?: (message: ReceivedMessage) => Reply;
  /** Awaited before the reply to DATA: holds a session open in the middle of its transaction. */
  beforeReply?: (message: ReceivedMessage) => Promise<void>;
  /** Offer STARTTLS with this key/cert (self-signed is fine). */
  tls?: { key: string | Buffer; cert: string | Buffer };
  /** Require AUTH with these users. */
  users?: Record<string, string>;
  /** Whether to keep DATA of refused messages too (default false). */
  /** smtp-server's cap on connections at once: one more gets `421 … Too many connected clients` as its greeting. */
  maxClients?: number;
}

export interface SmtpSink {
  port: number;
  messages: ReceivedMessage[];
  /** Resolves when at least `count` messages were accepted, or rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedMessage[]>;
  connections: number;
  /** TCP connections accepted, those refused at the greeting (maxClients) included. */
  tcpConnections: number;
  /** The most TCP connections open at once, from accept to close. */
  mostOpenAtOnce: number;
  /** AUTH commands received (whatever their outcome). */
  authAttempts: number;
  stop(): Promise<void>;
}

export async function startSmtpSink(options: SmtpSinkOptions = {}): Promise<SmtpSink> {
  const messages: ReceivedMessage[] = [];
  const waiters: { count: number; resolve: (m: ReceivedMessage[]) => void }[] = [];
  let connections = 0;
  let authAttempts = 0;

  const server = new SMTPServer({
    logger: false,
    disableReverseLookup: true,
    secure: false,
    hideSTARTTLS: !options.tls,
    key: options.tls?.key,
    cert: options.tls?.cert,
    authOptional: !options.users,
    authMethods: ['PLAIN', 'LOGIN'],
    allowInsecureAuth: true,
    size: 50 * 1024 * 1024,
    maxClients: options.maxClients,
    onConnect(_session, callback) {
      connections++;
      callback();
    },
    onAuth(auth, _session, callback) {
      authAttempts++;
      const expected = options.users?.[auth.username ?? ''];
      if (expected !== undefined && expected === auth.password) return callback(null, { user: auth.username });
      return callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
    },
    onMailFrom(address, _session, callback) {
      const reply = options.onMail?.(address.address);
      if (reply) return callback(Object.assign(new Error(reply.message), { responseCode: reply.code }));
      callback();
    },
    onRcptTo(address, _session, callback) {
      const reply = options.onRcpt?.(address.address);
      if (reply) return callback(Object.assign(new Error(reply.message), { responseCode: reply.code }));
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        const message: ReceivedMessage = {
          mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          mailFromParams: (session.envelope.mailFrom && (session.envelope.mailFrom.args as Record<string, string> | false)) || {},
          rcptTo: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks),
          secure: Boolean(session.secure),
          authUser: session.user as string | undefined,
          heloName: session.hostNameAppearsAs,
        };
        void Promise.resolve(options.beforeReply?.(message)).then(() => answer(message, callback));
      });
    },
  });

  /** The reply to DATA: the test's refusal, or the message kept and accepted. */
  const answer = (message: ReceivedMessage, callback: (error?: Error | null, reply?: string) => void) => {
    const reply = options.onData?.(message);
    if (reply) return callback(Object.assign(new Error(reply.message), { responseCode: reply.code }));
    messages.push(message);
    for (const waiter of [...waiters]) {
      if (messages.length >= waiter.count) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(messages.slice());
      }
    }
    callback(null, 'Queued as sink-' + messages.length);
  };
  server.on('error', () => {});
  let tcpConnections = 0;
  let openNow = 0;
  let mostOpenAtOnce = 0;
  server.server.on('connection', (socket: Socket) => {
    tcpConnections++;
    mostOpenAtOnce = Math.max(mostOpenAtOnce, ++openNow);
    socket.once('close', () => openNow--);
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve));
  const port = (server.server.address() as AddressInfo).port;

  return {
    port,
    messages,
    get connections() {
      return connections;
    },
    get tcpConnections() {
      return tcpConnections;
    },
    get mostOpenAtOnce() {
      return mostOpenAtOnce;
    },
    get authAttempts() {
      return authAttempts;
    },
    waitFor(count, timeoutMs = 10_000) {
      if (messages.length >= count) return Promise.resolve(messages.slice());
      return new Promise((resolve, reject) => {
        const waiter = { count, resolve };
        waiters.push(waiter);
        setTimeout(() => {
          const i = waiters.indexOf(waiter);
          if (i >= 0) {
            waiters.splice(i, 1);
            reject(new Error(`smtp sink: expected ${count} messages, got ${messages.length} after ${timeoutMs} ms`));
          }
        }, timeoutMs).unref();
      });
    },
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
