import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startAppliance } from '../helpers/appliance.js';

test('the appliance boots, reports healthy and answers the project of its key', async () => {
  const app = await startAppliance();
  try {
    const health = await app.api('GET', '/healthz', undefined, { key: null });
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'ok');
    const project = await app.api('GET', '/v1/project');
    assert.equal(project.status, 200);
    assert.equal(project.body.name, 'Default project');
  } finally {
    await app.stop();
  }
});
