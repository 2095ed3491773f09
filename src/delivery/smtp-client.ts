import { isAscii } from 'node:buffer';
import { isIP, connect as netConnect, type Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import { monotonicMs } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import { parseSmtpResponse, type SmtpCommand, type SmtpReply } from './classify.js';
import { checkDnsIdentity } from './mta-sts.js';

/**
 * SMTP client with connection reuse per destination address. One connection carries one transaction at
 * a time; after a 2xx it goes back to the idle list for the next message to the same address (MAIL FROM
 * directly, as nodemailer's own pool does), after anything else it is closed.
 */
export interface SmtpTarget {
  /** Host name shown in events and used for TLS SNI. */
  host: string;
  /** Address actually connected to (resolved and checked beforehand). */
  address: string;
  port: number;
  /** TLS from the first byte (smtps://). */
  secure: boolean;
  /** Fail instead of continuing in plain text when STARTTLS is missing or fails. */
  requireTls: boolean;
  /**
   * With requireTls: who requires it and what the operator can do, told when the server offers no
   * STARTTLS (`<host> offered no STARTTLS: <this>`). The operator read only that a TLS handshake
   * failed, or that the server did not know the command, and not why TLS was asked for.
   */
  tlsRequiredBy?: string;
  /** Verify the certificate. Opportunistic TLS to MX hosts does not (RFC 7435: encryption without authentication beats none). */
  verifyTls: boolean;
  /** With verifyTls: the host name must be a subjectAltName DNS name, not the subject CN (MTA-STS, RFC 8461 §4.2). */
  dnsIdOnly?: boolean;
  auth?: { user: string; pass: string };
  /**
   * The destination these connections count against (the recipient domain, or the relay): at most
   * `maxConnectionsPerGroup` of its connections are open at once, idle ones included, whichever of its
   * hosts they go to.
   */
  group?: string;
  /** The most connections open to the group now (its destination's learned limit, domain-limiter.ts), if lower than maxConnectionsPerGroup. */
  groupCap?: number;
}

export interface SmtpClientOptions {
  heloName: string;
  connectTimeoutMs: number;
  greetingTimeoutMs: number;
  socketTimeoutMs: number;
  idleTimeoutMs: number;
  maxMessagesPerConnection: number;
  /** `delivery.per_domain_concurrency`: open connections per target group (idle ones count). */
  maxConnectionsPerGroup?: number;
  /**
   * Idle connections kept open across all targets; past it the longest-kept one is closed (unbounded
   * when absent). Each holds a file descriptor for idle_connection_timeout.
   */
  maxIdleConnections?: number;
  /** CA certificates for verified TLS (system roots plus `delivery.extra_ca_file`); undefined = Node's defaults. */
  ca?: string[];
  log: Logger;
}

export type SendOutcome =
  /** The server answered the transaction (accepted or refused). */
  | { kind: 'reply'; reply: SmtpReply; tls: boolean }
  /** No transaction reply: connection refused, timeout, greeting refused, TLS/auth failure. Try the next host. */
  | { kind: 'connection-failed'; reply: SmtpReply }
  /** This host lacks an extension the message needs (SMTPUTF8); nothing was sent. Another host may have it. */
  | { kind: 'unsupported'; reply: SmtpReply }
  /**
   * This process could not open a connection at all (EMFILE/ENFILE: out of file descriptors): nothing
   * was sent and the destination was never reached, so its failure says nothing about the destination,
   * and every other host would fail the same way now.
   */
  | { kind: 'local-failure'; reply: SmtpReply }
  /**
   * The whole message was sent but no reply came (the connection dropped or timed out after the final
   * dot): it may have been delivered (RFC 5321 §4.5.3.2.6). Not retried on another host or connection
   * now, which would multiply the copies; the attempt is deferred.
   */
  | { kind: 'unknown'; reply: SmtpReply; tls: boolean };

export interface SmtpClient {
  send(target: SmtpTarget, envelope: { from: string; to: string }, message: Buffer): Promise<SendOutcome>;
  /**
   * Connections of `group` (undefined: those of no group, a relay's) open now past their session setup,
   * idle or busy: the ones the destination took.
   */
  takenConnections(group: string | undefined): number;
  /**
   * Resolves once no connection of `group` is in its session setup (connect, greeting, EHLO, STARTTLS,
   * AUTH), or after `timeoutMs`: then takenConnections says which of them the destination took.
   */
  setupsSettled(group: string | undefined, timeoutMs: number): Promise<void>;
  /** Whether a connection of `group` the destination had taken closed within the last `withinMs`: it may still count it. */
  closedWithin(group: string | undefined, withinMs: number): boolean;
  /**
   * Whether `target`'s host has as many connections of ours open as it was seen to take (a 421 at the
   * greeting of one more, beside those), and none idle for this target: a connection asked of it now
   * would be refused. Learned caps are kept `hostCapMemoryMs`, then the host is asked again.
   */
  hostAtCapacity(target: SmtpTarget): boolean;
  /** Closes every idle connection. */
  close(): void;
  readonly openConnections: number;
  /** Targets (address, port, host, TLS and auth settings) that have an idle connection now. */
  readonly idleTargets: number;
}

interface PooledConnection {
  connection: SMTPConnection;
  messages: number;
  idleTimer?: NodeJS.Timeout;
  closed: boolean;
  group?: string;
  /** Its host's address and port (hostKeyOf). */
  host: string;
  /** Its session setup (greeting, EHLO, STARTTLS, AUTH) succeeded: counted in takenByGroup until closed. */
  established?: boolean;
}

export function createSmtpClient(options: SmtpClientOptions): SmtpClient {
  const idle = new Map<string, PooledConnection[]>();
  /** Connections in the idle lists, all targets together (maxIdleConnections). */
  let idleCount = 0;
  let open = 0;
  const openByGroup = new Map<string, number>();
  const countOpen = (group: string | undefined, host: string, delta: 1 | -1) => {
    open += delta;
    countIn(openByHost, host, delta);
    if (group !== undefined) countIn(openByGroup, group, delta);
  };
  /**
   * Connections open (in their setup or past it) and established, by host (hostKeyOf): one MX host may
   * take fewer connections than its domain's others (hostAtCapacity).
   */
  const openByHost = new Map<string, number>();
  const takenByHost = new Map<string, number>();
  /** Connections closing by host (discardAndWaitForClose): the host counts them until they are gone. */
  const closingByHost = new Map<string, number>();
  /**
   * New connections by host waiting for room in their group (makeRoom) before they are opened: counted
   * by hostAtCapacity, or every message of a burst found room at a capped host while the first waited.
   */
  const waitingByHost = new Map<string, number>();
  /** The connections each host was seen to take at most, and when (learnHostCap); past `maxLearnedHostCaps`, expired ones go. */
  const hostCaps = new Map<string, { cap: number; learnedAtMs: number }>();
  const learnedCapOf = (host: string) => {
    const learned = hostCaps.get(host);
    if (learned && monotonicMs() - learned.learnedAtMs >= hostCapMemoryMs) hostCaps.delete(host);
    return hostCaps.get(host)?.cap;
  };
  /**
   * A host that refused a connection with 421 / 4.7.x at its greeting or EHLO while it had others of
   * ours past theirs takes no more than those (a cap on connections: Postfix's anvil per client,
   * smtp-server's maxClients for all). With several MX hosts, asking the preferred one first for each
   * new connection cost a refused connection per message, and closed an idle connection to the next host
   * to make room for it: 125 connections for 125 messages there, beside 125 refused. Refused with none
   * taken says nothing of a cap (a throttle, or the others not greeted yet); nor does a refusal of
   * STARTTLS or AUTH. Learned low (another connection was still in its setup), it grows as that one is
   * taken (markEstablished).
   */
  const learnHostCap = (target: SmtpTarget, error: unknown) => {
    const session = errorReply(error).sessionReply;
    if (!session || (session.code !== 421 && !session.enhanced?.startsWith('4.7.'))) return;
    if (!['CONN', 'EHLO', 'HELO'].includes((error as { command?: string } | undefined)?.command ?? '')) return;
    const host = hostKeyOf(target);
    // One of ours closed after its share of messages may still count there: its close and this connection crossed.
    const taken = (takenByHost.get(host) ?? 0) + (closingByHost.get(host) ?? 0);
    if (taken === 0) return;
    const now = monotonicMs();
    if (hostCaps.size >= maxLearnedHostCaps) {
      for (const [key, learned] of hostCaps) if (now - learned.learnedAtMs >= hostCapMemoryMs) hostCaps.delete(key);
    }
    // Still full of live entries (thousands of capped hosts within minutes): the oldest goes.
    if (hostCaps.size >= maxLearnedHostCaps) hostCaps.delete(hostCaps.keys().next().value!);
    hostCaps.delete(host);
    hostCaps.set(host, { cap: taken, learnedAtMs: now });
    options.log.info('mail host refused a connection beside ones it took: it gets no more than those for a while', { host: target.host, address: target.address, connections: taken });
  };
  /** Established connections by group ('' for those of none): takenConnections. */
  const takenByGroup = new Map<string, number>();
  const countTaken = (pooled: PooledConnection, delta: 1 | -1) => {
    countIn(takenByHost, pooled.host, delta);
    countIn(takenByGroup, pooled.group ?? '', delta);
  };
  const markEstablished = (pooled: PooledConnection) => {
    if (pooled.closed || pooled.established) return;
    pooled.established = true;
    countTaken(pooled, 1);
    const learned = hostCaps.get(pooled.host);
    const taken = takenByHost.get(pooled.host)!;
    if (learned && taken > learned.cap) learned.cap = taken;
  };
  /** When an established connection of each group ('' for none) last closed (closedWithin); pruned past 100 groups. */
  const lastClosedAt = new Map<string, number>();
  const markClosed = (pooled: PooledConnection) => {
    if (pooled.closed) return false;
    pooled.closed = true;
    countOpen(pooled.group, pooled.host, -1);
    if (pooled.established) {
      countTaken(pooled, -1);
      noteClosed(pooled.group ?? '');
    }
    return true;
  };
  const noteClosed = (group: string) => {
    const now = monotonicMs();
    lastClosedAt.delete(group);
    lastClosedAt.set(group, now);
    // Oldest first (re-inserted on each close): what a refusal a second later would not ask about goes.
    for (const [oldest, at] of lastClosedAt) {
      if (lastClosedAt.size <= 100 || now - at < 60_000) break;
      lastClosedAt.delete(oldest);
    }
  };
  /** Connections in their session setup by group ('' for none), and who waits for them to settle. */
  const settingUp = new Map<string, { count: number; waiters: (() => void)[] }>();
  const beginSetup = (group: string | undefined) => {
    const key = group ?? '';
    const entry = settingUp.get(key) ?? { count: 0, waiters: [] };
    entry.count++;
    settingUp.set(key, entry);
  };
  const endSetup = (group: string | undefined) => {
    const key = group ?? '';
    const entry = settingUp.get(key);
    if (!entry || --entry.count > 0) return;
    settingUp.delete(key);
    for (const wake of entry.waiters) wake();
  };
  /** Closes under way (discardAndWaitForClose) by group: a receiver still counts them (makeRoom). */
  const closingByGroup = new Map<string, Set<Promise<void>>>();

  // A connection opened opportunistically must never serve a target that requires verified TLS (MTA-STS).
  const keyOf = (t: SmtpTarget) => `${t.address}|${t.port}|${t.host}|${t.secure}|${t.requireTls}|${t.verifyTls}|${t.dnsIdOnly === true}|${t.auth?.user ?? ''}`;

  /** A connection that stopped answering: closed at once (QUIT would wait for the reply it does not send). */
  const destroy = (pooled: PooledConnection) => {
    if (!markClosed(pooled)) return;
    if (pooled.idleTimer) clearTimeout(pooled.idleTimer);
    pooled.connection.close();
  };

  const discard = (pooled: PooledConnection) => {
    if (!markClosed(pooled)) return;
    if (pooled.idleTimer) clearTimeout(pooled.idleTimer);
    try {
      pooled.connection.quit();
    } catch {
      pooled.connection.close();
    }
  };

  /**
   * QUIT, resolved once the connection is closed (at most `closeWaitMs`): a receiver counts it against
   * its cap on our connections until then (smtp-server's maxClients, Postfix's anvil), and a connection
   * opened in its place at once was refused with 421, or took the destination past
   * per_domain_concurrency (7 open with a cap of 5).
   */
  const discardAndWaitForClose = (pooled: PooledConnection): Promise<void> => {
    const socket = socketOf(pooled.connection);
    discard(pooled);
    if (!socket || socket.destroyed) return Promise.resolve();
    countIn(closingByHost, pooled.host, 1);
    const closed = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, closeWaitMs);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
    }).then(() => countIn(closingByHost, pooled.host, -1));
    if (pooled.group === undefined) return closed;
    const group = pooled.group;
    let closing = closingByGroup.get(group);
    if (!closing) closingByGroup.set(group, (closing = new Set()));
    closing.add(closed);
    return closed.then(() => {
      closing.delete(closed);
      if (closing.size === 0 && closingByGroup.get(group) === closing) closingByGroup.delete(group);
    });
  };

  /**
   * Takes one connection out of an idle list. An emptied list goes too: one was kept for every mail
   * server ever reached (~0.5 kB each, and makeRoom walked them all).
   */
  const removeIdle = (key: string, list: PooledConnection[], index: number): PooledConnection => {
    const [pooled] = list.splice(index, 1);
    idleCount--;
    if (list.length === 0 && idle.get(key) === list) idle.delete(key);
    return pooled;
  };

  /**
   * A burst to thousands of destinations (a newsletter to many small domains) left one idle connection
   * per mail server for idle_connection_timeout: thousands of descriptors, past a 1,024 open-file limit,
   * and every new connection, the SMTP listeners' and the API's too, failed with EMFILE (deliveries
   * deferred for minutes). The first list in the map is the oldest one still kept, its first entry the
   * longest idle there: the least likely to be reused in time.
   */
  const closeOldestIdleOverCap = () => {
    const max = options.maxIdleConnections;
    if (max === undefined) return;
    while (idleCount > max) {
      const [key, list] = idle.entries().next().value!;
      discard(removeIdle(key, list, 0));
    }
  };

  const takeIdle = (key: string): PooledConnection | undefined => {
    const list = idle.get(key);
    while (list && list.length > 0) {
      const pooled = removeIdle(key, list, list.length - 1);
      if (pooled.idleTimer) clearTimeout(pooled.idleTimer);
      if (!pooled.closed && !pooled.connection.destroyed) return pooled;
    }
    return undefined;
  };

  /**
   * Before a new connection of a group at its cap: close one of its idle connections, to whichever of
   * its hosts. Idle connections stay open for idle_connection_timeout, and with several equal MX hosts
   * each host kept its own, so a domain had more connections open than per_domain_concurrency.
   */
  const makeRoom = async (group: string | undefined, groupCap: number | undefined) => {
    const max = Math.min(options.maxConnectionsPerGroup ?? Infinity, groupCap ?? Infinity);
    if (group === undefined || max === Infinity) return;
    // Connections still closing count until they are gone (two sessions making room at once each found
    // the other's closed connection uncounted, and the destination was left one over its cap).
    for (;;) {
      const closing = closingByGroup.get(group);
      if ((openByGroup.get(group) ?? 0) + (closing?.size ?? 0) < max) return;
      const idleOne = takeIdleOfGroup(group);
      if (idleOne) await discardAndWaitForClose(idleOne);
      else if (closing && closing.size > 0) await Promise.race(closing);
      // At the cap with every connection busy: not expected (the destination's slots keep sessions under it).
      else return;
    }
  };

  /** One idle connection of the group, to whichever of its hosts, out of its idle list. */
  const takeIdleOfGroup = (group: string): PooledConnection | undefined => {
    for (const [key, list] of idle) {
      const i = list.findIndex((pooled) => pooled.group === group && !pooled.closed);
      if (i >= 0) return removeIdle(key, list, i);
    }
    return undefined;
  };

  /**
   * Back to the idle list; a connection that served its share of messages is closed instead, and counts
   * against its group's cap until it is gone (makeRoom waits for it when the group is at its cap). The
   * message's outcome does not wait for the close: holding it cost 10 % of the delivery bench's rate.
   */
  const release = (key: string, pooled: PooledConnection): void => {
    if (pooled.closed) return discard(pooled);
    if (pooled.messages >= options.maxMessagesPerConnection) return void discardAndWaitForClose(pooled);
    let list = idle.get(key);
    if (!list) idle.set(key, (list = []));
    list.push(pooled);
    idleCount++;
    pooled.idleTimer = setTimeout(() => {
      const i = list!.indexOf(pooled);
      if (i >= 0) removeIdle(key, list!, i);
      discard(pooled);
    }, options.idleTimeoutMs);
    pooled.idleTimer.unref();
    closeOldestIdleOverCap();
  };

  /**
   * After a refused message: RSET, then idle again, before the outcome is told (so the next message to
   * the destination finds it); a connection that cannot reset, or does not within resetTimeoutMs, is closed.
   */
  const resetForReuse = (key: string, pooled: PooledConnection) =>
    new Promise<void>((resolve) => {
      if (pooled.closed || pooled.connection.destroyed) {
        discard(pooled);
        return resolve();
      }
      let done = false;
      // A session that ends under the RSET never calls back. Removed again: a connection is reset up to
      // maxMessagesPerConnection times, and listeners left behind would pile up on it.
      const ended = () => finish(false);
      const finish = (reusable: boolean) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        pooled.connection.removeListener('end', ended);
        pooled.connection.removeListener('error', ended);
        if (reusable) release(key, pooled);
        else destroy(pooled);
        resolve();
      };
      const timer = setTimeout(ended, resetTimeoutMs);
      pooled.connection.once('end', ended);
      pooled.connection.once('error', ended);
      pooled.connection.reset((error) => finish(!error));
    });

  /**
   * `withoutTls`: no STARTTLS even when offered (the plaintext retry after a failed handshake).
   * The TCP connection is opened here, within connect_timeout, and handed to nodemailer, whose
   * connectionTimeout would otherwise also bound the greeting and the TLS handshake: the 5 minutes RFC
   * 5321 §4.5.3.2.1 gives the greeting were cut to the 30 s of the connect.
   */
  const connect = async (target: SmtpTarget, withoutTls = false): Promise<PooledConnection> => {
    // Counted from the start, so a group's connections being opened count against its cap (makeRoom).
    countOpen(target.group, hostKeyOf(target), 1);
    beginSetup(target.group);
    try {
      let socket: Socket;
      try {
        socket = await openSocket(target.address, target.port, options.connectTimeoutMs);
      } catch (error) {
        countOpen(target.group, hostKeyOf(target), -1);
        throw error;
      }
      return await startSession(socket, target, withoutTls);
    } finally {
      endSetup(target.group);
    }
  };

  /** The SMTP session on a connected socket, already counted as open; resolves once it may send. */
  const startSession = (socket: Socket, target: SmtpTarget, withoutTls: boolean) =>
    new Promise<PooledConnection>((resolve, reject) => {
      const connection = new SMTPConnection({
        connection: socket,
        host: target.address,
        port: target.port,
        secure: target.secure,
        servername: tlsServerName(target.host),
        name: options.heloName,
        requireTLS: target.requireTls,
        opportunisticTLS: !target.requireTls,
        ignoreTLS: withoutTls,
        // From here on it bounds the greeting and the TLS handshakes (the socket is connected already).
        connectionTimeout: options.greetingTimeoutMs,
        greetingTimeout: options.greetingTimeoutMs,
        socketTimeout: options.socketTimeoutMs,
        allowInternalNetworkInterfaces: true,
        tls: {
          rejectUnauthorized: target.verifyTls,
          servername: tlsServerName(target.host),
          ...(target.verifyTls && options.ca ? { ca: options.ca } : {}),
          ...(target.verifyTls && target.dnsIdOnly ? { checkServerIdentity: checkDnsIdentity } : {}),
        },
        logger: false,
      });
      const pooled: PooledConnection = { connection, messages: 0, closed: false, group: target.group, host: hostKeyOf(target) };
      const plaintextEhlo = recordPlaintextEhlo(connection);
      const setupError = (error: Error) => noStarttlsOffered(target, plaintextEhlo(), markedIfDuringStarttls(connection, error));
      let settled = false;
      // nodemailer bounds the greeting and the TLS handshake, not the EHLO or AUTH replies: a server that
      // trickles a multi-line reply held the session, its delivery slot and its lease, for weeks.
      const setupDeadline = setTimeout(() => {
        if (settled) return;
        settled = true;
        const error = Object.assign(new Error(`Session setup (greeting, EHLO, STARTTLS) not complete after ${options.greetingTimeoutMs} ms`), { code: 'ETIMEDOUT' });
        reject(setupError(error));
        destroy(pooled);
      }, options.greetingTimeoutMs);
      const settle = () => {
        settled = true;
        clearTimeout(setupDeadline);
      };
      connection.on('error', (error) => {
        markClosed(pooled);
        if (!settled) {
          settle();
          reject(setupError(error));
        }
      });
      connection.on('end', () => markClosed(pooled));
      connection.connect((error) => {
        if (settled) return;
        if (error) {
          settle();
          discard(pooled);
          reject(setupError(error));
          return;
        }
        if (!target.auth) {
          settle();
          markEstablished(pooled);
          return resolve(pooled);
        }
        connection.login({ user: target.auth.user, pass: target.auth.pass }, (loginError) => {
          if (settled) return;
          settle();
          if (loginError) {
            discard(pooled);
            return reject(loginError);
          }
          markEstablished(pooled);
          resolve(pooled);
        });
      });
    });

  /**
   * One transaction in two phases, each within socket_timeout in all: MAIL FROM to the 354 that lets the
   * message go, then the message and the reply after it. nodemailer's socket timeout only notices
   * silence, and a server that trickles its replies a line at a time would hold the session for as long
   * as it likes. Not one budget for both: RFC 5321 §4.5.3.2.6 gives the reply after the message its own
   * 10 minutes, and cut short by a slow envelope, a message the server was about to accept was deferred
   * as unanswered and sent again at the retry.
   */
  const transact = (pooled: PooledConnection, envelope: { from: string; to: string }, body: BodyHandOver, message: Buffer) =>
    new Promise<{ response: string }>((resolve, reject) => {
      const deadline = setTimeout(() => {
        destroy(pooled);
        reject(Object.assign(new Error(`No complete reply within ${options.socketTimeoutMs} ms`), { code: 'ETIMEDOUT', transactionTimeout: true }));
      }, options.socketTimeoutMs);
      // The message and the reply after it start a budget of their own; the reply once more when the
      // final dot has gone: a server reading a large message slowly took the reply's 10 minutes (RFC
      // 5321 §4.5.3.2.6), and the message it then accepted was deferred as unanswered and sent again.
      body.onHandOver(() => deadline.refresh());
      body.onSent(() => deadline.refresh());
      pooled.connection.send({ from: envelope.from, to: [envelope.to], size: message.length, use8BitMime: hasEightBitBytes(message) }, body.source, (error, info) => {
        clearTimeout(deadline);
        if (error) reject(error);
        else resolve({ response: info!.response });
      });
    });

  return {
    get openConnections() {
      return open;
    },
    get idleTargets() {
      return idle.size;
    },
    hostAtCapacity(target) {
      if (hostCaps.size === 0) return false;
      const host = hostKeyOf(target);
      const cap = learnedCapOf(host);
      if (cap === undefined || (idle.get(keyOf(target))?.length ?? 0) > 0) return false;
      return (openByHost.get(host) ?? 0) + (closingByHost.get(host) ?? 0) + (waitingByHost.get(host) ?? 0) >= cap;
    },
    takenConnections(group) {
      return takenByGroup.get(group ?? '') ?? 0;
    },
    closedWithin(group, withinMs) {
      const at = lastClosedAt.get(group ?? '');
      return at !== undefined && monotonicMs() - at < withinMs;
    },
    setupsSettled(group, timeoutMs) {
      const entry = settingUp.get(group ?? '');
      if (!entry) return Promise.resolve();
      return new Promise((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          resolve();
        };
        // Gone from the list when it times out: a group always setting up connections would keep every waiter.
        const timer = setTimeout(() => {
          entry.waiters.splice(entry.waiters.indexOf(wake), 1);
          resolve();
        }, timeoutMs);
        entry.waiters.push(wake);
      });
    },
    async send(target, envelope, message) {
      const key = keyOf(target);
      let pooled = takeIdle(key);
      const reused = Boolean(pooled);
      if (!pooled) {
        const host = hostKeyOf(target);
        countIn(waitingByHost, host, 1);
        try {
          await makeRoom(target.group, target.groupCap);
        } finally {
          // connect counts it as open from its first (synchronous) step.
          countIn(waitingByHost, host, -1);
        }
        try {
          pooled = await connect(target);
        } catch (error) {
          if (isOutOfFileDescriptors(error)) return { kind: 'local-failure', reply: errorReply(error) };
          if (!mayRetryWithoutTls(target, error)) {
            learnHostCap(target, error);
            return { kind: 'connection-failed', reply: errorReply(error) };
          }
          // Opportunistic TLS (RFC 7435, Postfix's "may"): a server whose TLS does not interoperate (a
          // failed handshake, a hang-up during it) still gets its mail, in plaintext as if it offered none.
          options.log.info('STARTTLS handshake failed; retrying without TLS', { host: target.host, address: target.address, reason: (error as Error).message });
          try {
            pooled = await connect(target, true);
          } catch (retryError) {
            if (isOutOfFileDescriptors(retryError)) return { kind: 'local-failure', reply: errorReply(retryError) };
            learnHostCap(target, retryError);
            return { kind: 'connection-failed', reply: errorReply(retryError) };
          }
        }
      }
      const tls = Boolean((pooled.connection as unknown as { secure?: boolean }).secure);
      if (needsSmtpUtf8(envelope, message) && !supportsExtension(pooled.connection, 'SMTPUTF8')) {
        // RFC 6531 §3.2: without the extension the message must not be sent (it would be mangled or
        // misrouted); nothing was transmitted, so the connection stays usable for other mail.
        release(key, pooled);
        return { kind: 'unsupported', reply: { code: 553, enhanced: '5.6.7', message: `${target.host} does not support SMTPUTF8, required for a non-ASCII address` } };
      }
      const body = handOverBody(message, socketOf(pooled.connection));
      try {
        const { response } = await transact(pooled, envelope, body, message);
        pooled.messages++;
        release(key, pooled);
        return { kind: 'reply', reply: parseSmtpResponse(response, 250), tls };
      } catch (error) {
        const tooLarge = sizeRefusal(error, target, message.length);
        if (tooLarge) {
          // Refused by nodemailer before MAIL FROM: nothing was sent, the connection stays usable.
          release(key, pooled);
          return { kind: 'reply', reply: tooLarge, tls };
        }
        if (refusedMessage(error)) {
          // The server's answer to this message (greylisting, an unknown user, spam): the session is fine.
          // RSET and keep it, as nodemailer's own pool does, instead of a new connection (and TLS
          // handshake) for every refused message.
          pooled.messages++;
          await resetForReuse(key, pooled);
          return { kind: 'reply', reply: errorReply(error), tls };
        }
        discard(pooled);
        const closing = closingReply(error);
        if (closing) {
          // A reused connection the server was closing as we spoke (an idle timeout, 4.4.2) gets a new
          // one; a 421 otherwise is this destination's answer: back off and retry later, not on another MX.
          if (reused && !body.handedOver() && !closing.enhanced?.startsWith('4.7.')) return this.send(target, envelope, message);
          return { kind: 'reply', reply: closing, tls };
        }
        const reply = errorReply(error);
        if (reply.code === 0 && body.handedOver()) {
          return { kind: 'unknown', reply: { ...reply, message: `no reply after the message was sent, so it may have been delivered (${reply.message})` }, tls };
        }
        // A reused connection the server dropped while idle is not the destination's answer: reconnect
        // once. One that stopped answering mid-transaction is: no second wait as long on this host.
        if (reused && reply.code === 0 && !(error as { transactionTimeout?: boolean }).transactionTimeout) return this.send(target, envelope, message);
        if (reply.code === 0) return { kind: 'connection-failed', reply };
        return { kind: 'reply', reply, tls };
      }
    },
    close() {
      for (const list of idle.values()) for (const pooled of list.splice(0)) discard(pooled);
      idle.clear();
      idleCount = 0;
    },
  };
}

