import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { normalizeContent, renderHtmlInLayout, renderMarkdownEmail, renderTemplate, type ContentNode, type RenderedEmail } from '../../src/render/index.js';
import { htmlToText } from '../../src/render/html-to-text.js';
import { galleryTemplates } from '../../src/templates/gallery.js';
import { launchChromium, skipWithoutChromium, viewports, type Viewport } from './chromium.js';
import { sampleDesign, sampleMarkdown, sampleMarkdownProps } from './fixtures.js';

/**
 * Every gallery template and the markdown sample, rendered for previews (data-uri images), laid out by
 * headless Chromium at desktop and phone widths, light and dark: nothing may be wider than the viewport
 * or stick out of the card, the content must be visible, every image must decode, and dark mode must
 * actually turn the card dark.
 */
const skip = skipWithoutChromium();

const design = sampleDesign();
const samples: { slug: string; email: RenderedEmail }[] = [
  ...galleryTemplates.map((t) => ({ slug: t.slug, email: renderTemplate(t, t.sampleProps, design, { imageMode: 'data-uri' }) })),
  { slug: 'markdown', email: renderMarkdownEmail(sampleMarkdown, sampleMarkdownProps, design, { imageMode: 'data-uri' }) },
  { slug: 'broadcast-html', email: broadcastInLayout('<h1>May news</h1><p>Our <a href="https://example.org/blog">blog</a> has new posts, in the colours the card gives them.</p>') },
  { slug: 'stress', email: renderTemplate({ subject: 'Stress', content: stressContent() }, { series: [3, 1, 4, 1, 5, 9, 2, 6] }, design, { imageMode: 'data-uri' }) },
];

