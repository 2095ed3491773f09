import type { SMTPServerDataStream } from 'smtp-server';

/**
 * Most concurrent sessions per listener. Each one may hold a message of up to the SIZE limit in memory
 * while it is read; past this smtp-server answers `421 Too many connected clients` and senders retry.
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
 * Reads a DATA stream into one Buffer, or `undefined` when it passed the SIZE limit. smtp-server keeps
 * reading past the limit (it flags `sizeExceeded` and lets the caller answer at the end), so chunks past
 * it are dropped as they come: a client streaming an endless DATA costs no memory.
 */
export function readMessage(stream: SMTPServerDataStream): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  const exceeded = () => stream.sizeExceeded === true;
  return new Promise((resolve) => {
    stream.on('data', (chunk: Buffer) => {
      if (!exceeded()) chunks.push(chunk);
    });
    stream.on('end', () => {
      if (exceeded()) chunks.length = 0;
      resolve(exceeded() ? undefined : Buffer.concat(chunks));
    });
  });
}
