import { isUtf8 } from 'node:buffer';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { H3Event } from 'h3';
import { AppError, AppErrorWithHeaders } from '../lib/errors.js';
import { jsonTextProblem, jsonValueProblem } from '../lib/json-limits.js';

/**
 * How a body holding room in the memory budget must keep arriving (router.ts `defaultBodyPace`): a
 * byte at least every `stalledAfterMs`, and on average `minBytesPerSecond` once `graceMs` have passed.
 */
export interface BodyPace {
  stalledAfterMs: number;
  graceMs: number;
  minBytesPerSecond: number;
}

/**
 * Reads the request body, refusing more than `limit` bytes with 413 before buffering it all: a declared
 * Content-Length over the limit is refused at once, a chunked body as soon as it passes the limit. With
 * a `pace`, a body that stops arriving, or arrives slower than it allows, is refused with 408.
 */
export async function readBodyWithLimit(event: H3Event, limit: number, pace?: BodyPace): Promise<Buffer | undefined> {
  const req = event.node.req;
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) {
    drainBounded(req, limit);
    throw tooLarge(limit);
  }
  if (req.method === 'GET' || req.method === 'HEAD' || req.readableEnded) return undefined;
  continueIfAwaited(event);
  // Plain 'data'/'end' listeners: an async iterator costs a promise per chunk on the hottest path.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const refuseAsTooSlow = (message: string) => {
      cleanup();
      chunks.length = 0;
      // The rest of the body may still come: the connection cannot carry another request.
      event.node.res.shouldKeepAlive = false;
      reject(new AppError('request-timeout', message));
    };
    const stalled = pace && setTimeout(() => refuseAsTooSlow(`The request body stopped arriving: no byte for ${pace.stalledAfterMs / 1000} s.`), pace.stalledAfterMs);
    /**
     * The whole body's time, as Apache's mod_reqtimeout counts it (body=20,MinRate=500): a grace, plus a
     * second for every `minBytesPerSecond` bytes received. The idle bound alone let a byte every 9 s hold
     * the body's room for Node's requestTimeout (5 minutes); counted from the bytes received rather than
     * the declared size, a trickle gets the grace only, whatever size it claims, while a body that keeps
     * the rate goes on whatever its size. Checked when the time granted so far runs out: timers, no clock.
     */
    let grantedMs = pace?.graceMs ?? 0;
    const checkPace = () => {
      const earnedMs = pace!.graceMs + (size * 1000) / pace!.minBytesPerSecond;
      if (earnedMs <= grantedMs) {
        return refuseAsTooSlow(`The request body arrived too slowly: ${size} bytes in ${Math.round(grantedMs / 1000)} s (at least ${pace!.minBytesPerSecond} bytes a second are needed after the first ${pace!.graceMs / 1000} s).`);
      }
      paced = setTimeout(checkPace, earnedMs - grantedMs);
      grantedMs = earnedMs;
    };
    let paced = pace && setTimeout(checkPace, pace.graceMs);
    const onData = (chunk: Buffer) => {
      stalled?.refresh();
      size += chunk.length;
      if (size <= limit) return void chunks.push(chunk);
      // Answered at once, not once the body ends (an endless one: never): the rest is dropped (drainBounded).
      cleanup();
      chunks.length = 0;
      drainBounded(req, limit);
      reject(tooLarge(limit));
    };
    const onEnd = () => {
      cleanup();
      resolve(size === 0 ? undefined : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    };
    const onError = (error: NodeJS.ErrnoException) => {
      cleanup();
      // Node reports a client that hangs up mid-body as an 'aborted' ECONNRESET on the request.
      reject(error.code === 'ECONNRESET' ? new ClientGoneError(cutByStop(req)) : error);
    };
    // 'close' without 'end': the client went away mid-body; nobody will read the answer.
    const onClose = () => {
      cleanup();
      reject(new ClientGoneError(cutByStop(req)));
    };
    const cleanup = () => {
      clearTimeout(stalled);
      clearTimeout(paced);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('close', onClose);
  });
}

