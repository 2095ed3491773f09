import { availableParallelism } from 'node:os';
import type { Worker } from 'node:worker_threads';
import type { Logger } from '../lib/logger.js';
import { findWorkerScript, spawnWorker } from '../lib/worker-threads.js';
import type { BuildReply, BuildRequest } from './build-worker.js';
import { composeMessage, type ComposeInput } from './compose.js';
import { createInlineDkimSigner, type DkimKey } from './dkim.js';

/**
 * Compose + sign, on a pool of worker threads when the worker script is found beside this code (src/ under
 * tsx, dist/ in the bundle), inline otherwise. The pool is the difference between the event loop doing
 * ~1 ms of CPU per message and ~0.1 ms (a postMessage each way, the builds of one turn posted together).
 */
export interface MessageBuilder {
  build(input: ComposeInput, key: DkimKey | undefined, timestampSec: number): Promise<Buffer>;
  readonly threads: number;
  /**
   * True while its threads keep stopping and none answers a build: more threads lost in a row than
   * there are slots (a thread that cannot load, a bad deploy of dist/delivery-worker.js). Nothing can be
   * built then, so nothing is delivered, and every email stays queued without an event.
   */
  readonly failing: boolean;
  close(): Promise<void>;
}

/**
 * A build whose thread died under it (out of memory, a crash in native code). Nothing is wrong with the
 * message: the job is tried again shortly instead of being marked `error`.
 */
export class BuilderThreadLost extends Error {
  constructor(cause: unknown) {
    super(`the compose/sign thread stopped: ${(cause as Error)?.message ?? String(cause)}`);
    this.name = 'BuilderThreadLost';
  }
}

/** A lost thread is replaced after this long: a thread that dies at start-up does not respawn in a loop. */
const respawnDelayMs = 1_000;

interface Slot {
  worker?: Worker;
  /** Builds sent to this slot's thread and not answered yet. */
  ids: Set<number>;
  /**
   * Builds asked for in this turn of the event loop, posted together at its end: a claim's messages
   * come to be built ~20 at a time, and each postMessage to an idle thread is a wake-up across vCPUs.
   * One post per batch took the event loop's CPU per delivered message down ~6 % (docs/benchmarks.md).
   */
  outbox: BuildRequest[];
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
  let closing = false;
  /** Threads lost since a thread last answered a build (see `failing`). */
  let lostInARow = 0;

  const settle = (slot: Slot, reply: BuildReply) => {
    lostInARow = 0;
    const waiter = pending.get(reply.id);
    if (!waiter) return;
    pending.delete(reply.id);
    slot.ids.delete(reply.id);
    if ('message' in reply) waiter.resolve(Buffer.from(reply.message.buffer, reply.message.byteOffset, reply.message.byteLength));
    else waiter.reject(new Error(`compose/sign failed: ${reply.error}`));
  };

  /** Only this thread's builds fail, as retryable; the others' threads go on. Then the slot gets a new thread. */
  const lose = (slot: Slot, worker: Worker, cause: unknown) => {
    if (slot.worker !== worker) return; // 'error' and 'exit' both report one loss
    slot.worker = undefined;
    lostInARow++;
    const lost = new BuilderThreadLost(cause);
    for (const id of slot.ids) {
      pending.get(id)?.reject(lost);
      pending.delete(id);
    }
    slot.ids.clear();
    slot.outbox = [];
    if (closing) return;
    options.log.error('delivery worker thread stopped; starting another', { error: cause });
    setTimeout(() => start(slot), respawnDelayMs).unref();
  };

  const start = (slot: Slot) => {
    if (closing) return;
    const worker = spawnWorker(script);
    worker.unref();
    slot.worker = worker;
    worker.on('message', (reply: BuildReply) => settle(slot, reply));
    worker.on('error', (error) => lose(slot, worker, error));
    worker.on('exit', (code) => lose(slot, worker, new Error(`exited with code ${code}`)));
  };

  const slots: Slot[] = Array.from({ length: size }, () => ({ ids: new Set<number>(), outbox: [] }));
  for (const slot of slots) start(slot);

  /** Sends the slot's outbox to its thread (a thread lost meanwhile took its builds with it: see lose). */
  const post = (slot: Slot) => {
    const batch = slot.outbox;
    slot.outbox = [];
    if (batch.length > 0) slot.worker?.postMessage(batch);
  };

  /** The next slot with a running thread, round robin. */
  const nextSlot = (): Slot | undefined => {
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[turn++ % slots.length];
      if (slot.worker) return slot;
    }
    return undefined;
  };

  return {
    threads: size,
    get failing() {
      return lostInARow > size;
    },
    build(input, key, timestampSec) {
      const slot = nextSlot();
      if (!slot) return Promise.reject(new BuilderThreadLost(new Error('no compose/sign thread is running')));
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        slot.ids.add(id);
        if (slot.outbox.push({ id, input, key, timestampSec }) === 1) queueMicrotask(() => post(slot));
      });
    },
    async close() {
      closing = true;
      await Promise.all(slots.map((slot) => slot.worker?.terminate()));
    },
  };
}

function createInlineBuilder(): MessageBuilder {
  const signer = createInlineDkimSigner();
  return {
    threads: 0,
    failing: false,
    async build(input, key, timestampSec) {
      const composed = composeMessage(input);
      return key ? signer.sign(composed, key, timestampSec) : composed;
    },
    close: async () => {},
  };
}
