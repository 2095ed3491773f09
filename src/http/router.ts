import { isIP } from 'node:net';
import type { AuthenticatedProject } from '../projects/keys.js';
import {
  createRouter,
  defineEventHandler,
  getQuery,
  getRequestHeader,
  getRequestIP,
  send,
  setResponseHeader,
  setResponseStatus,
  type H3Event,
  type Router,
} from 'h3';
import { AppError, AppErrorWithHeaders } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { HttpMetrics } from './metrics.js';
import { errorBody, statusFor, toAppError } from './errors.js';
import { ClientGoneError, bodyCharset, readBodyWithLimit, parseJsonBody, type BodyPace } from './body.js';
import { smallBodyBytes, type MemoryBudget } from '../lib/memory-budget.js';
import { canonicalAddress } from '../lib/private-address.js';
import { noTrustedProxies, type TrustedProxies } from './trusted-proxies.js';


export interface RequestContext<P extends AuthenticatedProject | null = AuthenticatedProject> {
  event: H3Event;
  /** The project that owns the API key; every query is scoped to it. */
  project: P;
  /** Path parameters, percent-decoded (clients send `a@b.com` and `a%40b.com` alike). */
  params: Record<string, string>;
  query: Record<string, unknown>;
  ip: string | undefined;
  header(name: string): string | undefined;
  /** The JSON body; undefined when the request has none. Malformed JSON → 400 parameters-invalid. */
  json(): Promise<unknown>;
  setStatus(status: number): void;
}

/** Returned by handlers that answer something other than JSON (tracking pixels, downloads). */
export class RawResponse {
  constructor(
    readonly body: Buffer | string,
    readonly headers: Record<string, string>,
    readonly status = 200,
  ) {}
}

export type Handler<P extends AuthenticatedProject | null> = (ctx: RequestContext<P>) => unknown;

export interface RouteDeps {
  authenticate(authorization: string | undefined): AuthenticatedProject;
  log: Logger;
  metrics: HttpMetrics;
  bodyLimitBytes: number;
  /** Bounds the bodies read and processed at once (`http.body_memory_bytes`); none: unbounded. */
  memoryBudget?: MemoryBudget;
  /** How a body holding room in it must keep arriving; `defaultBodyPace` unless a test shortens it. */
  bodyPace?: BodyPace;
  /** Peers whose X-Forwarded-For is believed (`http.trusted_proxies`). */
  trustedProxies?: TrustedProxies;
}

type Method = 'get' | 'head' | 'post' | 'patch' | 'put' | 'delete';

/** Registers handlers with auth, body limits, error mapping, access logs and metrics around them. */
export interface Routes {
  router: Router;
  get(path: string, handler: Handler<AuthenticatedProject>): void;
  post(path: string, handler: Handler<AuthenticatedProject>): void;
  patch(path: string, handler: Handler<AuthenticatedProject>): void;
  put(path: string, handler: Handler<AuthenticatedProject>): void;
  delete(path: string, handler: Handler<AuthenticatedProject>): void;
  /** A route that needs no API key (health, metrics, tracking pixels, signed links). */
  public(method: Method, path: string, handler: Handler<null>): void;
  /** The methods the route serving `path` takes (`Allow`), or undefined when no route serves it. */
  allowedMethods(path: string): string[] | undefined;
}

export function createRoutes(deps: RouteDeps): Routes {
  const router = createRouter();
  const table = new RouteTable();
  const allowedMethods = (path: string) => table.allowedMethods(path);
  const add = (method: Method, path: string, handler: Handler<any>, needsAuth: boolean) => {
    table.add(method, path);
    router[method](path, wrapHandler(deps, method.toUpperCase(), path, handler, needsAuth, allowedMethods));
  };
  return {
    allowedMethods,
    router,
    get: (path, handler) => {
      // HEAD answers as GET without the body (Node drops it): reads have no side effects. Public GETs
      // (tracking pixels, click links) record events, so they opt in one by one.
      add('get', path, handler, true);
      add('head', path, handler, true);
    },
    post: (path, handler) => add('post', path, handler, true),
    patch: (path, handler) => add('patch', path, handler, true),
    put: (path, handler) => add('put', path, handler, true),
    delete: (path, handler) => add('delete', path, handler, true),
    public: (method, path, handler) => add(method, path, handler, false),
  };
}

const methodOrder: Method[] = ['get', 'head', 'post', 'patch', 'put', 'delete'];

