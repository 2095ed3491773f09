import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderLimits } from '../../src/render/budget.js';
import { renderMarkdownEmail, renderTemplate } from '../../src/render/index.js';
import { renderedLineMaxChars } from '../../src/render/render-template.js';
import type { AppError } from '../../src/lib/errors.js';
import { render } from './helpers.js';

// One request must not hold the event loop: every render has a budget of nodes, output and time.
const refusedWith = (message: RegExp) => (error: unknown) => (error as AppError).code === 'parameters-invalid' && message.test((error as Error).message);

test('nested iterations multiply: 6 boxes over one 40-item array are stopped long before 40^6; rows that render nothing stop at the node budget', () => {
  let node: Record<string, unknown> = { type: 'text', text: 'Item {n}' };
  for (let depth = 0; depth < 6; depth++) node = { type: 'box', iterationKey: 'a', columns: [{ elements: [node] }] };
  const a = Array.from({ length: 40 }, (_, n) => ({ n }));
  // A budget is what stops it, however loaded the machine: the 2 s wall-time budget would too. Each row
  // of text is ~180 characters, so the output budget comes first.
  const nodeBudget = new RegExp(`more than ${renderLimits.units} nodes and rows`);
  assert.throws(() => render([node], { a }, {}, { timeLimitMs: 600_000 }), refusedWith(/larger than 6,144,000 characters/));
  // Spacers iterated inside an iterated box: 200 × 200 rows, next to no output.
  const spacers = { type: 'box', iterationKey: 'a', columns: [{ elements: [{ type: 'spacer', iterationKey: 'b' }] }] };
  const rows = Array.from({ length: 200 }, (_, n) => ({ n }));
  assert.throws(() => render([spacers], { a: rows, b: rows }, {}, { timeLimitMs: 600_000 }), refusedWith(nodeBudget));
  // The same templates over short arrays render.
  assert.match(render([node], { a: a.slice(0, 2) }).html, /Item 1/);
  assert.ok(render([spacers], { a: rows.slice(0, 20), b: rows.slice(0, 20) }).html.length > 0);
});

test('output is bounded: a 100 kB prop repeated 300 times is refused, not built', () => {
  const rows = Array.from({ length: 300 }, () => ({}));
  assert.throws(() => render([{ type: 'text', text: '{big}', iterationKey: 'rows' }], { big: 'x'.repeat(100_000), rows }), refusedWith(/larger than 6,144,000 characters/));
});

