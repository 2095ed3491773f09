import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { findContacts, type ContactQueryPage } from '../contacts/find.js';
import type { QueryContactsInput } from '../contacts/schemas.js';
import * as schema from '../db/schema/index.js';
import { AppError } from '../lib/errors.js';
import { searchEmails, type SearchPage } from './search.js';
import type { SearchEmailsInput } from './schemas.js';

/**
 * Worker-thread entry (search-runner.ts): email searches and contact queries on its own read connection.
 * WAL readers see every committed row without blocking the writer, and a slow query (a text term under 3
 * characters cannot use the trigram index and scans; a contact query of many rules reads every contact)
 * takes this thread, not the event loop that accepts mail.
 */
export type SearchRequest =
  | { id: number; kind: 'emails'; projectId: string; input: SearchEmailsInput }
  | { id: number; kind: 'contacts'; projectId: string; input: QueryContactsInput; nowMs: number };

export type SearchReply =
  | { id: number; page: SearchPage<unknown> | ContactQueryPage }
  | { id: number; error: { code?: string; message: string; details?: Record<string, unknown> } };

const sqlite = new Database((workerData as { path: string }).path);
sqlite.pragma('busy_timeout = 5000');
sqlite.pragma('query_only = 1');
const db = drizzle(sqlite, { schema });

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
    if (request.kind === 'contacts') return { id: request.id, page: findContacts(db, request.projectId, request.input, request.nowMs) };
    return { id: request.id, page: searchEmails(sqlite, request.projectId, request.input, (row) => row) };
  } catch (error) {
    if (error instanceof AppError) return { id: request.id, error: { code: error.code, message: error.message, details: error.details } };
    return { id: request.id, error: { message: (error as Error)?.stack ?? String(error) } };
  }
}