/** Content that tends to break layouts on phones: unbreakable words, wide tables, many columns. */
function stressContent(): ContentNode[] {
  const long = 'Supercalifragilisticexpialidocious'.repeat(4);
  const url = `https://example.com/${'very-long-path-segment/'.repeat(8)}?token=${'a'.repeat(60)}`;
  return normalizeContent([
    { type: 'text', preset: 'title', text: `Title with ${long}` },
    { type: 'text', text: `A link [${url}](${url}) and a word ${long}.` },
    { type: 'list', items: [long, url] },
    { type: 'table', columns: ['A', 'B', 'C', 'D', 'E', 'F'].map((label) => ({ label })), rows: [['1', long, '3', url, '5', '6'].map((text) => ({ text }))] },
    { type: 'box', styles: { gap: 12 }, columns: [1, 2, 3, 4].map((n) => ({ elements: [{ type: 'text', text: `Column ${n} ${long}` }, { type: 'button', label: `Button number ${n}`, url }] })) },
    { type: 'code', language: 'javascript', code: `const x = "${'y'.repeat(200)}";` },
    { type: 'button', label: `A very long call to action label that keeps going ${long}`, url },
    { type: 'image', src: 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', alt: 'wide', styles: { width: 2000 } },
    { type: 'chart', dataKey: 'series', chartType: 'bar' },
    { type: 'divider', styles: { width: 900 } },
  ]);
}

/** A Messenger with-layout broadcast: the sender's own html, with no classes or colours of ours, in the layout. */
function broadcastInLayout(html: string): RenderedEmail {
  const rendered = renderHtmlInLayout(html, { unsubscribeUrl: 'https://mail.example.test/t/u/x' }, design, { subject: 'May news', broadcast: true, imageMode: 'data-uri' });
  // The card shows the sender's html (the logo is above the card): its first line is what the layout check looks for.
  return { ...rendered, text: htmlToText(html) };
}

interface Layout {
  innerWidth: number;
  docWidth: number;
  bodyWidth: number;
  card: { left: number; right: number; width: number; height: number } | null;
  cardText: string;
  overflowing: string[];
  brokenImages: string[];
  cardBackground: string;
  titleColor: string;
  /** The first paragraph's text colour: a class of ours sets it, or the card's, which a sender's own html inherits. */
  paragraphColor: string;
  preheaderHeight: number;
}

describe('rendered emails in headless Chromium', { skip }, () => {
  let browser: Browser;
  const pages = new Map<string, Page>();

  before(async () => {
    browser = await launchChromium();
    for (const v of viewports) {
      const context = await browser.newContext({ viewport: { width: v.width, height: v.height }, colorScheme: v.colorScheme });
      const page = await context.newPage();
      // No network: previews carry their images as data URIs, so nothing has to load from outside.
      await page.route('**/*', (route) => route.abort());
      pages.set(v.name, page);
    }
  });

  after(async () => {
    await browser?.close();
  });

  for (const { slug, email } of samples) {
    for (const v of viewports) {
      test(`${slug} at ${v.name} (${v.width}px, ${v.colorScheme})`, async () => {
        const layout = await measure(pages.get(v.name)!, email.html);
        assertLayout(layout, v, email);
      });
    }
  }
});

async function measure(page: Page, html: string): Promise<Layout> {
  await page.setContent(html, { waitUntil: 'load' });
  return page.evaluate(() => {
    const card = document.querySelector('.cd') as HTMLElement | null;
    const rect = card?.getBoundingClientRect();
    const overflowing: string[] = [];
    if (card && rect) {
      for (const el of Array.from(card.querySelectorAll('*'))) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) continue;
        if (r.right > rect.right + 1 || r.left < rect.left - 1) overflowing.push(`<${el.tagName.toLowerCase()}> ${Math.round(r.left)}..${Math.round(r.right)} outside ${Math.round(rect.left)}..${Math.round(rect.right)}: ${(el.textContent ?? '').slice(0, 40)}`);
      }
    }
    const brokenImages = Array.from(document.images)
      .filter((img) => img.getBoundingClientRect().width > 0 && (!img.complete || img.naturalWidth === 0))
      .map((img) => img.alt || img.src.slice(0, 40));
    const title = card?.querySelector('.tt') as HTMLElement | null;
    const preheader = document.body.firstElementChild as HTMLElement | null;
    return {
      innerWidth: window.innerWidth,
      docWidth: document.documentElement.scrollWidth,
      bodyWidth: document.body.scrollWidth,
      card: rect ? { left: rect.left, right: rect.right, width: rect.width, height: rect.height } : null,
      cardText: card?.innerText ?? '',
      overflowing,
      brokenImages,
      cardBackground: card ? getComputedStyle(card).backgroundColor : '',
      titleColor: title ? getComputedStyle(title).color : '',
      paragraphColor: getComputedStyle(card?.querySelector('p') ?? card ?? document.body).color,
      preheaderHeight: preheader && preheader.tagName === 'DIV' ? preheader.getBoundingClientRect().height : 0,
    };
  });
}

function assertLayout(layout: Layout, v: Viewport, email: RenderedEmail): void {
  assert.ok(layout.docWidth <= layout.innerWidth, `page is ${layout.docWidth}px wide in a ${layout.innerWidth}px viewport`);
  assert.ok(layout.bodyWidth <= layout.innerWidth, `body is ${layout.bodyWidth}px wide in a ${layout.innerWidth}px viewport`);
  assert.ok(layout.card, 'the content card is rendered');
  assert.ok(layout.card.right <= v.width && layout.card.left >= 0, 'the card fits the viewport');
  assert.ok(layout.card.width >= Math.min(600, v.width - 32), `card width ${layout.card.width}`);
  assert.ok(layout.card.height > 150, `card height ${layout.card.height}`);
  assert.deepEqual(layout.overflowing, [], 'nothing sticks out of the card');
  assert.deepEqual(layout.brokenImages, [], 'every visible image decodes');
  const firstLine = email.text.split('\n').find((l) => l.trim() !== '')!.trim();
  // innerText applies text-transform, so compare case-insensitively.
  assert.ok(layout.cardText.replace(/\s+/g, ' ').toLowerCase().includes(firstLine.replace(/\s+/g, ' ').toLowerCase()), `visible text includes "${firstLine}"`);
  assert.equal(layout.preheaderHeight, 0, 'the preheader is hidden');
  const bg = luminance(layout.cardBackground);
  if (v.colorScheme === 'dark') {
    assert.ok(bg < 0.05, `dark card background, got ${layout.cardBackground}`);
    if (layout.titleColor) assert.ok(luminance(layout.titleColor) > 0.6, `light title text, got ${layout.titleColor}`);
    assert.ok(luminance(layout.paragraphColor) > 0.25, `light paragraph text on the dark card, got ${layout.paragraphColor}`);
  } else {
    assert.ok(bg > 0.9, `light card background, got ${layout.cardBackground}`);
  }
}

