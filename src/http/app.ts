import { createApp, defineEventHandler, toNodeListener, type App, type H3Event } from 'h3';
import { listen, type Listener } from 'listhen';
import { getRandomPort } from 'get-port-please';
import net, { type AddressInfo } from 'node:net';
import type { ServerResponse } from 'node:http';
import { AppError, type ErrorCode } from '../lib/errors.js';
import { listenFailure, probeListen } from '../lib/listen-errors.js';
import { silentLogger, type Logger } from '../lib/logger.js';
import { createConnectionLimiter, type HttpConnectionLimits } from './connection-limits.js';
import type { HttpMetrics } from './metrics.js';
import { noRouteFor, sendAppError, type Routes } from './router.js';
import { errorBody, statusFor, toAppError } from './errors.js';
import { awaitingContinue, cutConnectionsOf } from './body.js';

/** The h3 app: feature routes, then a fallback that answers unknown routes with the compatible 404 (405 for a known path asked with another method). */
export function createHttpApp(routes: Routes, deps: { log: Logger; metrics: HttpMetrics }): App {
  const app = createApp({
    // Errors raised outside our handlers (h3 internals) still get the compatible body.
    onError: (error, event) => {
      if (event.handled) return;
      const status = (error as { statusCode?: number }).statusCode;
      const appError = status === 404 ? noRouteFor(event.method, event.path, routes.allowedMethods) : toAppError(error.cause ?? error, deps.log, { path: event.path });
      return sendAppError(event, appError);
    },
  });
  app.use(defineEventHandler((event) => routes.router.handler(keepEncodedQuestionMarks(event))));
  app.use(
    defineEventHandler((event) => {
      // A path some route serves, asked with a method it does not take: 405 with Allow (router.ts RouteTable).
      const error = noRouteFor(event.method, event.path, routes.allowedMethods);
      const status = statusFor(error.code);
      deps.metrics.observeRequest(event.method, 'unmatched', status, 0);
      deps.log.info('request', { method: event.method, route: 'unmatched', status });
      return sendAppError(event, error);
    }),
  );
  return app;
}

/**
 * h3 decodes the path before routing (all but %25 and %2F), so an encoded `?` (`%3F`) began the query
 * there and the route parameter lost the rest: RFC 5322 allows `?` in a local part (`a?b@example.com`,
 * which the send API takes and a bounce can suppress), and `DELETE /v1/suppressions/a%3Fb%40example.com`
 * looked for `a`, answering `{deleted: false}` (or 404 for `%3Fb%40example.com`). Such a path is routed
 * as sent; its parameters are decoded once, by the router (router.ts decodeParams).
 */
function keepEncodedQuestionMarks(event: H3Event): H3Event {
  const url = event.node.req.url ?? '/';
  const queryAt = url.indexOf('?');
  if (/%3f/i.test(queryAt < 0 ? url : url.slice(0, queryAt))) event._path = url;
  return event;
}

/** listhen's "Unable to find an available port" becomes a boot error that names the key to change. */
async function listenOrExplain(handler: Parameters<typeof listen>[0], host: string, port: number, options: Parameters<typeof listen>[1]): Promise<Listener> {
  try {
    return await listen(handler, options);
  } catch (error) {
    if ((error as Error).name !== 'GetPortError') throw listenFailure(error, 'http', host, port);
    // listhen says "Unable to find an available port" whatever the cause; trying the port tells which.
    const cause = await probeListen(host, port);
    throw cause ? listenFailure(cause, 'http', host, port) : error;
  }
}

type NodeListener = ReturnType<typeof toNodeListener>;

/**
 * `//v1/email/send` is `/v1/email/send`: an SDK given a base URL that ends in `/` (`http://host:8080/`)
 * joins it with `/v1/…`, and "change only the base URL" should not depend on that slash. The query is
 * left as it is.
 */
function collapseSlashes(listener: NodeListener): NodeListener {
  return (req, res) => {
    const url = req.url ?? '/';
    const queryAt = url.indexOf('?');
    const path = queryAt < 0 ? url : url.slice(0, queryAt);
    if (path.includes('//')) req.url = path.replace(/\/{2,}/g, '/') + (queryAt < 0 ? '' : url.slice(queryAt));
    return listener(req, res);
  };
}

