import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { assertGolden, body, render, styleBlock } from './helpers.js';

const dark = { colors: { isDarkModeEnabled: true } };

describe('text node', () => {
  test("markdown lists read in the text part as in the html: a task's state, a nested list right under its line", () => {
    const r = render([{ type: 'text', text: '- [ ] task\n- [x] done\n\n1. one\n2. two\n   - nested a\n   - nested b' }]);
    assert.ok(r.html.includes('☐ task') && r.html.includes('☑ done'));
    assert.ok(r.text.includes('- ☐ task\n- ☑ done'), r.text);
    assert.ok(r.text.includes('1. one\n2. two\n   - nested a\n   - nested b'), r.text);
    assert.doesNotMatch(r.text, /^[ \t]+$/m, 'no line of spaces alone');
  });

  test('markdown, presets and inline styles', () => {
    const html = body([
      { type: 'text', text: '# Heading\n\nHello **bold** _em_ ~~del~~ `code` [link](https://example.com)\nsecond line' },
      { type: 'text', preset: 'title', text: 'Big title' },
      { type: 'text', preset: 'muted', text: 'Quiet words' },
    ]);
    assertGolden('text', html);
    assert.match(html, /<h1 class="tt" style="[^"]*font-size:26px/);
    assert.match(html, /<strong>bold<\/strong> <em>em<\/em> <del>del<\/del> <code class="ic"[^>]*>code<\/code>/);
    assert.match(html, /<a href="https:\/\/example.com" class="lk" style="color:#4f46e5;text-decoration:underline" target="_blank">link<\/a>/);
    assert.ok(html.includes('<br>second line'), 'single newline is a line break in editor text');
    assert.match(html, /<div class="tt ttl" role="heading" aria-level="1" style="font-size:26px;line-height:1.3;font-weight:700;[^"]*color:#111827">/);
    assert.match(html, /<div class="tm" style="font-size:14px;line-height:1.6;color:#646b77">/);
  });

  test('style fields become inline CSS; box styles wrap the text in a cell', () => {
    const html = body([
      {
        type: 'text',
        text: 'Styled',
        styles: {
          marginBottom: 30, align: 'center', fontFamily: 'Georgia', fontSize: 18, fontWeight: 'bold', fontStyle: 'italic',
          lineHeight: 1.4, letterSpacing: '1px', color: '#123456', textTransform: 'uppercase', textDecoration: 'underline',
          linkColor: '#ff0000', linkTextDecoration: 'none', backgroundColor: '#fafafa', borderWidth: 2, borderColor: '#cccccc',
          borderRadius: 6, paddingTop: 10, paddingBottom: 11, paddingLeft: 12, paddingRight: 13,
        },
      },
    ]);
    assertGolden('text-styles', html);
    assert.match(html, /<td align="center" style="padding:0 0 30px;text-align:center">/);
    for (const decl of [
      "font-family:Georgia, 'Times New Roman', Times, serif", 'font-size:18px', 'font-weight:bold', 'font-style:italic', 'line-height:1.4',
      'letter-spacing:1px', 'color:#123456', 'text-transform:uppercase', 'text-decoration:underline', 'background-color:#fafafa',
      'border:2px solid #cccccc', 'border-radius:6px', 'padding-top:10px', 'padding-bottom:11px', 'padding-left:12px', 'padding-right:13px',
    ]) assert.ok(html.includes(decl), decl);
  });

  test("colours are written as every client reads them: hex, or rgba() with commas; Gmail drops a style holding rgb() in the space syntax, and bgcolor misreads any function", () => {
    const content = [
      { type: 'box', columns: [{ elements: [{ type: 'text', text: 'Code', styles: { color: '#ffffff' } }] }], styles: { backgroundColor: 'rgb(17 24 39)' } },
      { type: 'text', text: 'Panel', styles: { color: 'hsl(0 0% 98%)', backgroundColor: 'rgb(31 41 55 / 100%)', dark: { color: 'rgb(250 250 250)' } } },
      { type: 'text', text: 'Veiled', styles: { backgroundColor: 'rgb(0 0 0 / 50%)', borderColor: '#11182780', borderWidth: 1 } },
      { type: 'button', label: 'Pay', url: 'https://example.com/pay', styles: { backgroundColor: 'rgb(255 255 0)' } },
      { type: 'text', text: 'Hues', styles: { color: 'hsl(120 100% 25%)', backgroundColor: '#00f8', borderColor: 'hsl(240, 100%, 50%)', borderWidth: 1 } },
    ];
    const { html } = render(content, {}, dark);
    for (const expected of ['background-color:#111827', 'color:#fafafa', 'background-color:#1f2937', 'color:#fafafa!important', 'background-color:rgba(0, 0, 0, 0.5)', 'rgba(17, 24, 39, 0.502)', 'bgcolor="#ffff00"', 'color:#008000', 'background-color:rgba(0, 0, 255, 0.533)', '#0000ff']) {
      assert.ok(html.includes(expected), expected);
    }
    assert.doesNotMatch(html, /(?:rgba?|hsla?)\([^),]*\d\s+\d/, 'no colour function in the space syntax');
    // A yellow button measured as yellow: its label is dark, not the theme's white.
    assert.match(html, /bgcolor="#ffff00"[^>]*>\s*<a [^>]*color:#111827/);
    // Translucent colours are measured by their channels too; bgcolor, which reads no rgba(), is left out.
    const translucent = render([
      { type: 'button', label: 'Pay', url: 'https://example.com/pay', styles: { backgroundColor: '#ffff00cc' } },
      { type: 'text', text: 'Near black', styles: { color: '#222222cc' } },
    ], {}, dark).html;
    assert.match(translucent, /<td[^>]*style="[^"]*background-color:rgba\(255, 255, 0, 0\.8\)[^"]*"><a [^>]*color:#111827/);
    assert.doesNotMatch(translucent, /bgcolor="rgba/);
    assert.match(translucent, /class="[^"]*\bd\d+\b[^"]*"[^>]*style="[^"]*color:rgba\(34, 34, 34, 0\.8\)/, 'lifted in dark mode like any near-black text');
  });

  test('link overrides apply to links inside the text', () => {
    const html = body([{ type: 'text', text: '[a](https://a.example)', styles: { linkColor: '#ff0000', linkTextDecoration: 'none' } }]);
    assert.match(html, /<a href="https:\/\/a.example" style="color:#ff0000;text-decoration:none" target="_blank">a<\/a>/);
  });

  test('unknown preset falls back to default', () => {
    assert.match(body([{ type: 'text', preset: 'nope', text: 'x' }]), /<div class="t" style="font-size:16px/);
  });
});

describe('button node', () => {
  test('bulletproof button with highlight colour, presets and plain text', () => {
    const r = render([
      { type: 'button', label: 'Confirm', url: 'https://example.com/c' },
      { type: 'button', label: 'Secondary', url: 'https://example.com/s', preset: 'muted' },
      { type: 'button', label: 'Wide', url: 'https://example.com/w', styles: { width: '100%', align: 'center', backgroundColor: '#16a34a', borderRadius: 20 } },
    ], {}, { colors: { highlight: '#ffcc00' } });
    const html = r.html;
    assertGolden('button', body([
      { type: 'button', label: 'Confirm', url: 'https://example.com/c' },
      { type: 'button', label: 'Wide', url: 'https://example.com/w', styles: { width: '100%', align: 'center', backgroundColor: '#16a34a', borderRadius: 20 } },
    ]));
    assert.match(html, /<td align="center" bgcolor="#ffcc00" style="background-color:#ffcc00;border-radius:8px"><a href="https:\/\/example.com\/c" style="[^"]*color:#111827/, 'dark label on a light highlight');
    assert.match(html, /class="btm"/);
    assert.match(html, /bgcolor="#16a34a"/);
    assert.match(html, /width="100%"/);
    assert.match(r.text, /Confirm: https:\/\/example.com\/c/);
  });

  test('a button painted in a colour of its own gets a label colour picked for it: the theme\'s white label on a yellow or white button was unreadable', () => {
    const labelOn = (styles: Record<string, unknown>, preset?: string) => {
      const html = body([{ type: 'button', label: 'Go', url: 'https://x.example', styles, ...(preset && { preset }) }]);
      return /<a href="https:\/\/x\.example" style="[^"]*?;color:(#[0-9a-f]{6})/.exec(html)?.[1];
    };
    assert.equal(labelOn({}), '#ffffff', 'the theme: white on the default indigo');
    assert.equal(labelOn({ backgroundColor: '#ffff00' }), '#111827');
    assert.equal(labelOn({ backgroundColor: '#fff' }), '#111827');
    assert.equal(labelOn({ backgroundColor: '#111111' }, 'muted'), '#ffffff', "the muted preset's dark label on a dark button");
    assert.equal(labelOn({ backgroundColor: '#ffff00', color: '#ff0000' }), '#ff0000', 'a label colour given wins');
    // A colour given by name or function is not measured: the preset's label stays.
    assert.equal(labelOn({ backgroundColor: 'yellow' }), '#ffffff');
    // A dark label needs no Gmail blend hook (it is there to keep white labels white).
    assert.ok(!body([{ type: 'button', label: 'Go', url: 'https://x.example', styles: { backgroundColor: '#ffff00' } }], {}, dark).includes('gbs'));
  });

  test('white labels get the Gmail dark-mode blend hook only with dark mode', () => {
    const withDark = body([{ type: 'button', label: 'Go', url: 'https://x.example' }], {}, dark);
    assert.ok(withDark.includes('<span class="gbs"><span class="gbd">Go</span></span>'));
    const without = body([{ type: 'button', label: 'Go', url: 'https://x.example' }]);
    assert.ok(!without.includes('gbs'));
  });
});

describe('list node', () => {
  test('symbol rules: bullet by default, numbers, custom symbol, hidden markers', () => {
    const r = render([
      { type: 'list', items: ['one', 'two'] },
      { type: 'list', items: ['first', 'second'], symbol: 'number' },
      { type: 'list', items: ['done'], symbol: '✓' },
      { type: 'list', items: ['bare'], symbol: '' },
    ]);
    const html = r.html;
    assertGolden('list', body([{ type: 'list', items: ['one **b**', 'two'] }, { type: 'list', items: ['first'], symbol: 'number' }]));
    assert.match(html, />•<\/td><td[^>]*>one<\/td>/);
    assert.match(html, />1\.<\/td><td[^>]*>first<\/td>/);
    assert.match(html, />2\.<\/td><td[^>]*>second<\/td>/);
    assert.match(html, />✓<\/td><td[^>]*>done<\/td>/);
    assert.match(html, /<tr><td valign="top" style="padding:0 0 0px;vertical-align:top">bare<\/td><\/tr>/, 'no marker cell');
    assert.ok(r.text.includes('- one\n- two'));
    assert.ok(r.text.includes('1. first\n2. second'));
    assert.ok(r.text.includes('✓ done'));
    assert.ok(r.text.includes('\nbare'));
  });

  test('list presets', () => {
    assert.match(body([{ type: 'list', preset: 'muted', items: ['a'] }]), /class="tm"[^>]*style="font-size:14px/);
  });
});

describe('table node', () => {
  const receipt = {
    type: 'table',
    iterationKey: 'items',
    iterationTarget: 'children',
    columns: [{ label: 'Item' }, { label: 'Price', align: 'right' }],
    rows: [[{ text: '{name}' }, { text: '{price}' }], [{ text: '**Total**' }, { text: '{total}' }]],
  };

  test('columns with align, markdown cells, iterationTarget children repeats the first row only', () => {
    const html = body([receipt], { items: [{ name: '**Pro**', price: '$9' }, { name: 'Seat', price: '$3' }], total: '$12', name: 'global' });
    assertGolden('table-children', html);
    assert.equal(html.match(/<tr>/g)!.length - 1 - 1, 3, 'header + 2 item rows + total');
    assert.match(html, /<th scope="col" class="bd tm" align="right"[^>]*>Price<\/th>/);
    assert.ok(html.includes('<strong>Pro</strong>'), 'markdown in iterated prop values');
    assert.ok(html.includes('>Seat<'));
    assert.ok(html.indexOf('Seat') < html.indexOf('Total'), 'repeated rows come before the rest');
    assert.ok(!html.includes('global'), 'item props win over global props');
    assert.ok(html.includes('<strong>Total</strong>'));
  });

  test('without iterationTarget the whole table repeats', () => {
    const html = body([{ ...receipt, iterationTarget: undefined }], { items: [{ name: 'A', price: '1' }, { name: 'B', price: '2' }], total: 'T' });
    assert.equal(html.match(/<th /g)!.length, 4, 'two tables, two headers each');
  });

  test('a table without labels has no header row', () => {
    assert.ok(!body([{ type: 'table', columns: [], rows: [[{ text: 'a' }, { text: 'b' }]] }]).includes('<th'));
  });
});

describe('divider node', () => {
  test('borderWidth, borderColor, borderRadius and width', () => {
    const html = body([{ type: 'divider' }, { type: 'divider', styles: { borderWidth: 4, borderColor: '#ff0000', borderRadius: 2, width: '50%', align: 'center' } }]);
    assertGolden('divider', html);
    assert.match(html, /<td class="dv" height="1" style="height:1px;background-color:#e5e7eb/);
    assert.match(html, /<td height="4" style="height:4px;background-color:#ff0000;border-radius:2px/);
    assert.match(html, /width="50%" cellpadding="0" cellspacing="0" border="0" style="width:50%;margin:0 auto"/);
  });
});

describe('image node', () => {
  test('src, alt, width, href and variables', () => {
    const html = body([{ type: 'image', src: 'https://cdn.example/{file}', alt: 'Photo of {name}', href: 'https://example.com/{name}', styles: { width: 200, align: 'center', borderRadius: 8 } }], { file: 'a.png', name: 'ava' });
    assertGolden('image', html);
    assert.match(html, /<a href="https:\/\/example.com\/ava" target="_blank" style="text-decoration:none;border:0"><img src="https:\/\/cdn.example\/a.png" alt="Photo of ava" width="200"/);
    assert.ok(html.includes('width:100%;max-width:200px'), 'fixed widths shrink on phones');
    assert.ok(html.includes('border-radius:8px'));
    assert.ok(html.includes('margin:0 auto'));
  });

  test('every length the schema takes is rendered, not dropped: a height in px or as a numeric string, a width in em, a margin up to the schema\'s 2000', () => {
    const img = (styles: Record<string, unknown>) => body([{ type: 'image', src: 'https://cdn.example/a.png', alt: 'a', styles }]);
    for (const height of [50, '50', '50px']) assert.ok(img({ width: 100, height }).includes('height:50px'), String(height));
    assert.ok(img({ height: '3em' }).includes('height:48px'), 'em at the layout\'s 16 px');
    assert.ok(img({ height: '50%' }).includes('height:auto'), 'a percentage has no pixel height');
    assert.match(img({ width: '10em' }), /width="160"/);
    assert.ok(body([{ type: 'text', text: 'a', styles: { marginBottom: 1000 } }, { type: 'text', text: 'b' }]).includes('padding:0 0 1000px'));
  });

  test('darkModeSrc is swapped in by the dark-mode classes, only when dark mode is enabled', () => {
    const node = { type: 'image', src: 'https://cdn.example/light.png', darkModeSrc: 'https://cdn.example/dark.png', alt: 'Logo' };
    const on = render([node], {}, dark).html;
    assert.match(on, /<img src="https:\/\/cdn.example\/light.png"[^>]*class="il"/);
    assert.match(on, /<div class="idk" style="display:none;max-height:0;overflow:hidden;mso-hide:all"><img src="https:\/\/cdn.example\/dark.png"/);
    assert.ok(styleBlock(on).includes('.il{display:none!important}'));
    const off = render([node]).html;
    assert.ok(!off.includes('dark.png'));
  });

  test('an image without a usable src shows its alt text', () => {
    assert.ok(body([{ type: 'image', src: 'javascript:alert(1)', alt: 'Chart' }]).includes('>Chart</span>'));
  });

  test('an image without a width of its own is drawn in Outlook for Windows at most as wide as the text (it reads no max-width); the others get the fluid one', () => {
    const html = body([{ type: 'image', src: 'https://cdn.example/hero-1200.png', alt: 'Hero' }]);
    assert.match(html, /<!--\[if mso\]><img src="https:\/\/cdn\.example\/hero-1200\.png" alt="Hero" width="520" style="[^"]*;width:520px;[^"]*"><!\[endif\]--><!--\[if !mso\]><!--><img src="https:\/\/cdn\.example\/hero-1200\.png" alt="Hero" style="[^"]*max-width:100%[^"]*"><!--<!\[endif\]-->/);
    // A width or a height of its own: one image, sized as given.
    for (const styles of [{ width: 300 }, { height: 80 }]) {
      const sized = body([{ type: 'image', src: 'https://cdn.example/a.png', styles }]);
      assert.equal(sized.match(/<img /g)?.length, 1, JSON.stringify(styles));
      assert.doesNotMatch(sized, /\[if mso\]/);
    }
    // Its border is drawn outside the width.
    assert.match(body([{ type: 'image', src: 'https://cdn.example/a.png', styles: { borderWidth: 10 } }]), /<!--\[if mso\]><img [^>]*width="500"/);
    // In a box column, the column's width.
    assert.match(body([{ type: 'box', columns: [{ elements: [{ type: 'image', src: 'https://cdn.example/a.png' }] }, { elements: [] }] }]), /<!--\[if mso\]><img [^>]*width="2\d\d"/);
  });

  test('a markdown image that is its paragraph gets the same Outlook width; one in a line of text keeps its size', () => {
    const html = body([{ type: 'text', text: '![Hero](https://cdn.example/hero.png)\n\n[![Shop](https://cdn.example/shop.png)](https://shop.example)\n\nBuilt with ![badge](https://cdn.example/badge.svg) inside' }]);
    assert.match(html, /<p [^>]*><!--\[if mso\]><img src="https:\/\/cdn\.example\/hero\.png" alt="Hero" width="520" style="width:520px;[^"]*"><!\[endif\]--><!--\[if !mso\]><!--><img src="https:\/\/cdn\.example\/hero\.png" alt="Hero" style="max-width:100%;[^"]*"><!--<!\[endif\]--><\/p>/);
    assert.match(html, /<a href="https:\/\/shop\.example"[^>]*><!--\[if mso\]><img [^>]*alt="Shop" width="520"/);
    assert.match(html, /Built with <img src="https:\/\/cdn\.example\/badge\.svg" alt="badge" style="max-width:100%;[^"]*"> inside/);
    // The width the text has: its own width or paddings, a blockquote's or list's indent taken off.
    const outlookWidth = (text: string, styles?: Record<string, unknown>) => /<!--\[if mso\]><img [^>]*width="(\d+)"/.exec(body([{ type: 'text', text, styles }]))?.[1];
    assert.equal(outlookWidth('![a](https://cdn.example/a.png)', { paddingLeft: 60, paddingRight: 60 }), '400');
    assert.equal(outlookWidth('![a](https://cdn.example/a.png)', { width: 300, borderWidth: 10 }), '280');
    assert.equal(outlookWidth('> ![a](https://cdn.example/a.png)'), '503');
    assert.equal(outlookWidth('- x\n\n  ![a](https://cdn.example/a.png)'), '496');
  });

  test("a linked image without alt text is named by its link's host; an unlinked one stays decorative", () => {
    // A link holding only an image with alt="" has no name: screen readers read out its address instead.
    assert.match(body([{ type: 'image', src: 'https://cdn.example/a.png', href: 'https://shop.example.org/sale?x=1' }]), /<a href="https:\/\/shop.example.org\/sale\?x=1"[^>]*>(?:<!--\[if mso\]>)?<img [^>]*alt="shop.example.org"/);
    assert.match(body([{ type: 'image', src: 'https://cdn.example/a.png', href: 'https://shop.example.org/', alt: 'Summer sale' }]), /alt="Summer sale"/);
    assert.match(body([{ type: 'image', src: 'https://cdn.example/a.png' }]), /alt=""/);
  });
});

describe('code node', () => {
  for (const [language, code, token] of [
    ['javascript', 'const a = "x"; // note', '<span style="color:#ff7b72">const</span>'],
    ['php', '<?php echo "hi"; ?>', '<span style="color:#a5d6ff">&quot;hi&quot;</span>'],
    ['ruby', 'def greet\n  puts "hi"\nend', '<span style="color:#ff7b72">def</span>'],
    ['python', 'def greet():\n    return 1', '<span style="color:#ff7b72">def</span>'],
    ['bash', 'echo "hi" # note', '<span style="color:#8b949e;font-style:italic"># note</span>'],
  ] as const) {
    test(`${language} is highlighted with inline colours`, () => {
      const html = body([{ type: 'code', language, code }]);
      assert.ok(html.includes(token), html);
      assert.ok(!html.includes('class="hljs'), 'no class-based colours');
    });
  }

  test('text is escaped, not highlighted; unknown variables keep their braces', () => {
    const html = body([{ type: 'code', language: 'text', code: '<b>{x}</b> { y } {known}' }], { known: 'K' });
    assertGolden('code', html);
    assert.ok(html.includes('&lt;b&gt;{x}&lt;/b&gt; { y } K'));
    assert.ok(html.includes('white-space:pre-wrap'), 'long lines wrap instead of overflowing');
  });

  test("Outlook for Windows's font rule (its fallback for web fonts) leaves code, and its highlighted tokens, in a monospace font", () => {
    const { html } = render([{ type: 'code', language: 'javascript', code: 'const y = 1;' }], {}, { font: { name: 'Inter' } });
    const mso = /<!--\[if mso\]>[\s\S]*?<style>([^<]*)<\/style><!\[endif\]-->/.exec(html)![1]!;
    assert.match(mso, /span\{font-family:'Segoe UI'/);
    assert.match(mso, /pre,pre span,code,code span\{font-family:'Courier New', Courier, monospace\}/);
    assert.match(html, /<pre [^>]*><span style="color:#ff7b72">const<\/span>/, "the tokens the rule is for: spans in a pre");
  });
});

describe('box node', () => {
  test('column widths, gap, verticalAlign, nested elements and stacking on mobile', () => {
    const r = render([
      {
        type: 'box',
        styles: { gap: 20, verticalAlign: 'middle', backgroundColor: '#f9fafb', paddingTop: 10, paddingBottom: 10, paddingLeft: 10, paddingRight: 10, mobile: { stackColumns: true } },
        columns: [
          { width: '30%', elements: [{ type: 'text', text: 'Left' }] },
          { elements: [{ type: 'box', columns: [{ width: 100, elements: [{ type: 'text', text: 'Nested A' }] }, { elements: [{ type: 'text', text: 'Nested B' }] }] }] },
        ],
      },
    ]);
    const html = r.html;
    assertGolden('box', body([{ type: 'box', styles: { gap: 20, mobile: { stackColumns: true } }, columns: [{ width: '30%', elements: [{ type: 'text', text: 'L' }] }, { elements: [{ type: 'text', text: 'R' }] }] }]));
    assert.match(html, /<td class="stk m\d+" width="28\.8%" valign="middle"/);
    assert.match(html, /<td class="gs" width="20" style="width:20px/);
    assert.ok(html.includes('Nested A') && html.includes('Nested B'));
    assert.ok(html.includes('background-color:#f9fafb'));
    const css = styleBlock(html);
    assert.ok(css.includes('.stk{display:block!important;width:100%!important'));
    assert.ok(css.includes('.gs{display:none!important}'));
    assert.match(css, /\.m\d+\{padding-bottom:20px!important\}/, 'gap below stacked columns');
    assert.ok(r.text.includes('Left\n\nNested A\n\nNested B'));
  });

  test('columns without stackColumns stay side by side on mobile', () => {
    const html = body([{ type: 'box', columns: [{ elements: [] }, { elements: [] }] }]);
    assert.ok(!html.includes('class="stk'));
  });
});

describe('style overrides', () => {
  test('dark overrides become prefers-color-scheme and Outlook [data-ogsc] rules when dark mode is enabled', () => {
    const node = { type: 'text', text: 'x [l](https://a.example)', styles: { color: '#111111', dark: { color: '#eeeeee', backgroundColor: '#000000', linkColor: '#99ccff' } } };
    const html = render([node], {}, dark).html;
    const css = styleBlock(html);
    assert.match(html, /<div class="d1" style="font-size:16px;line-height:1.6;color:#111111">/);
    assert.ok(css.includes('@media (prefers-color-scheme:dark){'));
    assert.ok(css.includes('.d1{color:#eeeeee!important;background-color:#000000!important}'));
    assert.ok(css.includes('.d1 a{color:#99ccff!important}'));
    assert.ok(css.includes('[data-ogsc] .d1,[data-ogsb] .d1{color:#eeeeee!important;background-color:#000000!important}'));
    assert.ok(html.includes('<meta name="color-scheme" content="light dark">'));
  });

  test('dark overrides and dark rules are left out when the project has dark mode off', () => {
    const html = render([{ type: 'text', text: 'x', styles: { dark: { color: '#eeeeee' } } }], {}, { colors: { isDarkModeEnabled: false } }).html;
    assert.ok(!html.includes('prefers-color-scheme'));
    assert.ok(!html.includes('data-ogsc'));
    assert.ok(!html.includes('#eeeeee'));
    assert.ok(html.includes('<meta name="color-scheme" content="light">'));
  });

  test('mobile overrides become rules inside the max-width media query', () => {
    const html = render([{ type: 'text', text: 'x', styles: { marginBottom: 40, mobile: { fontSize: 14, marginBottom: 10 } } }]).html;
    const css = styleBlock(html);
    const media = css.slice(css.indexOf('@media only screen and (max-width:620px){'));
    const row = /<td class="(m\d+)" align="left" style="padding:0 0 40px/.exec(html)?.[1];
    const text = /<div class="t (m\d+)"/.exec(html)?.[1];
    assert.ok(row && text && row !== text, 'the row and the text each get their override class');
    assert.ok(media.includes(`.${row}{padding-bottom:10px!important}`));
    assert.ok(media.includes(`.${text}{font-size:14px!important}`));
  });

  test('identical overrides share one class', () => {
    const node = { type: 'text', text: 'x', styles: { mobile: { fontSize: 14 } } };
    const css = styleBlock(render([node, node, node]).html);
    assert.equal(css.match(/font-size:14px!important/g)!.length, 1);
  });

  test('invalid CSS values are dropped at render time, never injected', () => {
    const html = render([{ type: 'text', text: 'x', styles: { color: 'red;background:url(javascript:alert(1))', fontFamily: 'x}</style><script>', marginBottom: 'evil' } }]).html;
    assert.ok(!html.includes('javascript:'));
    assert.ok(!html.includes('<script>'));
  });
});

describe('iteration', () => {
  test('iterationKey repeats any node per array item; item props win; missing key renders nothing', () => {
    const r = render(
      [
        { type: 'text', text: 'Hi {name} from {team}', iterationKey: 'people' },
        { type: 'button', label: 'Open {name}', url: 'https://x.example/{id}', iterationKey: 'people' },
        { type: 'text', text: 'never', iterationKey: 'missing' },
      ],
      { team: 'Core', name: 'global', people: [{ name: 'Ava', id: '1' }, { name: 'Ben', id: '2', team: 'Ops' }, 'not-an-object'] },
    );
    assert.ok(r.html.includes('Hi Ava from Core'));
    assert.ok(r.html.includes('Hi Ben from Ops'));
    assert.ok(r.html.includes('href="https://x.example/2"'));
    assert.ok(!r.html.includes('never'));
    assert.ok(!r.html.includes('global'));
    assert.ok(r.text.includes('Open Ava: https://x.example/1\n\nOpen Ben: https://x.example/2') || r.text.includes('Open Ben: https://x.example/2'));
  });

  test('iteration inside box columns', () => {
    const html = body([{ type: 'box', columns: [{ elements: [{ type: 'text', text: '- {v}', iterationKey: 'rows' }] }] }], { rows: [{ v: 'one' }, { v: 'two' }] });
    assert.ok(html.includes('one') && html.includes('two'));
  });
});
