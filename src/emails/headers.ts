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
]);

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
  if (ownedHeaders.has(name.toLowerCase())) return `header ${name} is set by the appliance and cannot be overridden`;
  return undefined;
}