/**
 * Which methods each registered path takes, to answer a known path asked with another method 405 with
 * `Allow` (RFC 9110 §15.5.6) rather than 404 "No route", which told a client that sent PUT to
 * /v1/email/send that the endpoint does not exist. A path is served by the route the router would pick:
 * of those whose pattern matches, the most specific, a literal segment before a parameter, left to right
 * (radix3's order: /v1/email/search, not /v1/email/:id).
 */
class RouteTable {
  private readonly routes = new Map<string, { segments: (string | null)[]; methods: Set<Method> }>();

  add(method: Method, path: string): void {
    let route = this.routes.get(path);
    if (!route) {
      route = { segments: splitPath(path).map((segment) => (segment.startsWith(':') ? null : segment)), methods: new Set() };
      this.routes.set(path, route);
    }
    route.methods.add(method);
  }

  allowedMethods(path: string): string[] | undefined {
    const segments = splitPath(path.split('?')[0]!);
    let best: { segments: (string | null)[]; methods: Set<Method> } | undefined;
    for (const route of this.routes.values()) {
      if (route.segments.length !== segments.length) continue;
      if (!route.segments.every((literal, i) => literal === null || literal === segments[i])) continue;
      if (!best || moreSpecific(route.segments, best.segments)) best = route;
    }
    return best && methodOrder.filter((method) => best.methods.has(method)).map((method) => method.toUpperCase());
  }
}

/** Path segments, a trailing slash ignored as the router does (`/v1/domains/` is `/v1/domains`). */
function splitPath(path: string): string[] {
  return path.split('/').filter((segment, i, all) => i > 0 && (segment !== '' || i < all.length - 1));
}

function moreSpecific(a: (string | null)[], b: (string | null)[]): boolean {
  for (let i = 0; i < a.length; i++) {
    if ((a[i] === null) !== (b[i] === null)) return a[i] !== null;
  }
  return false;
}

/** The answer to a path no route of this method serves: 405 naming the methods it takes, or 404 when none does. */
export function noRouteFor(method: string, path: string, allowedMethods: Routes['allowedMethods']): AppError {
  const bare = path.split('?')[0]!;
  const allowed = allowedMethods(bare);
  if (!allowed) return new AppError('not-found', `No route ${method} ${bare}.${versionPrefixHint(bare, allowedMethods)}`);
  // RFC 9110 §15.5.6: a 405 MUST list the methods the target takes.
  return new AppErrorWithHeaders('method-not-allowed', `${bare} does not take ${method}; it takes ${allowed.join(', ')}.`, { allow: allowed.join(', ') });
}

/**
 * The Python, Ruby and PHP SDKs take a base URL that ends in /v1 (their default is
 * https://api.sidemail.io/v1), the Node SDK a host without it, and integrations keep either in one
 * setting (SIDEMAIL_API_URL): pointed at the appliance with the other form, every call was a bare
 * "No route POST /email/send." (or /v1/v1/email/send) that did not say the base URL was at fault.
 */
function versionPrefixHint(path: string, allowedMethods: Routes['allowedMethods']): string {
  if (path.startsWith('/v1/v1/') && allowedMethods(path.slice(3))) {
    return ` Did you mean ${path.slice(3)}? The base URL ends in /v1 and the client adds /v1 too: give the host alone (http://host:8080), as the Node SDK takes it.`;
  }
  if (!path.startsWith('/v1/') && allowedMethods(`/v1${path}`)) {
    return ` Did you mean /v1${path}? API paths start with /v1: a base URL that names the API root ends in /v1 (http://host:8080/v1 for the Python, Ruby and PHP SDKs; the Node SDK's host is http://host:8080).`;
  }
  return '';
}

/** Probed every few seconds by monitors: a line per probe would bury the log (at debug they still show). */
const probeRoutes = new Set(['/healthz', '/metrics']);

function wrapHandler(deps: RouteDeps, method: string, route: string, handler: Handler<any>, needsAuth: boolean, allowedMethods: Routes['allowedMethods']) {
  const logRequest = probeRoutes.has(route) ? deps.log.debug.bind(deps.log) : deps.log.info.bind(deps.log);
  const paramNames = [...route.matchAll(/:(\w+)/g)].map((match) => match[1]!);
  return defineEventHandler(async (event) => {
    const started = performance.now();
    let projectId: string | undefined;
    let status = 200;
    try {
      // A path that names a static route, asked with a method that route lacks, is handed by h3 to a
      // param route of that method, without its params (GET /v1/email/search → GET /v1/email/:id, which
      // answered {email: null}): the static route does not take that method, as for any other wrong one.
      if (paramNames.some((name) => event.context.params?.[name] === undefined)) throw noRouteFor(method, event.path, allowedMethods);
      const project = needsAuth ? deps.authenticate(getRequestHeader(event, 'authorization')) : null;
      projectId = project?.id;
      const ctx = new HandlerContext(event, project, deps);
      const result = await handler(ctx);
      status = result instanceof RawResponse ? result.status : event.node.res.statusCode;
      if (result instanceof RawResponse) return sendRaw(event, result);
      // Never an empty body or a 204: one SDK throws on a non-JSON answer (COMPAT.md "Transport").
      return result === undefined ? {} : result;
    } catch (error) {
      const appError = toAppError(error, deps.log, { method, route, projectId });
      status = statusFor(appError.code);
      return sendAppError(event, appError);
    } finally {
      const ms = performance.now() - started;
      deps.metrics.observeRequest(method, route, status, ms / 1000);
      logRequest('request', { method, route, status, ms: Math.round(ms * 100) / 100, projectId });
    }
  });
}

