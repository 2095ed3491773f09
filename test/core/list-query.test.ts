import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance } from '../helpers/appliance.js';

/**
 * A client that builds the query string from its unset options sends `?limit=&paginationCursorNext=`
 * (templates.md: an empty value counts as absent). Every list reads `limit` and the cursor by one rule.
 */
test('list endpoints read an empty limit or cursor as absent, and name the rule for a limit that is not a number', async () => {
  const app = await startAppliance();
  try {
    await app.api('POST', '/v1/suppressions', { emailAddress: 'listed@example.com' });
    await app.api('POST', '/v1/templates', { name: 'listed', subject: 's' });
    const webhook = await app.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/x' });
    const lists = ['/v1/suppressions', '/v1/templates', `/v1/webhooks/${webhook.body.id}/deliveries`, '/v1/email/search'];
    for (const list of lists) {
      const method = list === '/v1/email/search' ? 'POST' : 'GET';
      const empty = await app.api(method, `${list}?limit=&paginationCursorNext=`, method === 'POST' ? {} : undefined);
      assert.equal(empty.status, 200, `${list}: ${JSON.stringify(empty.body)}`);
      for (const limit of ['abc', '0x10', '1e2', '2.5', '0']) {
        const refused = await app.api(method, `${list}?limit=${limit}`, method === 'POST' ? {} : undefined);
        assert.equal(refused.status, 400, `${list}?limit=${limit}: ${JSON.stringify(refused.body)}`);
        assert.match(refused.body.developerMessage, /limit: must be a whole number from 1 to 100/, `${list}?limit=${limit}`);
        assert.doesNotMatch(refused.body.developerMessage, /NaN/);
      }
    }
    assert.deepEqual((await app.api('GET', '/v1/suppressions?limit=%201%20')).body.data.map((s: { emailAddress: string }) => s.emailAddress), ['listed@example.com']);
    const badCursor = await app.api('GET', `/v1/webhooks/${webhook.body.id}/deliveries?paginationCursorNext=xyz`);
    assert.equal(badCursor.status, 400);
    assert.match(badCursor.body.developerMessage, /paginationCursorNext: must be a paginationCursorNext value returned by a previous page/);
  } finally {
    await app.stop();
  }
});
