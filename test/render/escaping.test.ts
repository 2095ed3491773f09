import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { renderMarkdownEmail, renderTemplate, substituteVariables, type ContentNode } from '../../src/render/index.js';
import { safeUrl } from '../../src/render/escape.js';
import { body, render, styleBlock } from './helpers.js';
import { elementAttributes, wellFormedProblems } from './html-check.js';

const script = '<script>alert(1)</script>';
const breakout = '"><img src=x onerror=alert(1)>';
const hostile = { s: script, b: breakout, js: 'javascript:alert(1)', md: '**bold** [x](javascript:alert(1))' };

/** No executable markup: no script element, no event handler attribute, no javascript: URL anywhere. */
function assertInert(html: string): void {
  assert.ok(!/<script/i.test(html), 'no <script> element');
  assert.ok(!/<iframe/i.test(html), 'no <iframe> element');
  for (const { tag, name, value } of elementAttributes(html)) {
    assert.ok(!name.startsWith('on'), `event handler attribute ${name} on <${tag}>`);
    if (name === 'href' || name === 'src') assert.match(value, /^(https?:|mailto:|tel:|cid:|data:image\/png;base64,)/, `${name}="${value}" on <${tag}>`);
  }
  assert.deepEqual(wellFormedProblems(html), []);
}

