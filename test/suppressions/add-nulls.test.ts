import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance } from '../helpers/appliance.js';

test('POST /v1/suppressions: an optional reason or detail sent as null counts as not sent (docs/errors.md)', async () => {
  const app = await startAppliance();
  try {
    const created = await app.api('POST', '/v1/suppressions', { emailAddress: 'n@example.com', reason: null, detail: null });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual([created.body.suppression.reason, created.body.suppression.detail], ['manual', null]);
    const missing = await app.api('POST', '/v1/suppressions', { emailAddress: null });
    assert.equal(missing.status, 400);
    assert.match(missing.body.developerMessage, /emailAddress/);
  } finally {
    await app.stop();
  }
});