function luminance(css: string): number {
  const [r, g, b] = (css.match(/\d+(\.\d+)?/g) ?? ['0', '0', '0']).slice(0, 3).map((n) => {
    const c = Number(n) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  }) as [number, number, number];
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/**
 * Dark mode recolours the card and the theme's text, not what a node paints itself: text on a node's own
 * light background turned light grey on it (1.3:1), and text in a dark colour of its own stayed dark on the
 * dark card (1.05:1). Each marked text must read where it is, in both schemes.
 */
describe('colours a node sets itself read in dark mode as in light mode', { skip }, () => {
  const browser = browserForSuite();

  const content = normalizeContent([
    { type: 'text', text: 'On-yellow text [and a link](https://example.com)', styles: { backgroundColor: '#ffff00' } },
    { type: 'box', styles: { backgroundColor: '#f3f4f6' }, columns: [{ elements: [{ type: 'text', text: 'In-panel text' }, { type: 'list', items: ['In-panel item'] }] }] },
    { type: 'table', styles: { backgroundColor: '#fafafa' }, columns: [{ label: 'Panel-heading' }], rows: [[{ text: 'Panel-cell' }]] },
    { type: 'text', text: 'Own-dark text', styles: { color: '#222222' } },
    { type: 'list', items: ['Own-brand item'], styles: { color: '#4f46e5' } },
    { type: 'button', label: 'Yellow-button', url: 'https://example.com', styles: { backgroundColor: '#ffff00' } },
  ]);
  const email = renderTemplate({ subject: 'Colours', content }, {}, design, { imageMode: 'data-uri' });
  const markers = ['On-yellow text', 'and a link', 'In-panel text', 'In-panel item', 'Panel-heading', 'Panel-cell', 'Own-dark text', 'Own-brand item', 'Yellow-button'];

  for (const colorScheme of ['light', 'dark'] as const) {
    test(`in ${colorScheme} mode`, async () => {
      for (const { text, color, background } of await textColours(browser(), email.html, colorScheme, markers)) {
        const ratio = contrast(color, background);
        // Body text 4.5:1 (WCAG AA); the table's small uppercase heading is the theme's muted colour, 3:1.
        assert.ok(ratio >= (text === 'Panel-heading' ? 3 : 4.5), `${text}: ${color} on ${background} is ${ratio.toFixed(2)}:1 in ${colorScheme} mode`);
      }
    });
  }
});

/**
 * The brand colour was used for text as given: links, list markers and outline labels in amber or sky
 * blue read at 2.2–2.8:1 on the white card, a default button on them kept a white label (2.2:1) where a
 * dark one reads at 8:1, and a near-black brand's link was lifted one fixed step (3.5:1 on the dark
 * card). The footer's muted text read at 4.4:1 on the grey page.
 */
describe('text in or on a brand colour reads, whatever the colour', { skip }, () => {
  const browser = browserForSuite();

  const content = normalizeContent([
    { type: 'text', text: 'Body with [a brand link](https://example.com)' },
    { type: 'list', items: ['Brand-marker item'], symbol: 'number' },
    { type: 'button', label: 'Default-button', url: 'https://example.com' },
    { type: 'button', label: 'Outline-button', url: 'https://example.com', preset: 'outline' },
    { type: 'box', styles: { backgroundColor: '#f3f4f6' }, columns: [{ elements: [{ type: 'button', label: 'Panel-outline', url: 'https://example.com', preset: 'outline' }, { type: 'button', label: 'Panel-muted', url: 'https://example.com', preset: 'muted' }] }] },
  ]);
  const markers = ['a brand link', '1.', 'Default-button', 'Outline-button', 'Panel-outline', 'Panel-muted', 'Footer-words', 'Unsubscribe-link'];
  for (const highlight of ['#f59e0b', '#0ea5e9', '#16a34a', '#111827']) {
    const brandDesign = { colors: { highlight, isDarkModeEnabled: true }, footerTextTransactional: 'Footer-words', unsubscribeText: '[Unsubscribe-link](https://example.com/u)' };
    const email = renderTemplate({ subject: 'Brand', content }, {}, brandDesign, { imageMode: 'data-uri', broadcast: true });
    for (const colorScheme of ['light', 'dark'] as const) {
      test(`highlight ${highlight} in ${colorScheme} mode`, async () => {
        for (const { text, color, background } of await textColours(browser(), email.html, colorScheme, markers)) {
          const ratio = contrast(color, background);
          assert.ok(ratio >= 4.5, `${text}: ${color} on ${background} is ${ratio.toFixed(2)}:1 in ${colorScheme} mode`);
        }
      });
    }
  }
});

/** The computed colour of the first text containing each marker, and the background painted under it. */
async function textColours(browser: Browser, html: string, colorScheme: 'light' | 'dark', markers: string[]) {
  const context = await browser.newContext({ viewport: { width: 800, height: 900 }, colorScheme });
  try {
    const page = await context.newPage();
    await page.route('**/*', (route) => route.abort());
    await page.setContent(html, { waitUntil: 'load' });
    // No named functions inside: the test runner's transform would refer to a helper the page lacks.
    const found = await page.evaluate((texts) =>
      texts.map((text) => {
        const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          if (!node.textContent?.toLowerCase().includes(text.toLowerCase())) continue;
          const el = node.parentElement!;
          let background = 'rgb(255, 255, 255)';
          for (let at: Element | null = el; at; at = at.parentElement) {
            const bg = getComputedStyle(at).backgroundColor;
            if (bg && bg !== 'transparent' && !/rgba\(.*,\s*0\)$/.test(bg)) {
              background = bg;
              break;
            }
          }
          return { text, color: getComputedStyle(el).color, background };
        }
        return { text, color: '', background: '' };
      }), markers);
    for (const { text, color } of found) assert.ok(color, `${text} is on the page`);
    return found;
  } finally {
    await context.close();
  }
}