/**
 * The socket could not be created: this process (EMFILE) or the whole system (ENFILE) is at its
 * open-file limit, under a burst of connections. net reports the errno as the error's code; nodemailer
 * keeps it as originalCode when it wraps one.
 */
function isOutOfFileDescriptors(error: unknown): boolean {
  const { code, originalCode } = (error ?? {}) as { code?: unknown; originalCode?: unknown };
  return [code, originalCode].some((c) => c === 'EMFILE' || c === 'ENFILE');
}

/**
 * A TLS failure of an opportunistic session: never when TLS is required (MTA-STS enforce, a relay with
 * starttls=required) or implicit (smtps), nor with credentials to send, which must not go in plaintext.
 */
function mayRetryWithoutTls(target: SmtpTarget, error: unknown): boolean {
  // A target whose certificate is to be verified (a relay, unless ?tls_verify=false) that fails it went
  // on in plaintext, less private than not verifying at all: it waits instead, and the operator is told.
  if (target.secure || target.requireTls || target.auth || target.verifyTls) return false;
  // nodemailer's own upgrade errors are ETLS; an OpenSSL handshake error reaches it as a socket error
  // (ESOCKET) with the ERR_SSL_… code kept; a hang-up or a stall during the handshake is only told by
  // when it came (markedIfDuringStarttls). Before STARTTLS a plain session has no TLS to fail.
  const { code, originalCode, duringStarttls } = (error ?? {}) as { code?: string; originalCode?: string; duringStarttls?: boolean };
  return code === 'ETLS' || duringStarttls === true || (originalCode?.startsWith('ERR_SSL_') ?? false);
}

