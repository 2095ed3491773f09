import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { listSuppressionsQuery } from '../../src/suppressions/repo.js';
import { startAppliance } from '../helpers/appliance.js';
import { addSendingDomain, routeToSink, send, startRig, waitForEvent, waitForFinal } from '../delivery/harness.js';

test('DELETE /v1/suppressions/:emailAddress removes an address whose local part holds ? or # (percent-encoded as the client must)', async () => {
  const app = await startAppliance();
  try {
    // RFC 5322 atext: `?` and `#` are valid in a local part; the send API and this API accept them, so
    // such an address can bounce and be suppressed, and must be removable again.
    for (const address of ['a?b@example.com', '?lead@example.com', 'a#b@example.com', 'a%3Fb@example.com']) {
      assert.equal((await app.api('POST', '/v1/suppressions', { emailAddress: address })).status, 201, address);
      const removed = await app.api('DELETE', `/v1/suppressions/${encodeURIComponent(address)}`);
      assert.equal(removed.status, 200, `${address}: ${JSON.stringify(removed.body)}`);
      assert.deepEqual(removed.body, { deleted: true }, address);
    }
    assert.deepEqual((await app.api('GET', '/v1/suppressions')).body.data, []);
  } finally {
    await app.stop();
  }
});

test('GET /v1/suppressions/:emailAddress tells whether one address is suppressed, why and since when, in any case', async () => {
  const app = await startAppliance();
  try {
    assert.deepEqual((await app.api('GET', `/v1/suppressions/${encodeURIComponent('Ann?x@Example.com')}`)).body, { suppression: null });
    const added = await app.api('POST', '/v1/suppressions', { emailAddress: 'ann?x@example.com', reason: 'manual', detail: 'asked to stop' });
    const found = await app.api('GET', `/v1/suppressions/${encodeURIComponent('Ann?x@Example.com')}`);
    assert.equal(found.status, 200);
    assert.deepEqual(found.body, { suppression: added.body.suppression });
    assert.equal(found.body.suppression.detail, 'asked to stop');
    // Another project's list is its own.
    const other = await app.api('POST', '/v1/project', { name: 'other' });
    assert.deepEqual((await app.api('GET', `/v1/suppressions/${encodeURIComponent('ann?x@example.com')}`, undefined, { key: other.body.apiKey })).body, { suppression: null });
  } finally {
    await app.stop();
  }
});

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

test('a page of GET /v1/suppressions past the first is a range of the newest-first index, not a walk down to it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-suppressions-'));
  const handle = openDatabase({ path: join(dir, 'postino.sqlite'), synchronous: 'FULL' });
  try {
    migrateDatabase(handle.db);
    const query = listSuppressionsQuery(handle.db, 'project', 100, { createdAt: 1_000, emailAddress: 'a@example.com' }).toSQL();
    const plan = (handle.sqlite.prepare(`explain query plan ${query.sql}`).all(...query.params) as { detail: string }[]).map((row) => row.detail).join('\n');
    assert.match(plan, /USING (?:COVERING )?INDEX suppressions_project_created_idx \(project_id=\? AND \(created_at,email_address\)<\(\?,\?\)\)/, plan);
    assert.doesNotMatch(plan, /TEMP B-TREE/, plan);
  } finally {
    handle.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('/v1/suppressions names an IDN address by its U-label domain as by its A-label one (the form submission sends to and a bounce suppresses)', async () => {
  const app = await startAppliance();
  try {
    // SMTP submission takes RCPT TO:<anna@bücher.example> and sends to (and suppresses) anna@xn--bcher-kva.example.
    assert.equal((await app.api('POST', '/v1/suppressions', { emailAddress: 'anna@xn--bcher-kva.example' })).status, 201);
    const found = await app.api('GET', `/v1/suppressions/${encodeURIComponent('Anna@Bücher.example')}`);
    assert.equal(found.body.suppression?.emailAddress, 'anna@xn--bcher-kva.example', JSON.stringify(found.body));
    assert.deepEqual((await app.api('DELETE', `/v1/suppressions/${encodeURIComponent('anna@bücher.example')}`)).body, { deleted: true });
    const added = await app.api('POST', '/v1/suppressions', { emailAddress: 'anna@bücher.example' });
    assert.equal(added.status, 201, JSON.stringify(added.body));
    assert.equal(added.body.suppression.emailAddress, 'anna@xn--bcher-kva.example');
    // Still one entry, whichever form names it.
    assert.equal((await app.api('POST', '/v1/suppressions', { emailAddress: 'anna@xn--bcher-kva.example' })).body.status, 'exists');
    // A non-ASCII local part needs SMTPUTF8, which this appliance never sends: still refused.
    assert.equal((await app.api('POST', '/v1/suppressions', { emailAddress: 'änna@bücher.example' })).status, 400);
  } finally {
    await app.stop();
  }
});

test('an email not sent because its recipient is suppressed says why in its record: the suppression\'s reason and detail', { timeout: 30_000 }, async () => {
  const rig = await startRig({ sink: { onRcpt: (address) => (address.startsWith('gone@') ? { code: 550, message: '5.1.1 No such user here' } : undefined) } });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    const suppressedEvent = async (id: string) => {
      const { body } = await rig.app.api('GET', `/v1/email/${id}`);
      assert.equal(body.email.status, 'suppressed');
      return body.email.events.find((event: { type: string }) => event.type === 'suppressed');
    };

    // At the send: the address bounced before.
    assert.equal(await waitForFinal(rig, await send(rig, { toAddress: 'gone@inbox.test', fromAddress: 'hello@sender.test' })), 'bounce');
    const atSend = await suppressedEvent(await send(rig, { toAddress: 'gone@inbox.test', fromAddress: 'hello@sender.test' }));
    assert.equal(atSend.reason, 'hard-bounce');
    assert.equal(atSend.detail, '550 5.1.1 No such user here');

    // At delivery: suppressed by hand while the email waited for its retry.
    rig.dns.fail('later.test', 'SERVFAIL');
    const waiting = await send(rig, { toAddress: 'anna@later.test', fromAddress: 'hello@sender.test' });
    await waitForEvent(rig, waiting, 'deferred');
    await rig.app.api('POST', '/v1/suppressions', { emailAddress: 'anna@later.test', reason: 'manual', detail: 'asked to be removed by phone' });
    rig.dns.clearFailure('later.test');
    routeToSink(rig.dns, 'later.test');
    assert.equal(await waitForFinal(rig, waiting), 'suppressed');
    const atDelivery = await suppressedEvent(waiting);
    assert.equal(atDelivery.reason, 'manual');
    assert.equal(atDelivery.detail, 'asked to be removed by phone');
  } finally {
    await rig.stop();
  }
});
