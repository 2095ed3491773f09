import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import javascript from 'highlight.js/lib/languages/javascript';
import php from 'highlight.js/lib/languages/php';
import python from 'highlight.js/lib/languages/python';
import ruby from 'highlight.js/lib/languages/ruby';
import { escapeHtml } from './escape.js';
import { Lru } from './lru.js';
import { isTimeLimitExceeded, runWithTimeLimit } from './time-limit.js';
import type { CodeLanguage } from './types.js';

// Only the languages of spec §2.2 are registered: the core plus five grammars load in milliseconds,
// where the full bundle would register ~190.
hljs.registerLanguage('javascript', javascript);
hljs.registerLanguage('php', php);
hljs.registerLanguage('ruby', ruby);
hljs.registerLanguage('python', python);
hljs.registerLanguage('bash', bash);

/** Code block colours (GitHub dark palette); the block is dark in both light and dark mode. */
export const codeTheme = { background: '#0d1117', text: '#e6edf3', border: '#30363d' };

/**
 * highlight.js emits `<span class="hljs-keyword">`. Classes are unreliable in email (Gmail drops
 * unknown <style> content, Outlook.com prefixes class names), so every span gets its colour inline.
 */
const tokenColors: Record<string, string> = {
  keyword: 'color:#ff7b72',
  'selector-tag': 'color:#ff7b72',
  literal: 'color:#79c0ff',
  built_in: 'color:#ffa657',
  type: 'color:#ffa657',
  string: 'color:#a5d6ff',
  regexp: 'color:#a5d6ff',
  'template-tag': 'color:#a5d6ff',
  number: 'color:#79c0ff',
  symbol: 'color:#79c0ff',
  comment: 'color:#8b949e;font-style:italic',
  quote: 'color:#8b949e;font-style:italic',
  title: 'color:#d2a8ff',
  'title.function': 'color:#d2a8ff',
  'title.class': 'color:#ffa657',
  function: 'color:#d2a8ff',
  variable: 'color:#ffa657',
  'template-variable': 'color:#ffa657',
  attr: 'color:#79c0ff',
  attribute: 'color:#79c0ff',
  property: 'color:#79c0ff',
  params: 'color:#e6edf3',
  meta: 'color:#8b949e',
  subst: 'color:#e6edf3',
  section: 'color:#79c0ff;font-weight:bold',
  operator: 'color:#ff7b72',
  punctuation: 'color:#e6edf3',
};

const aliases: Record<string, CodeLanguage> = {
  js: 'javascript', javascript: 'javascript', ts: 'javascript', typescript: 'javascript', node: 'javascript', json: 'javascript',
  php: 'php', rb: 'ruby', ruby: 'ruby', py: 'python', python: 'python',
  bash: 'bash', sh: 'bash', shell: 'bash', zsh: 'bash', console: 'bash', curl: 'bash',
  text: 'text', txt: 'text', plain: 'text', plaintext: 'text', '': 'text',
};

/** Maps what people write after ``` (or in `language`) to one of the supported languages. */
export function codeLanguage(value: string | undefined | null): CodeLanguage {
  // Own keys only (isCodeLanguage): `constructor` or `__proto__` after ``` would otherwise name a function.
  const name = (value ?? '').trim().toLowerCase();
  return isCodeLanguage(name) ? aliases[name] : 'text';
}

export function isCodeLanguage(value: string): boolean {
  return Object.prototype.hasOwnProperty.call(aliases, value.trim().toLowerCase());
}

// Weighed by code and output: a large block highlights to over a megabyte of HTML.
const cache = new Lru<string, string>(500, { maxWeight: 4_000_000, weigh: (key, html) => key.length + html.length });

/**
 * highlight.js takes time quadratic in the length of a run of word characters outside a string: 0.9 s
 * for 20,000 in a row, 21 s for 100,000, all of it on the event loop before the render budget can stop
 * it. No real identifier is that long; a block holding one is shown as plain text. Runs of 199 over a
 * whole 100,000-character block highlight in under 50 ms.
 */
const tooLongForHighlighting = /[A-Za-z0-9_$]{200}/;

/**
 * Other inputs are slow too, with no pattern as simple: a run of 99,000 line breaks took 12 s (javascript,
 * ruby), `<x<` repeated 4 s (ruby), before the render budget, checked between nodes, could stop anything;
 * and code from a prop has no length limit. So a long block is highlighted under a time limit, and shown
 * as plain text when it runs out (the block still reads; colours are decoration). Short blocks, at most a
 * few milliseconds whatever they hold, are highlighted directly.
 */
const directHighlightMaxChars = 2_000;
export const highlightTimeLimitMs = 250;

/** Highlighted, escaped HTML for the inside of a <pre>, with inline colours. */
export function highlightCode(code: string, language: CodeLanguage): string {
  if (language === 'text' || tooLongForHighlighting.test(code)) return escapeHtml(code);
  return cache.getOrCreate(`${language}\u0000${code}`, () => highlightWithinLimit(code, language));
}

function highlightWithinLimit(code: string, language: Exclude<CodeLanguage, 'text'>): string {
  const highlight = () => inlineColors(hljs.highlight(code, { language, ignoreIllegals: true }).value);
  if (code.length <= directHighlightMaxChars) return highlight();
  try {
    return runWithTimeLimit(highlight, highlightTimeLimitMs);
  } catch (error) {
    if (isTimeLimitExceeded(error)) return escapeHtml(code);
    throw error;
  }
}

function inlineColors(html: string): string {
  return html.replace(/<span class="([^"]*)">/g, (_, classes: string) => {
    const style = styleFor(classes);
    return style ? `<span style="${style}">` : '<span>';
  });
}

function styleFor(classes: string): string | undefined {
  // `hljs-title function_` → try "title.function" first, then "title".
  const parts = classes.split(/\s+/).map((c) => c.replace(/^hljs-/, '').replace(/_+$/, ''));
  const [first, second] = parts;
  if (!first) return undefined;
  return (second && tokenColors[`${first}.${second}`]) || tokenColors[first];
}
