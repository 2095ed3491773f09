/**
 * Headers the appliance writes itself; a custom value would break threading, DKIM or the envelope.
 * Lower-case names.
 */
const ownedHeaders = new Set([
  'from',
  'to',
  'cc',
  'bcc',
  'subject',
  'date',
  'message-id',
  'sender',
  'reply-to',
  'return-path',
  'received',
  'dkim-signature',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'content-disposition',
  // What receivers add and read as the verdicts of their own checks (RFC 8601, RFC 8617, RFC 7208): set
  // by a sender, a fake ARC set breaks the receiver's chain and a fake verdict can mislead a filter.
  'authentication-results',
  'arc-seal',
  'arc-message-signature',
  'arc-authentication-results',
  'received-spf',
  // RFC 5322 §3.6.6: a message re-sent by a user, which no message the appliance writes is.
  'resent-date',
  'resent-from',
  'resent-sender',
  'resent-to',
  'resent-cc',
  'resent-bcc',
  'resent-message-id',
]);

/**
 * Structured fields that cannot hold RFC 2047 encoded-words: URIs (RFC 2369 List-*), a list id (RFC
 * 2919), message ids (RFC 5322 §3.6.4). MailComposer would make the whole value one encoded-word for a
 * single non-ASCII character (or write it raw in 8 bits, for the message ids).
 */
export function cannotBeEncoded(lowerCaseName: string): boolean {
  return lowerCaseName.startsWith('list-') || lowerCaseName === 'in-reply-to' || lowerCaseName === 'references';
}

// RFC 5322 §2.2: a field name is printable US-ASCII except colon.
const fieldName = /^[\x21-\x39\x3b-\x7e]+$/;

/** Why a custom header is refused, or undefined when it is fine. */
export function headerProblem(name: string, value: string): string | undefined {
  if (/[\r\n]/.test(name) || /[\r\n]/.test(value)) return 'header names and values must not contain CR or LF';
  if (!fieldName.test(name)) return 'header name must be printable ASCII without spaces or colons';
  if (name.length > 76) return 'header name must have at most 76 characters';
  if (value.length > 998) return 'header value must have at most 998 characters (RFC 5322 line limit)';
  // A value is folded at its spaces onto lines that start with one; a run with nowhere to fold goes on a
  // line of its own, one longer than itself. Non-ASCII runs are written as encoded-words, which fold anywhere.
  if (/[\x21-\x7e]{998}/.test(value)) return 'header value must not have 998 characters without a space (RFC 5322 line limit)';
  // Folding breaks a line inside such a run, leaving lines of whitespace only (RFC 5322 §4.2's obsolete syntax).
  if (/[ \t]{71}/.test(value)) return 'header value must not have more than 70 spaces or tabs in a row';
  if (ownedHeaders.has(name.toLowerCase())) return ownedHeaderProblem(name);
  if (cannotBeEncoded(name.toLowerCase()) && !/^[\x20-\x7e\t]*$/.test(value)) {
    return `header ${name} must be printable ASCII (percent-encode its URIs, RFC 3986): it cannot be MIME-encoded`;
  }
  return undefined;
}

/**
 * Why an owned header is refused, pointing to the field that does it where there is one: Reply-To and
 * Cc/Bcc are not written by the appliance for every email, so "set by the appliance" misled there.
 */
function ownedHeaderProblem(name: string): string {
  const lower = name.toLowerCase();
  if (lower === 'reply-to') return `header ${name} cannot be set in headers: use replyToAddress (and replyToName)`;
  if (lower === 'cc' || lower === 'bcc') return `header ${name} cannot be set in headers: an email has one recipient, toAddress; send one email per recipient (a batch takes up to 50)`;
  if (lower === 'to' || lower === 'from' || lower === 'subject') return `header ${name} is set by the appliance from the email's ${lower === 'to' ? 'toAddress' : lower === 'from' ? 'fromAddress and fromName' : 'subject'} and cannot be overridden`;
  return `header ${name} is set by the appliance and cannot be overridden`;
}

/** Names that differ only in case name one field: refused, or both would be written (one unsigned). */
export function repeatedHeaderName(names: string[]): [string, string] | undefined {
  const seen = new Map<string, string>();
  for (const name of names) {
    const first = seen.get(name.toLowerCase());
    if (first !== undefined) return [first, name];
    seen.set(name.toLowerCase(), name);
  }
  return undefined;
}