function contrast(a: string, b: string): number {
  const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x) as [number, number];
  return (light + 0.05) / (dark + 0.05);
}

/**
 * Arabic and Hebrew emails were laid out left to right: each sentence's full stop showed at the start of
 * its line and the text sat against the left edge. Text that starts right-to-left gets the layout that
 * way: the document is `dir="rtl"`, text starts from the right edge, a list's marker is on the right.
 */
describe('an email whose text runs right to left is laid out that way', { skip }, () => {
  const browser = browserForSuite();

  test('Arabic text, a list and a button, from a prop too', async () => {
    const content = normalizeContent([
      { type: 'text', text: 'مرحبا {name}! طلبك رقم 123 جاهز.' },
      { type: 'list', items: ['العنصر الأول', 'العنصر الثاني'] },
      { type: 'button', label: 'افتح', url: 'https://example.com' },
    ]);
    const email = renderTemplate({ subject: 'طلبك', content }, { name: 'سارة' }, design, { imageMode: 'data-uri' });
    assert.match(email.html, /<html dir="rtl"/);
    const context = await browser().newContext({ viewport: { width: 800, height: 900 } });
    try {
      const page = await context.newPage();
      await page.route('**/*', (route) => route.abort());
      // As sent, and as Gmail, Yahoo and Outlook.com show it: without the <html> element's attributes.
      for (const html of [email.html, email.html.replace(/<html[^>]*>/, '<html>')]) {
        await page.setContent(html, { waitUntil: 'load' });
        const geometry = await page.evaluate(() => {
          const card = document.querySelector('.cd') as HTMLElement;
          const cardBox = card.getBoundingClientRect();
          const padding = parseFloat(getComputedStyle(card).paddingRight);
          const paragraph = card.querySelector('p') as HTMLElement;
          const range = document.createRange();
          range.selectNodeContents(paragraph);
          const text = range.getBoundingClientRect();
          const markers = Array.from(card.querySelectorAll('td.hl')).map((td) => td.getBoundingClientRect());
          const items = Array.from(card.querySelectorAll('td.hl + td')).map((td) => td.getBoundingClientRect());
          return {
            direction: getComputedStyle(paragraph).direction,
            textRight: text.right,
            textLeft: text.left,
            contentRight: cardBox.right - padding,
            contentLeft: cardBox.left + padding,
            markersRightOfItems: markers.every((m, i) => m.left >= items[i].right - 1),
          };
        });
        assert.equal(geometry.direction, 'rtl');
        assert.ok(Math.abs(geometry.textRight - geometry.contentRight) < 2, `text starts at the right edge: ${geometry.textRight} vs ${geometry.contentRight}`);
        assert.ok(geometry.textLeft > geometry.contentLeft + 50, 'and not from the left one');
        assert.ok(geometry.markersRightOfItems, "each list marker is on its item's right");
      }
    } finally {
      await context.close();
    }
  });

  test('a left-to-right email is as it was: dir="ltr", lang="en"', () => {
    const email = renderTemplate({ subject: 'Hi', content: normalizeContent([{ type: 'text', text: 'Hello, مرحبا' }]) }, {}, design, {});
    assert.match(email.html, /<html lang="en" dir="ltr"/);
  });

  test("the design's language is the lang of either direction; right-to-left text without one says none", () => {
    const hebrew = normalizeContent([{ type: 'text', text: 'שלום עולם' }]);
    assert.match(renderTemplate({ subject: 'Hi', content: hebrew }, {}, design, {}).html, /<html dir="rtl"/);
    assert.match(renderTemplate({ subject: 'Hi', content: hebrew }, {}, { ...design, language: 'he' }, {}).html, /<html lang="he" dir="rtl"/);
    const german = normalizeContent([{ type: 'text', text: 'Guten Tag' }]);
    const inGerman = renderTemplate({ subject: 'Hi', content: german }, {}, { ...design, language: 'de' }, {}).html;
    assert.match(inGerman, /<html lang="de" dir="ltr"/);
    // Said inside the body too, which is all Gmail keeps.
    assert.match(inGerman.slice(inGerman.indexOf('<body')), /<table role="presentation" class="pb" lang="de" dir="ltr"/);
    // A design stored without the API's check cannot put markup into the attribute.
    assert.match(renderTemplate({ subject: 'Hi', content: german }, {}, { ...design, language: 'x"><b>' }, {}).html, /<html lang="en" dir="ltr"/);
  });
});

