import { renderedTooLarge, renderLimits } from './budget.js';
import { Lru, sourceChars } from './lru.js';
import type { TemplateProps } from './types.js';

/**
 * `{name}` variables (spec §2.1, COMPAT.md): the key between the braces is matched exactly, spaces and case
 * included; a missing prop renders as the bare name. One pass only: a value that itself contains `{x}` is
 * never expanded again, so props cannot reach other props.
 */
const variablePattern = /\{([^{}\r\n]{1,100})\}/g;

export function substituteVariables(text: string, props: TemplateProps): string {
  if (!text.includes('{')) return text;
  return mapMatches(text, variablePattern, keep, (m) => propText(props, m[1]!));
}

/**
 * Like `substituteVariables` but leaves unknown `{...}` untouched (code blocks and a sender's own html
 * are full of braces); each value through `escape` (html: a prop never becomes markup).
 */
export function substituteKnownVariables(text: string, props: TemplateProps, escape: (value: string) => string = keep): string {
  if (!text.includes('{')) return text;
  return mapMatches(text, variablePattern, keep, (m) => (lookupProp(props, m[1]!) === undefined ? m[0] : escape(propText(props, m[1]!))));
}

const keep = (s: string) => s;

/**
 * `text` with every match of `pattern` (global) replaced, and the text between matches mapped too (escaped
 * for its context). Every substitution goes through here because it is where output outgrows input: a
 * source repeating `{a}` 3,000 times with a 100 kB prop would make 300 MB (and escaping it, seconds of
 * event loop), so it stops once the result passes the render's whole output budget (budget.ts).
 */
export function mapMatches(text: string, pattern: RegExp, between: (s: string) => string, replacement: (match: RegExpMatchArray) => string): string {
  let out = '';
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    out += between(text.slice(last, m.index)) + replacement(m);
    if (out.length > renderLimits.outputChars) throw renderedTooLarge();
    last = m.index! + m[0].length;
  }
  return out + between(text.slice(last));
}

/** The text a prop renders as. Own properties only, so `{constructor}` is just "constructor". */
export function propText(props: TemplateProps, name: string): string {
  const value = lookupProp(props, name);
  if (value === undefined || value === null) return name;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (Array.isArray(value) && value.every((v) => v === null || typeof v !== 'object')) return value.join(', ');
  return name;
}

/**
 * Own properties along the scope chain (iteration scopes are prototype-linked to the enclosing props),
 * never Object.prototype's: `{constructor}` is not a prop.
 */
export function lookupProp(props: TemplateProps, name: string): unknown {
  for (let scope: object | null = props; scope && scope !== Object.prototype; scope = Object.getPrototypeOf(scope) as object | null) {
    if (Object.prototype.hasOwnProperty.call(scope, name)) return (scope as Record<string, unknown>)[name];
  }
  return undefined;
}

/**
 * A template string with each variable replaced by a sentinel (`\uE000<index>\uE001`, private-use
 * characters that markdown treats as ordinary letters) plus the variable names. Markdown is parsed once on
 * the sentinel form, independently of the props, and the values are put back while rendering, escaped for
 * the context they land in. So a prop can never turn into markup or markdown, and parsed markdown can be
 * cached per template rather than per recipient.
 */
export interface CompiledText {
  source: string;
  names: string[];
}

export const sentinelOpen = '\uE000';
export const sentinelClose = '\uE001';
export const sentinelPattern = /\uE000(\d+)\uE001/g;
const strayPrivateUse = /[\uE000\uE001]/g;

const compiled = new Lru<string, CompiledText>(2000, sourceChars(2_000_000));

export function compileText(text: string): CompiledText {
  return compiled.getOrCreate(text, () => {
    const names: string[] = [];
    const source = text.replace(strayPrivateUse, '').replace(variablePattern, (_, name: string) => {
      names.push(name);
      return `${sentinelOpen}${names.length - 1}${sentinelClose}`;
    });
    return { source, names };
  });
}
