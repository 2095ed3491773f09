import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { fontStack, normalizeContent, renderTemplate } from '../../src/render/index.js';
import { fonts, webFontUrl } from '../../src/templates/fonts.js';
import { galleryTemplates } from '../../src/templates/gallery.js';
import { render, styleBlock } from './helpers.js';
import { wellFormedProblems } from './html-check.js';
import { sampleDesign, sampleLogoBase64 } from './fixtures.js';

const text = [{ type: 'text', text: 'Hello [link](https://x.example)' }];

describe('default layout', () => {
  test('600 px body, table-based, responsive media query, well formed', () => {
    const { html } = render(text);
    assert.ok(html.startsWith('<!DOCTYPE html>'));
    assert.ok(html.includes('max-width:600px'));
    assert.ok(html.includes('<!--[if mso]><table role="presentation" width="600"'), 'fixed width for Outlook');
    assert.ok(styleBlock(html).includes('@media only screen and (max-width:620px){'));
    assert.ok(html.includes('<meta name="viewport" content="width=device-width, initial-scale=1">'));
    assert.deepEqual(wellFormedProblems(html), []);
  });

  test('logo: base64 file becomes an inline image (cid) or data URI, with its size and link', () => {
    const design = { logo: { sizeWidth: 140, href: 'https://brand.example', file: sampleLogoBase64() } };
    const sent = render(text, {}, design);
    assert.equal(sent.inlineImages.length, 1);
    const logo = sent.inlineImages[0]!;
    assert.equal(logo.contentType, 'image/png');
    assert.match(logo.cid, /^logo-[0-9a-f]{20}@postino$/);
    assert.ok(sent.html.includes(`<a href="https://brand.example" target="_blank" style="text-decoration:none"><img src="cid:${logo.cid}" alt="Logo" width="140"`));
    const preview = render(text, {}, { logo: { ...design.logo, file: `data:image/png;base64,${design.logo.file}` } }, { imageMode: 'data-uri' });
    assert.equal(preview.inlineImages.length, 0);
    assert.match(preview.html, /<img src="data:image\/png;base64,[^"]+" alt="Logo" width="140"/);
  });

  test('logo: an SVG file (the SDK READMEs\' example) is an inline image/svg+xml part named logo.svg', () => {
    const svg = '<?xml version="1.0"?>\n<!-- logo --><svg viewBox="0 0 24 24" xmlns="http://www.w3.org/2000/svg"><path d="m12 5"/></svg>';
    const sent = render(text, {}, { logo: { sizeWidth: 50, file: Buffer.from(svg).toString('base64') } });
    assert.equal(sent.inlineImages.length, 1);
    assert.equal(sent.inlineImages[0]!.contentType, 'image/svg+xml');
    assert.equal(sent.inlineImages[0]!.filename, 'logo.svg');
    assert.ok(sent.html.includes(`<img src="cid:${sent.inlineImages[0]!.cid}" alt="Logo" width="50"`));
  });

  test('logo: an SVG that could run script or fetch anything when opened on its own is refused, whatever its spelling', () => {
    const svgNs = 'xmlns="http://www.w3.org/2000/svg"';
    const refused = [
      `<svg ${svgNs}><a href="jav&#x61;script:alert(1)"><rect width="9" height="9"/></a></svg>`,
      `<svg ${svgNs} xmlns:s="http://www.w3.org/2000/svg"><s:script>alert(1)</s:script></svg>`,
      `<svg ${svgNs}><h:script xmlns:h="http://www.w3.org/1999/xhtml">alert(1)</h:script></svg>`,
      `<svg ${svgNs}><h:iframe xmlns:h="http://www.w3.org/1999/xhtml" src="data:text/html,x"/></svg>`,
      `<svg ${svgNs}><a><set attributeName="href" to="jav&#x61;script:alert(1)"/><rect width="9" height="9"/></a></svg>`,
      `<svg ${svgNs} xmlns:xlink="http://www.w3.org/1999/xlink"><a xlink:href="data:text/html,&lt;script&gt;alert(1)&lt;/script&gt;"><rect width="9" height="9"/></a></svg>`,
      `<svg ${svgNs}><use href="https://evil.example/x.svg#a"/></svg>`,
      `<svg ${svgNs}><image href="https://tracker.example/beacon.png" width="1" height="1"/></svg>`,
      `<svg ${svgNs}><style>@import url(https://tracker.example/x.css);</style></svg>`,
      `<svg ${svgNs}><style>&#64;import "https://tracker.example/x.css";</style></svg>`,
      `<svg ${svgNs}><rect style="fill:u\\72l(https://tracker.example/y)" width="9" height="9"/></svg>`,
      `<svg ${svgNs}><rect fill="url(https://tracker.example/y)" width="9" height="9"/></svg>`,
      `<!DOCTYPE svg [<!ENTITY s "&#60;script&#62;alert(1)&#60;/script&#62;">]><svg ${svgNs}>&s;</svg>`,
      `<svg ${svgNs}><SCRIPT>alert(1)</SCRIPT></svg>`,
      `<svg ${svgNs}\n ONLOAD\n=\n"alert(1)"/>`,
    ];
    for (const svg of refused) assert.ok(!render(text, {}, { logo: { file: Buffer.from(svg).toString('base64') } }).html.includes('alt="Logo"'), svg);
    // What design tools export stays a logo: a DOCTYPE, a stylesheet, gradients by #id, Inkscape metadata, an embedded PNG.
    const exported = [
      `<?xml version="1.0" encoding="utf-8"?>\n<!-- Generator: Adobe Illustrator 27.0.0 -->\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n<svg version="1.1" id="Layer_1" ${svgNs} xmlns:xlink="http://www.w3.org/1999/xlink" x="0px" y="0px" viewBox="0 0 100 40" style="enable-background:new 0 0 100 40;" xml:space="preserve">\n<style type="text/css">\n\t.st0{fill:url(#SVGID_1_);}\n</style>\n<linearGradient id="SVGID_1_" gradientUnits="userSpaceOnUse" x1="0" y1="0" x2="100" y2="40"><stop offset="0" style="stop-color:#FF0000"/><stop offset="1" style="stop-color:#0000FF"/></linearGradient>\n<path class="st0" d="M0,0h100v40H0V0z"/><use xlink:href="#SVGID_1_"/>\n<text x="5" y="20">Caf&#233; &amp; co</text></svg>`,
      `<svg ${svgNs} xmlns:inkscape="http://www.inkscape.org/namespaces/inkscape" xmlns:sodipodi="http://sodipodi.sourceforge.net/DTD/sodipodi-0.dtd" xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:cc="http://creativecommons.org/ns#" inkscape:version="1.3"><sodipodi:namedview id="nv" pagecolor="#ffffff"/><metadata><rdf:RDF><cc:Work rdf:about=""><dc:format>image/svg+xml</dc:format></cc:Work></rdf:RDF></metadata><g inkscape:label="Layer 1" inkscape:groupmode="layer"><circle cx="5" cy="5" r="4" filter="url(#f)"/></g><filter id="f"><feGaussianBlur stdDeviation="1"/></filter><image width="1" height="1" href="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="/></svg>`,
    ];
    for (const svg of exported) assert.equal(render(text, {}, { logo: { file: Buffer.from(svg).toString('base64') } }).inlineImages[0]?.contentType, 'image/svg+xml', svg);
  });

  test('logo: url works, invalid files and unsafe URLs are ignored', () => {
    assert.ok(render(text, {}, { logo: { url: 'https://cdn.example/logo.png' } }).html.includes('src="https://cdn.example/logo.png"'));
    assert.ok(!render(text, {}, { logo: { file: 'not base64 !!' } }).html.includes('alt="Logo"'));
    assert.ok(!render(text, {}, { logo: { file: Buffer.from('<svg onload=alert(1)>').toString('base64') } }).html.includes('alt="Logo"'));
    assert.ok(!render(text, {}, { logo: { url: 'javascript:alert(1)' } }).html.includes('alt="Logo"'));
  });

  test('font: named fonts get a fallback stack; web fonts are linked outside Outlook', () => {
    const { html } = render(text, {}, { font: { name: 'Inter' } });
    assert.ok(html.includes("font-family:Inter, -apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"));
    assert.ok(html.includes('<!--[if !mso]><!--><link href="https://fonts.googleapis.com/css2?family=Inter:wght@400;500;600;700&amp;display=swap" rel="stylesheet"'));
    assert.ok(!render(text, {}, { font: { name: 'Georgia' } }).html.includes('fonts.googleapis.com'));
    assert.equal(fontStack('Open Sans'), "'Open Sans', 'Segoe UI', Tahoma, Geneva, Verdana, sans-serif");
    assert.equal(fontStack('Times New Roman'), "'Times New Roman', Times, Georgia, serif");
    assert.equal(fontStack('Some Custom'), "'Some Custom', -apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif");
    assert.equal(fontStack(undefined), fontStack('System'));
  });

  test('highlight colour drives buttons, links and list markers', () => {
    const { html } = render([...text, { type: 'button', label: 'B', url: 'https://x.example' }, { type: 'list', items: ['a'] }], {}, { colors: { highlight: '#0f766e' } });
    assert.ok(html.includes('color:#0f766e;text-decoration:underline'));
    assert.ok(html.includes('bgcolor="#0f766e"'));
    assert.ok(html.includes('color:#0f766e;font-weight:600'));
    assert.ok(!render(text, {}, { colors: { highlight: 'url(javascript:x)' } }).html.includes('javascript'));
  });

  test('dark mode: prefers-color-scheme, Outlook and Gmail hooks only when enabled', () => {
    const on = styleBlock(render(text, {}, { colors: { isDarkModeEnabled: true } }).html);
    assert.ok(on.includes('@media (prefers-color-scheme:dark){.pb{background-color:#0f1115!important}'));
    assert.ok(on.includes('[data-ogsc] .t,[data-ogsb] .t{color:#d1d5db!important}'));
    assert.ok(on.includes('u+.body .gbs{background:#000;mix-blend-mode:screen}'));
    const off = styleBlock(render(text).html);
    assert.ok(!off.includes('prefers-color-scheme') && !off.includes('data-ogsc') && !off.includes('mix-blend-mode'));
  });

  test('footer and, for a broadcast only, unsubscribe text, with markdown and variables, in HTML and plain text', () => {
    const design = { footerTextTransactional: '{company} · [Site](https://acme.example)', unsubscribeText: 'No more? [Unsubscribe]({unsubscribeUrl})' };
    const broadcast = render(text, { company: 'Acme <Ltd>', unsubscribeUrl: 'https://u.example/t/u/1' }, design, { broadcast: true });
    assert.ok(broadcast.html.includes('Acme &lt;Ltd&gt; · <a href="https://acme.example" class="ft"'));
    assert.ok(broadcast.html.includes('No more? <a href="https://u.example/t/u/1"'));
    assert.ok(broadcast.text.endsWith('Acme <Ltd> · Site (https://acme.example)\n\nNo more? Unsubscribe (https://u.example/t/u/1)\n'));
    // A receipt or a password reset: the offer to unsubscribe, its link going nowhere, was in every one.
    const transactional = render(text, { company: 'Acme <Ltd>' }, design);
    assert.ok(transactional.html.includes('Acme &lt;Ltd&gt; · <a href="https://acme.example" class="ft"'));
    assert.ok(!transactional.html.includes('No more?') && !transactional.text.includes('No more?'));
    assert.ok(transactional.text.endsWith('Acme <Ltd> · Site (https://acme.example)\n'));
  });

  test('preheader is hidden preview text', () => {
    const r = renderTemplate({ subject: 's', preheader: 'Preview {x}', content: [] }, { x: '<y>' }, {});
    assert.match(r.html, /<div style="display:none;[^"]*mso-hide:all">Preview &lt;y&gt;&#847;&zwnj;&nbsp;/);
    assert.ok(!renderTemplate({ subject: 's', content: [] }, {}, {}).html.includes('mso-hide:all">'));
  });

  test('plain text comes from text, list and button nodes unless emailText is set', () => {
    const content = [
      { type: 'text', text: '**Hi** {name}, see [docs](https://d.example).' },
      { type: 'list', items: ['one', 'two'] },
      { type: 'table', columns: [{ label: 'T' }], rows: [[{ text: 'cell' }]] },
      { type: 'code', language: 'text', code: 'code' },
      { type: 'button', label: 'Go', url: 'https://go.example' },
    ];
    const r = render(content, { name: 'Ava' });
    assert.equal(r.text, 'Hi Ava, see docs (https://d.example).\n\n- one\n- two\n\nGo: https://go.example\n');
    const custom = renderTemplate({ subject: 's', content: content as never, emailText: 'Custom {name}' }, { name: 'Ava' }, {});
    assert.equal(custom.text, 'Custom Ava\n');
  });

  test('layoutId null or unknown selects the default layout', () => {
    const a = renderTemplate({ subject: 's', content: [], layoutId: null }, {}, {});
    const b = renderTemplate({ subject: 's', content: [], layoutId: 'unknown' }, {}, {});
    assert.equal(a.html, b.html);
  });

  test('rendering is pure: same inputs, same output', () => {
    const t = galleryTemplates.find((g) => g.slug === 'weekly-report')!;
    const a = renderTemplate(t, t.sampleProps, sampleDesign());
    const b = renderTemplate(t, t.sampleProps, sampleDesign());
    assert.equal(a.html, b.html);
    assert.deepEqual(a.inlineImages.map((i) => i.cid), b.inlineImages.map((i) => i.cid));
  });
});