/** How long a refused body may still be arriving after the 413, before its connection is cut. */
const refusedBodyDrainMs = 10_000;

/**
 * The rest of a body refused with 413 is read and dropped (Node dumps it once the answer is written), so a
 * client that sends its whole body before reading the answer still reads it, and the connection stays
 * usable: closed at once, unread bytes would make the kernel reset it, possibly before the client read the
 * answer. But only up to another `limit` bytes, for at most 10 s: before, an endless or 100 GB body was
 * read at wire speed until Node's requestTimeout (5 minutes), then the connection kept alive.
 */
function drainBounded(req: H3Event['node']['req'], limit: number): void {
  const socket = req.socket;
  // Counted on the socket: Node's parser reads it natively, without 'data' events.
  const stopAt = socket.bytesRead + limit;
  const cutOff = () => {
    stop();
    socket.destroy();
  };
  // The time bound is a timer of its own (a duration, not a reading of the clock); the interval watches the bytes.
  const deadline = setTimeout(cutOff, refusedBodyDrainMs);
  const check = setInterval(() => {
    if (socket.bytesRead > stopAt) cutOff();
  }, 50);
  const stop = () => {
    clearTimeout(deadline);
    clearInterval(check);
    req.off('end', stop);
    socket.off('close', stop);
  };
  req.once('end', stop);
  socket.once('close', stop);
  // Node dumps an unread body once the answer is written, but not one a handler began to read.
  req.resume();
}

/**
 * Set on a request that sent `Expect: 100-continue` (app.ts), to the keep-alive its answer would have had.
 * Node's own handling answers "100 Continue" before any handler runs, so a request refused on its headers
 * (an unknown key, a declared size over the limit) had its body uploaded anyway (RFC 9110 §10.1.1: the
 * point of the expectation is not to). Now "100 Continue" goes out only when the body is read; until then
 * the answer closes the connection, since the client may then send the body or not, and a kept connection
 * would read whichever it does as the next request.
 */
export const awaitingContinue = Symbol('awaitingContinue');

type ContinueAwaitingRequest = H3Event['node']['req'] & { [awaitingContinue]?: boolean };

function continueIfAwaited(event: H3Event): void {
  const req = event.node.req as ContinueAwaitingRequest;
  const keepAlive = req[awaitingContinue];
  if (keepAlive === undefined) return;
  delete req[awaitingContinue];
  const res = event.node.res;
  if (res.headersSent) return;
  res.shouldKeepAlive = keepAlive;
  res.writeContinue();
}

/**
 * The connection closed before the body was complete: the client's doing, not a server error; or, with
 * `byStop`, the appliance's stop cutting a request that was still arriving after its grace (app.ts).
 */
export class ClientGoneError extends Error {
  constructor(readonly byStop = false) {
    super(byStop ? 'the stop closed the connection before the whole body arrived' : 'the client closed the connection before sending the whole body');
    this.name = 'ClientGoneError';
  }
}

/** Servers whose stop has cut their remaining connections (app.ts close). */
export const cutConnectionsOf = new WeakSet<object>();

function cutByStop(req: IncomingMessage): boolean {
  // A server's socket knows its server (net.Server sets `server` on the sockets it accepts).
  const server = (req.socket as (Socket & { server?: object }) | null)?.server;
  return server !== undefined && cutConnectionsOf.has(server);
}

function tooLarge(limit: number): AppError {
  return new AppError('payload-too-large', `Request body is larger than the limit of ${limit} bytes.`);
}

/**
 * A body that is not JSON, sent with a Content-Type that says it is something else (a form, as curl -F or
 * -d key=value and no-code tools' "form" bodies send; XML), is told so: the parser's words alone ("No
 * number after minus sign in JSON at position 1" for a multipart body) did not say that the API takes JSON.
 * The Content-Type is not checked otherwise: JSON labelled `text/plain` or a form (curl -d '{…}' without
 * -H) is read as JSON, as it always was.
 */
