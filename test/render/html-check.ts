/**
 * A strict-enough well-formedness check for rendered email HTML: every non-void element is closed in
 * order, attributes are quoted, nothing is left open at the end. Comments (including Outlook conditional
 * comments) are skipped. Returns a list of problems, empty when the document is well formed.
 */
const voidElements = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'source', 'track', 'wbr']);
const rawText = new Set(['style', 'title', 'script']);

export function wellFormedProblems(html: string): string[] {
  const problems: string[] = [];
  const stack: string[] = [];
  let i = 0;
  while (i < html.length) {
    const lt = html.indexOf('<', i);
    if (lt === -1) break;
    if (html.startsWith('<!--', lt)) {
      const end = html.indexOf('-->', lt + 4);
      if (end === -1) return [...problems, `unterminated comment at ${lt}`];
      i = end + 3;
      continue;
    }
    if (html.startsWith('<!', lt)) {
      i = html.indexOf('>', lt) + 1;
      continue;
    }
    const tag = /^<(\/?)([a-zA-Z][a-zA-Z0-9:-]*)((?:\s+[a-zA-Z_:][-a-zA-Z0-9_:.]*(?:="[^"]*")?)*)\s*(\/?)>/.exec(html.slice(lt, lt + 4000));
    if (!tag) {
      problems.push(`malformed tag at ${lt}: ${html.slice(lt, lt + 60)}`);
      i = lt + 1;
      continue;
    }
    const [whole, closing, rawName] = tag;
    const name = rawName!.toLowerCase();
    i = lt + whole.length;
    if (closing) {
      const open = stack.pop();
      if (open !== name) problems.push(`</${name}> closes <${open ?? 'nothing'}> at ${lt}`);
      continue;
    }
    if (voidElements.has(name)) continue;
    if (rawText.has(name)) {
      const end = html.toLowerCase().indexOf(`</${name}>`, i);
      if (end === -1) return [...problems, `unclosed <${name}>`];
      i = end + name.length + 3;
      continue;
    }
    stack.push(name);
  }
  if (stack.length) problems.push(`unclosed: ${stack.join(' > ')}`);
  return problems;
}

/** The rendered content rows (inside the card), for golden files that ignore the layout. */
export function contentRows(html: string): string {
  const start = html.indexOf('<table role="presentation"', html.indexOf('class="cd ct"'));
  const end = html.lastIndexOf('</table>\n</td></tr>');
  return html.slice(start, end + '</table>'.length);
}

/** Every element's attributes (comments skipped), for checks like "no event handler attribute anywhere". */
export function* elementAttributes(html: string): Generator<{ tag: string; name: string; value: string }> {
  const withoutComments = html.replace(/<!--[\s\S]*?-->/g, '');
  for (const m of withoutComments.matchAll(/<([a-zA-Z][a-zA-Z0-9]*)((?:\s+[^\s=>]+(?:="[^"]*")?)*)\s*\/?>/g)) {
    for (const a of m[2]!.matchAll(/\s+([^\s=>]+)(?:="([^"]*)")?/g)) yield { tag: m[1]!.toLowerCase(), name: a[1]!.toLowerCase(), value: a[2] ?? '' };
  }
}
