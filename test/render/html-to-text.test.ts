import assert from 'node:assert/strict';
import { test } from 'node:test';
import { htmlToText } from '../../src/render/html-to-text.js';

test('html to text: block ends break lines, paragraphs and headings stand apart, tags, head, scripts, styles and comments go, entities are decoded', () => {
  const html =
    '<!DOCTYPE html><html><head><title>T</title><style>p { color: red }</style><SCRIPT type="x">if (a < b) alert(1)</script></head><body>' +
    '<!--[if mso]><table><tr><td><![endif]--><p>Delivery&nbsp;failed.</p><div>550 5.1.1 &lt;a@b.test&gt;</div>line<br/>two<brx>three<h2>T</h2>after < lone</body></html>';
  assert.equal(htmlToText(html), 'Delivery failed.\n\n550 5.1.1 <a@b.test>\nline\ntwothree\n\nT\n\nafter < lone');
});

test('html to text: a link shows its address after its label, unless the label shows it or it is no web address; images show their alt; lists and cells', () => {
  const html =
    '<p>Read our <a class="x" href="https://example.org/blog?a=1&amp;b=2">blog</a>, <a href=\'https://example.org/\'>https://example.org/</a>, ' +
    '<a href="mailto:a@b.test">write</a> or <a href="#top">top</a>.</p><a href="https://example.org/logo"><img src="x.png"></a>' +
    '<ul><li>one</li><li><img alt="Logo" src="l.png"> two</li></ul><table><tr><td>Item</td><td>$3</td></tr><tr><th>Total</th><th>$3</th></tr></table>';
  assert.equal(
    htmlToText(html),
    'Read our blog (https://example.org/blog?a=1&b=2), https://example.org/, write or top.\n\nhttps://example.org/logo\n\n- one\n- Logo two\n\nItem $3\nTotal $3',
  );
});

test('html to text: source line breaks and runs of spaces are one space, but pre keeps them', () => {
  assert.equal(htmlToText('<p>one\n   two\t\tthree</p><pre>  indented\n    more</pre>'), 'one two three\n\n  indented\n    more');
});

test('html to text: markup that never closes is read in one pass, as text', () => {
  assert.equal(htmlToText('<'.repeat(5)), '<<<<<');
  assert.equal(htmlToText('a <br'.repeat(3)), 'a <bra <bra <br');
  assert.equal(htmlToText('x<!-- never closed'), 'x');
  assert.equal(htmlToText('x<script>y'), 'x');
  // 300 kB of unclosed tags: linear (the bounce and inbound tests send these through the SMTP listener).
  assert.equal(htmlToText('<br'.repeat(100_000)).length, 300_000);
  assert.equal(htmlToText('<div>a</div></div><div><div><p>b</p></div>').length, 4, 'blocks that meet make one break, a paragraph a blank line');
});

test('html to text: an html document whose head is never closed still has its text; a > inside a quoted attribute value does not end the tag', () => {
  assert.equal(htmlToText('<html><head><meta charset="utf-8"><title>T</title><body><p>Delivery failed.</p></body></html>'), 'Delivery failed.');
  assert.equal(htmlToText(`<p title="a > b" data-x='1>0'>Hello</p><a href="https://example.org/?q=a>b">go</a>`), 'Hello\n\ngo (https://example.org/?q=a>b)');
  // A quote opens a value only after `=`: a stray one does not hide what follows.
  assert.equal(htmlToText('<p class=x" id=y>Text</p>'), 'Text');
});

test('html to text: a link inside a link is part of it (one link at a time, as browsers read them), in one pass', () => {
  assert.equal(htmlToText('<a href="https://a.test/">outer <a href="https://b.test/">inner</a> tail</a> after'), 'outer inner (https://a.test/) tail after');
  const nested = `${'<a href=http://a>'.repeat(30_000)}x${'</a>'.repeat(30_000)}`;
  assert.equal(htmlToText(nested), 'x (http://a)');
});
