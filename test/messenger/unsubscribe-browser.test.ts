import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { launchChromium, skipWithoutChromium } from '../render/chromium.js';
import { startAppliance, type TestAppliance } from '../helpers/appliance.js';

/**
 * The unsubscribe page of a broadcast's link, in headless Chromium, as a recipient uses it: the page
 * asks, the button unsubscribes (under the page's own CSP, `form-action 'self'`), and the answer says so.
 */
const skip = skipWithoutChromium();

describe('the unsubscribe page in a browser', { skip }, () => {
  let app: TestAppliance;
  let browser: Browser;

  before(async () => {
    app = await startAppliance({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await app?.stop();
  });

  test('the link asks, the button unsubscribes, and the contact is left out of the next broadcast', async () => {
    assert.equal((await app.api('POST', '/v1/contacts', { emailAddress: 'reader@inbox.test' })).status, 200);
    const draft = (await app.api('POST', '/v1/messenger', { fromAddress: 'news@sender.test', subject: 'News', html: '<p>News</p>', status: 'queued' })).body;
    await app.appliance.context.messenger.runDue(new Date());
    const [summary] = (await app.api('POST', '/v1/email/search', { query: { messengerId: draft.id } })).body.data;
    const email = (await app.api('GET', `/v1/email/${summary.id}`)).body.email;
    const footer = await (await fetch(email.htmlReferenceUrl)).text();
    const link = /<a href="([^"]+\/t\/u\/[^"]+)"[^>]*>Unsubscribe<\/a>/.exec(footer)?.[1];
    assert.ok(link, 'the layout footer carries the link');

    const page = await browser.newPage();
    const blocked: string[] = [];
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) blocked.push(message.text());
    });
    try {
      await page.goto(link);
      assert.match(await page.textContent('body') ?? '', /Stop these emails to reader@inbox\.test\?/);
      assert.equal((await app.api('GET', '/v1/contacts/reader@inbox.test')).body.contact.isSubscribed, true, 'opening the link alone changes nothing');
      await Promise.all([page.waitForNavigation(), page.click('#unsubscribe')]);
      assert.equal(await page.textContent('#done'), 'You are unsubscribed');
      assert.deepEqual(blocked, [], 'the page works under its own CSP');
    } finally {
      await page.close();
    }
    assert.equal((await app.api('GET', '/v1/contacts/reader@inbox.test')).body.contact.isSubscribed, false);
    assert.equal((await app.api('GET', `/v1/messenger/${draft.id}`)).body.data.stats.unsubscribedTotal, 1);
  });
});
