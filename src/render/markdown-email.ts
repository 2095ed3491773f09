import type { Token, Tokens } from 'marked';
import { AppError } from '../lib/errors.js';
import { decodeEntities } from './escape.js';
import { lexBlocksWithinLimits } from './markdown.js';
import { Lru } from './lru.js';
import { renderContent } from './render-template.js';
import type { ButtonNode, ContentNode, ProjectDesign, RenderedEmail, RenderOptions, TemplateProps } from './types.js';

/**
 * Markdown emails (send option `markdown`, COMPAT.md): optional YAML front matter with `subject` (and
 * `preheader`), `{variable}` substitution, `[$btn Label](url)` buttons and highlighted fenced code,
 * wrapped in the project's branded layout. The markdown becomes content nodes (a paragraph made only of
 * `$btn` links becomes button nodes, everything else text nodes), so it renders, escapes and produces
 * plain text exactly like a template.
 */
export function renderMarkdownEmail(
  markdown: string,
  props: TemplateProps,
  design: ProjectDesign,
  options: RenderOptions & { subject?: string } = {},
): RenderedEmail {
  const parsed = parseMarkdownEmail(markdown ?? '');
  const subject = parsed.meta.subject ?? options.subject ?? '';
  return renderContent(
    { subject, preheader: parsed.meta.preheader ?? null, content: parsed.content },
    props ?? {},
    design ?? {},
    options,
    (ctx) => {
      // Markdown emails follow CommonMark: a single newline is a soft wrap, not a line break.
      ctx.breaks = false;
    },
  );
}

interface ParsedMarkdown {
  meta: { subject?: string; preheader?: string };
  content: ContentNode[];
}

// Weighed by what an entry holds (its source and the text of its nodes): the nodes may hold more than
// the source (link definitions copied into them, bounded above).
const parsedCache = new Lru<string, ParsedMarkdown>(200, {
  maxWeight: 500_000,
  weigh: (source, parsed) => source.length + parsed.content.reduce((sum, node) => sum + (node.type === 'text' ? node.text.length : 0), 0),
});

export function parseMarkdownEmail(markdown: string): ParsedMarkdown {
  return parsedCache.getOrCreate(markdown, () => {
    const { meta, body } = splitFrontMatter(markdown);
    return { meta, content: markdownToNodes(body) };
  });
}

/** `---\nkey: value\n---` at the very start; only simple `key: value` lines are read. */
export function splitFrontMatter(markdown: string): { meta: ParsedMarkdown['meta']; body: string } {
  const match = /^\uFEFF?---[ \t]*\r?\n([\s\S]*?)\r?\n---[ \t]*(?:\r?\n|$)/.exec(markdown);
  if (!match) return { meta: {}, body: markdown };
  const lines = match[1]!.split(/\r?\n/);
  // Between two rules, prose is content (a rule, a paragraph, a rule), not front matter to drop.
  if (!lines.every((line) => yamlLine.test(line))) return { meta: {}, body: markdown };
  const meta: ParsedMarkdown['meta'] = {};
  for (let i = 0; i < lines.length; i++) {
    const kv = /^([A-Za-z][\w-]*)[ \t]*:[ \t]*(.*)$/.exec(lines[i]!);
    if (!kv) continue;
    const key = kv[1]!.toLowerCase();
    if (key !== 'subject' && key !== 'preheader') continue;
    let value = yamlScalar(kv[2]!);
    // A block scalar (`subject: >` or `|`): the indented lines below, joined by spaces (one line either way).
    if (/^[>|][+-]?$/.test(value)) {
      const block: string[] = [];
      while (i + 1 < lines.length && /^[ \t]+\S/.test(lines[i + 1]!)) block.push(lines[++i]!.trim());
      value = block.join(' ');
    }
    // An empty value says nothing: the request's subject (or none) applies, as when the key is absent.
    if (value !== '') meta[key] = value;
  }
  return { meta, body: markdown.slice(match[0].length) };
}

