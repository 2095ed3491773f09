import { drizzle } from 'drizzle-orm/better-sqlite3';
import type { Worker } from 'node:worker_threads';
import { findContacts, type ContactQueryPage } from '../contacts/find.js';
import type { QueryContactsInput } from '../contacts/schemas.js';
import type { Db, Sqlite } from '../db/client.js';
import * as schema from '../db/schema/index.js';
import { AppError, type ErrorCode } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { findWorkerScript, spawnWorker } from '../lib/worker-threads.js';
import type { StoredEmailRow } from './repo.js';
import type { SearchEmailsInput } from './schemas.js';
import { mayScanProject, searchEmails, type SearchPage } from './search.js';
import type { SearchReply, SearchRequest } from './search-worker.js';

/**
 * Runs email searches and contact queries on worker threads, each with its own read connection
 * (search-worker.ts), so a slow one never stalls sending; inline on the main connection when there is
 * no worker script or the database is in memory. Answers are the raw rows; the services present them.
 */
export interface SearchRunner {
  search(projectId: string, input: SearchEmailsInput): Promise<SearchPage<StoredEmailRow>>;
  /** A contact query (contacts/find.ts), on the scan lane: it may read every contact of the project. */
  queryContacts(projectId: string, input: QueryContactsInput, nowMs: number): Promise<ContactQueryPage>;
  /** Closes the workers' connections; call before the main connection closes. */
  close(): Promise<void>;
}

/** A request as the runner sends it; the thread's runner numbers it. */
type Request = SearchRequest extends infer R ? (R extends SearchRequest ? Omit<R, 'id'> : never) : never;

/** Where a request runs: a search thread, or the main connection. */
interface Searcher {
  ask(request: Request): Promise<unknown>;
}

/** A thread that stopped is replaced after this long, doubled for each one in a row that stopped before answering. */
const restartDelayMs = 1_000;
const maxRestartDelayMs = 5 * 60_000;

export interface SearchRunnerOptions {
  /** Starts a search thread; tests pass one that keeps the threads it starts. */
  spawn?: typeof spawnWorker;
  restartDelayMs?: number;
}

/**
 * Two search threads at most, in two lanes. A search that may scan (a text under 3 characters, which
 * the trigram index cannot serve: seconds over a large project) runs on the scan lane, behind the other
 * scans; the rest go to the lookup lane, or to the scan lane while it is idle. So scans never hold both
 * threads, as two at once did when a search-as-you-type client sent "a" and then "ab".
 */
export function createSearchRunner(sqlite: Sqlite, log: Logger, options: SearchRunnerOptions = {}): SearchRunner {
  let db: Db | undefined;
  const inline: Searcher = {
    ask: async (request) =>
      request.kind === 'contacts'
        ? findContacts((db ??= drizzle(sqlite, { schema })), request.projectId, request.input, request.nowMs)
        : searchEmails(sqlite, request.projectId, request.input, (row) => row),
  };
  const inMemory = sqlite.memory || sqlite.name === '' || sqlite.name === ':memory:';
  const script = inMemory ? undefined : findWorkerScript(import.meta.url, 'search-worker.js', 'search-worker.ts');
  if (!script) {
    if (!inMemory) log.warn('search worker script not found; searching on the main thread');
    return runnerOver(() => inline, () => inline, async () => {});
  }
  const spawn = options.spawn ?? spawnWorker;
  const baseDelay = options.restartDelayMs ?? restartDelayMs;
  // Threads start on demand: an appliance that is never searched (most CI sandboxes) pays nothing, and
  // the second starts when a search arrives while the first is busy.
  const scanLane = newLane();
  const lookupLane = newLane();
  let closed = false;

  const live = (lane: Lane): WorkerRunner | undefined => (lane.runner && !lane.runner.failed ? lane.runner : undefined);
  const idle = (lane: Lane): WorkerRunner | undefined => (live(lane)?.pending === 0 ? lane.runner : undefined);
  /** The lane's thread; started now if it has none, or if the one that stopped has waited out its delay. */
  const threadOf = (lane: Lane): WorkerRunner | undefined => {
    if (live(lane)) return lane.runner;
    if (lane.runner && performance.now() < lane.restartAt) return undefined;
    if (lane.runner) log.info('starting a search thread in place of the one that stopped');
    const runner = createWorkerRunner(spawn(script, { workerData: { path: sqlite.name } }), inline, log, () => {
      // A thread that cannot even start is retried less and less often, not once per search.
      lane.stoppedInARow = runner.answered ? 1 : lane.stoppedInARow + 1;
      lane.restartAt = performance.now() + Math.min(baseDelay * 2 ** (lane.stoppedInARow - 1), maxRestartDelayMs);
    });
    lane.runner = runner;
    return runner;
  };

  const unstarted = (lane: Lane): WorkerRunner | undefined => (lane.runner ? undefined : threadOf(lane));

  // With no thread to take it (both stopped a moment ago), a search runs on the main thread.
  const forScan = (): Searcher => (closed ? inline : (threadOf(scanLane) ?? live(lookupLane) ?? inline));
  // A lookup takes an idle thread, else starts a thread not started yet, else waits behind lookups.
  const forLookup = (): Searcher =>
    closed ? inline : (idle(lookupLane) ?? idle(scanLane) ?? unstarted(lookupLane) ?? unstarted(scanLane) ?? threadOf(lookupLane) ?? live(scanLane) ?? inline);
  return runnerOver(forScan, forLookup, async () => {
    closed = true;
    await Promise.all([scanLane, lookupLane].map((lane) => lane.runner?.close()));
  });
}

