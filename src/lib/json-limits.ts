/**
 * Limits of the appliance's own on JSON a client sends, whichever way it comes: an API request body
 * (http/body.ts) or an SMTP control header holding JSON (X-Postino-Template-Props,
 * smtp/submission-message.ts). Both go on to the same validation, rendering and storage.
 */

/**
 * Deepest nesting of objects and arrays. The deepest legitimate body, a template with boxes six deep,
 * needs ~20; far deeper input would overflow the stack of the recursive code behind (validation,
 * rendering, JSON.stringify) and fail as a server error instead of a refusal.
 */
export const maxJsonDepth = 64;

/**
 * Most values: strings, numbers, booleans and nulls, objects and arrays, each counted once. Validation
 * and storage take microseconds per value on the event loop, and a failing one (`templateProps` of
 * 600,000 numbers, a list of a million strings) builds an issue each: a 7 MB body, under the size
 * limit, held every request for 15 s. The largest legitimate body, a template at the renderer's 2,000
 * nodes, holds ~60,000.
 */
export const maxJsonValues = 100_000;

const tooDeep = `nests objects and arrays deeper than ${maxJsonDepth} levels`;
const tooMany = `holds more than ${maxJsonValues} values (strings, numbers, objects, arrays and the rest, counted together)`;

/**
 * The depth and count limits, read from JSON text before it is parsed: checked only on the parsed value,
 * they came too late. A 10 MB body of 5 million nested `[` held the event loop 5.4 s inside JSON.parse and
 * took 300 MB of heap before it was refused as too deep (three at once, within the body memory budget,
 * would pass the 1 GB heap), and one of 3.3 million `[]` held it 1.1 s. A scan stops at the 65th level or
 * the 100,001st value instead; it skips strings with indexOf, so a body of large attachments costs
 * little more than a look for each closing quote. Same words as jsonValueProblem, which still checks the
 * parsed value (lone surrogates, and JSON that comes parsed). Text that is not JSON may be refused here
 * for its size or depth before JSON.parse would have called it malformed.
 */
export function jsonTextProblem(text: string): string | undefined {
  let depth = 0;
  // The top-level value, then one per comma, and one more for each container that is not empty:
  // n elements (or members) are n - 1 commas and a non-empty container. Keys are not values.
  let values = 1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      i = closingQuote(text, i);
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxJsonDepth) return tooDeep;
      let next = i + 1;
      while (next < text.length && isJsonWhitespace(text.charCodeAt(next))) next++;
      const first = text.charCodeAt(next);
      if (first !== 0x5d && first !== 0x7d && ++values > maxJsonValues) return tooMany;
      i = next - 1;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    } else if (c === 0x2c && ++values > maxJsonValues) {
      return tooMany;
    }
  }
  return undefined;
}

/** The index of the quote that closes the string opened at `open` (one not escaped by an odd run of backslashes), or the end. */
function closingQuote(text: string, open: number): number {
  let at = open;
  for (;;) {
    at = text.indexOf('"', at + 1);
    if (at < 0) return text.length;
    let backslashes = 0;
    while (text.charCodeAt(at - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
}

function isJsonWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * Why a parsed JSON value cannot be taken, as words that follow its name ("Request body …"), or
 * undefined when it can: too deep, too many values, or a key or string holding a lone UTF-16 surrogate
 * (with its path). JSON's `\ud800` escapes allow one; SQLite would store it as bytes that are not UTF-8,
 * read back as U+FFFD, and JSON.stringify would echo it as an escape strict parsers refuse.
 */
export function jsonValueProblem(value: unknown): string | undefined {
  const problem = problemIn(value, maxJsonDepth, { left: maxJsonValues });
  if (problem === undefined) return undefined;
  if (problem === 'too deep') return tooDeep;
  if (problem === 'too many') return tooMany;
  return `has a string that is not valid Unicode at ${pathText(problem)}: a lone UTF-16 surrogate (an unpaired \\ud800–\\udfff escape) has no UTF-8 form`;
}

/**
 * The first problem found: descending at most `limit` levels (so the check itself cannot overflow) and
 * stopping at the first value past `values.left`.
 */
function problemIn(value: unknown, limit: number, values: { left: number }): 'too deep' | 'too many' | (string | number)[] | undefined {
  if (--values.left < 0) return 'too many';
  if (typeof value === 'string') return value.isWellFormed() ? undefined : [];
  if (typeof value !== 'object' || value === null) return undefined;
  if (limit === 0) return 'too deep';
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = problemIn(value[i], limit - 1, values);
      if (problem) return typeof problem === 'string' ? problem : [i, ...problem];
    }
    return undefined;
  }
  // JSON.parse makes own properties only (`__proto__` included), so for-in sees exactly those.
  for (const key in value) {
    if (!key.isWellFormed()) return [key];
    const problem = problemIn((value as Record<string, unknown>)[key], limit - 1, values);
    if (problem) return typeof problem === 'string' ? problem : [key, ...problem];
  }
  return undefined;
}

/** `templateProps.name`, `[3].subject`, `attachments[0].name`; keys that are not identifiers quoted as JSON strings. */
function pathText(path: (string | number)[]): string {
  if (path.length === 0) return 'the top level';
  return path
    .map((step, i) => (typeof step === 'number' ? `[${step}]` : /^[A-Za-z_$][\w$]*$/.test(step) ? `${i === 0 ? '' : '.'}${step}` : `[${JSON.stringify(step)}]`))
    .join('');
}
