import { AppError, type ErrorCode } from '../lib/errors.js';
import type { Outcome } from './batch-transaction.js';

// Messages between the writer thread (writer-worker.ts) and the write queue's side (writer-thread.ts).

/** One write procedure (write-procedures.ts) with its structured-cloneable arguments. */
export interface ProcedureCall {
  name: string;
  args: unknown;
}

export interface WriterRequest {
  id: number;
  calls: ProcedureCall[];
}

/**
 * The answer to a request: its transaction is over (the write lock is free). Under synchronous=FULL on a
 * WAL file the commit skipped the fsync; the write queue syncs the WAL before any caller hears of it.
 */
export type WriterMessage = 'ready' | 'closed' | { id: number; outcomes: WireOutcome[]; commitError?: WireError };

export type WireOutcome = { ok: true; value: unknown } | { ok: false; error: WireError };

export interface WireError {
  message: string;
  /** SQLite's code (SQLITE_CONSTRAINT_…) or, with `appError`, the AppError code. */
  code?: string;
  appError?: boolean;
  details?: Record<string, unknown>;
}

/** Errors cross the thread boundary as data; an AppError stays an AppError (it maps to an API answer). */
export function toWire(outcome: Outcome): WireOutcome {
  return outcome.ok ? outcome : { ok: false, error: toWireError(outcome.error) };
}

export function toWireError(thrown: unknown): WireError {
  const error = thrown as { message?: unknown; code?: unknown; details?: Record<string, unknown> } | undefined;
  return {
    message: String(error?.message ?? thrown),
    code: typeof error?.code === 'string' ? error.code : undefined,
    appError: thrown instanceof AppError || undefined,
    details: thrown instanceof AppError ? thrown.details : undefined,
  };
}

export function fromWire(outcome: WireOutcome): Outcome {
  return outcome.ok ? outcome : { ok: false, error: fromWireError(outcome.error) };
}

export function fromWireError({ message, code, appError, details }: WireError): Error {
  if (appError) return new AppError(code as ErrorCode, message, details);
  return Object.assign(new Error(message), code ? { code } : {});
}
