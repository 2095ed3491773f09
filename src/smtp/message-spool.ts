import { createWriteStream, mkdirSync, readdirSync, rmSync, type WriteStream } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import type { SMTPServerDataStream } from 'smtp-server';
import { smallBodyBytes, type MemoryBudget, type MemoryReservation } from '../lib/memory-budget.js';

/**
 * A submitted message between its DATA and its parsing. Parsing waits for room in the memory budget
 * (lib/memory-budget.ts), and a message read into memory held all of its bytes while it waited: 60
 * clients sending 24 MB messages at once took the process to 3.7 GB. A message of `memoryBytes` or more
 * is written to a file of the spool directory as it arrives instead, so a waiting session holds a file,
 * and its bytes come back into memory only once it has room. Smaller ones (every ordinary message) stay
 * in memory and never touch the disk.
 */
export interface SpooledMessage {
  readonly size: number;
  contents(): Promise<Buffer>;
  /** Removes its file, if it has one. Idempotent. */
  discard(): Promise<void>;
}

export type SpoolOutcome =
  | { kind: 'received'; message: SpooledMessage }
  /** Past the SIZE limit: smtp-server reads on to the final dot, the bytes past the limit are dropped. */
  | { kind: 'too-large' }
  /** The spool file could not be written (a full disk, a failing one): the client should try again later. */
  | { kind: 'storage-failed'; error: Error }
  /** The client went away before the final dot: there is nobody to answer. */
  | { kind: 'aborted' };

export interface MessageSpool {
  read(stream: SMTPServerDataStream): Promise<SpoolOutcome>;
}

/**
 * The spool keeps nothing across restarts: a file left by a stopped process belongs to a message that
 * was never answered 250, so its client sends it again. The directory is emptied when the spool is made.
 */
export function createMessageSpool(directory: string, memoryBytes = smallBodyBytes): MessageSpool {
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  for (const leftover of readdirSync(directory)) rmSync(join(directory, leftover), { force: true, recursive: true });
  let sequence = 0;
  return {
    read: (stream) =>
      readInto(stream, memoryBytes, () => {
        // Made again when gone (an operator's clean-up): every message of 64 kB or more was refused until a restart.
        mkdirSync(directory, { recursive: true, mode: 0o700 });
        return join(directory, `${process.pid}-${++sequence}.eml`);
      }),
  };
}

function readInto(stream: SMTPServerDataStream, memoryBytes: number, nextPath: () => string): Promise<SpoolOutcome> {
  const chunks: Buffer[] = [];
  let size = 0;
  let file: { path: string; stream: WriteStream } | undefined;
  let writeError: Error | undefined;

  const startFile = () => {
    let path: string;
    try {
      path = nextPath();
    } catch (error) {
      // Thrown here, in a data listener, it would have ended the process.
      writeError = error as Error;
      chunks.length = 0;
      return;
    }
    const output = createWriteStream(path, { flags: 'wx', mode: 0o600 });
    output.on('error', (error) => {
      writeError ??= error;
      stream.resume(); // read the rest of the message to its final dot, dropping it, so the reply can be sent
    });
    for (const chunk of chunks.splice(0)) output.write(chunk);
    file = { path, stream: output };
  };

  return new Promise((resolve) => {
    stream.on('data', (chunk: Buffer) => {
      if (stream.sizeExceeded === true || writeError) return;
      size += chunk.length;
      if (!file) {
        chunks.push(chunk);
        if (size >= memoryBytes) startFile();
        return;
      }
      // Backpressure: smtp-server stops reading the socket while its data stream is paused.
      if (!file.stream.write(chunk)) {
        stream.pause();
        file.stream.once('drain', () => stream.resume());
      }
    });
    stream.on('end', () => {
      if (!file && writeError) {
        resolve({ kind: 'storage-failed', error: writeError });
        return;
      }
      if (!file) {
        resolve(stream.sizeExceeded === true ? { kind: 'too-large' } : { kind: 'received', message: inMemory(Buffer.concat(chunks)) });
        return;
      }
      const { path } = file;
      void settleFile(file, () => writeError).then((error) => {
        if (error) resolve({ kind: 'storage-failed', error });
        else if (stream.sizeExceeded === true) void removeFile(path).then(() => resolve({ kind: 'too-large' }));
        else resolve({ kind: 'received', message: onDisk(path, size) });
      });
    });
    // smtp-server destroys the data stream when the connection closes before the final dot.
    stream.on('close', () => {
      if (stream.readableEnded) return;
      chunks.length = 0;
      if (!file) return resolve({ kind: 'aborted' });
      const { path } = file;
      void settleFile(file, () => writeError)
        .then(() => removeFile(path))
        .then(() => resolve({ kind: 'aborted' }));
    });
    stream.on('error', () => {}); // the close above tells it; without a listener smtp-server destroys it silently
  });
}

/** Ends the file and waits for it to be written and closed; a failed write removes it. Resolves with the write's error. */
async function settleFile(file: { path: string; stream: WriteStream }, writeError: () => Error | undefined): Promise<Error | undefined> {
  if (!file.stream.destroyed) file.stream.end();
  try {
    await finished(file.stream);
  } catch {
    // the 'error' listener recorded it
  }
  const error = writeError();
  if (error) await removeFile(file.path);
  return error;
}

function inMemory(raw: Buffer): SpooledMessage {
  return { size: raw.length, contents: async () => raw, discard: async () => {} };
}

function onDisk(path: string, size: number): SpooledMessage {
  return { size, contents: () => readFile(path), discard: () => removeFile(path) };
}

/** A file that cannot be removed (its directory gone) is left for the next start to clear. */
const removeFile = (path: string) => rm(path, { force: true }).catch(() => {});

export type BudgetedOutcome<T> = Exclude<SpoolOutcome, { kind: 'received' }> | { kind: 'used'; value: T };

/**
 * A listener's way from DATA to its message: spooled as it arrives, then handed to `use` once the memory
 * budget has room for it (parsed and stored, a message takes several times its size: lib/memory-budget.ts),
 * its file discarded after. A session that closes while its message waits leaves the queue (`aborted`:
 * its client never heard 250, so it sends again): the listener calls `sessionClosed` from its onClose.
 */
export function createBudgetedReader(spool: MessageSpool, memoryBudget: MemoryBudget | undefined) {
  const leaveOnClose = new Map<string, () => void>();

  /** Waits for the room; false when the session closed first. */
  const roomOrClose = (room: MemoryReservation, sessionId: string): Promise<boolean> =>
    new Promise<boolean>((resolve) => {
      leaveOnClose.set(sessionId, () => resolve(false));
      void room.granted.then(() => resolve(true));
    }).finally(() => leaveOnClose.delete(sessionId));

  return {
    sessionClosed: (sessionId: string) => leaveOnClose.get(sessionId)?.(),

    async read<T>(stream: SMTPServerDataStream, sessionId: string, use: (raw: Buffer) => Promise<T>): Promise<BudgetedOutcome<T>> {
      const outcome = await spool.read(stream);
      if (outcome.kind !== 'received') return outcome;
      const { message } = outcome;
      const room = memoryBudget?.reserve(message.size);
      try {
        if (room && !(await roomOrClose(room, sessionId))) return { kind: 'aborted' };
        return { kind: 'used', value: await use(await message.contents()) };
      } finally {
        room?.release();
        await message.discard();
      }
    },
  };
}
