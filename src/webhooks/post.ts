import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { isIP, type LookupFunction, type TcpNetConnectOpts } from 'node:net';
import { monotonicMs } from '../lib/clock.js';
import type { Resolver } from '../lib/resolver.js';
import { isLocalhostName, isPrivateAddress } from '../lib/private-address.js';
import { resolveHostAddresses } from '../delivery/resolve-mx.js';
import { waitAtMost } from '../lib/wait-at-most.js';
import { cutToLength } from '../lib/text.js';

export interface PostResult {
  ok: boolean;
  statusCode?: number;
  error?: string;
  /** The receiver's Retry-After header on a failed answer, verbatim (dispatcher.ts reads it). */
  retryAfter?: string;
  durationMs: number;
}

export interface PostOptions {
  resolver: Resolver;
  allowPrivate: boolean;
  timeoutMs: number;
  signal?: AbortSignal;
  /** CA certificates trusted for an https receiver instead of Node's roots; tests pass their own CA. */
  ca?: string;
}

/** Bytes of the receiver's answer kept for nothing but draining; we never store response bodies. */
const maxDrainBytes = 64 * 1024;

/** How long each address of a host with several gets to take the connection before the next is tried. */
const perAddressConnectMs = 1_000;

/** Largest header block of an answer read (Node's default is 16 kB; a receiver's cookies can pass it). */
const answerHeaderBytes = 64 * 1024;

/**
 * One webhook POST. The host is resolved through the appliance resolver, checked against the private
 * address guard, and the socket is pinned to those vetted addresses (no second lookup a DNS-rebinding
 * attacker could flip). Redirects are NOT followed: a 3xx is a failure like any non-2xx (COMPAT.md).
 */
export async function postWebhook(url: string, headers: Record<string, string>, body: string, options: PostOptions): Promise<PostResult> {
  const started = monotonicMs();
  const elapsed = () => Math.round(monotonicMs() - started);
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    return { ok: false, error: 'invalid URL', durationMs: elapsed() };
  }
  if (target.protocol !== 'http:' && target.protocol !== 'https:') return { ok: false, error: `unsupported scheme ${target.protocol}`, durationMs: elapsed() };
  let addresses: PinnedAddress[];
  try {
    // Bounded like the POST: the dispatcher's lease covers two timeouts (dispatcher.ts), and a lookup
    // that outlived it (dns.timeout × tries × servers, for A then AAAA) let a second attempt start.
    const lookup = await waitAtMost(untilAborted(resolveHost(target.hostname, options.resolver), options.signal), options.timeoutMs);
    if (!lookup.done) return { ok: false, error: 'DNS: timed out', durationMs: elapsed() };
    addresses = lookup.value;
  } catch (error) {
    return { ok: false, error: `DNS: ${(error as Error).message}`, durationMs: elapsed() };
  }
  // Every address the socket may try is vetted, not only the first: a private one is never connected to.
  const vetted = options.allowPrivate ? addresses : addresses.filter((candidate) => !isPrivateAddress(candidate.address));
  if (vetted.length === 0) {
    return { ok: false, error: `refused: ${target.hostname} resolves to private address ${addresses[0].address} (webhooks.allow_private)`, durationMs: elapsed() };
  }
  const outcome = await postToPinnedAddresses(target, headers, body, vetted, options);
  return { ...outcome, durationMs: elapsed() };
}

/** `work`, or a rejection as soon as `signal` aborts (a stop does not wait for a DNS lookup that hangs). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  if (signal.aborted) return Promise.reject(new Error('aborted'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

type PinnedAddress = { address: string; family: 4 | 6 };

/**
 * The one POST of an attempt, connecting only to the addresses vetted before it (the lookup below hands
 * them back instead of asking DNS again, so a name that changes between the check and the connect cannot
 * lead to a private address).
 */
