import { Lexer, type Token, type Tokens } from 'marked';
import { startSide } from './direction.js';
import { AppError } from '../lib/errors.js';
import { decodeEntities, escapeAttr, escapeAuthored, escapeHtml, safeUrl } from './escape.js';
import { codeLanguage } from './highlight.js';
import { codeBlockHtml, inlineCodeStyle } from './code-block.js';
import { cellWrapping } from './css.js';
import { Lru, sourceChars } from './lru.js';
import type { RenderContext } from './context.js';
import { isTimeLimitExceeded, runWithTimeLimit } from './time-limit.js';
import { outlookSizedImage } from './nodes/common.js';
import { compileText, lookupProp, mapMatches, propText, sentinelOpen, sentinelPattern, substituteVariables } from './variables.js';

/**
 * Markdown of text, list and table values. The markdown is parsed by marked's lexer, then walked here
 * rather than by marked's HTML renderer, so that every piece of output is produced by code that escapes
 * it: raw HTML in markdown is shown as text, link and image URLs pass the scheme allow-list, and each
 * element gets inline styles that survive email clients.
 *
 * Outside iterated nodes, variables are replaced by sentinels before parsing and their values are put
 * back escaped while walking: a name like `*Bob*` stays literal. Inside iterated nodes (COMPAT.md) prop
 * values are markdown too, so they are substituted before parsing.
 */

export interface MarkdownStyle {
  /** Inline style of links (colour and decoration). */
  link: string;
  /** Class for links that follow the theme's dark link colour; empty when the node sets its own. */
  linkClass: string;
  /** Headings use the title colour unless the node sets a colour. */
  headingColor?: string;
  /**
   * The width a picture (an image alone in its paragraph) may take in this text, for the copy Outlook
   * is given at that width (imageHtml); none: no copy.
   */
  pictureWidth?: number;
}

interface Walk {
  values: string[] | null;
  /** Values for code: a variable missing from the props keeps its braces (code is full of them). */
  codeValues: string[] | null;
  ctx: RenderContext;
  style: MarkdownStyle;
  /** The image the paragraph being walked consists of (soleImageOf). */
  soleImage?: Tokens.Image;
  /** Pixels a blockquote or list the walk is inside takes from pictureWidth. */
  indent?: number;
}

// Weighed by source length: tokens take ~100 bytes per source character in the worst case (lru.ts).
const blockCache = new Lru<string, Token[]>(2000, sourceChars(500_000));
const inlineCache = new Lru<string, Token[]>(4000, sourceChars(250_000));

function lexBlocks(source: string, breaks: boolean, limitMs: number): Token[] {
  return blockCache.getOrCreate(`${breaks ? 1 : 0}${source}`, () => lexBlocksWithinLimits(source, breaks, limitMs));
}

/** Block markdown → tokens, refused (a 400) when too deep or too slow to lex. */
export function lexBlocksWithinLimits(source: string, breaks = false, limitMs = lexTimeLimitMs): Token[] {
  refuseDeepContainers(source);
  return lexWithinLimits(source, () => Lexer.lex(source, { gfm: true, breaks }), limitMs);
}

/**
 * A line opening thousands of quotes or lists (`>>>>…` or `- - - …`) makes the lexer recurse until the
 * stack runs out; how long that takes depends on the machine's load, so under load it could be refused
 * for its time instead of its depth. Counting the markers first refuses it the same way every time, in
 * a linear scan, before any lexing.
 */
const maxContainerDepth = 100;
const leadingContainerMarkers = /^(?:[ \t]*(?:>|(?:[-*+]|\d{1,9}[.)])(?=[ \t]|$)))+/gm;
const containerMarker = />|(?:[-*+]|\d{1,9}[.)])(?=[ \t]|$)/g;

function refuseDeepContainers(source: string): void {
  for (const [run] of source.matchAll(leadingContainerMarkers)) {
    // Every marker takes at least one character: a short run cannot hold too many.
    if (run.length > maxContainerDepth && (run.match(containerMarker)?.length ?? 0) > maxContainerDepth) {
      throw new AppError('parameters-invalid', `Markdown nests too deeply to render: a line opens more than ${maxContainerDepth} quotes or lists.`);
    }
  }
}

