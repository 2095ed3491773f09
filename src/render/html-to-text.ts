import { decodeEntities } from './escape.js';

/**
 * The plain text of an html email, as a text/plain alternative shows it: paragraphs and headings apart
 * by a blank line, list items as `- `, table cells side by side, a link as `label (url)`, an image as its
 * alt text; head, script, style and comments (Outlook's conditional markup among them) left out;
 * entities decoded; `pre` keeps its spaces. For html that is not ours to render from nodes: a
 * broadcast's own html (a message without a text part scores as spam, rspamd MIME_HTML_ONLY), an
 * html-only received message or bounce report.
 *
 * One scan with indexOf: a regular expression per tag rescans to the end of the input from every `<`
 * that no `>` follows (`<<<<…`), which held the event loop 19 s for 180 kB. The text is at most the
 * html's length plus the links' addresses.
 */
export function htmlToText(html: string): string {
  const out: string[] = [];
  // One link at a time, as browsers read `<a>` inside `<a>`: a stack of them, each label joined at its
  // end, made nested links quadratic (a 630 kB bounce report took 9 s).
  let link: { href: string | undefined; start: number } | undefined;
  let lower: string | undefined;
  let preDepth = 0;
  let at = 0;
  const text = (raw: string) => {
    if (raw === '') return;
    const decoded = decodeEntities(raw).replace(/\u00a0/g, ' ');
    out.push(preDepth > 0 ? decoded.replace(/[ \t]/g, preSpace) : decoded.replace(/\s+/g, ' '));
  };
  while (at < html.length) {
    const open = html.indexOf('<', at);
    if (open < 0) break;
    text(html.slice(at, open));
    if (html.startsWith('<!--', open)) {
      const end = html.indexOf('-->', open + 4);
      at = end < 0 ? html.length : end + 3;
      continue;
    }
    if (html[open + 1] === '!' || html[open + 1] === '?') {
      // <!DOCTYPE html>, <![endif]>, <?xml …?>: nothing to show.
      const end = html.indexOf('>', open + 2);
      at = end < 0 ? html.length : end + 1;
      continue;
    }
    tagName.lastIndex = open + 1;
    const name = tagName.exec(html)?.[0].toLowerCase();
    if (!name) {
      // Not a tag: `a < b`.
      text('<');
      at = open + 1;
      continue;
    }
    const close = tagEnd(html, open + 1 + name.length);
    if (close < 0) {
      // A tag (or a quoted value in it) that never closes, so none after it does either: the rest is text.
      at = open;
      break;
    }
    const tag = html.slice(open, close + 1);
    at = close + 1;
    if (skippedElements.has(name)) {
      lower ??= html.toLowerCase();
      const end = lower.indexOf(`</${name}`, at);
      const endClose = end < 0 ? -1 : html.indexOf('>', end);
      at = endClose < 0 ? html.length : endClose + 1;
      continue;
    }
    if (name === 'a') link ??= { href: attribute(tag, 'href'), start: out.length };
    else if (name === '/a' && link) {
      closeLink(out, link);
      link = undefined;
    } else if (name === 'img') text(` ${attribute(tag, 'alt') ?? ''} `);
    else if (name === 'pre') preDepth++;
    else if (name === '/pre') preDepth = Math.max(0, preDepth - 1);
    out.push(breakAfter(name));
  }
  text(html.slice(at));
  return tidyLines(out.join(''));
}

const tagName = /\/?[a-zA-Z][a-zA-Z0-9]*/y;
/**
 * Elements whose content is no text, skipped to their end tag. Not `head`: its end tag may be left out
 * (HTML §13.1.2.4), and skipped to one that never comes, a whole message read as empty.
 */
const skippedElements = new Set(['script', 'style', 'title', 'template']);

/**
 * Where the tag that `from` is inside ends: its first `>` outside an attribute's quoted value
 * (`<p title="a > b">`), -1 when none follows. A quote opens a value only after `=`, as in HTML's
 * tokenizer, so a stray one in a tag does not hide the rest of the document.
 */
function tagEnd(html: string, from: number): number {
  let quote = '';
  let afterEquals = false;
  for (let i = from; i < html.length; i++) {
    const c = html[i];
    if (quote) {
      if (c === quote) quote = '';
    } else if (c === '>') {
      return i;
    } else if ((c === '"' || c === "'") && afterEquals) {
      quote = c;
    } else if (c !== ' ' && c !== '\t' && c !== '\n' && c !== '\r') {
      afterEquals = c === '=';
    }
  }
  return -1;
}
/** Spaces of a `pre`, kept through the trimming of lines (a private-use character, put back last). */
const preSpace = '\uE010';

/**
 * Where blocks meet, a line break or a blank line, however many blocks open and close there (nested
 * layout tables and divs): marks, merged by tidyLines. A `<br>` is a line break of its own: two are a
 * blank line.
 */
const lineMark = '\uE011';
const paragraphMark = '\uE012';

/** What a tag leaves in the text: a blank line around a paragraph, a line break around a block, a space between cells. */
function breakAfter(name: string): string {
  if (name === 'br') return '\n';
  if (lineBlocks.has(name)) return lineMark;
  if (paragraphBlocks.has(name)) return paragraphMark;
  if (name === 'li') return `${lineMark}- `;
  if (name === 'td' || name === 'th' || name === '/td' || name === '/th') return ' ';
  return '';
}

const lineBlocks = new Set(['div', '/div', '/tr', 'hr', 'pre', '/pre', 'center', '/center', 'section', '/section', 'header', '/header', 'footer', '/footer', 'article', '/article']);
const paragraphBlocks = new Set(['p', '/p', 'h1', '/h1', 'h2', '/h2', 'h3', '/h3', 'h4', '/h4', 'h5', '/h5', 'h6', '/h6', 'blockquote', '/blockquote', 'table', '/table', 'ul', '/ul', 'ol', '/ol']);

/** A link's address after its label, unless the label already shows it or it goes nowhere a reader can type. */
function closeLink(out: string[], link: { href: string | undefined; start: number }): void {
  if (!link.href || !/^https?:\/\//i.test(link.href)) return;
  const label = out.slice(link.start).join('').trim();
  if (label === '') out.push(link.href);
  else if (!label.includes(link.href)) out.push(` (${link.href})`);
}

/** An attribute's value in one tag (quoted either way, or bare), entities decoded. */
function attribute(tag: string, name: string): string | undefined {
  const match = new RegExp(`\\s${name}\\s*=\\s*(?:"([^"]*)"|'([^']*)'|([^\\s>]+))`, 'i').exec(tag);
  if (!match) return undefined;
  return decodeEntities(match[1] ?? match[2] ?? match[3] ?? '').trim();
}

/** Block marks merged (a blank line where any of a run asks for one), lines trimmed, at most one blank line in a row, none at either end. */
function tidyLines(text: string): string {
  return text
    .replace(/[ \uE011\uE012]*[\uE011\uE012][ \uE011\uE012]*/g, (run) => (run.includes(paragraphMark) ? '\n\n' : '\n'))
    .split('\n')
    .map((line) => line.replace(/ {2,}/g, ' ').trim())
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .replaceAll(preSpace, ' ')
    .trim();
}
