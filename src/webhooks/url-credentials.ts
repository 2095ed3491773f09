import { AppError } from '../lib/errors.js';

/**
 * Credentials in an endpoint URL (`https://user:password@host/path`) are sent as HTTP Basic auth (Node's
 * client does it from the URL: the percent-decoded `user:password`, UTF-8, Base64). The password is a
 * receiver's credential, so the API shows it masked, as it shows no other credential it did not make.
 */
export const passwordMask = '***';

/** The URL with its password replaced by the mask; a URL without one, unchanged. */
export function redactPassword(url: string): string {
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  if (!parsed?.password) return url;
  parsed.password = passwordMask;
  return parsed.href;
}

/**
 * The URL an update stores. A client that reads an endpoint and writes it back (PUT, or a PATCH of its
 * events) sends the masked URL: that keeps the stored one, password included. A masked password on any
 * other URL is refused: stored as it is, it would be sent as the password; carried over to a changed
 * URL, the password would go to a host its owner may never have given it to.
 */
export function urlToStore(input: string, stored: string): string {
  if (input === stored || new URL(input).password !== passwordMask) return input;
  if (new URL(input).href === redactPassword(stored)) return stored;
  throw maskRefused(' to change the URL');
}

/**
 * A new endpoint has no stored password for the mask to stand for: a URL copied from another endpoint as
 * the API shows it would be stored with `***` as its password, and every POST refused by the receiver.
 */
export function refuseMaskedPassword(url: string): void {
  if (URL.canParse(url) && new URL(url).password === passwordMask) throw maskRefused('');
}

const maskRefused = (purpose: string) =>
  new AppError('parameters-invalid', `url: its password is ${passwordMask}, the mask the API shows in place of a password; send the password itself${purpose}`);

/**
 * Node's client percent-decodes the user name and password for the Authorization header, and a malformed
 * escape (`%zz`) throws there: every attempt failed, for a day, before anything was sent.
 */
export function credentialsDecode(url: URL): boolean {
  try {
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
    return true;
  } catch {
    return false;
  }
}
