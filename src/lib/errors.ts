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
  conflict: 409,
  'payload-too-large': 413,
  'rate-limited': 429,
  'internal-error': 500,
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

export function isAppError(value: unknown): value is AppError {
  return value instanceof AppError;
}

/** Shorthands for the codes services throw most. */
export const invalid = (message: string) => new AppError('parameters-invalid', message);
export const notFound = (what: string) => new AppError('not-found', `${what} not found.`);

/** A boot failure the operator can fix (busy port, unreadable file); printed without a stack trace. */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupError';
  }
}
