import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { AppError } from '../lib/errors.js';
import { searchEmails, type SearchPage } from './search.js';
import type { SearchEmailsInput } from './schemas.js';

/**
 * Worker-thread entry (search-runner.ts): email search on its own read connection. WAL readers see every
 * committed row without blocking the writer, and a slow query (a text term under 3 characters cannot use
 * the trigram index and scans) takes this thread, not the event loop that accepts mail.
 */
export interface SearchRequest {
  id: number;
  projectId: string;
  input: SearchEmailsInput;
}

export type SearchReply =
  | { id: number; page: SearchPage<unknown> }
  | { id: number; error: { code?: string; message: string; details?: Record<string, unknown> } };

const sqlite = new Database((workerData as { path: string }).path);
sqlite.pragma('busy_timeout = 5000');
sqlite.pragma('query_only = 1');

parentPort!.on('message', (message: SearchRequest | 'close') => {
  if (message === 'close') {
    sqlite.close();
    parentPort!.postMessage('closed');
    return;
  }
  parentPort!.postMessage(run(message));
});

function run(request: SearchRequest): SearchReply {
  try {
    return { id: request.id, page: searchEmails(sqlite, request.projectId, request.input, (row) => row) };
  } catch (error) {
    if (error instanceof AppError) return { id: request.id, error: { code: error.code, message: error.message, details: error.details } };
    return { id: request.id, error: { message: (error as Error)?.stack ?? String(error) } };
  }
}
