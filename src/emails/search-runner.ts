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
 * Runs email searches on a worker thread with its own read connection (search-worker.ts), so a slow
 * search never stalls sending; inline on the main connection when there is no worker script or the
 * database is in memory. Answers are the raw rows; the service presents them (signed links).
 */
export interface SearchRunner {
  search(projectId: string, input: SearchEmailsInput): Promise<SearchPage<EmailRow>>;
  /** Closes the worker's connection; call before the main connection closes. */
  close(): Promise<void>;
}

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
  // Started on the first search: an appliance that is never searched (most CI sandboxes) pays nothing.
  let runner: SearchRunner | undefined;
  let closed = false;
  return {
    search(projectId, input) {
      if (closed) return inline.search(projectId, input);
      runner ??= createWorkerRunner(spawnWorker(script, { workerData: { path: sqlite.name } }), inline, log);
      return runner.search(projectId, input);
    },
    async close() {
      closed = true;
      await runner?.close();
    },
  };
}

function createWorkerRunner(worker: Worker, inline: SearchRunner, log: Logger): SearchRunner {
  const pending = new Map<number, { resolve: (page: SearchPage<EmailRow>) => void; reject: (error: Error) => void }>();
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
    // Searches carry on inline; the ones in flight are answered with a generic 500.
    log.error('search worker failed; searching on the main thread from now on', { error });
    failed = true;
    for (const [id, waiter] of pending) {
      pending.delete(id);
      waiter.reject(error);
    }
  };
  worker.on('error', fail);
  worker.on('exit', (code) => {
    if (!closing && !failed) fail(new Error(`search worker exited (code ${code})`));
  });
  return {
    search(projectId, input) {
      if (failed || closing) return inline.search(projectId, input);
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
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
