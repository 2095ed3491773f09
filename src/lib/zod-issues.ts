import type { z } from 'zod';

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
  return issue.message;
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
    else out += out === '' ? String(segment) : `.${String(segment)}`;
  }
  return out;
}
