import { z } from 'zod';
import { AppError } from '../lib/errors.js';
import { formatPath, issueMessage } from '../lib/zod-issues.js';

/**
 * Validate at the edge (DESIGN convention 2). A failure becomes `parameters-invalid` whose message names
 * the field path and the rule broken, e.g. `templateProps.items[2]: must be a string`.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, where = 'body'): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw new AppError('parameters-invalid', notAnObject(result.error, value, where) ?? describeIssues(result.error, where));
}

/**
 * A body that is not an object at all, where one is expected, is said in words: zod's own issue read
 * "Invalid body. body: Invalid input: expected object, received undefined" for a request with no body
 * (an SDK call made without its argument), naming a field `body` and JavaScript's `undefined`. The send
 * endpoints already answered "Invalid body: expected a JSON object."; now every endpoint does, and says
 * what came instead.
 */
function notAnObject(error: z.ZodError, value: unknown, where: string): string | undefined {
  const issue = error.issues.find((candidate) => candidate.path.length === 0);
  if (!issue || issue.code !== 'invalid_type' || issue.expected !== 'object') return undefined;
  return notAJsonObjectMessage(value, where);
}

/** "Invalid body: expected a JSON object, but it is an array." (or null, a string, no body at all). */
export function notAJsonObjectMessage(value: unknown, where: string): string {
  const received =
    value === undefined ? 'the request has no body' : value === null ? 'it is null' : Array.isArray(value) ? 'it is an array' : `it is a ${typeof value}`;
  return `Invalid ${where}: expected a JSON object, but ${received}.`;
}

export function describeIssues(error: z.ZodError, where: string): string {
  // Two checks can fail on one value with the same words (a limit of 1e308 is neither whole nor ≤ 100).
  // A rule of the whole body is said of it, not of a field named after it: "Invalid body: give at least
  // one of …", where it read "Invalid body. body: give at least one of …".
  const lines = [...new Set(error.issues.map((issue) => (issue.path.length === 0 ? issueMessage(issue) : `${formatPath(issue.path, where)}: ${issueMessage(issue)}`)))];
  const parts = lines.slice(0, 5);
  const more = lines.length > 5 ? ` (and ${lines.length - 5} more)` : '';
  return `Invalid ${where}${error.issues[0]?.path.length === 0 ? ':' : '.'} ${parts.join('; ')}${more}`;
}

/**
 * A free-form object (headers, templateProps, sampleProps) with string keys. zod drops a `__proto__`
 * key without a word (a plain object cannot hold it as a key): refused instead, so nothing sent is
 * silently lost.
 */
export function recordOf<V extends z.ZodType>(value: V) {
  return z
    .unknown()
    .transform(emptyArrayAsObject)
    .superRefine((input, ctx) => {
      if (input !== null && typeof input === 'object' && Object.hasOwn(input, '__proto__')) {
        ctx.addIssue({ code: 'custom', path: ['__proto__'], message: 'is not accepted as a key' });
      }
    })
    .pipe(z.record(z.string(), value));
}

/**
 * PHP's json_encode writes an empty array as `[]`, whether it stands for a list or a map: the PHP SDK's
 * `search()` without arguments sends `[]`, and `'templateProps' => []` arrives as `[]`. Where an object
 * is expected, an empty array is an empty object; any other array is still refused.
 */
export function emptyArrayAsObject(value: unknown): unknown {
  return Array.isArray(value) && value.length === 0 ? {} : value;
}

/**
 * `limit` of a list, 1 to `max`, from the query string (digits, spaces around them allowed) or a JSON
 * body (a number). Absent, null or empty (`?limit=`, a client writing its unset options) is `byDefault`.
 * Anything else is refused with the rule: coerced by Number(), `abc` was "expected number, received
 * NaN" and `0x10` or `1e2` passed as 16 and 100, and `?limit=` was refused as 0 ("Too small").
 */
export function pageLimit(max: number, byDefault: number) {
  const rule = `must be a whole number from 1 to ${max}`;
  return z.preprocess(wholeNumberInput, z.number({ error: rule }).int(rule).min(1, rule).max(max, rule).default(byDefault));
}

/** `offset` of a list: a whole number, 0 or more, from the query string or a JSON body; 0 when absent. */
export function pageOffset() {
  const max = 1_000_000_000;
  const rule = `must be a whole number from 0 to ${max}`;
  return z.preprocess(wholeNumberInput, z.number({ error: rule }).int(rule).min(0, rule).max(max, rule).default(0));
}

/**
 * A whole number from the query string (digits, spaces around them allowed) or a JSON body (a number, left
 * to the schema's check); absent, null or empty (`?offset=`) is undefined, so the default applies.
 */
export function wholeNumberInput(value: unknown): unknown {
  if (value === null || value === '') return undefined;
  return typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value;
}

/**
 * Fields that cannot be null, sent as null, are not sent (docs/errors.md): PHP and Java clients write
 * unset options as null. A preprocess step for an object schema; anything but an object passes as it is.
 */
export function nullsAsAbsent(fields: readonly string[]): (value: unknown) => unknown {
  return (value) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
    return Object.fromEntries(Object.entries(value).filter(([key, field]) => !(field === null && fields.includes(key))));
  };
}

/** A request body that must be a JSON object: none is {}, PHP's `[]` is {} (emptyArrayAsObject), anything else is refused in words. */
export function jsonObjectBody(value: unknown): Record<string, unknown> {
  const body = emptyArrayAsObject(value) ?? {};
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new AppError('parameters-invalid', notAJsonObjectMessage(body, 'body'));
  return body as Record<string, unknown>;
}

/** COMPAT.md "Transport": paging (cursors, limit, offset) may come in the query string; for each key the body does not set, the query's value. */
export function queryFallbacks(query: Record<string, unknown>, body: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of keys) if (body[key] === undefined && query[key] !== undefined && query[key] !== '') out[key] = query[key];
  return out;
}

/** A `paginationCursorNext` that is an id (COMPAT.md: cursors are ids); empty (`?paginationCursorNext=`) is the first page. */
export const idCursor = z.preprocess(
  (value) => (value === '' || value === null ? undefined : value),
  z.string().regex(/^[0-9a-f]{24}$/, 'must be a paginationCursorNext value returned by a previous page').optional(),
);