/** The runner's calls, each sent where `forScan` or `forLookup` says. */
function runnerOver(forScan: () => Searcher, forLookup: () => Searcher, close: () => Promise<void>): SearchRunner {
  return {
    search: (projectId, input) => {
      const searcher = mayScanProject(input.query ?? {}) ? forScan() : forLookup();
      return searcher.ask({ kind: 'emails', projectId, input }) as Promise<SearchPage<StoredEmailRow>>;
    },
    queryContacts: (projectId, input, nowMs) => forScan().ask({ kind: 'contacts', projectId, input, nowMs }) as Promise<ContactQueryPage>,
    close,
  };
}

interface Lane {
  runner?: WorkerRunner;
  /** Stops in a row of this lane's threads; a thread that had answered searches counts as the first. */
  stoppedInARow: number;
  /** When a thread may start in place of the one that stopped. */
  restartAt: number;
}

const newLane = (): Lane => ({ stoppedInARow: 0, restartAt: 0 });

interface WorkerRunner extends Searcher {
  close(): Promise<void>;
  /** Searches sent to this thread and not answered yet. */
  readonly pending: number;
  /** The thread stopped; searches sent to this runner run inline. */
  readonly failed: boolean;
  /** The thread answered at least one search (it did start). */
  readonly answered: boolean;
}

function createWorkerRunner(worker: Worker, inline: Searcher, log: Logger, onStop: () => void): WorkerRunner {
  const pending = new Map<number, { resolve: (page: unknown) => void; reject: (error: Error) => void }>();
  let nextId = 0;
  let failed = false;
  let answered = false;
  let closing: Promise<void> | undefined;
  worker.unref();
  worker.on('message', (reply: SearchReply | 'closed') => {
    if (reply === 'closed') return;
    const waiter = pending.get(reply.id);
    if (!waiter) return;
    pending.delete(reply.id);
    answered = true;
    if ('page' in reply) waiter.resolve(reply.page);
    else if (reply.error.code) waiter.reject(new AppError(reply.error.code as ErrorCode, reply.error.message, reply.error.details));
    else waiter.reject(new Error(`search failed in the search worker: ${reply.error.message}`));
  });
  const fail = (error: Error) => {
    // The searches in flight are answered with a generic 500; later ones go to the other lane's
    // thread (or inline when it has none) until this lane's thread is replaced.
    log.error('search worker failed; the searches it was running fail, the next ones go to another thread', { error });
    failed = true;
    for (const [id, waiter] of pending) {
      pending.delete(id);
      waiter.reject(error);
    }
    onStop();
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
    get answered() {
      return answered;
    },
    ask(request) {
      if (failed || closing) return inline.ask(request);
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        worker.postMessage({ ...request, id } satisfies SearchRequest);
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
