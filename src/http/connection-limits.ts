import { readFileSync } from 'node:fs';
import type net from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AppError } from '../lib/errors.js';
import { errorBody } from './errors.js';
import { hostNetworkOf, isLoopbackAddress } from '../lib/private-address.js';
import { monotonicMs } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { TrustedProxies } from './trusted-proxies.js';

/**
 * Connections one client host (an IPv4 address, an IPv6 /64) may hold to the API at once. A client that
 * trickled header bytes into ~20,000 connections took every file descriptor of the process, and with
 * them both SMTP listeners and outbound delivery. An app sending in parallel opens one per request in
 * flight (Node's agents have no cap per origin), and keeps them open idle: 1,024 leaves room for a busy
 * one (300 at once lost 44 to a cap of 256; the send benchmark uses 50).
 */
export const maxHttpConnectionsPerHost = 1024;

/**
 * Refused connections of one host answered at once (429 at their first request, within 5 s); past them
 * a host's next ones are closed unanswered. Each holds a descriptor while it waits: a host reopening
 * refused ones as fast as they closed filled the total alone, and every other host was shut out.
 */
const refusedAnsweredPerHost = 8;

export interface HttpConnectionLimits {
  /** Connections one client host may hold; one more is answered 429 and closed. */
  perHost: number;
  /** All connections of the API; past it Node drops new ones. The rest of the descriptors stay for SMTP, delivery and SQLite. */
  total: number;
  /**
   * Peers not counted per host: loopback (a reverse proxy on this machine, or a CI job's own client) and
   * `http.trusted_proxies`. A proxy carries many clients' requests; its own limits apply to them.
   */
  uncounted: (address: string) => boolean;
}

/** Production limits: loopback and trusted proxies are not counted per host; the API gets half the descriptors. */
export function defaultConnectionLimits(trustedProxies: TrustedProxies): HttpConnectionLimits {
  return {
    perHost: maxHttpConnectionsPerHost,
    total: Math.max(512, Math.floor(openFileLimit() / 2)),
    uncounted: (address) => isLoopbackAddress(address) || trustedProxies.has(address),
  };
}

/** The process's soft limit of open files (Node raises it to the hard limit at start); 1,024 where /proc is not there. */
function openFileLimit(): number {
  try {
    const line = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    if (line?.[1] === 'unlimited') return 1_048_576;
    if (line) return Number(line[1]);
  } catch {
    // Not Linux: the conservative default below.
  }
  return 1024;
}

/** How often a refusal is logged at most: a flood would otherwise write a line per connection. */
const refusalLogIntervalMs = 60_000;

/** How long a refused connection may take to send the request its 429 answers; then it is closed unanswered. */
const refusedConnectionGraceMs = 5_000;

/** What a client past its share is told to wait before it tries again (Retry-After). */
const retryAfterSeconds = 10;

/**
 * Counts the API's open connections per client host. A connection past `limits.perHost` is answered 429
 * `rate-limited` at its first request and closed, never handled: the client learns why, and nothing it
 * sent on it is run. One that sends no request in 5 s is closed (the flood trickles headers). All
 * connections are capped at `limits.total` (Node's maxConnections drops the rest unanswered: descriptors
 * are what is short then).
 */
export function createConnectionLimiter(limits: HttpConnectionLimits, log: Logger) {
  const openByHost = new Map<string, number>();
  const refusedByHost = new Map<string, number>();
  const refusedSockets = new WeakSet<net.Socket>();
  let refused = 0;
  let dropped = 0;
  let lastLogMs = -Infinity;
  const logRefusals = (host: string | undefined) => {
    const now = monotonicMs();
    if (now - lastLogMs < refusalLogIntervalMs) return;
    lastLogMs = now;
    log.warn('API connections refused', { refusedPerHost: refused, droppedOverTotal: dropped, lastHost: host, perHost: limits.perHost, total: limits.total });
  };

  function count(socket: net.Socket): void {
    const address = socket.remoteAddress;
    if (address === undefined || limits.uncounted(address)) return;
    const host = hostNetworkOf(address);
    const open = openByHost.get(host) ?? 0;
    if (open >= limits.perHost) {
      refused++;
      logRefusals(host);
      if ((refusedByHost.get(host) ?? 0) >= refusedAnsweredPerHost) {
        socket.destroy();
        return;
      }
      refusedSockets.add(socket);
      countWhileOpen(refusedByHost, host, socket);
      const cut = setTimeout(() => socket.destroy(), refusedConnectionGraceMs).unref();
      socket.once('close', () => clearTimeout(cut));
      return;
    }
    countWhileOpen(openByHost, host, socket);
  }

  return {
    attach(server: net.Server): void {
      server.maxConnections = limits.total;
      server.on('connection', count);
      server.on('drop', () => {
        dropped++;
        logRefusals(undefined);
      });
    },
    /** Answers the requests of a refused connection with 429 and closes it; the others go to `listener`. */
    guard(listener: NodeListener): NodeListener {
      return (req, res) => {
        if (!refusedSockets.has(req.socket)) return listener(req, res);
        const body = JSON.stringify(errorBody(new AppError('rate-limited', `Too many connections from ${hostNetworkOf(req.socket.remoteAddress ?? '')}: at most ${limits.perHost} at once. Retry once some of yours have closed.`, { retryAfter: retryAfterSeconds })));
        res.shouldKeepAlive = false;
        res.writeHead(429, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'retry-after': String(retryAfterSeconds), 'x-content-type-options': 'nosniff' });
        res.end(body);
      };
    },
  };
}

type NodeListener = (req: IncomingMessage, res: ServerResponse) => void;

/** Counts `socket` under `host` until it closes. */
function countWhileOpen(counts: Map<string, number>, host: string, socket: net.Socket): void {
  counts.set(host, (counts.get(host) ?? 0) + 1);
  socket.once('close', () => {
    const left = (counts.get(host) ?? 1) - 1;
    if (left > 0) counts.set(host, left);
    else counts.delete(host);
  });
}