/**
 * Marks an error that ended the session setup while nodemailer was upgrading it with STARTTLS (a reset,
 * a hang-up, a handshake that timed out), or after the upgrade before the EHLO over TLS was answered
 * (a hang-up, EHLO and HELO refused): an ESOCKET or ETIMEDOUT like any other, but the server's TLS is
 * what failed, and opportunistic TLS retries in plaintext. A server that dropped every session right
 * after the handshake kept its mail deferred until the give-up, though it took it in plaintext (Postfix
 * and KumoMTA count a failed EHLO after STARTTLS as a TLS failure too). Only called before the session
 * is ready; `secure` then means upgraded here, since implicit TLS (smtps) never retries in plaintext.
 */
function markedIfDuringStarttls(connection: SMTPConnection, error: Error): Error {
  const state = connection as unknown as { upgrading?: boolean; secure?: boolean };
  // A 421 over TLS is the server closing for its own reasons (busy), not its TLS failing: no plaintext.
  if (state.upgrading || (state.secure && !closingResponse(error))) Object.assign(error, { duringStarttls: true });
  return error;
}

/**
 * The server's EHLO reply before any STARTTLS. With requireTLS nodemailer sends STARTTLS whether or not
 * it was offered, and forgets the reply once the upgrade starts: after the error, only this tells a
 * server that offers no STARTTLS from one whose TLS failed.
 */