test('an email may render to 6,144,000 characters of html and 2,048,000 of text, and no more; markdown of inline code at the spec\'s limit (5.1 million) fits', () => {
  assert.ok(render([{ type: 'text', text: '{a}' }], { a: 'x'.repeat(2_000_000) }).html.length < renderLimits.outputChars);
  assert.throws(() => render([{ type: 'text', text: '{a} {a} {a}' }], { a: 'x'.repeat(2_100_000) }), refusedWith(/^The rendered email is larger than 6,144,000 characters\.$/));
  const template = (emailText: string) => ({ subject: 'Hi', content: [], emailText });
  assert.equal(renderTemplate(template('{a}'), { a: 'x'.repeat(2_000_000) }, {}).text.length, 2_000_001);
  assert.throws(() => renderTemplate(template('{a}'), { a: 'x'.repeat(2_100_000) }, {}), refusedWith(/^The rendered email's text is larger than 2,048,000 characters\.$/));
  // Markdown of inline code at the spec's limit (102,400), a styled span each: 5.1 million characters.
  let code = '';
  while (code.length < 102_396) code += '`a` ';
  const rendered = renderMarkdownEmail(code, {}, {}, { subject: 's', timeLimitMs: 600_000 });
  assert.ok(rendered.html.length > 4_000_000 && rendered.html.length < renderLimits.outputChars, String(rendered.html.length));
});

test('output is bounded inside one source: a prop repeated 3,000 times in one text is refused as too large, escaped once', () => {
  // 3,000 × 400 kB escaped: 1.2 GB. It used to be built (16 s, ~900 MB) until the string overflowed.
  const big = { a: '<'.repeat(100_000) };
  const refused = refusedWith(/larger than 6,144,000 characters/);
  assert.throws(() => render([{ type: 'text', text: '{a}'.repeat(3000) }], big), refused);
  assert.throws(() => renderMarkdownEmail('{a}'.repeat(3000), big, {}, { subject: 's' }), refused);
  assert.throws(() => render([{ type: 'code', code: '{a}'.repeat(3000) }], big), refused);
  assert.throws(() => render([{ type: 'text', text: `[x](https://example.com/${'{a}'.repeat(3000)})` }], big), refused);
  // The same text with a short value renders every occurrence.
  assert.equal(render([{ type: 'text', text: '{a}'.repeat(3000) }], { a: '<b>' }).html.split('&lt;b&gt;').length - 1, 3000);
});

test('the plain text, subject and preheader are bounded too, not only the html', () => {
  const template = (fields: Record<string, string>) => ({ subject: 'Hi', content: [], ...fields });
  // emailText is not part of the html: 2,000 × 30 kB would store a 60 MB text part.
  assert.throws(() => renderTemplate(template({ emailText: '{a}'.repeat(2000) }), { a: 'x'.repeat(30_000) }, {}), refusedWith(/larger than 6,144,000 characters/));
  assert.equal(renderTemplate(template({ emailText: '{a}'.repeat(2000) }), { a: 'xy' }, {}).text.length, 4001);
  const long = { a: 'x'.repeat(renderedLineMaxChars) };
  assert.throws(() => renderTemplate(template({ subject: 'Re: {a}' }), long, {}), refusedWith(/subject renders to more than 10,000 characters/));
  assert.throws(() => renderTemplate(template({ preheader: '{a} {a}' }), long, {}), refusedWith(/preheader renders to more than 10,000 characters/));
  assert.equal(renderTemplate(template({ subject: '{a}' }), long, {}).subject.length, renderedLineMaxChars);
});

test('time is bounded: 200 tall charts of 500 points are refused after the time budget', () => {
  const charts = Array.from({ length: 200 }, (_, i) => ({ type: 'chart', dataKey: 'd', chartType: 'line', fill: true, maxValue: 1000 + i, styles: { height: 600 } }));
  const d = Array.from({ length: 500 }, (_, i) => i);
  const started = performance.now();
  assert.throws(() => render(charts, { d }), refusedWith(new RegExp(`takes too long to render \\(over ${renderLimits.ms} ms\\)`)));
  // Stopped between charts, so within the budget and one chart more: far from the ~80 s the whole set takes.
  assert.ok(performance.now() - started < 20_000);
});

test('a code block holding a 100,000-character word is shown as plain text, not highlighted for seconds', () => {
  // highlight.js takes time quadratic in such a run (~21 s for this one, past the time budget).
  const code = `const x = <${'b'.repeat(100_000)}>;`;
  const { html } = render([{ type: 'code', language: 'javascript', code }]);
  assert.ok(html.includes(`const x = &lt;${'b'.repeat(100_000)}&gt;;`));
  assert.ok(!html.includes('<span style="color:#ff7b72">const</span>'), 'not highlighted');
  // Ordinary code in the same email still is.
  assert.ok(render([{ type: 'code', language: 'javascript', code: 'const y = 1;' }]).html.includes('<span style="color:#ff7b72">const</span>'));
});

test('a code block that highlight.js would take seconds over is shown as plain text: 99,000 line breaks took 12 s, with no budget check inside', () => {
  const code = `${'\n'.repeat(99_000)}const z = 2;`;
  const { html } = render([{ type: 'code', language: 'javascript', code }]);
  assert.ok(html.includes('const z = 2;'), 'shown, escaped');
  assert.ok(!html.includes('<span style="color:#ff7b72">const</span>'), 'not highlighted: stopped at its time limit');
  // A long block of ordinary code goes through the same limit, and is highlighted.
  const ordinary = Array.from({ length: 200 }, (_, i) => `const v${i} = call(${i}, "text");`).join('\n');
  assert.ok(ordinary.length > 2_000);
  assert.ok(render([{ type: 'code', language: 'javascript', code: ordinary }]).html.includes('<span style="color:#ff7b72">const</span> v199'));
});
