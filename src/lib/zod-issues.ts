import type { z } from 'zod';
import { cutToLength } from './text.js';

/**
 * How a validation issue reads in an error message, for every schema the appliance checks (request
 * bodies, http/validate.ts; template content, render/normalize.ts). Types only from zod: no schema here.
 */

/**
 * The rule a value broke, in words. A required field that is missing is said so: zod's words were
 * "Invalid input: expected string, received undefined", JavaScript's name for what a JSON client never
 * sent (`POST /v1/templates {}`, or a text node without its `text`).
 */
export function issueMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_type' && / received undefined$/.test(issue.message)) return `is required (${articled(issue.expected)})`;
  if (issue.code === 'unrecognized_keys' && issue.message.startsWith('Unrecognized key')) return `Unrecognized key${issue.keys.length === 1 ? '' : 's'}: ${issue.keys.map(quotedKey).join(', ')}`;
  return issue.message;
}

/** Longer than this, what a client sent is cut where an error quotes it: a 5 MB key made a 5 MB error. */
const quotedMaxChars = 100;

/** A key (or name) the client sent, quoted for an error message and cut to a readable length. */
export function quotedKey(key: string): string {
  return JSON.stringify(clipped(key));
}

export function clipped(text: string): string {
  return text.length > quotedMaxChars ? `${cutToLength(text, quotedMaxChars)}…` : text;
}

function articled(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** A field's path the way clients see their JSON: `['content', 3, 'columns', 0, 'url']` → `content[3].columns[0].url`; `root` for the value itself. */
export function formatPath(path: readonly PropertyKey[], root: string): string {
  if (path.length === 0) return root;
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else out += out === '' ? clipped(String(segment)) : `.${clipped(String(segment))}`;
  }
  return out;
}