/**
 * A class, not an object literal: a literal with getters that are closures is a dictionary-mode object
 * in V8, slow to build (0.45 µs against 0.002 µs for this class, Node 20) and read through hash lookups
 * on every `ctx.…`. `query` and `ip` live once on the prototype; the methods stay per-object arrow
 * functions because handlers destructure them (`({ setStatus }) => …`).
 */
class HandlerContext implements RequestContext<any> {
  private decodedParams?: Record<string, string>;
  readonly header: (name: string) => string | undefined;
  readonly json: () => Promise<unknown>;
  readonly setStatus: (status: number) => void;

  constructor(
    readonly event: H3Event,
    readonly project: AuthenticatedProject | null,
    private readonly deps: RouteDeps,
  ) {
    let body: Promise<unknown> | undefined;
    this.header = (name) => getRequestHeader(event, name);
    this.json = () => (body ??= readJsonBody(event, deps));
    this.setStatus = (status) => setResponseStatus(event, status);
  }

  // query and ip are read by few routes: computed on first use, not for every send.
  get query(): Record<string, unknown> {
    return getQuery(this.event);
  }

  /** Decoded when first read: a route that takes its parameter as sent (a tracking token) never fails on it. */
  get params(): Record<string, string> {
    return (this.decodedParams ??= decodeParams(this.event.context.params ?? {}));
  }

  get ip(): string | undefined {
    const { event, deps } = this;
    return clientAddress(getRequestIP(event, { xForwardedFor: false }), getRequestHeader(event, 'x-forwarded-for'), deps.trustedProxies ?? noTrustedProxies);
  }
}

/** The body, parsed; a large one first waits for room in the memory budget (lib/memory-budget.ts). */
function readJsonBody(event: H3Event, deps: RouteDeps): Promise<unknown> {
  let charset: string | undefined;
  try {
    // A body that could not be read as sent (compressed, an unknown charset) is refused before it is read.
    charset = bodyCharset(event.node.req.headers);
  } catch (error) {
    return Promise.reject(error);
  }
  const parse = (raw: Buffer | undefined) => parseJsonBody(raw, charset, event.node.req.headers['content-type']);
  const size = bodySizeToExpect(event, deps.bodyLimitBytes);
  // Over the limit it is refused at once (413), without waiting for room first.
  if (!deps.memoryBudget || size < smallBodyBytes || size > deps.bodyLimitBytes) return readBodyWithLimit(event, deps.bodyLimitBytes).then(parse);
  const pace = deps.bodyPace ?? defaultBodyPace;
  return holdBodyRoom(event, deps.memoryBudget, size).then(() => readBodyWithLimit(event, deps.bodyLimitBytes, pace).then(parse));
}

/**
 * A body holding room in the memory budget must keep arriving. Its room is taken for its declared size
 * before a byte of it is read, and held until it is answered: 11 connections that declared 10 MB and
 * then sent nothing (a client gone without a FIN, or on purpose) held every API body and submitted
 * message of 64 kB or more, of every project, waiting for the 5 minutes of Node's requestTimeout; and
 * as many sending a byte every 9 s did the same. So: a byte at least every 10 s, and, after 30 s, on
 * average 8 kB a second (64 kbit/s: an EDGE or ISDN uplink still passes; any DSL, 3G or better is far
 * above it). A 10 MB body already needs 35 kB/s to beat Node's requestTimeout; a smaller one on a slow
 * link passes (1 MB at 64 kbit/s: 2 minutes), and a trickle is cut after 30 s whatever size it declares.
 */
export const defaultBodyPace: BodyPace = { stalledAfterMs: 10_000, graceMs: 30_000, minBytesPerSecond: 8 * 1024 };