function recordPlaintextEhlo(connection: SMTPConnection): () => string | undefined {
  const internals = connection as unknown as { _actionEHLO: (reply: string) => void; secure?: boolean };
  const handleEhlo = internals._actionEHLO;
  let reply: string | undefined;
  internals._actionEHLO = function (this: unknown, text: string) {
    if (!internals.secure && reply === undefined) reply = text;
    return handleEhlo.call(this, text);
  };
  return () => reply;
}

/**
 * A session that requires TLS, set up with a server whose EHLO offered no STARTTLS: the error says so
 * first, then who requires TLS (target.tlsRequiredBy), then what came of asking anyway (a refused
 * command, a failed handshake), with the server's reply kept for errorReply.
 */
function noStarttlsOffered(target: SmtpTarget, ehlo: string | undefined, error: Error): Error {
  if (!target.requireTls || target.secure || ehlo === undefined || !ehlo.startsWith('2') || /[ -]STARTTLS\b/im.test(ehlo)) return error;
  const { code, originalCode, response } = error as { code?: string; originalCode?: string; response?: unknown };
  const requiredBy = target.tlsRequiredBy ?? 'this session requires it';
  // nodemailer's ETLS message names the step and the reply; a socket error only its code names.
  const askedAnyway = code === 'ETLS' ? error.message.trim() : `${originalCode ?? code ?? 'ERROR'}: ${error.message.trim()}`;
  const explained = new Error(`${target.host} offered no STARTTLS: ${requiredBy} (asked anyway: ${askedAnyway})`);
  return Object.assign(explained, { code: 'ETLS', starttlsNotOffered: true, ...(typeof response === 'string' ? { response } : {}) });
}