function postToPinnedAddresses(target: URL, headers: Record<string, string>, body: string, pinned: PinnedAddress[], options: PostOptions): Promise<Omit<PostResult, 'durationMs'>> {
  const doRequest = target.protocol === 'https:' ? httpsRequest : httpRequest;
  const requestOptions = pinnedRequestOptions(target, headers, body, pinned, options);
  return exchangeOnce((onResponse) => doRequest(target, requestOptions, onResponse), body, options.timeoutMs);
}

type RequestOptionsWithFamilies = RequestOptions & Pick<TcpNetConnectOpts, 'autoSelectFamily' | 'autoSelectFamilyAttemptTimeout'>;

/** How the POST goes out: to the pinned addresses only, one request per connection, read leniently. */
function pinnedRequestOptions(target: URL, headers: Record<string, string>, body: string, pinned: PinnedAddress[], options: PostOptions): RequestOptionsWithFamilies {
  const lookup: LookupFunction = (_host, lookupOptions, callback) => {
    if ((lookupOptions as { all?: boolean }).all) (callback as any)(null, pinned);
    else callback(null, pinned[0].address, pinned[0].family);
  };
  return {
    method: 'POST',
    headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
    lookup,
    // Tries the vetted addresses in turn when one refuses or does not answer (RFC 8305), as browsers and
    // curl do: a receiver behind round-robin DNS with one node down failed every attempt. Node alternates
    // the families, IPv4 first as resolveHost lists them. Set here, not left to the process default
    // (--no-network-family-autoselection turns it off).
    autoSelectFamily: true,
    // Node's default gives each address but the last 250 ms, then drops it for the next: a receiver across
    // the world (a round trip past 250 ms) would lose an address that was up to one that may be down. One
    // second fits any real round trip and costs a blackholed address one second of webhooks.timeout.
    autoSelectFamilyAttemptTimeout: perAddressConnectMs,
    // Only the status line decides (docs/webhooks.md), so the answer is read as leniently as a browser reads
    // one: a 200 with headers over Node's 16 kB, bare LF line ends or Content-Length beside chunked was a
    // parse error, a failed attempt, and the event went again for a day to a receiver that had it. The
    // strict parser guards a shared connection against response smuggling; this one carries one request
    // (agent: false) and nothing of its answer is kept.
    insecureHTTPParser: true,
    maxHeaderSize: answerHeaderBytes,
    timeout: options.timeoutMs,
    signal: options.signal,
    agent: false,
    // Node sends the URL's host as it is written: `hooks.example.com.` went out with its dot in SNI, which
    // a receiver's TLS front end may match to no certificate or refuse. The certificate is checked
    // against this same name.
    servername: tlsServerName(target.hostname),
    ...(options.ca !== undefined && { ca: options.ca }),
  };
}

/**
 * Sends the request `start` makes, with `body`, and settles once with its outcome: the status line when
 * one came (2xx ok, anything else a failure), else why none did. Never rejects.
 */