function lexInline(source: string, limitMs: number): Token[] {
  return inlineCache.getOrCreate(source, () => lexWithinLimits(source, () => Lexer.lexInline(source, { gfm: true, breaks: true }), limitMs));
}

/**
 * marked's lexer is quadratic on some inputs: thousands of `_` or `*`, or of spaces, in one paragraph.
 * A 100 kB markdown body of `_a` held the event loop ~45 s. Sources longer than this are lexed under a
 * time limit (vm's watchdog interrupts the running code; ~0.1–0.5 ms per call, so short ones, at most
 * ~20 ms in the worst case, are lexed directly). Parsed sources are cached, so a template pays it once.
 */
const directLexMaxChars = 2_000;
const lexTimeLimitMs = 500;

function lexWithinLimits(source: string, lex: () => Token[], limitMs = lexTimeLimitMs): Token[] {
  try {
    if (source.length <= directLexMaxChars) return lex();
    return runWithTimeLimit(lex, Math.min(limitMs, lexTimeLimitMs));
  } catch (error) {
    if (isTimeLimitExceeded(error)) {
      throw new AppError('parameters-invalid', `Markdown takes too long to parse (over ${Math.min(limitMs, lexTimeLimitMs)} ms): a paragraph holds thousands of * or _ or spaces.`);
    }
    if (error instanceof RangeError) throw new AppError('parameters-invalid', 'Markdown nests too deeply to render.');
    throw error;
  }
}

interface Prepared {
  tokens: Token[];
  values: string[] | null;
  codeValues: string[] | null;
}

/** Parses `text` with variables for the current scope; returns tokens and the sentinel values. */
function prepare(ctx: RenderContext, text: string, inline: boolean, breaks: boolean): Prepared {
  // Thousands of text nodes lex thousands of sources: the render's time budget covers them together.
  ctx.budget.checkTime();
  const limitMs = ctx.budget.remainingMs();
  if (ctx.iterated) {
    const source = substituteVariables(text, ctx.props).replace(/[\uE000\uE001]/g, '');
    return { tokens: inline ? lexInline(source, limitMs) : lexBlocks(source, breaks, limitMs), values: null, codeValues: null };
  }
  const compiled = compileText(text);
  const tokens = inline ? lexInline(compiled.source, limitMs) : lexBlocks(compiled.source, breaks, limitMs);
  if (compiled.names.length === 0) return { tokens, values: null, codeValues: null };
  const values = compiled.names.map((n) => propText(ctx.props, n));
  const codeValues = compiled.names.map((n, i) => (lookupProp(ctx.props, n) === undefined ? `{${n}}` : values[i]!));
  return { tokens, values, codeValues };
}

/** Block markdown (text nodes) → HTML. */
export function markdownBlockHtml(ctx: RenderContext, text: string, style: MarkdownStyle): string {
  const { tokens, values, codeValues } = prepare(ctx, text, false, ctx.breaks);
  return blocksHtml(tokens, { values, codeValues, ctx, style });
}

/** Inline markdown (list items, table cells) → HTML. */
export function markdownInlineHtml(ctx: RenderContext, text: string, style: MarkdownStyle): string {
  const { tokens, values, codeValues } = prepare(ctx, text, true, true);
  return inlineHtml(tokens, { values, codeValues, ctx, style });
}

/** A table node's cell (inline markdown) → its HTML and how its words may break (cellWrapping), from one parse. */
export function markdownCell(ctx: RenderContext, text: string, style: MarkdownStyle): { html: string; wrapping: string } {
  const { tokens, values, codeValues } = prepare(ctx, text, true, true);
  const walk = { values, codeValues, ctx, style };
  return { html: inlineHtml(tokens, walk), wrapping: cellWrapping(inlineText(tokens, walk)) };
}

export function markdownBlockText(ctx: RenderContext, text: string): string {
  const { tokens, values, codeValues } = prepare(ctx, text, false, ctx.breaks);
  return blocksText(tokens, { values, codeValues }).trim();
}