function mediaTypeHint(contentType: string | undefined): string {
  const mediaType = contentType?.split(';')[0]!.trim().toLowerCase();
  if (!mediaType || mediaType === 'application/json' || mediaType.endsWith('+json') || mediaType === 'text/plain') return '';
  return `. It was sent as ${mediaType}: the API takes a JSON body, sent with Content-Type: application/json`;
}

/**
 * How the body's bytes are to be read, from its headers: undefined for UTF-8 (JSON's encoding, RFC 8259
 * §8.1), else the declared charset, which is honoured (`charset=ISO-8859-1`). A compressed body
 * (`Content-Encoding: gzip`) or a charset unknown to the decoder is refused with 415 before it is read:
 * read as UTF-8 text anyway, the first was answered 400 "not valid JSON" quoting binary bytes (or accepted
 * when it happened to be plain), the second stored U+FFFD in place of every byte that was not UTF-8.
 */
export function bodyCharset(headers: IncomingHttpHeaders): string | undefined {
  const hasBody = (headers['content-length'] !== undefined && headers['content-length'] !== '0') || headers['transfer-encoding'] !== undefined;
  if (!hasBody) return undefined;
  // Node decodes only chunked: any other transfer coding (`gzip, chunked`) left its bytes to be read as JSON.
  const transfer = headers['transfer-encoding']?.trim().toLowerCase();
  if (transfer !== undefined && transfer !== 'chunked') {
    throw new AppError('unsupported-media-type', `Request bodies with Transfer-Encoding ${transfer} are not accepted: send the JSON uncompressed (chunked alone, or with a Content-Length).`);
  }
  const coding = headers['content-encoding']?.trim().toLowerCase();
  if (coding && coding !== 'identity') {
    // RFC 9110 §15.5.16 and §12.5.3: a 415 for a content coding says in Accept-Encoding which it takes.
    throw new AppErrorWithHeaders('unsupported-media-type', `Request bodies with Content-Encoding ${coding} are not accepted: send the JSON uncompressed.`, { 'accept-encoding': 'identity' });
  }
  const declared = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(headers['content-type'] ?? '')?.[1];
  if (declared === undefined) return undefined;
  let charset: string;
  try {
    charset = new TextDecoder(declared).encoding;
  } catch {
    throw new AppError('unsupported-media-type', `Request body charset ${declared} is not supported: send the JSON in UTF-8.`);
  }
  return charset === 'utf-8' ? undefined : charset;
}

export function parseJsonBody(raw: Buffer | undefined, charset?: string, contentType?: string): unknown {
  if (raw === undefined) return undefined;
  let text: string;
  if (charset !== undefined) {
    try {
      text = new TextDecoder(charset, { fatal: true }).decode(raw);
    } catch {
      throw new AppError('parameters-invalid', `Request body is not valid ${charset}, the charset its Content-Type declares.`);
    }
  } else {
    // Decoded leniently, bytes that are not UTF-8 would be stored as U+FFFD and answered 200.
    if (!isUtf8(raw)) throw new AppError('parameters-invalid', 'Request body is not valid UTF-8 (JSON is UTF-8 unless its Content-Type declares another charset).');
    text = raw.toString('utf8');
  }
  // Too deep or too many values is known from the text, before JSON.parse spends seconds and hundreds of MB on it.
  const shapeProblem = jsonTextProblem(text);
  if (shapeProblem) throw new AppError('parameters-invalid', `Request body ${shapeProblem}.`);
  let value: unknown;
  try {
    // A UTF-8 byte order mark, as some Windows tools write: not JSON, but not worth refusing either.
    value = JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
  } catch (error) {
    throw new AppError('parameters-invalid', `Request body is not valid JSON: ${(error as Error).message}${mediaTypeHint(contentType)}`);
  }
  // The appliance's own limits on JSON (lib/json-limits.ts): too deep, too many values, a lone surrogate.
  const problem = jsonValueProblem(value);
  if (problem) throw new AppError('parameters-invalid', `Request body ${problem}.`);
  return value;
}