function closingResponse(error: Error): boolean {
  const response = (error as { response?: unknown }).response;
  return typeof response === 'string' && /^421(?:[ -]|\r?\n|$)/.test(response.trim());
}

/**
 * The message as the stream nodemailer's send() wants: after the server's 354 it pipes it into its
 * dot-stuffing stream, whose output goes to the socket. pipe() writes the whole message and ends the
 * data at once, with the socket corked meanwhile: the message and the final dot leave in one write,
 * where a stream sent the dot as a segment of its own (one more syscall here and one more wake-up of
 * the receiver per message). A message over the stream's 16 kB buffer still waits for the socket to
 * drain, and its dot goes after it. Once pipe() has run the message is on its way, so a failure from
 * then on leaves the outcome unknown.
 */
interface BodyHandOver {
  source: Readable;
  handedOver: () => boolean;
  /** Called when the message starts on its way (after the server's 354). */
  onHandOver: (listener: () => void) => void;
  /** Called when the whole message and its final dot have gone to the socket. */
  onSent: (listener: () => void) => void;
}

function handOverBody(message: Buffer, socket: Socket | undefined): BodyHandOver {
  let handedOver = false;
  let listener: (() => void) | undefined;
  let sentListener: (() => void) | undefined;
  const source = {
    pipe(stream: Writable) {
      handedOver = true;
      listener?.();
      // nodemailer's dot-stuffing stream ends once its last bytes, the final dot, went into the socket.
      stream.once('end', () => sentListener?.());
      socket?.cork();
      try {
        stream.write(message);
        stream.end();
      } finally {
        if (socket) process.nextTick(() => socket.uncork());
      }
      return stream;
    },
  };
  return { source: source as unknown as Readable, handedOver: () => handedOver, onHandOver: (fn) => (listener = fn), onSent: (fn) => (sentListener = fn) };
}

