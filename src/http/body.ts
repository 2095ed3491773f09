import type { H3Event } from 'h3';
import { AppError } from '../lib/errors.js';

/**
 * Reads the request body, refusing more than `limit` bytes with 413 before buffering it all: a declared
 * Content-Length over the limit is refused at once, a chunked body as soon as it passes the limit.
 */
export async function readBodyWithLimit(event: H3Event, limit: number): Promise<Buffer | undefined> {
  const req = event.node.req;
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) throw tooLarge(limit);
  if (req.method === 'GET' || req.method === 'HEAD') return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  let overflow = false;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) overflow = true;
    // Past the limit the rest is read and dropped, not buffered: answering before the request is fully
    // read makes Node tear the socket down under the response (the server's requestTimeout bounds this).
    if (!overflow) chunks.push(chunk);
  }
  if (overflow) throw tooLarge(limit);
  return size === 0 ? undefined : Buffer.concat(chunks, size);
}

function tooLarge(limit: number): AppError {
  return new AppError('payload-too-large', `Request body is larger than the limit of ${limit} bytes.`);
}

export function parseJsonBody(raw: Buffer | undefined): unknown {
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (error) {
    throw new AppError('parameters-invalid', `Request body is not valid JSON: ${(error as Error).message}`);
  }
}