describe('escaping per context', () => {
  test('HTML text: props in text, list, table cells, button labels and headings appear as text', () => {
    const r = render(
      [
        { type: 'text', text: '# {s}\n\nHello {s} and {b}' },
        { type: 'list', items: ['{s}', '{b}'] },
        { type: 'table', columns: [{ label: '{s}' }], rows: [[{ text: '{b}' }]] },
        { type: 'button', label: '{s}', url: 'https://x.example' },
        { type: 'chart', dataKey: 'none', chartType: 'line', xAxisStartLabel: '{s}', xAxisEndLabel: '{b}' },
      ],
      hostile,
    );
    assertInert(r.html);
    assert.ok(r.html.includes('&lt;script&gt;alert(1)&lt;/script&gt;'));
    assert.ok(r.html.includes('&quot;&gt;&lt;img src=x onerror=alert(1)&gt;'));
    assert.ok(r.text.includes(script), 'the plain-text part shows the value verbatim');
  });

  test('attributes: image src/alt/href and link titles cannot break out of their quotes', () => {
    const html = body(
      [
        { type: 'image', src: 'https://cdn.example/{b}', alt: '{b}', href: 'https://x.example/{b}' },
        { type: 'text', text: '[t](https://x.example "{b}")' },
      ],
      hostile,
    );
    assertInert(html);
    assert.ok(html.includes('alt="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"'));
    assert.ok(html.includes('https://cdn.example/%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E'));
  });

  test('URLs: javascript:, data: and vbscript: never become links, however they are written', () => {
    for (const url of ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', ' java\tscript:alert(1)', '&#106;avascript:alert(1)', 'data:text/html;base64,PHNjcmlwdD4=', 'vbscript:msgbox(1)', '\u0001javascript:alert(1)']) {
      const html = body(
        [
          { type: 'button', label: 'Go', url: '{u}' },
          { type: 'text', text: '[link]({u}) and <{u}>' },
          { type: 'image', src: 'https://cdn.example/a.png', alt: 'a', href: '{u}' },
          { type: 'image', src: '{u}', alt: 'img' },
        ],
        { u: url },
      );
      assertInert(html);
      assert.ok(!html.includes('<a href="&amp;#106;'), url);
      assert.ok(html.includes('<span style="padding:14px 28px'), `button without a link for ${JSON.stringify(url)}`);
    }
  });

  test('markdown in a prop is literal outside iteration, markdown inside iteration, never unsafe', () => {
    const plain = body([{ type: 'text', text: 'Hi {md}' }], hostile);
    assert.ok(plain.includes('**bold** [x](javascript:alert(1))'), 'literal');
    const iterated = body([{ type: 'text', text: 'Hi {md}', iterationKey: 'rows' }], { rows: [{ md: hostile.md }, { md: script }] });
    assert.ok(iterated.includes('<strong>bold</strong>'));
    assert.ok(iterated.includes('Hi &lt;script&gt;alert(1)&lt;/script&gt;'));
    assertInert(iterated);
  });

  test('raw HTML written in markdown is shown as text; <br> is kept', () => {
    const html = body([{ type: 'text', text: 'a <b onclick="x()">b</b> <br> c <iframe src="//evil"></iframe>' }]);
    assertInert(html);
    assert.ok(html.includes('&lt;b onclick=&quot;x()&quot;&gt;b&lt;/b&gt; <br> c &lt;iframe'));
  });

  test('authored entities keep working, prop entities stay literal', () => {
    const html = body([{ type: 'text', text: '&copy; 2026 &amp; {v}' }], { v: '&copy;' });
    assert.ok(html.includes('&copy; 2026 &amp; &amp;copy;'));
  });

  test('the plain-text part decodes every HTML5 named entity the author wrote, not a handful', () => {
    // Typographic entities (&rsquo; &ldquo; &eacute; ...) are what HTML-minded authors write: the HTML shows
    // the character, and the text part must too instead of the raw reference.
    const r = render([
      { type: 'text', text: 'Here&rsquo;s your &ldquo;receipt&rdquo;, caf&eacute; &amp; {v} &nbsp;x' },
      { type: 'list', items: ['Item&rsquo;s one'] },
    ], { v: '&rsquo;' });
    assert.equal(r.text, 'Here\u2019s your \u201creceipt\u201d, caf\u00e9 & &rsquo;  x\n\n- Item\u2019s one\n');
    const md = renderMarkdownEmail('It&rsquo;s done\n\n[$btn Let&rsquo;s go](https://x.example/?a=1&amp;b=2)', {}, {});
    assert.ok(md.html.includes('>Let\u2019s go</a>'), 'the button label shows the character, not &amp;rsquo;');
    assert.equal(md.text, 'It\u2019s done\n\nLet\u2019s go: https://x.example/?a=1&b=2\n');
    assert.ok(!/&[a-z]+;/i.test(md.text), 'no entity reference left in the text part');
  });

  test('the subject cannot carry a header break', () => {
    assert.equal(renderTemplate({ subject: 'Hi {x}', content: [] }, { x: 'a\r\nBcc: evil@example.com' }, {}).subject, 'Hi a Bcc: evil@example.com');
    const r = renderMarkdownEmail('---\nsubject: "Hi {x}"\n---\nbody', { x: 'a\r\nBcc: evil@example.com' }, {});
    assert.equal(r.subject, 'Hi a Bcc: evil@example.com');
  });

  test('font names cannot leave their CSS declaration: the design font and node fontFamily', () => {
    // Stored before the API refused such names (or written to the database directly): rendering is safe anyway.
    const design = render([{ type: 'text', text: 'hi' }], {}, { font: { name: 'a,b"><script>alert(1)</script>' } } as never);
    assertInert(design.html);
    assert.ok(!design.html.includes('<script>alert(1)'));
    assert.match(design.html, /font-family:a, 'bscriptalert1script'/);
    const attribute = render([{ type: 'text', text: 'hi' }], {}, { font: { name: 'x,y" onmouseover="alert(1)' } } as never);
    assertInert(attribute.html);
    // An unbalanced quote in a node's family list left the rest of the <style> block inside a string,
    // dark mode included.
    const node = render([
      { type: 'text', text: 'A', styles: { fontFamily: "Arial,'", color: '#ff0000' } },
      { type: 'text', text: 'B', styles: { mobile: { fontFamily: "Arial,'" } } },
      { type: 'text', text: 'C', styles: { dark: { color: '#0000ff' } } },
    ], {}, { colors: { isDarkModeEnabled: true } } as never);
    assert.match(node.html, /font-family:Arial;color:#ff0000/);
    const css = styleBlock(node.html);
    assert.equal((css.match(/'/g) ?? []).length % 2, 0, 'quotes balanced in the <style> block');
    assert.match(css, /@media \(prefers-color-scheme:dark\)\{[^]*#0000ff/);
  });

  test('safeUrl allow-list', () => {
    assert.equal(safeUrl('https://a.example/x?y=1&z=2'), 'https://a.example/x?y=1&z=2');
    assert.equal(safeUrl('mailto:a@b.example'), 'mailto:a@b.example');
    assert.equal(safeUrl('example.com/path'), 'https://example.com/path');
    assert.equal(safeUrl('cid:chart@x', 'image'), 'cid:chart@x');
    assert.equal(safeUrl('cid:chart@x', 'link'), undefined);
    assert.equal(safeUrl('data:image/png;base64,AAAA', 'image'), 'data:image/png;base64,AAAA');
    assert.equal(safeUrl('data:image/svg+xml;base64,AAAA', 'image'), undefined);
    assert.equal(safeUrl('https://a.example/"onmouseover="x'), 'https://a.example/%22onmouseover=%22x');
    assert.equal(safeUrl('just words'), undefined);
  });
});

describe('variables', () => {
  test('substituteVariables: exact keys, missing → bare name, one pass only', () => {
    assert.equal(substituteVariables('Hi {name}!', { name: 'Ava' }), 'Hi Ava!');
    assert.equal(substituteVariables('Hi {firstName}', {}), 'Hi firstName');
    assert.equal(substituteVariables('{Name} {name } {name}', { name: 'x' }), 'Name name  x', 'case and whitespace sensitive');
    assert.equal(substituteVariables('{ name }', { ' name ': 'spaced' }), 'spaced');
    assert.equal(substituteVariables('{a}', { a: '{b}', b: 'no' }), '{b}', 'values are not expanded again');
    assert.equal(substituteVariables('{constructor} {toString}', {}), 'constructor toString', 'own properties only');
    assert.equal(substituteVariables('{n} {list} {obj}', { n: 3, list: [1, 2], obj: { a: 1 } }), '3 1, 2 obj');
    assert.equal(substituteVariables('{ {x} }', { x: 'y' }), '{ y }');
  });

  test('variables in subject, preheader, text, links, labels, image props and table cells', () => {
    const props = { v: 'VAL', u: 'https://u.example/p' };
    const r = renderTemplateAll(props);
    for (const needle of ['<title>S VAL</title>', '>P VAL', 'T VAL', 'href="https://u.example/p"', 'L VAL', 'alt="A VAL"', 'src="https://img.example/VAL.png"', 'C VAL', 'H VAL']) {
      assert.ok(r.html.includes(needle), needle);
    }
    assert.equal(r.subject, 'S VAL');
  });
});

function renderTemplateAll(props: Record<string, unknown>) {
  return renderTemplateWith({
    subject: 'S {v}',
    preheader: 'P {v}',
    content: [
      { type: 'text', text: 'T {v} [x]({u})' },
      { type: 'button', label: 'L {v}', url: '{u}' },
      { type: 'image', src: 'https://img.example/{v}.png', alt: 'A {v}' },
      { type: 'table', columns: [{ label: 'H {v}' }], rows: [[{ text: 'C {v}' }]] },
    ],
  }, props);
}

function renderTemplateWith(t: { subject: string; preheader: string; content: unknown[] }, props: Record<string, unknown>) {
  return renderTemplate({ ...t, content: t.content as ContentNode[] }, props, {});
}