/**
 * The name sent as SNI and checked against the certificate: none for a relay given as an IP address (RFC
 * 6066 forbids one; Node printed a DEP0123 warning outside the log), whose certificate is then checked
 * against the address itself.
 */
function tlsServerName(host: string): string | undefined {
  return isIP(host.replace(/^\[|\]$/g, '')) ? undefined : host;
}

/** A TCP connection to `address:port`, or an ETIMEDOUT error after `timeoutMs`. */
function openSocket(address: string, port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host: address, port });
    const fail = (error: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    };
    const timer = setTimeout(() => fail(Object.assign(new Error(`Connection timeout after ${timeoutMs} ms`), { code: 'ETIMEDOUT' })), timeoutMs);
    socket.once('error', fail);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeListener('error', fail);
      resolve(socket);
    });
  });
}

/** nodemailer's socket (it corks it itself for the pipelined envelope); undefined if that ever changes. */
function socketOf(connection: SMTPConnection): Socket | undefined {
  const socket = (connection as unknown as { _socket?: Socket })._socket;
  return socket && typeof socket.cork === 'function' ? socket : undefined;
}

/**
 * nodemailer refuses, before MAIL FROM, a message larger than the server's advertised SIZE (RFC 1870).
 * That is the server's permanent limit for this message: a bounce of the message (5.3.4), not a
 * connection failure retried for days and then held against the recipient.
 */
