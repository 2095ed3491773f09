import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { apiCall } from '../helpers/appliance.js';
import { startChildAppliance, type ChildAppliance } from '../helpers/child.js';
import { waitUntil } from '../helpers/wait-until.js';

const key = 'pst_messenger_crash_key_0123456789abcdefghij';
const recipients = 20_000;

/**
 * kill -9 while a broadcast is being expanded into emails: after a restart on the same data dir the
 * scheduler goes on from the last committed batch, and every subscribed contact gets exactly one email.
 */
test('kill -9 mid-broadcast: the expansion resumes, one email per recipient, none lost, none twice', { timeout: 120_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-messenger-crash-'));
  const env = {
    POSTINO_STORAGE_DATA_DIR: dataDir,
    POSTINO_AUTH_API_KEY: key,
    POSTINO_DELIVERY_MODE: 'capture',
    POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
    POSTINO_SCHEDULER_ENABLED: 'true',
  };
  let child: ChildAppliance | undefined = await startChildAppliance(env);
  const database = new Database(join(dataDir, 'postino.sqlite'));
  try {
    database.pragma('busy_timeout = 10000');
    insertContacts(database, recipients);
    const base = () => `http://127.0.0.1:${child!.httpPort}`;
    const created = await apiCall(base(), 'POST', '/v1/messenger', {
      fromAddress: 'news@sender.test',
      subject: 'Crash news',
      contentType: 'no-layout',
      html: '<p>hi</p>',
      status: 'queued',
    }, key);
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const draftId: string = created.body.id;
    const draft = async () => (await apiCall(base(), 'GET', `/v1/messenger/${draftId}`, undefined, key)).body.data;

    // Killed once some batches are committed and others are not.
    await waitUntil(async () => (await draft()).stats.totalRecipients > 0, 'the expansion started', 20_000);
    child.child.kill('SIGKILL');
    await child.exited;
    const atKill = countEmails(database, draftId);
    assert.ok(atKill.total < recipients, `the expansion had finished (${atKill.total} emails) before the kill: raise the contact count`);
    assert.equal(atKill.total % 100, 0, 'only whole batches were committed');
    t.diagnostic(`${atKill.total} of ${recipients} emails committed at the kill`);

    child = await startChildAppliance(env);
    await waitUntil(async () => (await draft()).status === 'DONE', 'the broadcast finished after the restart', 90_000);
    assert.deepEqual(countEmails(database, draftId), { total: recipients, addresses: recipients });
    assert.equal((await draft()).stats.totalRecipients, recipients);
  } finally {
    database.close();
    child?.child.kill('SIGKILL');
    await child?.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
});

/** Contacts written straight into the appliance's file: 20,000 through the API would take the test's time. */
function insertContacts(database: Database.Database, count: number): void {
  const projectId = database.prepare(`select id from projects order by created_at limit 1`).pluck().get() as string;
  const insert = database.prepare(
    `insert into contacts (id, project_id, email_address, email_key, is_subscribed, subscribed_at, source_type, groups, custom_props, created_at, updated_at)
     values (?, ?, ?, ?, 1, 0, 'api', '[]', '{}', 0, 0)`,
  );
  database.transaction(() => {
    for (let i = 0; i < count; i++) {
      const address = `reader${i}@inbox.test`;
      insert.run(`c${String(i).padStart(23, '0')}`, projectId, address, address);
    }
  })();
}

function countEmails(database: Database.Database, draftId: string): { total: number; addresses: number } {
  return database.prepare(`select count(*) as total, count(distinct to_address) as addresses from emails where messenger_id = ?`).get(draftId) as { total: number; addresses: number };
}
