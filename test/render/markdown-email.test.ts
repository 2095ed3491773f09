import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { renderMarkdownEmail } from '../../src/render/index.js';
import { parseMarkdownEmail } from '../../src/render/markdown-email.js';
import { contentRows, wellFormedProblems } from './html-check.js';
import { assertGolden } from './helpers.js';
import { sampleDesign, sampleMarkdown, sampleMarkdownProps } from './fixtures.js';

describe('markdown emails', () => {
  test('the sample renders in the branded layout with subject from front matter', () => {
    const r = renderMarkdownEmail(sampleMarkdown, sampleMarkdownProps, sampleDesign(), { subject: 'ignored' });
    assert.equal(r.subject, 'Deploy v2.14.0 finished', 'front matter wins over options.subject');
    assert.deepEqual(wellFormedProblems(r.html), []);
    assert.ok(r.html.includes('The release is live in all regions.'), 'preheader from front matter');
    assert.ok(!r.html.includes('subject:'), 'front matter is not shown');
    assert.ok(r.html.includes('Acme Analytics · 18 Harbour Street'), 'footer from the design');
    assert.ok(r.html.includes('alt="Logo"'), 'logo from the design');
    assertGolden('markdown-email', contentRows(r.html));
  });

  test('{variable} substitution is escaped and missing variables render as their name', () => {
    const r = renderMarkdownEmail('Hi {name}, {missing}!', { name: '<b>Ava</b>' }, {});
    assert.ok(r.html.includes('Hi &lt;b&gt;Ava&lt;/b&gt;, missing!'));
    assert.equal(r.text, 'Hi <b>Ava</b>, missing!\n');
  });

  test('[$btn Label](url) on its own line becomes a button node, inline it becomes a button-styled link', () => {
    const r = renderMarkdownEmail('Intro\n\n[$btn Confirm {what}]({url})\n\nOr [$btn inline](https://x.example/i) here.', { url: 'https://x.example/c', what: 'email' }, {});
    assert.match(r.html, /bgcolor="#4f46e5"[^>]*><a href="https:\/\/x.example\/c"[^>]*>Confirm email<\/a>/);
    assert.match(r.html, /<a href="https:\/\/x.example\/i" style="display:inline-block;background-color:#4f46e5[^"]*" target="_blank">inline<\/a>/);
    assert.ok(r.text.includes('Confirm email: https://x.example/c'));
    assert.ok(r.text.includes('Or inline: https://x.example/i here.'));
  });

  test('a $btn link with a javascript: URL is not a link', () => {
    const r = renderMarkdownEmail('[$btn Go]({u})', { u: 'javascript:alert(1)' }, {});
    assert.ok(!r.html.includes('javascript:'));
    assert.ok(r.html.includes('>Go</span>'));
  });

  test('fenced code is highlighted for each supported language; aliases work', () => {
    for (const [lang, needle] of [
      ['js', '<span style="color:#ff7b72">const</span>'],
      ['javascript', '<span style="color:#ff7b72">const</span>'],
      ['php', '<span style="color:#ff7b72">function</span>'],
      ['ruby', '<span style="color:#ff7b72">def</span>'],
      ['python', '<span style="color:#ff7b72">def</span>'],
      ['bash', '<span style="color:#ffa657">echo</span>'],
    ]) {
      const code = { js: 'const a = 1;', javascript: 'const a = 1;', php: '<?php function f() {}', ruby: 'def f; end', python: 'def f(): pass', bash: 'echo "{name}"' }[lang!]!;
      const r = renderMarkdownEmail(`\`\`\`${lang}\n${code}\n\`\`\``, { name: 'Ava' }, {});
      assert.ok(r.html.includes(needle!), `${lang}: ${r.html.slice(r.html.indexOf('<pre'), r.html.indexOf('</pre>'))}`);
    }
    const r = renderMarkdownEmail('```js\nconst o = {a: 1}; f({name});\n```', { name: 'Ava' }, {});
    const code = r.html.slice(r.html.indexOf('<pre'), r.html.indexOf('</pre>')).replace(/<[^>]+>/g, '');
    assert.ok(code.includes('{a: 1}'), 'braces in code are kept when no such prop exists');
    assert.ok(code.includes('f(Ava)'), 'known props are substituted in code');
    assert.ok(r.text.includes('const o = {a: 1}; f(Ava);'));
  });

  test('front matter forms: quoted, single-quoted, plain with comment, absent', () => {
    assert.equal(renderMarkdownEmail("---\nsubject: 'It''s {x}'\n---\nb", { x: 'ok' }, {}).subject, "It's ok");
    assert.equal(renderMarkdownEmail('---\nsubject: Plain {x} # comment\nother: 1\n---\nb', { x: 'ok' }, {}).subject, 'Plain ok');
    assert.equal(renderMarkdownEmail('no front matter', {}, {}, { subject: 'From options {x}' }).subject, 'From options x');
    assert.equal(renderMarkdownEmail('---\nnot closed\nbody', {}, {}).subject, '');
    // An empty value falls back to the request's subject; block scalars read their indented lines.
    assert.equal(renderMarkdownEmail('---\nsubject:\n---\nb', {}, {}, { subject: 'From the request' }).subject, 'From the request');
    assert.equal(renderMarkdownEmail('---\nsubject: >\n  Your weekly\n  report {x}\npreheader: p\n---\nb', { x: 'is ready' }, {}).subject, 'Your weekly report is ready');
    // YAML lists and comments are front matter too.
    assert.equal(renderMarkdownEmail('---\n# meta\nsubject: Hi\ntags:\n- a\n- b\n---\nbody', {}, {}).subject, 'Hi');
  });

  test('prose between two rules at the very start is content, not front matter to drop', () => {
    const r = renderMarkdownEmail('---\nThe release is out: see below.\n\n---\nMore text.', {}, {}, { subject: 'S' });
    assert.equal(r.subject, 'S');
    assert.ok(r.html.includes('The release is out: see below.'));
    assert.ok(r.html.includes('More text.'));
    assert.match(r.text, /The release is out: see below\./);
  });

  test('markdown emails follow CommonMark soft wraps; lists, tables, quotes and headings', () => {
    const r = renderMarkdownEmail('# Title\n\nline one\nline two\n\n1. a\n2. b\n\n| x | y |\n|---|---|\n| 1 | 2 |\n\n> quoted', {}, {});
    assert.ok(r.html.includes('line one\nline two'), 'no <br> for a soft wrap');
    assert.match(r.html, /<h1 class="tt"/);
    assert.match(r.html, /<ol style/);
    assert.match(r.html, /<th scope="col" class="bd"/);
    assert.match(r.html, /<blockquote/);
    assert.equal(r.text, 'Title\n\nline one\nline two\n\n1. a\n2. b\n\nx | y\n1 | 2\n\n> quoted\n');
  });
});