function exchangeOnce(start: (onResponse: (res: IncomingMessage) => void) => ClientRequest, body: string, timeoutMs: number): Promise<Omit<PostResult, 'durationMs'>> {
  return new Promise((resolve) => {
    let settled = false;
    let overall: NodeJS.Timeout | undefined;
    const finish = (result: Omit<PostResult, 'durationMs'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(overall);
      resolve(result);
    };
    let req: ClientRequest;
    try {
      req = start(onResponse);
    } catch (error) {
      // Refused before anything was sent, e.g. a header value Node will not write (a secret stored before
      // secrets had to be printable ASCII): a failed attempt like any other, not a rejection.
      finish({ ok: false, error: `request not sent: ${(error as Error).message}` });
      return;
    }
    // Once the status line is in, it is the answer: a body still trickling in when time runs out, or a
    // connection that breaks under it, does not turn a 200 into a failure (and a second POST of the event).
    let answered: (() => void) | undefined;
    const giveUp = () => {
      answered?.();
      req.destroy(new Error(`timed out after ${timeoutMs} ms`));
    };
    // The request's `timeout` is idle time only; this caps the whole exchange.
    overall = setTimeout(giveUp, timeoutMs);
    function onResponse(res: IncomingMessage): void {
      const statusCode = res.statusCode ?? 0;
      let drained = 0;
      res.on('data', (chunk: Buffer) => {
        drained += chunk.length;
        if (drained > maxDrainBytes) res.destroy();
      });
      const retryAfter = res.headers['retry-after'];
      const done = () =>
        finish(
          statusCode >= 200 && statusCode < 300
            ? { ok: true, statusCode }
            : { ok: false, statusCode, error: describeStatus(statusCode, res.headers.location), ...(retryAfter !== undefined && { retryAfter }) },
        );
      answered = done;
      res.on('end', done);
      res.on('close', done);
      res.on('error', done);
    }
    req.on('timeout', giveUp);
    req.on('error', (error) => (answered ? answered() : finish({ ok: false, error: describeError(error) })));
    // A 101 never reaches onResponse: without an 'upgrade' listener Node destroys the socket and emits no
    // 'error', so the POST never settled (its dispatcher slot held for good, a stop waiting forever).
    req.on('upgrade', (res: IncomingMessage, socket) => {
      socket.destroy();
      finish({ ok: false, statusCode: res.statusCode ?? 101, error: `HTTP ${res.statusCode ?? 101} upgrade refused` });
    });
    // Whatever else ends the request without an answer or an error settles it too.
    req.on('close', () => (answered ? answered() : finish({ ok: false, error: 'connection closed without an answer' })));
    req.end(body);
  });
}

/** Characters of a redirect's Location kept in the attempt's error: it is stored with every attempt. */
const maxLocationChars = 512;

function describeStatus(statusCode: number, location: string | undefined): string {
  const shown = location && location.length > maxLocationChars ? `${cutToLength(location, maxLocationChars)}…` : location;
  if (statusCode >= 300 && statusCode < 400) return `HTTP ${statusCode} redirect not followed${shown ? ` (to ${shown})` : ''}`;
  return `HTTP ${statusCode}`;
}

/** Every address of a failed connection when several were tried (Node reports them as an AggregateError with no message). */
function describeError(error: Error): string {
  const tried = error instanceof AggregateError ? error.errors.map((each: Error) => each.message).filter(Boolean) : [];
  return tried.length > 0 ? tried.join('; ') : error.message;
}

/**
 * The host's addresses: its A records, then its AAAA records. Both families, not the AAAA records only
 * when there is no A record: a receiver whose IPv4 side is down (refused, or no answer) is posted to over
 * IPv6 in the same attempt, as delivery tries a host's next address (resolveHostAddresses, which also
 * bounds the wait for an AAAA answer once A records are in).
 */
async function resolveHost(hostname: string, resolver: Resolver): Promise<PinnedAddress[]> {
  const bare = hostname.replace(/^\[|\]$/g, '');
  const literal = isIP(bare);
  if (literal) return [{ address: bare, family: literal as 4 | 6 }];
  if (isLocalhostName(bare)) return [{ address: '127.0.0.1', family: 4 }];
  const resolution = await resolveHostAddresses(resolver, bare);
  if (resolution.kind === 'none') throw new Error(resolution.message);
  return resolution.addresses.map((address) => ({ address, family: isIP(address) as 4 | 6 }));
}

/**
 * The name sent in SNI and checked against the certificate: the host without the final dot of a fully
 * qualified name (RFC 6066 §3: "The hostname is represented ... without a trailing dot"), and none for an
 * IP address (SNI carries names only; Node then checks the certificate against the address).
 */
function tlsServerName(hostname: string): string | undefined {
  if (hostname.startsWith('[') || isIP(hostname)) return undefined;
  return hostname.replace(/\.$/, '');
}