/** A line front matter may hold: `key: value`, an indented continuation, a `- item`, a comment or nothing. */
// `[ \t].*`, not `[ \t]+.*`: the two would share a run of blanks, and a line of them ending in a line
// separator (which `.` does not match) took time growing with the square of its length.
const yamlLine = /^(?:[A-Za-z][\w-]*[ \t]*:(?:[ \t].*)?|[ \t].*|-(?:[ \t].*)?|#.*|)$/;

/** A YAML scalar on one line: plain, 'single' ('' escapes a quote) or "double" (backslash escapes). */
function yamlScalar(raw: string): string {
  const v = raw.trim();
  if (v.length >= 2 && v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1).replace(/''/g, "'");
  if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) {
    try {
      return JSON.parse(v) as string;
    } catch {
      return v.slice(1, -1);
    }
  }
  // A comment starts at a # after white space; found with one linear search (`\s+#.*$` backtracked
  // over every run of blanks).
  const comment = v.search(/\s#/);
  return comment === -1 ? v : v.slice(0, comment).trimEnd();
}

const buttonLabel = /^\$btn\s+/;

function markdownToNodes(body: string): ContentNode[] {
  const nodes: ContentNode[] = [];
  const tokens = lexBlocksWithinLimits(body);
  // Each text node is parsed on its own: it gets the link reference definitions (`[1]: url`) it uses,
  // which may sit below a button that splits the body, and which render as nothing.
  const definitions = new Map<string, string>();
  for (const token of tokens) {
    if (token.type !== 'def') continue;
    // CommonMark §4.7: of two definitions of one label, the first counts (as marked reads them).
    const label = normalizeLabel((token as Tokens.Def).tag);
    if (!definitions.has(label)) definitions.set(label, token.raw.trim());
  }
  let copiedChars = 0;
  let pending: string[] = [];
  const flush = () => {
    if (pending.length === 0) return;
    const text = pending.join('\n\n');
    const used = definitionsUsedBy(text, definitions);
    copiedChars += used.reduce((sum, definition) => sum + definition.length, 0);
    if (copiedChars > maxCopiedDefinitionChars) throw definitionsTooRepeated();
    nodes.push({ type: 'text', text: [text, ...used].join('\n\n') });
    pending = [];
  };
  for (const token of tokens) {
    if (token.type === 'space' || token.type === 'def') continue;
    const buttons = token.type === 'paragraph' ? paragraphButtons(token as Tokens.Paragraph) : undefined;
    if (buttons) {
      flush();
      nodes.push(...buttons);
    } else {
      pending.push(token.raw.replace(/\n+$/, ''));
    }
  }
  flush();
  return nodes;
}

/**
 * Characters of link reference definitions copied into the text nodes, all together. Copied into every
 * node between buttons, one 51 kB definition under 4,000 buttons made 200 M characters of one 100 kB
 * request, and five such sends ran the heap out. A real email copies a few short ones a few times.
 */
const maxCopiedDefinitionChars = 102_400;

function definitionsTooRepeated(): AppError {
  return new AppError(
    'parameters-invalid',
    `markdown: link reference definitions ([label]: url) are used in too many sections between buttons (over ${maxCopiedDefinitionChars} characters of them, each section counting its own): write those links inline.`,
  );
}

/**
 * The definitions (by marked's normalised label: lower case, white space collapsed) whose label the
 * text names in brackets, `[text][label]`, `[label][]` or `[label]`. One linear scan: only the brackets
 * that close without another opening between (a label holds no unescaped bracket).
 */
function definitionsUsedBy(text: string, definitions: Map<string, string>): string[] {
  if (definitions.size === 0) return [];
  const used = new Set<string>();
  let open = -1;
  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    if (char === '[') open = i;
    else if (char === ']' && open >= 0) {
      const definition = definitions.get(normalizeLabel(text.slice(open + 1, i)));
      if (definition !== undefined) used.add(definition);
      open = -1;
    }
  }
  return [...used];
}

/** CommonMark §4.7: labels match case-insensitively, with runs of white space as one space. */
function normalizeLabel(label: string): string {
  return label.trim().replace(/\s+/g, ' ').toLowerCase();
}

/** Button nodes when the paragraph holds nothing but `[$btn ...](...)` links and whitespace. */
function paragraphButtons(paragraph: Tokens.Paragraph): ButtonNode[] | undefined {
  const links = paragraph.tokens.filter((t: Token) => !(t.type === 'text' && t.raw.trim() === '') && t.type !== 'br');
  if (links.length === 0 || !links.every((t) => t.type === 'link' && buttonLabel.test((t as Tokens.Link).text))) return undefined;
  return links.map((t) => {
    const link = t as Tokens.Link;
    // Entity references decoded as in any link (markdown.ts plainParts): the button escapes its own output.
    return { type: 'button', label: decodeEntities(link.text.replace(buttonLabel, '')), url: decodeEntities(link.href), styles: { align: 'left' } };
  });
}