describe('render limits', () => {
  test('a code fence naming an inherited property (constructor, __proto__) renders as plain text', () => {
    for (const language of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
      const r = renderMarkdownEmail(`# Hi\n\n\`\`\`${language}\nx = 1\n\`\`\``, {}, {}, { subject: 'Code' });
      assert.match(r.html, /x = 1/, language);
    }
  });

  test('variables past the 10,000th of one text are substituted too', () => {
    const r = renderMarkdownEmail(`${'{b} '.repeat(10_002)}end`, { b: 'B' }, {}, { subject: 'Many' });
    assert.ok(!/[\uE000\uE001]/.test(r.html) && !/[\uE000\uE001]/.test(r.text), 'no placeholder left');
    assert.ok(!/\b1000[01]\b/.test(r.text), 'no placeholder index in place of a value');
    assert.equal(r.text.match(/\bB\b/g)?.length, 10_002);
  });
});

test('link reference definitions render as nothing, and serve links across a button that splits the body', () => {
  const r = renderMarkdownEmail('See [docs][1].\n\n[$btn Go](https://go.example.com)\n\nThen [again][1].\n\n[1]: https://docs.example.com "Docs"', {}, {}, { subject: 's' });
  const links = r.html.match(/<a href="https:\/\/docs\.example\.com"[^>]*>[^<]*<\/a>/g) ?? [];
  assert.deepEqual(links.map((a) => />([^<]*)</.exec(a)![1]), ['docs', 'again']);
  assert.ok(links.every((a) => a.includes('title="Docs"')));
  assert.ok(!r.html.includes('[1]:') && !r.html.includes('[docs]'), 'neither the definition nor an unresolved reference shows');
  assert.ok(r.html.includes('href="https://go.example.com"'), 'the button is still a button');
  assert.match(r.text, /See docs \(https:\/\/docs\.example\.com\)/);
  assert.ok(!r.text.includes('[1]:'));
});

