import assert from 'node:assert/strict';
import { existsSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { startAppliance } from '../helpers/appliance.js';
import { waitUntil } from '../helpers/wait-until.js';

const env = { POSTINO_DELIVERY_MODE: 'capture', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_SUBMISSION_ENABLED: 'false' };
const email = (subject: string) => ({ toAddress: 'bob@example.com', fromAddress: 'app@example.org', subject, text: 'body' });

/** The subjects of the emails in a database file. */
function subjectsIn(path: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare('select subject from emails order by subject').pluck().all() as string[];
  } finally {
    db.close();
  }
}

test('the data directory removed under the running appliance: sends are refused, not answered queued into a deleted file; healthz 503; what the database held is copied out', async () => {
  const app = await startAppliance({ env });
  try {
    assert.equal((await app.api('POST', '/v1/email/send', email('before'))).status, 200);
    rmSync(app.dataDir, { recursive: true, force: true });
    await new Promise((resolve) => setTimeout(resolve, 60)); // past the age at which new mail reads the storage again
    const refused = await app.api('POST', '/v1/email/send', email('after'));
    assert.equal(refused.status, 500, JSON.stringify(refused.body));
    assert.match(refused.body.developerMessage, /^The appliance's database file was removed or replaced while it ran, so it stores nothing more until it is restarted: nothing was stored/);
    const health = await app.api('GET', '/healthz');
    assert.equal(health.status, 503);
    assert.equal(health.body.components.storage, 'failed');
    const copied = (entry: string) => entry.includes('was removed while the appliance ran: what it held is copied to');
    await waitUntil(() => app.logs.some(copied), 'the log says so, and where the copy is');
    const line = app.logs.find(copied)!;
    const copy = join(app.dataDir, 'postino.rescued.sqlite');
    assert.ok(line.includes(copy), line);
    assert.deepEqual(subjectsIn(copy), ['before'], 'every email answered before is in the copy');
  } finally {
    await app.stop();
  }
});

test('the database file replaced by another under the running appliance is told apart too', async () => {
  const app = await startAppliance({ env });
  try {
    assert.equal((await app.api('POST', '/v1/email/send', email('first'))).status, 200);
    const path = join(app.dataDir, 'postino.sqlite');
    renameSync(path, `${path}.moved`);
    new Database(path).close(); // an empty database where it was
    await waitUntil(async () => (await app.api('GET', '/healthz')).status === 503, 'healthz 503 within a reading (5 s)');
    await waitUntil(() => app.logs.some((entry) => entry.includes(`the database file ${path} was replaced by another file while the appliance ran: what it held is copied to`)), 'said, with the copy');
    assert.ok(existsSync(join(app.dataDir, 'postino.rescued.sqlite')));
    assert.deepEqual(subjectsIn(join(app.dataDir, 'postino.rescued.sqlite')), ['first']);
  } finally {
    await app.stop();
  }
});