/**
 * A table node and a markdown table hold data: they were marked `role="presentation"` like the layout's
 * tables, so a screen reader heard "DESCRIPTION QTY AMOUNT Team plan 1 $99.00 …" as one run of words.
 * They are tables with column headings to the browser's accessibility tree; the layout's tables are not.
 */
describe('data tables are tables to assistive technology, layout tables are not', { skip }, () => {
  test('a table node and a markdown table expose their headings and cells', async () => {
    const content = normalizeContent([
      { type: 'table', columns: [{ label: 'Item' }, { label: 'Price', align: 'right' }], rows: [[{ text: 'Pro' }, { text: '$9' }]] },
      { type: 'text', text: '| Day | Visits |\n|---|---|\n| Mon | 120 |' },
    ]);
    const email = renderTemplate({ subject: 'Tables', content }, {}, design, { imageMode: 'data-uri' });
    await withEmailPage(email.html, { width: 800, height: 900 }, async (page) => {
      assert.equal(await page.getByRole('table').count(), 2, 'only the two data tables');
      assert.equal(await page.getByRole('columnheader', { name: 'Price' }).count(), 1);
      assert.equal(await page.getByRole('columnheader', { name: 'Visits' }).count(), 1);
      assert.equal(await page.getByRole('cell', { name: '$9' }).count(), 1);
      assert.equal(await page.getByRole('cell', { name: '120' }).count(), 1);
    });
  });
});