test('a section between buttons gets only the link definitions it uses, and copying them is bounded: one 51 kB definition under 4,000 buttons made 200 M characters', () => {
  const parsed = parseMarkdownEmail('See [docs][1].\n\n[$btn Go](https://go.example.com)\n\nNo links here.\n\n[$btn Again](https://go.example.com)\n\nThen [again][ONE  more].\n\n[1]: https://docs.example.com\n[one more]: https://more.example.com');
  const texts = parsed.content.filter((node) => node.type === 'text').map((node) => (node as { text: string }).text);
  assert.deepEqual(texts, ['See [docs][1].\n\n[1]: https://docs.example.com', 'No links here.', 'Then [again][ONE  more].\n\n[one more]: https://more.example.com']);
  const big = `[d]: https://x.example/${'a'.repeat(51_000)}`;
  const bomb = `${'[d]\n\n[$btn Go](https://go.example.com)\n\n'.repeat(1_000)}${big}\n`;
  assert.throws(
    () => renderMarkdownEmail(bomb, {}, {}, { subject: 's' }),
    (error: Error & { code?: string }) => error.code === 'parameters-invalid' && /link reference definitions .* used in too many sections between buttons/.test(error.message),
  );
  // Of two definitions of one label the first counts (CommonMark §4.7), as before sections got only theirs.
  const twice = renderMarkdownEmail('See [d].\n\n[$btn Go](https://go.example.com)\n\n[d]: https://first.example/\n[d]: https://second.example/\n', {}, {}, { subject: 's' });
  assert.match(twice.html, /href="https:\/\/first\.example\/"/);
  assert.doesNotMatch(twice.html, /second\.example/);
  // Used in one section, the same definition is fine.
  assert.match(renderMarkdownEmail(`[d]\n\n[$btn Go](https://go.example.com)\n\n${big}\n`, {}, {}, { subject: 's' }).html, /href="https:\/\/x\.example\/a{51000}"/);
});

test('entity references in a link destination or title are decoded once (CommonMark), then escaped for the attribute', () => {
  const r = renderMarkdownEmail('[Pay](https://pay.example.com/?id=7&amp;ref=mail "A &amp; B") ![a &amp; b](https://img.example.com/x.png?s=1&amp;t=2)\n\n[$btn Go &amp; pay](https://g.example.com/?a=1&amp;b=2)', {}, {}, { subject: 's' });
  assert.ok(r.html.includes('href="https://pay.example.com/?id=7&amp;ref=mail"'), 'one escape: the browser reads id=7&ref=mail');
  assert.ok(!r.html.includes('&amp;amp;'));
  assert.ok(r.html.includes('title="A &amp; B"'));
  assert.ok(r.html.includes('src="https://img.example.com/x.png?s=1&amp;t=2"') && r.html.includes('alt="a &amp; b"'));
  assert.ok(r.html.includes('href="https://g.example.com/?a=1&amp;b=2"') && r.html.includes('>Go &amp; pay</a>'));
  assert.match(r.text, /Pay \(https:\/\/pay\.example\.com\/\?id=7&ref=mail\)/);
  // A prop is never decoded: its "&amp;" is literal text, escaped once.
  const p = renderMarkdownEmail('[x](https://e.example.com/?q={q})', { q: 'a&amp;b' }, {}, { subject: 's' });
  assert.ok(p.html.includes('href="https://e.example.com/?q=a&amp;amp;b"'));
});