export function markdownInlineText(ctx: RenderContext, text: string): string {
  const { tokens, values, codeValues } = prepare(ctx, text, true, true);
  return inlineText(tokens, { values, codeValues }).trim();
}

// ---------------------------------------------------------------- HTML

function blocksHtml(tokens: Token[], w: Walk): string {
  // A link reference definition (`[1]: https://…`) only serves the links that use it.
  const blocks = tokens.filter((t) => t.type !== 'space' && t.type !== 'def');
  return blocks.map((t, i) => blockHtml(t, w, i === blocks.length - 1 ? 0 : 14)).join('');
}

function blockHtml(token: Token, w: Walk, gap: number): string {
  const margin = `margin:0 0 ${gap}px`;
  switch (token.type) {
    case 'paragraph': {
      const tokens = (token as Tokens.Paragraph).tokens;
      return `<p style="${margin}">${inlineHtml(tokens, { ...w, soleImage: soleImageOf(tokens) })}</p>`;
    }
    case 'heading':
      return headingHtml(token as Tokens.Heading, w, gap);
    case 'list':
      return listHtml(token as Tokens.List, w, gap);
    case 'blockquote':
      return `<blockquote class="bd tm" style="${margin};padding:0 0 0 14px;border-left:3px solid ${w.ctx.theme.light.border};color:${w.ctx.theme.light.muted}">${blocksHtml((token as Tokens.Blockquote).tokens, indented(w, 17))}</blockquote>`;
    case 'code': {
      const code = token as Tokens.Code;
      return `<div style="${margin}">${codeBlockHtml(substituteValues(code.text, w.codeValues), codeLanguage(code.lang))}</div>`;
    }
    case 'hr':
      return `<hr style="border:0;border-top:1px solid ${w.ctx.theme.light.border};margin:8px 0 ${gap + 8}px">`;
    case 'table':
      return tableHtml(token as Tokens.Table, w, gap);
    case 'html':
      return `<p style="${margin}">${rawHtmlAsText((token as Tokens.HTML).text, w)}</p>`;
    case 'text': {
      const text = token as Tokens.Text;
      return `<p style="${margin}">${text.tokens ? inlineHtml(text.tokens, w) : textHtml(text.text, w)}</p>`;
    }
    default:
      return 'raw' in token && typeof token.raw === 'string' ? `<p style="${margin}">${textHtml(token.raw, w)}</p>` : '';
  }
}

const headingSizes = ['26px;line-height:1.3', '21px;line-height:1.35', '18px;line-height:1.4', '16px;line-height:1.5'];

function headingHtml(token: Tokens.Heading, w: Walk, gap: number): string {
  const depth = Math.min(Math.max(token.depth, 1), 6);
  const size = headingSizes[Math.min(depth, 4) - 1];
  const color = w.style.headingColor ? `;color:${w.style.headingColor}` : '';
  const cls = w.style.headingColor ? ' class="tt"' : '';
  return `<h${depth}${cls} style="margin:0 0 ${Math.max(gap, 10)}px;font-size:${size};font-weight:700${color}">${inlineHtml(token.tokens, w)}</h${depth}>`;
}

function listHtml(token: Tokens.List, w: Walk, gap: number): string {
  const tag = token.ordered ? 'ol' : 'ul';
  const start = token.ordered && typeof token.start === 'number' && token.start !== 1 ? ` start="${token.start}"` : '';
  const items = token.items.map((item) => `<li style="margin:0 0 6px">${listItemHtml(item, indented(w, 24))}</li>`).join('');
  return `<${tag}${start} style="margin:0 0 ${gap}px;padding:0 0 0 24px">${items}</${tag}>`;
}

/** The walk inside a blockquote or list, whose indent of `px` pixels narrows a picture's room. */
const indented = (w: Walk, px: number): Walk => ({ ...w, indent: (w.indent ?? 0) + px });