/**
 * RFC 9112 §3.2.2: a server MUST accept a request target in absolute form (`GET http://host/v1/project`),
 * which clients send when configured to go through a forward proxy. It was routed as a path and answered
 * 404 "No route GET http:/host/v1/project"; now only its path and query count (`/` when it has no path).
 */
function originForm(listener: NodeListener): NodeListener {
  return (req, res) => {
    const authority = /^https?:\/\/[^/?#]*/i.exec(req.url ?? '')?.[0];
    if (authority !== undefined) {
      const rest = req.url!.slice(authority.length);
      req.url = rest.startsWith('/') ? rest : `/${rest}`;
    }
    return listener(req, res);
  };
}

/**
 * Every answer says its Content-Type is the truth: a browser that sniffed a JSON answer carrying a
 * user's text (a template name, a subject with markup) could otherwise run it as html on this origin.
 */
function noSniffing(listener: NodeListener): NodeListener {
  return (req, res) => {
    res.setHeader('x-content-type-options', 'nosniff');
    return listener(req, res);
  };
}

/** RFC 9112 §3.2: an HTTP/1.1 request without Host is answered 400 (as Node would, but in the compatible shape). */
function requireHost(listener: NodeListener): NodeListener {
  return (req, res) => {
    if (req.headers.host !== undefined || req.httpVersionMajor !== 1 || req.httpVersionMinor !== 1) return listener(req, res);
    const body = JSON.stringify(errorBody(new AppError('parameters-invalid', 'An HTTP/1.1 request needs a Host header.')));
    res.shouldKeepAlive = false;
    res.writeHead(400, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
}

/**
 * Pipelined requests (RFC 9112 §9.3.2: several sent on a connection before any answer is read) are
 * answered in order anyway, so each runs once the answer before it has left: Node hands every request
 * parsed from a chunk to the handler at once and buffers their answers until the earlier ones are
 * written. A client that pipelined 40 downloads and read none had 40 answers built into memory for it;
 * a few such connections exhausted the heap. A client that reads gets the same answers, in the same order.
 */
function oneRequestAtATimePerConnection(listener: NodeListener): NodeListener {
  return (req, res) => {
    // Node gives a pipelined request's answer its socket only once every answer before it has left
    // (_http_server.js: queued in `outgoing`, then `assignSocket`, which emits 'socket'), so an answer
    // without a socket waits for that; the usual request, alone on its connection, runs at once. One
    // whose connection closes first never gets it and is not run: nobody could read its answer.
    if (res.socket) return listener(req, res);
    res.once('socket', (socket: net.Socket) => {
      if (!socket.destroyed) listener(req, res);
    });
  };
}

/**
 * Node's HTTP server has no write timeout: an answer the client does not read (a client hung, or one
 * that asks and never reads on purpose) stayed in memory with its connection for as long as the client
 * kept it, and keep-alive's idle timeout starts only once the answer has left. So once written, an
 * answer must leave at the pace its size allows (`AnswerPace`), or its connection is closed.
 */
function closeUnreadAnswers(listener: NodeListener, pace: AnswerPace): NodeListener {
  return async (req, res) => {
    await listener(req, res);
    if (res.writableEnded && !res.writableFinished && !res.destroyed) closeIfNotLeftInTime(res, pace);
  };
}

function closeIfNotLeftInTime(res: ServerResponse, pace: AnswerPace): void {
  const allowedMs = pace.graceMs + (res.writableLength * 1000) / pace.minBytesPerSecond;
  const cut = setTimeout(() => res.destroy(), allowedMs);
  const stop = () => clearTimeout(cut);
  res.once('finish', stop).once('close', stop);
}

/** Port 0: a free port on `host`; a host that is not this machine's is named like on a fixed port. */
async function freePortOrExplain(host: string): Promise<number> {
  try {
    return await getRandomPort(host);
  } catch (error) {
    const cause = await probeListen(host, 0);
    throw cause ? listenFailure(cause, 'http', host, 0) : error;
  }
}

export interface HttpServer {
  port: number;
  close(): Promise<void>;
}

/** How long a stopping server still answers requests on open keep-alive sockets before closing idle ones. */
const keepAliveGraceMs = 500;

/** `http.keep_alive_timeout`'s default: above the 60 s idle timeout of nginx's upstream keepalive and AWS ALB. */
export const defaultKeepAliveTimeoutMs = 65_000;

export interface HttpServerOptions {
  /** How long an idle connection is kept for the next request (`http.keep_alive_timeout`). */
  keepAliveTimeoutMs?: number;
  /** How an answer must leave; `defaultAnswerPace` unless a test shortens it. */
  answerPace?: AnswerPace;
  /** Connections per client host and in all (connection-limits.ts); none when absent (tests of other things). */
  connectionLimits?: HttpConnectionLimits;
  /** Where refused connections are logged. */
  log?: Logger;
}

/** How fast a written answer must leave: within `graceMs`, plus a second for every `minBytesPerSecond` bytes of it. */
export interface AnswerPace {
  graceMs: number;
  minBytesPerSecond: number;
}

/**
 * The mirror of the request body's pace (router.ts `defaultBodyPace`): 30 s, plus a second for every
 * 8 kB (64 kbit/s). A 2 MB attachment on the slowest link still downloads (4.5 minutes allowed).
 */
export const defaultAnswerPace: AnswerPace = { graceMs: 30_000, minBytesPerSecond: 8 * 1024 };

/** Listens with listhen; port 0 means "any free port" (listhen alone would fall back to 3000). */
export async function startHttpServer(app: App, host: string, port: number, options: HttpServerOptions = {}): Promise<HttpServer> {
  const chosenPort = port === 0 ? await freePortOrExplain(host) : port;
  const limiter = options.connectionLimits && createConnectionLimiter(options.connectionLimits, options.log ?? silentLogger);
  const handler = closeUnreadAnswers(noSniffing(requireHost(originForm(collapseSlashes(toNodeListener(app))))), options.answerPace ?? defaultAnswerPace);
  const guarded = limiter ? limiter.guard(handler) : handler;
  const listener: Listener = await listenOrExplain(oneRequestAtATimePerConnection(guarded), host, chosenPort, {
    hostname: host,
    port: chosenPort,
    isProd: true, // never hop to another port silently: a busy port is a boot error
    public: host !== '127.0.0.1' && host !== 'localhost' && host !== '::1',
    showURL: false,
    autoClose: false,
    qr: false,
  });
  const address = listener.server.address() as AddressInfo;
  limiter?.attach(listener.server);
  listener.server.on('clientError', answerMalformedRequest);
  listener.server.on('connect', refuseConnect);
  // Node's own answers to these, sent before any handler runs, are bodiless; clients expect JSON for every
  // answer (COMPAT.md). A missing Host is answered by `requireHost` below instead, an expectation other
  // than 100-continue ignored (RFC 9110 §10.1.1 lets a server do so) instead of a bare 417.
  (listener.server as { requireHostHeader?: boolean }).requireHostHeader = false;
  listener.server.on('checkExpectation', (request, response) => listener.server.emit('request', request, response));
  // "100 Continue" only once a handler reads the body (body.ts `awaitingContinue`), not before it runs.
  listener.server.on('checkContinue', (request, response) => {
    (request as typeof request & { [awaitingContinue]?: boolean })[awaitingContinue] = response.shouldKeepAlive;
    response.shouldKeepAlive = false;
    listener.server.emit('request', request, response);
  });
  // A reverse proxy reuses its idle connections to the API until its own idle timeout (nginx, AWS ALB:
  // 60 s); one the API closes first may carry the proxy's next request as it closes, and the proxy
  // answers 502 (a send it does not retry). So idle connections are kept longer than that; close()
  // below still closes them at once when the server stops.
  listener.server.keepAliveTimeout = options.keepAliveTimeoutMs ?? defaultKeepAliveTimeoutMs;
  return {
    port: address.port,
    close: async () => {
      const server = listener.server;
      // Stop accepting, but leave idle keep-alive sockets open for a moment (http.Server.close closes them
      // at once): a client may have a request on its way on one, and a closed socket answers it with a
      // reset, not an answer; without an Idempotency-Key it cannot tell whether its email was accepted.
      // Requests that still arrive are answered with `Connection: close`.
      const closed = new Promise<void>((resolve) => net.Server.prototype.close.call(server, () => resolve()));
      server.on('request', (_request, response) => {
        if (!response.headersSent) response.setHeader('connection', 'close');
      });
      let sweep: NodeJS.Timeout | undefined;
      // Then keep-alive sockets are closed as soon as they are idle.
      const grace = setTimeout(() => {
        server.closeIdleConnections();
        sweep = setInterval(() => server.closeIdleConnections(), 50);
      }, keepAliveGraceMs);
      // In-flight requests get a moment to finish; then the remaining sockets are cut.
      const forced = setTimeout(() => {
        cutConnectionsOf.add(server);
        server.closeAllConnections();
      }, 3000);
      await closed;
      clearTimeout(grace);
      clearInterval(sweep);
      clearTimeout(forced);
    },
  };
}

/**
 * Requests Node's HTTP parser refuses before any handler runs (a bad request line or header, headers
 * over the size limit, headers that never arrive in time) got Node's bare `400 Bad Request` with no body;
 * clients expect JSON for every answer (COMPAT.md), so they get the compatible error body. Then the
 * connection is destroyed, as Node's own handler does: ending it only half-closes it, and a client that
 * never closes its side would hold the descriptor for good (Node no longer times such a socket out).
 */
export function answerMalformedRequest(error: Error & { code?: string }, socket: net.Socket & { _httpMessage?: { headersSent?: boolean } }): void {
  // As Node's own handler: no answer into a response already on its way (it would corrupt it).
  if (error.code === 'ECONNRESET' || !socket.writable || socket._httpMessage?.headersSent) {
    socket.destroy();
    return;
  }
  const { status, reason, code, message } = malformedRequestAnswer(error.code);
  answerOnSocket(socket, status, reason, new AppError(code, message));
}

/**
 * CONNECT (a proxy's method) reaches no handler: Node hands its socket over and, with no listener,
 * closed it without a word, where every other refused request gets a JSON answer.
 */
export function refuseConnect(_request: unknown, socket: net.Socket): void {
  answerOnSocket(socket, 405, 'Method Not Allowed', new AppError('method-not-allowed', 'CONNECT is not supported: this is an HTTP API, not a proxy.'));
}

/** A JSON error written straight to the connection, which then closes: for requests Node never hands to a handler. */
function answerOnSocket(socket: net.Socket, status: number, reason: string, error: AppError): void {
  const body = JSON.stringify(errorBody(error));
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`, () => socket.destroy());
  // A client that does not read may never let the answer drain: it does not keep the socket either.
  const cut = setTimeout(() => socket.destroy(), malformedAnswerGraceMs).unref();
  socket.once('close', () => clearTimeout(cut));
}

/** How long a refused request's answer may take to leave before its connection is cut anyway. */
const malformedAnswerGraceMs = 5_000;

/** Node's parser error codes, as Node itself answers them (413 for oversized chunk extensions). */
function malformedRequestAnswer(parserCode: string | undefined): { status: number; reason: string; code: ErrorCode; message: string } {
  switch (parserCode) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, reason: 'Request Header Fields Too Large', code: 'payload-too-large', message: 'The request line or headers are too large.' };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { status: 413, reason: 'Payload Too Large', code: 'payload-too-large', message: 'The chunk extensions of the request body are too large.' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, reason: 'Request Timeout', code: 'request-timeout', message: 'The request was not received in time.' };
    default:
      return { status: 400, reason: 'Bad Request', code: 'parameters-invalid', message: `Malformed HTTP request (${parserCode ?? 'parse error'}).` };
  }
}