function sizeRefusal(error: unknown, target: SmtpTarget, size: number): SmtpReply | undefined {
  const e = error as { code?: string; response?: unknown; message?: string };
  const limit = e?.code === 'EMESSAGE' && !e.response ? /size larger than allowed (\d+)/i.exec(e.message ?? '')?.[1] : undefined;
  if (!limit) return undefined;
  return { code: 552, enhanced: '5.3.4', message: `message of ${size} bytes is larger than ${target.host} accepts (SIZE ${limit})`, command: 'DATA' };
}

/** How long a host's learned connection cap is kept (hostAtCapacity): then it is asked for one more again, at the cost of one refused connection. */
const hostCapMemoryMs = 5 * 60_000;
/** Learned host caps kept at most (~0.1 kB each). */
const maxLearnedHostCaps = 1_000;

/** The mail host a connection goes to, whatever name it was reached by. */
const hostKeyOf = (target: SmtpTarget) => `${target.address}|${target.port}`;

/** Counts one key up or down, deleting it at zero (a map per destination or host would otherwise keep every one ever reached). */
function countIn(counts: Map<string, number>, key: string, delta: 1 | -1): void {
  const count = (counts.get(key) ?? 0) + delta;
  if (count > 0) counts.set(key, count);
  else counts.delete(key);
}

