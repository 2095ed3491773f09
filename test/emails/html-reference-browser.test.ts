import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext } from 'playwright-core';
import { launchChromium, skipWithoutChromium } from '../render/chromium.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';
import { baseEmail } from './helpers.js';

/**
 * The html reference (htmlReferenceUrl) opened in headless Chromium, as a person reading a sent email
 * would: the sender's html runs no script on the API's origin, and what the appliance itself renders
 * (links that open in a new tab) still works.
 */
const skip = skipWithoutChromium();

describe('the html reference in a browser', { skip }, () => {
  let app: TestAppliance;
  let browser: Browser;
  let context: BrowserContext;

  before(async () => {
    app = await startAppliance({ env: { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
    browser = await launchChromium();
    context = await browser.newContext();
    // No network: the pages a link opens are answered here.
    await context.route('https://example.net/**', (route) => route.fulfill({ contentType: 'text/html', body: '<title>opened</title>' }));
  });
  after(async () => {
    await browser?.close();
    await app?.stop();
  });

  async function htmlReferenceOf(email: Record<string, unknown>, key?: string): Promise<string> {
    const sent = await app.api('POST', '/v1/email/send', { ...baseEmail, ...email }, { key });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    return (await app.api('GET', `/v1/email/${sent.body.id}`, undefined, { key })).body.email.htmlReferenceUrl;
  }

  test("the sender's scripts do not run", async () => {
    const url = await htmlReferenceOf({ html: '<p id="p">static</p><script>document.getElementById("p").textContent = "ran"</script><img src="x" onerror="document.title = \'ran\'">' });
    const page = await context.newPage();
    try {
      await page.goto(url);
      assert.equal(await page.textContent('#p'), 'static');
      assert.notEqual(await page.title(), 'ran');
    } finally {
      await page.close();
    }
  });

  test('a link rendered to open in a new tab (every markdown link, button and linked image) opens it', async () => {
    const url = await htmlReferenceOf({ text: undefined, markdown: '[Read the docs](https://example.net/docs)' });
    const page = await context.newPage();
    try {
      await page.goto(url);
      const opened = context.waitForEvent('page', { timeout: 5000 });
      await page.click('a[href="https://example.net/docs"][target="_blank"]');
      const tab = await opened;
      await tab.waitForLoadState();
      assert.equal(tab.url(), 'https://example.net/docs');
      assert.equal(await tab.title(), 'opened', 'the opened site is not sandboxed itself');
      await tab.close();
    } finally {
      await page.close();
    }
  });

  test("the design's web font loads: its stylesheet is not refused", async () => {
    const project = await app.api('POST', '/v1/project', { name: 'Web font' });
    const key = project.body.apiKey;
    assert.equal((await app.api('PATCH', '/v1/project', { emailTemplateDesign: { font: { name: 'Inter' } } }, { key })).status, 200);
    const url = await htmlReferenceOf({ text: undefined, markdown: 'Hello in Inter' }, key);
    const requested: string[] = [];
    const page = await context.newPage();
    await page.route('https://fonts.googleapis.com/**', (route) => {
      requested.push(route.request().url());
      return route.fulfill({ contentType: 'text/css', body: 'body { letter-spacing: 7px }' });
    });
    try {
      await page.goto(url);
      await page.waitForLoadState('load');
      assert.equal(requested.length, 1, 'the Google Fonts stylesheet the layout links is fetched');
      assert.match(requested[0], /family=Inter/);
      assert.equal(await page.evaluate(() => getComputedStyle(document.body).letterSpacing), '7px');
    } finally {
      await page.close();
    }
  });
});