/**
 * The title and subtitle presets looked like headings and were paragraphs to screen readers: no gallery
 * email had a single heading to skim by. They are headings of level 1 and 2, plain or in a box.
 */
describe('title and subtitle text are headings to assistive technology', { skip }, () => {
  test('plain, and with a box of their own', async () => {
    const content = normalizeContent([
      { type: 'text', preset: 'title', text: 'Thanks for your payment' },
      { type: 'text', preset: 'subtitle', text: 'Daily visitors', styles: { backgroundColor: '#fafafa', paddingTop: 8 } },
      { type: 'text', text: 'Body text' },
    ]);
    const email = renderTemplate({ subject: 'Headings', content }, {}, design, { imageMode: 'data-uri' });
    await withEmailPage(email.html, { width: 800, height: 900 }, async (page) => {
      assert.equal(await page.getByRole('heading', { level: 1, name: 'Thanks for your payment' }).count(), 1);
      assert.equal(await page.getByRole('heading', { level: 2, name: 'Daily visitors' }).count(), 1);
      assert.equal(await page.getByRole('heading').count(), 2, 'body text is no heading');
    });
  });
});

/**
 * At 320 px (WCAG's reflow width) a receipt's amounts split mid-number ("$161.7" over "0") and its
 * headings mid-word: the card lets any word break anywhere, so the table shrank its number columns below
 * their words. A cell of short words keeps them whole; long ones (the stress sample's URL) still break.
 */
describe('a table of short words keeps its words whole on a narrow screen', { skip }, () => {
  test('a receipt at 320 px, as a table node and as a markdown table', async () => {
    const content = normalizeContent([
      {
        type: 'table',
        columns: [{ label: 'Description' }, { label: 'Qty', align: 'right' }, { label: 'Amount', align: 'right' }],
        rows: [
          [{ text: '**Team plan**, monthly' }, { text: '1' }, { text: '$99.00' }],
          [{ text: 'Extra seats, add-on for the whole team' }, { text: '3' }, { text: '$1,236.00' }],
          [{ text: '**Total**' }, { text: '' }, { text: '**$1,335.70**' }],
        ],
      },
      { type: 'text', text: '| Item of the order, as described | Amount |\n|---|--:|\n| Seats for the whole team this year | $2,470.00 |' },
    ]);
    const email = renderTemplate({ subject: 'Receipt', content }, {}, design, { imageMode: 'data-uri' });
    await withEmailPage(email.html, { width: 320, height: 800 }, async (page) => {
      const lines = await page.evaluate((words) =>
        words.map((word) => {
          const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const at = node.textContent!.indexOf(word);
            if (at === -1) continue;
            const range = document.createRange();
            range.setStart(node, at);
            range.setEnd(node, at + word.length);
            return { word, lines: new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top))).size };
          }
          return { word, lines: 0 };
        }), ['Description', 'Amount', '$99.00', '$1,236.00', '$1,335.70', '$2,470.00']);
      for (const { word, lines: count } of lines) assert.equal(count, 1, `${word} on one line`);
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 320), 'no horizontal scrolling');
    });
  });
});

/** The email loaded in a fresh headless Chromium page, no network; `use` runs on it, then the browser closes. */
async function withEmailPage<T>(html: string, viewport: { width: number; height: number }, use: (page: Page) => Promise<T>): Promise<T> {
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport });
    await page.route('**/*', (route) => route.abort());
    await page.setContent(html, { waitUntil: 'load' });
    return await use(page);
  } finally {
    await browser.close();
  }
}

/** One Chromium for the tests of the enclosing describe: launched before them, closed after them. */
function browserForSuite(): () => Browser {
  let browser: Browser | undefined;
  before(async () => {
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
  });
  return () => browser!;
}