/** Longest wait for the reply to RSET after a refused message; past it the connection is closed. */
const resetTimeoutMs = 5_000;
/** Longest wait for a server to close a connection after QUIT before its replacement is opened anyway. */
const closeWaitMs = 1_000;

/**
 * A refusal of one message, in a reply to MAIL FROM, RCPT TO or after the message: the session goes on
 * (RFC 5321 §4.1.1.5, RSET). Not a 421, with which the server ends it.
 */
function refusedMessage(error: unknown): boolean {
  const e = error as { code?: string; responseCode?: number; response?: unknown };
  if (e?.code !== 'EENVELOPE' && e?.code !== 'EMESSAGE') return false;
  if (typeof e.responseCode !== 'number' || e.responseCode < 400 || e.responseCode > 599 || e.responseCode === 421) return false;
  return typeof e.response === 'string' && /^[45]\d\d/.test(e.response.trim());
}

/**
 * A 421 answering a command of the transaction. nodemailer reports it as the connection closing
 * (ECONNECTION, command CONN) when the commands were pipelined, with the reply kept, or as an envelope
 * error naming MAIL FROM; answering a later command it names that command, and errorReply handles it.
 */
function closingReply(error: unknown): SmtpReply | undefined {
  const e = error as { code?: string; command?: string; response?: unknown };
  // A bare `421` counts too (RFC 5321 §4.2: the reply text is optional).
  if (typeof e?.response !== 'string' || !/^421(?:[ -]|\r?\n|$)/.test(e.response.trim())) return undefined;
  // The server closing the session before this transaction began (an idle timeout, a cap on messages
  // per connection) answers MAIL FROM with it; nodemailer reports that as an envelope error.
  const closing = (e.code === 'ECONNECTION' && e.command === 'CONN') || (e.code === 'EENVELOPE' && e.command === 'MAIL FROM');
  return closing ? parseSmtpResponse(e.response) : undefined;
}

const transactionCommands: readonly string[] = ['MAIL FROM', 'RCPT TO', 'DATA'] satisfies SmtpCommand[];

/** Turns a nodemailer error into a reply: the server's own words when there were some. */
function errorReply(error: unknown): SmtpReply {
  const e = error as { response?: string; responseCode?: number; code?: string; originalCode?: string; message?: string; command?: string; starttlsNotOffered?: boolean };
  if (e?.starttlsNotOffered) {
    // Already the whole story (noStarttlsOffered); the server's reply, when there was one, stays known.
    const session = typeof e.response === 'string' && /^\d{3}/.test(e.response.trim()) ? parseSmtpResponse(e.response) : undefined;
    return { code: 0, message: e.message!, ...(session ? { sessionReply: { code: session.code, enhanced: session.enhanced } } : {}) };
  }
  if (typeof e?.response === 'string' && /^\d{3}/.test(e.response.trim())) {
    const reply = parseSmtpResponse(e.response);
    // Greeting/EHLO/STARTTLS/AUTH refusals happen before the transaction: treat as a connection failure of this host.
    if (e.code === 'ECONNECTION' || e.code === 'EAUTH' || e.code === 'ETLS' || e.code === 'EPROTOCOL') {
      // nodemailer's message names the step (e.g. "Error upgrading connection with STARTTLS: 500 …"):
      // the reply alone would not say that TLS was required and refused.
      const message = e.message?.includes(e.response.trim()) ? e.message : `${reply.code} ${reply.message}`;
      return { code: 0, message, sessionReply: { code: reply.code, enhanced: reply.enhanced } };
    }
    // Which command was refused tells whose problem it is: the sender's (MAIL FROM), the recipient's, the content's.
    return e.command && transactionCommands.includes(e.command) ? { ...reply, command: e.command as SmtpCommand } : reply;
  }
  return { code: 0, message: `${e?.originalCode ?? e?.code ?? 'ERROR'}: ${e?.message ?? String(error)}` };
}

/** RFC 6531: non-ASCII in the envelope or in the header section (RFC 6532 raw UTF-8 addresses) needs SMTPUTF8. */
export function needsSmtpUtf8(envelope: { from: string; to: string }, message: Buffer): boolean {
  if (/[^\x00-\x7f]/.test(envelope.from) || /[^\x00-\x7f]/.test(envelope.to)) return true;
  let end = message.indexOf('\r\n\r\n');
  if (end < 0) end = message.length;
  for (let i = 0; i < end; i++) if (message[i] >= 0x80) return true;
  return false;
}

/**
 * RFC 6152 §3: 8-bit data goes with BODY=8BITMIME (nodemailer adds it when the server offers 8BITMIME).
 * Composed text is quoted-printable or base64, so only a forwarded email (message/rfc822, whose body RFC
 * 2046 §5.2.1 lets no encoding change) or raw UTF-8 headers make a message 8-bit. A server that does not
 * offer the extension still gets it as it is, as Exim sends it: next to every MX takes 8-bit data.
 */
function hasEightBitBytes(message: Buffer): boolean {
  return !isAscii(message);
}

function supportsExtension(connection: SMTPConnection, name: string): boolean {
  const extensions = (connection as unknown as { _supportedExtensions?: string[] })._supportedExtensions ?? [];
  return extensions.includes(name);
}
