import { AppError, deletedMeanwhile, errorCodes, isAppError, isStorageBusy, isStorageFull, storageBusy, storageFull, type ErrorCode } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { ClientGoneError } from './body.js';
import { cutToLength } from '../lib/text.js';

/** The compatible error body every SDK reads (COMPAT.md "Transport"). */
export interface ErrorBody {
  developerMessage: string;
  errorCode: ErrorCode;
  moreInfo: string;
  [extra: string]: unknown;
}

/** Where the error codes are documented; a path in this repository, since the appliance has no website. */
const docsBase = 'docs/errors.md#';

export function statusFor(code: ErrorCode): number {
  return errorCodes[code];
}

/** No message needs more; one that quotes what a client sent stays bounded whatever was sent. */
const developerMessageMaxChars = 4_000;

export function errorBody(error: AppError): ErrorBody {
  const message = error.message.length > developerMessageMaxChars ? `${cutToLength(error.message, developerMessageMaxChars)}…` : error.message;
  return { developerMessage: message, errorCode: error.code, moreInfo: docsBase + error.code, ...error.details };
}

/**
 * Anything that is not an AppError is a bug or an outage: log it with its stack, answer a generic 500
 * that reveals nothing of the internals (DESIGN convention 1). A full disk is an outage the client
 * should know about: 507 storage-full, so it retries later instead of reporting a bug.
 */
export function toAppError(error: unknown, log: Logger, context: Record<string, unknown>): AppError {
  if (isAppError(error)) return error;
  if (isStorageFull(error)) {
    log.warn('storage full: request refused', { ...context, error: (error as Error).message });
    return storageFull();
  }
  if (isStorageBusy(error)) {
    // Another process holds the write lock: an outage the client can wait out (503 and Retry-After), not a bug.
    log.warn('storage busy: request refused while another process holds the database write lock', { ...context, error: (error as Error).message });
    return storageBusy();
  }
  if ((error as { code?: unknown } | undefined)?.code === 'SQLITE_CONSTRAINT_FOREIGNKEY') {
    // Authenticated, then its project (or what it named) was deleted before its write committed, e.g. a
    // send in flight while DELETE /v1/project ran: the write rolled back, which is no bug of ours.
    log.warn('request refused: what it refers to was deleted meanwhile', { ...context, error: (error as Error).message });
    return deletedMeanwhile();
  }
  if (error instanceof ClientGoneError) {
    if (error.byStop) log.warn('request cut by the stop: its body was still arriving after the stop\'s grace', context);
    else log.info('request abandoned by the client', context);
    return new AppError('parameters-invalid', 'The request body was not sent completely.');
  }
  log.error('unhandled error', { ...context, error });
  return new AppError('internal-error', 'An unexpected error occurred. It has been logged.');
}