function listItemHtml(item: Tokens.ListItem, w: Walk): string {
  const prefix = taskMark(item);
  const blocks = item.tokens.filter((t) => t.type !== 'space' && t.type !== 'checkbox');
  if (blocks.length === 1 && blocks[0]!.type === 'text') return prefix + blockInner(blocks[0]!, w);
  return prefix + blocks.map((t, i) => (t.type === 'text' ? blockInner(t, w) : blockHtml(t, w, i === blocks.length - 1 ? 0 : 8))).join('');
}

function blockInner(token: Token, w: Walk): string {
  const text = token as Tokens.Text;
  return text.tokens ? inlineHtml(text.tokens, w) : textHtml(text.text, w);
}

function tableHtml(token: Tokens.Table, w: Walk, gap: number): string {
  const border = w.ctx.theme.light.border;
  const cell = (c: Tokens.TableCell, head: boolean, last: boolean) => {
    const align = `;text-align:${c.align ?? startSide(w.ctx.direction)}`;
    const tag = head ? 'th' : 'td';
    const scope = head ? ' scope="col"' : '';
    const weight = head ? ';font-weight:600' : '';
    return `<${tag}${scope} class="bd" style="padding:8px ${last ? 0 : 12}px 8px 0;border-bottom:1px solid ${border}${align}${weight};${cellWrapping(inlineText(c.tokens, w))}">${inlineHtml(c.tokens, w)}</${tag}>`;
  };
  const row = (cells: Tokens.TableCell[], head: boolean) => `<tr>${cells.map((c, i) => cell(c, head, i === cells.length - 1)).join('')}</tr>`;
  const head = row(token.header, true);
  const rows = token.rows.map((r) => row(r, false)).join('');
  // A data table, unlike the layout's: no role="presentation", so screen readers announce its rows and headings.
  return `<table width="100%" cellpadding="0" cellspacing="0" border="0" style="border-collapse:collapse;margin:0 0 ${gap}px">${head}${rows}</table>`;
}

function inlineHtml(tokens: Token[], w: Walk): string {
  let out = '';
  for (const token of tokens) out += inlineTokenHtml(token, w);
  return out;
}

function inlineTokenHtml(token: Token, w: Walk): string {
  switch (token.type) {
    case 'text': {
      const text = token as Tokens.Text;
      return text.tokens ? inlineHtml(text.tokens, w) : textHtml(text.text, w);
    }
    case 'escape':
      return escapeHtml((token as Tokens.Escape).text);
    case 'strong':
      return `<strong>${inlineHtml((token as Tokens.Strong).tokens, w)}</strong>`;
    case 'em':
      return `<em>${inlineHtml((token as Tokens.Em).tokens, w)}</em>`;
    case 'del':
      return `<del>${inlineHtml((token as Tokens.Del).tokens, w)}</del>`;
    case 'codespan':
      return `<code class="ic" style="${inlineCodeStyle(w.ctx.theme)}">${codeText((token as Tokens.Codespan).text, w)}</code>`;
    case 'br':
      return '<br>';
    case 'link':
      return linkHtml(token as Tokens.Link, w);
    case 'image':
      return imageHtml(token as Tokens.Image, w);
    case 'html':
      return rawHtmlAsText((token as Tokens.Tag).text, w);
    default:
      return 'raw' in token && typeof token.raw === 'string' ? textHtml(token.raw, w) : '';
  }
}

const buttonPrefix = /^\$btn\s+/;

function linkHtml(token: Tokens.Link, w: Walk): string {
  const href = safeUrl(plainParts(token.href, w));
  if (buttonPrefix.test(token.text)) return inlineButtonHtml(token.text.replace(buttonPrefix, ''), href, w);
  const label = inlineHtml(token.tokens, w);
  // A URL outside the allow-list (javascript:, data:, ...) keeps its label as plain text, never a link.
  if (!href) return label;
  const title = token.title ? ` title="${escapeAttr(plainParts(token.title, w))}"` : '';
  const cls = w.style.linkClass ? ` class="${w.style.linkClass}"` : '';
  return `<a href="${escapeAttr(href)}"${cls}${title} style="${w.style.link}" target="_blank">${label}</a>`;
}

