/**
 * The one error type services throw. The HTTP edge maps `code` to a status and the compatible body
 * `{developerMessage, errorCode, moreInfo}`; the SMTP edge maps it to a reply. Codes are a closed set so
 * every edge can map every code (see shared/COMPAT.md "Error codes").
 */
export const errorCodes = {
  'authentication-required': 401,
  'authentication-invalid': 401,
  'authentication-failed': 401,
  'parameters-invalid': 400,
  'to-address-invalid': 400,
  'from-address-unverified': 400,
  'template-not-found': 404,
  'sending-limit-exhausted': 403,
  'account-subscription-expired': 403,
  'account-unverified': 403,
  'email-sending-paused': 403,
  'resource-duplicate': 403,
  'not-found': 404,
  'method-not-allowed': 405,
  conflict: 409,
  'request-timeout': 408,
  'payload-too-large': 413,
  'unsupported-media-type': 415,
  'rate-limited': 429,
  'internal-error': 500,
  'storage-full': 507,
  'storage-busy': 503,
} as const;

export type ErrorCode = keyof typeof errorCodes;

export class AppError extends Error {
  readonly code: ErrorCode;
  /** Extra machine-readable detail merged into the error body (e.g. `retryAfter`). */
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = 'AppError';
    this.code = code;
    this.details = details;
  }
}

/**
 * An error whose answer carries headers of its own, which HTTP asks of some statuses: `Allow` on a 405,
 * `Accept-Encoding` on a 415 for a content coding. Kept out of the body, which keeps the compatible shape
 * (http/router.ts sendAppError sets them).
 */
export class AppErrorWithHeaders extends AppError {
  constructor(
    code: ErrorCode,
    message: string,
    readonly headers: Record<string, string>,
  ) {
    super(code, message);
  }
}

export function isAppError(value: unknown): value is AppError {
  return value instanceof AppError;
}

/**
 * SQLite's SQLITE_FULL (the disk or a quota is full, or the database hit its page limit) and the file
 * system's ENOSPC/EDQUOT (e.g. from the WAL's fdatasync). Nothing was stored; the same write succeeds
 * once there is room again, so the edges answer with a temporary error instead of a generic 500.
 */
export function isStorageFull(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return code === 'SQLITE_FULL' || code === 'ENOSPC' || code === 'EDQUOT';
}

export const storageFull = () =>
  new AppError('storage-full', 'The appliance is out of storage space, so nothing was stored. It accepts again as soon as there is room (free disk space on its data directory).');

/**
 * SQLite's SQLITE_BUSY (and its extended codes): another process holds the database's write lock (an
 * operator's `sqlite3 data/postino.sqlite` session inside BEGIN IMMEDIATE) longer than the appliance
 * waits for it (db/client.ts). Nothing was stored; the same write succeeds once the lock is released.
 */
export function isStorageBusy(error: unknown): boolean {
  if (isAppError(error)) return error.code === 'storage-busy';
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

/** Seconds a client is asked to wait (Retry-After) before it tries a write refused as storage-busy. */
export const storageBusyRetryAfterSeconds = 5;

export const storageBusy = () =>
  new AppError(
    'storage-busy',
    'Another process holds the database write lock (for example an open sqlite3 session on the data directory inside a transaction), so nothing was stored. Retry once it is released.',
    { retryAfter: storageBusyRetryAfterSeconds },
  );

/**
 * A write refused because a sync of the database failed earlier (db/write-queue.ts): nothing more is
 * stored until a restart. The failure is logged once, when it happens; the loops that retry every second
 * or so (delivery, webhooks, scheduler jobs) say their refusals at debug, as for a full disk, instead of
 * an error with its stack several times a second that buries that one line.
 */
export class StorageStopped extends AppError {
  constructor(message: string) {
    super('internal-error', message);
  }
}

export function isStorageStopped(error: unknown): boolean {
  return error instanceof StorageStopped;
}

/** The write queue's refusal once the database is closed at a stop (db/write-queue.ts). */
export const databaseClosedCode = 'DATABASE_CLOSED';

/**
 * Refusals that are the storage's state or a stop under way, not the fault of what was written: SQLite's
 * and the file system's own errors or their AppErrors, a database stopped after a failed sync, one closed
 * by a stop. The loops that retry them say so at debug.
 */
export function isStorageRefusal(error: unknown): boolean {
  if (isStorageFull(error) || isStorageBusy(error) || isStorageStopped(error)) return true;
  if (isAppError(error)) return error.code === 'storage-full';
  return (error as { code?: unknown } | undefined)?.code === databaseClosedCode;
}

/** Shorthands for the codes services throw most. */
export const invalid = (message: string) => new AppError('parameters-invalid', message);
export const notFound = (what: string) => new AppError('not-found', `${what} not found.`);

/**
 * A write refused because its project (or what it names) was deleted while the request ran: the same
 * answer whether the deletion was still under way (its mark, projects/deletion-guard.ts) or had already
 * removed the project row (a foreign key, http/errors.ts), so a client hears one thing: nothing was stored.
 */
export const deletedMeanwhile = () =>
  new AppError('conflict', 'Something this request refers to (its project, or a resource it names) was deleted while it ran; nothing was stored.');

/** A boot failure the operator can fix (busy port, unreadable file); printed without a stack trace. */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupError';
  }
}
