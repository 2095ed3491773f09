import { availableParallelism } from 'node:os';
import type { Logger } from '../lib/logger.js';
import { findWorkerScript, spawnWorker } from '../lib/worker-threads.js';
import type { BuildReply } from './build-worker.js';
import { composeMessage, type ComposeInput } from './compose.js';
import { createInlineDkimSigner, type DkimKey } from './dkim.js';

/**
 * Compose + sign, on a pool of worker threads when the worker script is found beside this code (src/ under
 * tsx, dist/ in the bundle), inline otherwise. The pool is the difference between the event loop doing
 * ~1 ms of CPU per message and ~0.1 ms (a postMessage each way).
 */
export interface MessageBuilder {
  build(input: ComposeInput, key: DkimKey | undefined, timestampSec: number): Promise<Buffer>;
  readonly threads: number;
  close(): Promise<void>;
}

export function createMessageBuilder(options: { threads: number; log: Logger }): MessageBuilder {
  const script = findWorkerScript(import.meta.url, 'delivery-worker.js', 'build-worker.ts');
  if (!script) {
    options.log.warn('delivery worker script not found; composing and signing on the main thread');
    return createInlineBuilder();
  }
  const size = options.threads > 0 ? options.threads : Math.max(1, Math.min(4, availableParallelism()));
  const pending = new Map<number, { resolve: (message: Buffer) => void; reject: (error: Error) => void }>();
  let nextId = 0;
  let turn = 0;
  const workers = Array.from({ length: size }, () => {
    const worker = spawnWorker(script);
    worker.unref();
    worker.on('message', (reply: BuildReply) => {
      const waiter = pending.get(reply.id);
      if (!waiter) return;
      pending.delete(reply.id);
      if ('message' in reply) waiter.resolve(Buffer.from(reply.message.buffer, reply.message.byteOffset, reply.message.byteLength));
      else waiter.reject(new Error(`compose/sign failed: ${reply.error}`));
    });
    worker.on('error', (error) => {
      options.log.error('delivery worker thread failed', { error });
      for (const [id, waiter] of pending) {
        pending.delete(id);
        waiter.reject(error);
      }
    });
    return worker;
  });
  return {
    threads: size,
    build(input, key, timestampSec) {
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        workers[turn++ % workers.length].postMessage({ id, input, key, timestampSec });
      });
    },
    async close() {
      await Promise.all(workers.map((worker) => worker.terminate()));
    },
  };
}

function createInlineBuilder(): MessageBuilder {
  const signer = createInlineDkimSigner();
  return {
    threads: 0,
    async build(input, key, timestampSec) {
      const composed = composeMessage(input);
      return key ? signer.sign(composed, key, timestampSec) : composed;
    },
    close: async () => {},
  };
}