/** `[$btn Label](url)` inside running text (markdown emails, COMPAT.md): a button-styled link. */
function inlineButtonHtml(label: string, href: string | undefined, w: Walk): string {
  const t = w.ctx.theme;
  const text = textHtml(label, w);
  const style = `display:inline-block;background-color:${t.highlight};color:${t.onHighlight};padding:12px 22px;border-radius:6px;font-weight:600;text-decoration:none;line-height:1.2`;
  return href ? `<a href="${escapeAttr(href)}" style="${style}" target="_blank">${text}</a>` : `<span style="${style}">${text}</span>`;
}

function imageHtml(token: Tokens.Image, w: Walk): string {
  const alt = plainParts(token.text, w);
  const src = safeUrl(plainParts(token.href, w), 'image');
  if (!src) return escapeHtml(alt);
  const img = (size: string, width: string) => `<img src="${escapeAttr(src)}" alt="${escapeAttr(alt)}"${size} style="${width};height:auto;border:0;vertical-align:middle">`;
  const fluid = img('', 'max-width:100%');
  // An image in a line of text (a badge, an icon) is left at its size; one that is its paragraph is a
  // picture, drawn in Outlook no wider than the text (markdown has no way to give it a width).
  const width = w.style.pictureWidth === undefined ? undefined : w.style.pictureWidth - (w.indent ?? 0);
  return w.soleImage === token && width !== undefined && width > 0 ? outlookSizedImage(fluid, img(` width="${width}"`, `width:${width}px`)) : fluid;
}

/** The image a paragraph consists of, linked or not, with nothing but blanks beside it. */
function soleImageOf(tokens: Token[]): Tokens.Image | undefined {
  const content = tokens.filter((t) => !(t.type === 'text' && (t as Tokens.Text).text.trim() === ''));
  if (content.length !== 1) return undefined;
  const [only] = content;
  if (only!.type === 'image') return only as Tokens.Image;
  return only!.type === 'link' ? soleImageOf((only as Tokens.Link).tokens) : undefined;
}

/** Raw HTML in markdown is shown as text; only line breaks are kept as markup. */
function rawHtmlAsText(html: string, w: Walk): string {
  if (/^<br\s*\/?>\s*$/i.test(html)) return '<br>';
  return textHtml(html, w).replace(/&lt;br\s*\/?&gt;/gi, '<br>');
}

/** Authored text keeps entity references; variable values are escaped fully, newlines kept as breaks. */
function textHtml(text: string, w: Walk): string {
  return mapParts(text, w.values, escapeAuthored, valueHtml);
}

function valueHtml(value: string): string {
  const escaped = escapeHtml(value);
  return escaped.includes('\n') ? escaped.replace(/\r?\n/g, '<br>') : escaped;
}

/** Code spans show their content literally, entities included. */
function codeText(text: string, w: Walk): string {
  return mapParts(text, w.codeValues, escapeHtml, escapeHtml);
}

function mapParts(text: string, values: string[] | null, authored: (s: string) => string, value: (s: string) => string): string {
  if (!values || !text.includes(sentinelOpen)) return authored(text);
  // A variable repeated in one source is escaped once.
  const mapped = new Map<number, string>();
  return mapMatches(text, sentinelPattern, authored, (m) => {
    const index = Number(m[1]);
    let out = mapped.get(index);
    if (out === undefined) mapped.set(index, (out = value(values[index] ?? '')));
    return out;
  });
}

/** Sentinels back to raw values (URLs, titles and code, which are escaped by their own context). */
export function substituteValues(text: string, values: string[] | null): string {
  if (!values || !text.includes(sentinelOpen)) return text;
  return mapMatches(text, sentinelPattern, (s) => s, (m) => values[Number(m[1])] ?? '');
}

// ---------------------------------------------------------------- plain text

interface Vals {
  values: string[] | null;
  codeValues: string[] | null;
}

function blocksText(tokens: Token[], v: Vals): string {
  return tokens
    .filter((t) => t.type !== 'space')
    .map((t) => blockText(t, v))
    .filter((s) => s !== '')
    .join('\n\n');
}