describe('gallery and fonts', () => {
  test('at least the eight required templates, each complete and unique', () => {
    const slugs = galleryTemplates.map((t) => t.slug);
    for (const slug of ['welcome', 'email-verification', 'password-reset', 'login-code', 'receipt', 'weekly-report', 'invitation', 'shipping-update']) {
      assert.ok(slugs.includes(slug), slug);
    }
    assert.equal(new Set(slugs).size, slugs.length);
    assert.equal(new Set(galleryTemplates.map((t) => t.name)).size, slugs.length);
    for (const t of galleryTemplates) {
      assert.equal(t.version, 2);
      assert.ok(t.name.length <= 200 && t.subject.length <= 1000 && t.preheader.length <= 200, t.slug);
      assert.ok(t.tags.length > 0 && t.content.length > 0, t.slug);
    }
  });

  test('receipt repeats a table row and weekly report has a chart', () => {
    const receipt = galleryTemplates.find((t) => t.slug === 'receipt')!;
    assert.ok(receipt.content.some((n) => n.type === 'table' && n.iterationTarget === 'children'));
    const report = galleryTemplates.find((t) => t.slug === 'weekly-report')!;
    assert.ok(report.content.some((n) => n.type === 'chart'));
  });

  for (const t of galleryTemplates) {
    test(`${t.slug}: passes normalizeContent and renders well formed, under the clipping threshold, with every variable filled`, () => {
      assert.deepEqual(normalizeContent(JSON.parse(JSON.stringify(t.content))), t.content);
      for (const design of [{}, sampleDesign()]) {
        const r = renderTemplate(t, t.sampleProps, design);
        assert.deepEqual(wellFormedProblems(r.html), [], t.slug);
        assert.ok(r.html.length < 104448, `${t.slug}: ${r.html.length} characters`);
        assert.ok(r.text.trim().length > 0);
        assert.ok(!r.subject.includes('{'));
      }
      // Sample props cover every variable the template uses (global or per iterated item).
      const known = new Set(Object.keys(t.sampleProps));
      for (const value of Object.values(t.sampleProps)) {
        if (Array.isArray(value)) for (const item of value) if (item && typeof item === 'object') Object.keys(item).forEach((k) => known.add(k));
      }
      const used = JSON.stringify([t.subject, t.preheader, t.content.filter((n) => n.type !== 'code')]).match(/\{[^{}"]+\}/g) ?? [];
      for (const v of used) assert.ok(known.has(v.slice(1, -1)), `${t.slug}: ${v} has no sample value`);
    });
  }

  test('fonts: spec shape, known fonts only, each with a stack', () => {
    assert.ok(fonts.length >= 20);
    for (const f of fonts) {
      assert.deepEqual(Object.keys(f).sort(), ['category', 'name', 'subsets', 'variants']);
      assert.ok(fontStack(f.name).endsWith('serif') || fontStack(f.name).endsWith('monospace'), f.name);
    }
    assert.ok(fonts.some((f) => f.name === 'Arial') && fonts.some((f) => f.name === 'Roboto'));
    assert.equal(webFontUrl('Arial'), undefined);
    assert.match(webFontUrl('Roboto Mono')!, /family=Roboto\+Mono:wght@400;500;700/);
  });
});
