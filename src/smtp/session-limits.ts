import type { SMTPServerDataStream } from 'smtp-server';

/**
 * Most concurrent sessions per listener; past this smtp-server answers `421 Too many connected clients`
 * and senders retry. An inbound session keeps at most the first `keepBytes` of a message in memory, a
 * submission session at most 64 kB (larger messages go to the spool, message-spool.ts).
 */
export const maxSessionsPerListener = 500;

/**
 * How long a stopping listener lets open sessions finish before it answers them `421` and closes them
 * (smtp-server's default, 30 s, is past the 10 s a stop may take). A client idling on the port would
 * otherwise hold the shutdown for all of it; a message cut off this way was not accepted, so its sender
 * retries it.
 */
export const smtpCloseTimeoutMs = 3_000;

/**
 * Sessions at once from one address, on the inbound and the submission listener. An MTA delivers over a few connections; a
 * host trickling a byte a minute into each of `maxSessionsPerListener` sessions (every one resets the
 * idle timer) would otherwise shut every real mail server out.
 */
export const maxSessionsPerAddress = 20;

/** Counts open sessions by remote address; a refused session is not counted, so its close releases nothing. */
export function createSessionsPerAddress(max: number) {
  const open = new Map<string, number>();
  const admitted = new Set<string>();
  return {
    admit(sessionId: string, address: string): boolean {
      const count = open.get(address) ?? 0;
      if (count >= max) return false;
      open.set(address, count + 1);
      admitted.add(sessionId);
      return true;
    },
    release(sessionId: string, address: string): void {
      if (!admitted.delete(sessionId)) return;
      const count = (open.get(address) ?? 1) - 1;
      if (count > 0) open.set(address, count);
      else open.delete(address);
    },
  };
}

/**
 * Reads a DATA stream, or its first `keepBytes`, into one Buffer (the inbound reports are read from their
 * first MiB: a session holds no more than that, whatever the SIZE limit), or `undefined` when it passed
 * the SIZE limit. smtp-server keeps reading past the limit (it flags `sizeExceeded` and lets the caller
 * answer at the end), so chunks past it are dropped as they come: a client streaming an endless DATA
 * costs no memory. `stream.byteLength` still tells the whole size.
 */
export function readMessage(stream: SMTPServerDataStream, keepBytes = Number.POSITIVE_INFINITY): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let kept = 0;
  const exceeded = () => stream.sizeExceeded === true;
  return new Promise((resolve) => {
    stream.on('data', (chunk: Buffer) => {
      if (exceeded() || kept >= keepBytes) return;
      const part = kept + chunk.length > keepBytes ? chunk.subarray(0, keepBytes - kept) : chunk;
      chunks.push(part);
      kept += part.length;
    });
    stream.on('end', () => {
      if (exceeded()) chunks.length = 0;
      resolve(exceeded() ? undefined : Buffer.concat(chunks));
    });
  });
}