/** The blocks of a list item, one per line in a tight list (no blank line between a line and its nested list). */
function listItemText(item: Tokens.ListItem, loose: boolean, v: Vals): string {
  return item.tokens
    .filter((t) => t.type !== 'space' && t.type !== 'checkbox')
    .map((t) => blockText(t, v))
    .filter((s) => s !== '')
    .join(loose ? '\n\n' : '\n');
}

function taskMark(item: Tokens.ListItem): string {
  return item.task ? (item.checked ? '☑ ' : '☐ ') : '';
}

function blockText(token: Token, v: Vals): string {
  switch (token.type) {
    case 'paragraph':
    case 'heading':
      return inlineText((token as Tokens.Paragraph).tokens, v).trim();
    case 'list': {
      const list = token as Tokens.List;
      const start = typeof list.start === 'number' ? list.start : 1;
      // An item's own lines are indented under its marker, blank ones left empty; a task says its state
      // as the html does.
      return list.items
        .map((item, i) => `${list.ordered ? `${start + i}.` : '-'} ${taskMark(item)}${listItemText(item, list.loose, v).replace(/\n(?=[^\n])/g, '\n   ')}`)
        .join('\n');
    }
    case 'blockquote':
      return blocksText((token as Tokens.Blockquote).tokens, v).replace(/^/gm, '> ');
    case 'code':
      return substituteValues((token as Tokens.Code).text, v.codeValues);
    case 'hr':
      return '---';
    case 'table': {
      const table = token as Tokens.Table;
      const row = (cells: Tokens.TableCell[]) => cells.map((c) => inlineText(c.tokens, v).trim()).join(' | ');
      return [row(table.header), ...table.rows.map(row)].join('\n');
    }
    case 'text': {
      const text = token as Tokens.Text;
      return text.tokens ? inlineText(text.tokens, v) : plainParts(text.text, v);
    }
    case 'html':
      return plainParts((token as Tokens.HTML).text.replace(/<br\s*\/?>/gi, '\n'), v).trim();
    default:
      return '';
  }
}

function inlineText(tokens: Token[], v: Vals): string {
  let out = '';
  for (const token of tokens) out += inlineTokenText(token, v);
  return out;
}

function inlineTokenText(token: Token, v: Vals): string {
  switch (token.type) {
    case 'text': {
      const text = token as Tokens.Text;
      return text.tokens ? inlineText(text.tokens, v) : plainParts(text.text, v);
    }
    case 'escape':
      return (token as Tokens.Escape).text;
    case 'strong':
    case 'em':
    case 'del':
      return inlineText((token as Tokens.Strong).tokens, v);
    case 'codespan':
      return substituteValues((token as Tokens.Codespan).text, v.codeValues);
    case 'br':
      return '\n';
    case 'link':
      return linkText(token as Tokens.Link, v);
    case 'image':
      return plainParts((token as Tokens.Image).text, v);
    case 'html':
      return /^<br\s*\/?>$/i.test((token as Tokens.Tag).text.trim()) ? '\n' : plainParts((token as Tokens.Tag).text, v);
    default:
      return '';
  }
}

function linkText(token: Tokens.Link, v: Vals): string {
  const href = safeUrl(plainParts(token.href, v));
  if (buttonPrefix.test(token.text)) {
    const label = plainParts(token.text.replace(buttonPrefix, ''), v);
    return href ? `${label}: ${href}` : label;
  }
  const label = inlineText(token.tokens, v);
  if (!href || href === label || href === `mailto:${label}` || `https://${label}` === href) return label;
  return `${label} (${href})`;
}

/**
 * Text as it reads, not as markup: entity references in the authored part decoded (CommonMark decodes
 * them in link destinations and titles too: `?a=1&amp;b=2` is `?a=1&b=2`), values as given. Escaped
 * again by whatever context it lands in.
 */
function plainParts(text: string, v: Vals): string {
  return mapParts(text, v.values, decodeEntities, (value) => value);
}
