import type { Worker } from 'node:worker_threads';
import type { Sqlite } from '../db/client.js';
import { AppError, type ErrorCode } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { findWorkerScript, spawnWorker } from '../lib/worker-threads.js';
import type { EmailRow } from './repo.js';
import type { SearchEmailsInput } from './schemas.js';
import { searchEmails, type SearchPage } from './search.js';
import type { SearchReply, SearchRequest } from './search-worker.js';

/**
 * Runs email searches on worker threads, each with its own read connection (search-worker.ts), so a slow
 * search never stalls sending; inline on the main connection when there is no worker script or the
 * database is in memory. Answers are the raw rows; the service presents them (signed links).
 */
export interface SearchRunner {
  search(projectId: string, input: SearchEmailsInput): Promise<SearchPage<EmailRow>>;
  /** Closes the workers' connections; call before the main connection closes. */
  close(): Promise<void>;
}

/**
 * Search threads at most. A search that scans (text under 3 characters, which the trigram index cannot
 * serve, over a large project: seconds) holds its thread; the next searches go to the other one.
 */
const searchThreads = 2;

export function createSearchRunner(sqlite: Sqlite, log: Logger): SearchRunner {
  const inline: SearchRunner = {
    search: async (projectId, input) => searchEmails(sqlite, projectId, input, (row) => row),
    close: async () => {},
  };
  const inMemory = sqlite.memory || sqlite.name === '' || sqlite.name === ':memory:';
  const script = inMemory ? undefined : findWorkerScript(import.meta.url, 'search-worker.js', 'search-worker.ts');
  if (!script) {
    if (!inMemory) log.warn('search worker script not found; searching on the main thread');
    return inline;
  }
  // Threads start on demand: an appliance that is never searched (most CI sandboxes) pays nothing, and
  // the second starts only when a search arrives while the first is busy.
  const runners: WorkerRunner[] = [];
  let closed = false;
  const pickRunner = (): SearchRunner => {
    // A thread that stopped is not replaced (a thread that cannot start must not respawn per search):
    // the other one serves, and with none left searches run inline.
    const live = runners.filter((runner) => !runner.failed);
    const idle = live.find((runner) => runner.pending === 0);
    if (idle) return idle;
    if (runners.length < searchThreads) {
      const runner = createWorkerRunner(spawnWorker(script, { workerData: { path: sqlite.name } }), inline, log);
      runners.push(runner);
      return runner;
    }
    if (live.length === 0) return inline;
    // The fewest searches waiting; on a tie, the thread busy for the shortest time, so a search does not
    // queue behind a long scan while the other thread is only finishing a lookup.
    return live.reduce((best, runner) =>
      runner.pending < best.pending || (runner.pending === best.pending && (runner.busySince ?? 0) > (best.busySince ?? 0)) ? runner : best,
    );
  };
  return {
    search(projectId, input) {
      if (closed) return inline.search(projectId, input);
      return pickRunner().search(projectId, input);
    },
    async close() {
      closed = true;
      await Promise.all(runners.map((runner) => runner.close()));
    },
  };
}

interface WorkerRunner extends SearchRunner {
  /** Searches sent to this thread and not answered yet. */
  readonly pending: number;
  /** The thread stopped; its searches run inline. */
  readonly failed: boolean;
  /** When the oldest search still waiting on this thread was sent (undefined when none waits). */
  readonly busySince: number | undefined;
}

function createWorkerRunner(worker: Worker, inline: SearchRunner, log: Logger): WorkerRunner {
  const pending = new Map<number, { resolve: (page: SearchPage<EmailRow>) => void; reject: (error: Error) => void; sentAt: number }>();
  let nextId = 0;
  let failed = false;
  let closing: Promise<void> | undefined;
  worker.unref();
  worker.on('message', (reply: SearchReply | 'closed') => {
    if (reply === 'closed') return;
    const waiter = pending.get(reply.id);
    if (!waiter) return;
    pending.delete(reply.id);
    if ('page' in reply) waiter.resolve(reply.page as SearchPage<EmailRow>);
    else if (reply.error.code) waiter.reject(new AppError(reply.error.code as ErrorCode, reply.error.message, reply.error.details));
    else waiter.reject(new Error(`search failed in the search worker: ${reply.error.message}`));
  });
  const fail = (error: Error) => {
    // Later searches go to the other search thread, or inline when none is left; the ones in flight
    // are answered with a generic 500.
    log.error('search worker failed; its searches go to another search thread or the main thread from now on', { error });
    failed = true;
    for (const [id, waiter] of pending) {
      pending.delete(id);
      waiter.reject(error);
    }
  };
  worker.on('error', fail);
  worker.on('exit', (code) => {
    if (!closing && !failed) return fail(new Error(`search worker exited (code ${code})`));
    // Exited while closing: searches still waiting for it get an answer too.
    for (const [id, waiter] of pending) {
      pending.delete(id);
      waiter.reject(new Error('the search thread closed'));
    }
  });
  return {
    get pending() {
      return pending.size;
    },
    get failed() {
      return failed;
    },
    get busySince() {
      // Map order is insertion order: the first entry is the oldest search still waiting.
      for (const waiter of pending.values()) return waiter.sentAt;
      return undefined;
    },
    search(projectId, input) {
      if (failed || closing) return inline.search(projectId, input);
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject, sentAt: performance.now() });
        worker.postMessage({ id, projectId, input } satisfies SearchRequest);
      });
    },
    close() {
      closing ??= (async () => {
        if (!failed) {
          const closed = new Promise<void>((resolve) => {
            worker.on('message', (reply) => reply === 'closed' && resolve());
            worker.once('exit', () => resolve());
          });
          worker.postMessage('close');
          await closed;
        }
        await worker.terminate();
      })();
      return closing;
    },
  };
}
