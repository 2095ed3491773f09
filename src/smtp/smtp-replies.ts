import { isAppError, isStorageFull, type ErrorCode } from '../lib/errors.js';

export type SmtpError = Error & { responseCode: number };

const smtpReply = Symbol('an SMTP reply made here');

export function smtpError(code: number, message: string): SmtpError {
  return Object.assign(new Error(message), { responseCode: code, [smtpReply]: true });
}

/** DESIGN convention 1 at the SMTP edge: an AppError code becomes an SMTP reply (RFC 3463 status codes). */
const replies: Partial<Record<ErrorCode, [number, string]>> = {
  'parameters-invalid': [554, '5.6.0'],
  'to-address-invalid': [550, '5.1.3'],
  'from-address-unverified': [550, '5.7.1'],
  'template-not-found': [554, '5.6.0'],
  'not-found': [554, '5.6.0'],
  'payload-too-large': [552, '5.3.4'],
  'sending-limit-exhausted': [554, '5.7.1'],
  'account-subscription-expired': [554, '5.7.1'],
  'account-unverified': [554, '5.7.1'],
  'email-sending-paused': [554, '5.7.1'],
  'resource-duplicate': [554, '5.7.1'],
  'authentication-required': [530, '5.7.0'],
  'authentication-invalid': [535, '5.7.8'],
  'authentication-failed': [535, '5.7.8'],
  'rate-limited': [451, '4.7.1'],
  conflict: [451, '4.3.0'],
  'storage-full': [452, '4.3.1'],
  // RFC 3463 4.3.0: a temporary system condition (the database's write lock held by another process).
  'storage-busy': [451, '4.3.0'],
};

/**
 * Unknown errors are our fault and temporary: 451 so the client retries (never a lost email). A full
 * disk is RFC 3463's 4.3.1, insufficient system storage (452, RFC 5321 §4.2.2): also retried later.
 */
/** An SMTP reply made here (smtpError): the listener that made it has logged what it needed to. */
export function isSmtpReply(error: unknown): error is SmtpError {
  return (error as { [smtpReply]?: boolean } | undefined)?.[smtpReply] === true;
}

export function toSmtpError(error: unknown): SmtpError {
  // Already a reply (spoolFailure): said as it is.
  if (isSmtpReply(error)) return error;
  if (isStorageFull(error)) return smtpError(452, '4.3.1 Insufficient system storage, try again later');
  if (!isAppError(error)) return smtpError(451, '4.3.0 Temporary failure, try again later');
  const [code, status] = replies[error.code] ?? [451, '4.3.0'];
  return smtpError(code, `${status} ${oneLine(error.message)}`);
}

/**
 * A message that could not be written to the spool: a full disk is 452 4.3.1 (insufficient system
 * storage), anything else (a failing or read-only disk) 451 4.3.0, where every one read "insufficient
 * storage". Both temporary: the client sends it again.
 */
export function spoolFailure(error: Error): SmtpError {
  if (isStorageFull(error)) return smtpError(452, '4.3.1 Insufficient system storage, try again later');
  return smtpError(451, '4.3.0 Local error: the message could not be written to disk, try again later');
}

/** A reply is one line per message; strip CR/LF so a message can never inject SMTP lines. */
function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ').slice(0, 400);
}