/** Content-Length, or the body limit for a chunked body (its size is known only once read). */
function bodySizeToExpect(event: H3Event, limit: number): number {
  const headers = event.node.req.headers;
  if (headers['content-length'] !== undefined) return Number(headers['content-length']) || 0;
  return headers['transfer-encoding'] === undefined ? 0 : limit;
}

/** Holds room for `bytes` until the answer is written or the client goes away (`close` covers both). */
function holdBodyRoom(event: H3Event, budget: MemoryBudget, bytes: number): Promise<void> {
  const reservation = budget.reserve(bytes);
  const res = event.node.res;
  return new Promise((resolve, reject) => {
    const gone = () => {
      reservation.release();
      reject(new ClientGoneError()); // nothing once granted: the request then ends as any other
    };
    if (res.closed) return gone();
    res.once('close', gone);
    void reservation.granted.then(resolve);
  });
}

/**
 * The client's address: the connecting peer's, unless that peer is a trusted proxy; then the nearest
 * X-Forwarded-For entry that is not one (each proxy appends the address it saw; entries to its left
 * are whatever the client claimed).
 */
export function clientAddress(peer: string | undefined, forwardedFor: string | undefined, trustedProxies: TrustedProxies): string | undefined {
  if (!trustedProxies.has(peer) || !forwardedFor) return plainAddress(peer);
  const hops = forwardedFor.split(',').map((hop) => plainAddress(hop.trim())).filter((hop): hop is string => Boolean(hop));
  for (let i = hops.length - 1; i >= 0; i--) {
    if (trustedProxies.has(hops[i])) continue;
    // Some proxies write `unknown` for a client they could not tell, and a client may write anything:
    // then the address is not known (null), never that text in an `ipAddress` field.
    return isIP(hops[i]) !== 0 ? hops[i] : undefined;
  }
  return hops[0] ?? plainAddress(peer);
}

/**
 * One spelling per client: an IPv4 peer of a dual-stack listener (`http.host = "::"`) is `::ffff:1.2.3.4`
 * to Node, and some proxies append the port to their hop (`1.2.3.4:5678`, `[2001:db8::1]:443`).
 */
function plainAddress(address: string | undefined): string | undefined {
  if (!address) return address;
  const withoutPort = /^\[([^\]]+)\](?::\d+)?$/.exec(address)?.[1] ?? /^(\d{1,3}(?:\.\d{1,3}){3}):\d+$/.exec(address)?.[1] ?? address;
  // Also what a proxy writes its own way: `2001:DB8:0:0:0:0:0:5`, `::ffff:cb00:7109`, `fe80::1%eth0`.
  return canonicalAddress(withoutPort);
}

function decodeParams(raw: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(raw)) {
    try {
      out[key] = decodeURIComponent(value);
    } catch {
      throw new AppError('parameters-invalid', `Path parameter ${key} is not valid percent-encoding.`);
    }
  }
  return out;
}

export function sendAppError(event: H3Event, error: AppError) {
  setResponseStatus(event, statusFor(error.code));
  if ((error.code === 'rate-limited' || error.code === 'storage-busy') && typeof error.details?.retryAfter === 'number') {
    setResponseHeader(event, 'retry-after', error.details.retryAfter);
  }
  if (error instanceof AppErrorWithHeaders) for (const [name, value] of Object.entries(error.headers)) setResponseHeader(event, name, value);
  const challenge = bearerChallenge(error.code);
  if (challenge) setResponseHeader(event, 'www-authenticate', challenge);
  setResponseHeader(event, 'content-type', 'application/json');
  return send(event, JSON.stringify(errorBody(error)), 'application/json');
}

/**
 * RFC 9110 §15.5.2: a 401 MUST carry WWW-Authenticate, the scheme the client is to use; the API's 401s
 * had none, so generic HTTP clients (and proxies that act on 401) could not tell what was asked for. The
 * error attribute is RFC 6750 §3.1's: none when no credentials came, `invalid_request` for a header that
 * is not `Bearer <key>`, `invalid_token` for a key that is unknown or revoked.
 */
function bearerChallenge(code: AppError['code']): string | undefined {
  if (code === 'authentication-required') return 'Bearer realm="postino"';
  if (code === 'authentication-invalid') return 'Bearer realm="postino", error="invalid_request"';
  if (code === 'authentication-failed') return 'Bearer realm="postino", error="invalid_token"';
  return undefined;
}

function sendRaw(event: H3Event, response: RawResponse) {
  setResponseStatus(event, response.status);
  // Set here, not left to Node: an answer to HEAD carries no body, so Node would give no length either.
  setResponseHeader(event, 'content-length', Buffer.byteLength(response.body));
  for (const [name, value] of Object.entries(response.headers)) setResponseHeader(event, name, value);
  return send(event, response.body);
}
