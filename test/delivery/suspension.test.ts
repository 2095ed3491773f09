import { test } from 'node:test';
import assert from 'node:assert/strict';
import { addSendingDomain, emailStatus, eventsOf, jobOf, routeToSink, send, startRig, waitForFinal } from './harness.js';

test('too many bounces pause the project (email-sending-paused); the operator can disable the rule', async () => {
  const rig = await startRig({
    // One delivery at a time: the first held job finds the rest of the backlog due and not yet claimed.
    env: { POSTINO_DELIVERY_SUSPENSION_YOUNG_MAX_BOUNCES: '1', POSTINO_DELIVERY_CONCURRENCY: '1' },
    sink: { onRcpt: (address) => (address.startsWith('bad') ? { code: 550, message: '5.1.1 No such user' } : undefined) },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    // Accepted before the pause, due after it.
    const soon = new Date(Date.now() + 1000).toISOString();
    const later = await send(rig, { toAddress: 'later@inbox.test', fromAddress: 'hello@sender.test', scheduledAt: soon });
    const backlog = await Promise.all([1, 2, 3].map((n) => send(rig, { toAddress: `queued${n}@inbox.test`, fromAddress: 'hello@sender.test', scheduledAt: soon })));
    for (const to of ['bad1@inbox.test', 'bad2@inbox.test']) assert.equal(await waitForFinal(rig, await send(rig, { toAddress: to, fromAddress: 'hello@sender.test' })), 'bounce');
    const { sqlite } = rig.app.appliance.context.database;
    assert.deepEqual(sqlite.prepare('select sum(sent) as sent, sum(bounces) as bounces from project_sending_stats').get(), { sent: 2, bounces: 2 }, 'counted with each outcome');
    // The verdict is cached for 2 s per project (it runs on every send).
    await new Promise((resolve) => setTimeout(resolve, 2100));
    const paused = await rig.app.api('POST', '/v1/email/send', { toAddress: 'good@inbox.test', fromAddress: 'hello@sender.test', subject: 's', text: 't' });
    assert.equal(paused.status, 403);
    assert.equal(paused.body.errorCode, 'email-sending-paused');
    assert.match(paused.body.developerMessage, /2 bounces/);

    // The backlog waits too: released now, the scheduled email is held without an attempt.
    await rig.app.appliance.context.emails.releaseScheduled(new Date());
    const heldFrom = Date.now();
    // Held: no lease (not in flight), due again in ~10 minutes. A claim alone also moves the due time (to the lease's end).
    const isHeld = () => {
      const job = jobOf(rig, later);
      return job !== undefined && job.leaseUntil === null && job.nextAttemptAt >= heldFrom + 9 * 60_000;
    };
    for (let i = 0; i < 150 && !isHeld(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(isHeld(), `looked at again in ~10 minutes: ${JSON.stringify(jobOf(rig, later))}`);
    assert.equal(emailStatus(rig, later), 'queued');
    assert.deepEqual(eventsOf(rig, later).map((e) => e.type), ['scheduled', 'queued'], 'a hold is not an attempt');
    assert.equal(rig.sink.messages.some((m) => m.rcptTo.includes('later@inbox.test')), false);
    assert.equal(jobOf(rig, later)!.attempts, 0);
    const heldLines = () => rig.app.logs.filter((line) => line.includes('queued mail held'));
    // The line follows the hold's last write (the first held job's own put-back can be seen before the
    // rest of the backlog is moved): once it is there, the whole backlog is held.
    for (let i = 0; i < 150 && heldLines().length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    for (const id of backlog) {
      const job = jobOf(rig, id)!;
      assert.ok(job.leaseUntil === null && job.nextAttemptAt >= heldFrom + 9 * 60_000, `the rest of the backlog is held too: ${JSON.stringify(job)}`);
    }
    const held = heldLines();
    assert.equal(held.length, 1, 'logged once per hold period');
    assert.equal(JSON.parse(held[0]).held, 4, 'the whole backlog, held with the first');
    // Named so the operator can find the held mail and knows why and until when (not only the project id).
    const line = JSON.parse(held[0]);
    assert.ok([later, ...backlog].includes(line.emailId), `names a held email: ${held[0]}`);
    assert.match(String(line.reason), /2 bounces/);
    assert.equal(line.until, new Date(jobOf(rig, line.emailId)!.nextAttemptAt).toISOString(), 'when they are looked at again');
  } finally {
    await rig.stop();
  }

  const relaxed = await startRig({
    env: { POSTINO_DELIVERY_SUSPENSION_YOUNG_MAX_BOUNCES: '1', POSTINO_DELIVERY_SUSPENSION_ENABLED: 'false' },
    sink: { onRcpt: (address) => (address.startsWith('bad') ? { code: 550, message: '5.1.1 No such user' } : undefined) },
  });
  try {
    await addSendingDomain(relaxed, 'sender.test');
    routeToSink(relaxed.dns, 'inbox.test');
    for (const to of ['bad1@inbox.test', 'bad2@inbox.test']) await waitForFinal(relaxed, await send(relaxed, { toAddress: to, fromAddress: 'hello@sender.test' }));
    const id = await send(relaxed, { toAddress: 'good@inbox.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(relaxed, id), 'delivered');
  } finally {
    await relaxed.stop();
  }
});

test('suppression API: validation, add, duplicate, list paging, delete', async () => {
  const rig = await startRig();
  try {
    const bad = await rig.app.api('POST', '/v1/suppressions', { emailAddress: 'not-an-address' });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.errorCode, 'parameters-invalid');
    assert.match(bad.body.developerMessage, /emailAddress/);
    const created = await rig.app.api('POST', '/v1/suppressions', { emailAddress: 'Ann@Example.com', reason: 'unsubscribed' });
    assert.equal(created.status, 201);
    assert.equal(created.body.suppression.emailAddress, 'ann@example.com');
    assert.equal(created.body.suppression.reason, 'unsubscribed');
    const again = await rig.app.api('POST', '/v1/suppressions', { emailAddress: 'ann@example.com' });
    assert.equal(again.status, 200);
    assert.equal(again.body.status, 'exists');
    for (const n of [1, 2, 3]) await rig.app.api('POST', '/v1/suppressions', { emailAddress: `u${n}@example.com` });
    const page1 = await rig.app.api('GET', '/v1/suppressions?limit=2');
    assert.equal(page1.body.data.length, 2);
    assert.equal(page1.body.hasMore, true);
    const page2 = await rig.app.api('GET', `/v1/suppressions?limit=2&paginationCursorNext=${page1.body.paginationCursorNext}`);
    assert.equal(page2.body.data.length, 2);
    assert.equal(page2.body.hasMore, false);
    const all = [...page1.body.data, ...page2.body.data].map((s: { emailAddress: string }) => s.emailAddress).sort();
    assert.deepEqual(all, ['ann@example.com', 'u1@example.com', 'u2@example.com', 'u3@example.com']);
    const badCursor = await rig.app.api('GET', '/v1/suppressions?paginationCursorNext=zzz');
    assert.equal(badCursor.status, 400);
    assert.deepEqual((await rig.app.api('DELETE', '/v1/suppressions/ANN@example.com')).body, { deleted: true });
    assert.deepEqual((await rig.app.api('DELETE', '/v1/suppressions/ann@example.com')).body, { deleted: false });
    // A suppressed address is recorded as `suppressed` at send time.
    await addSendingDomain(rig, 'sender.test');
    const sent = await rig.app.api('POST', '/v1/email/send', { toAddress: 'u1@example.com', fromAddress: 'hello@sender.test', subject: 's', text: 't' });
    assert.equal((await rig.app.api('GET', `/v1/email/${sent.body.id}`)).body.email.status, 'suppressed');
    // Any address a send accepts can be suppressed by hand, with the same rule.
    assert.equal((await rig.app.api('POST', '/v1/suppressions', { emailAddress: 'a!b@example.com' })).status, 201);
    const odd = await rig.app.api('POST', '/v1/email/send', { toAddress: 'a!b@example.com', fromAddress: 'hello@sender.test', subject: 's', text: 't' });
    assert.equal((await rig.app.api('GET', `/v1/email/${odd.body.id}`)).body.email.status, 'suppressed');
  } finally {
    await rig.stop();
  }
});

test('mail given up because nothing answered (this side\'s resolver, a blocked port 25) is not counted against the project: the outage does not pause it', async () => {
  // Without a reply there is nothing to say about the sender's list; counted, an outage of the appliance's
  // own network bounced every project's mail into a pause that outlived the fix by the whole window.
  const rig = await startRig({
    env: {
      POSTINO_DELIVERY_SUSPENSION_YOUNG_MAX_BOUNCES: '0',
      POSTINO_DELIVERY_GIVE_UP_AFTER: '2s',
      POSTINO_DNS_TIMEOUT: '200ms',
      POSTINO_DNS_TRIES: '1',
      // Short cool-downs: most of the unreachable domain's backlog gives up while held by one (held-by-throttle).
      POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '600ms',
      POSTINO_DELIVERY_THROTTLE_BACKOFF_MAX: '600ms',
    },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    rig.dns.fail('silent.test', 'timeout');
    // Loopback where nothing listens: every connection refused.
    rig.dns.set('dead.test', 'MX', [{ preference: 10, exchange: 'mx.dead.test' }]);
    rig.dns.set('mx.dead.test', 'A', ['127.0.0.2']);
    const ids = [await send(rig, { toAddress: 'kim@silent.test', fromAddress: 'hello@sender.test' })];
    for (let i = 0; i < 8; i++) ids.push(await send(rig, { toAddress: `u${i}@dead.test`, fromAddress: 'hello@sender.test' }));
    for (const id of ids) assert.equal(await waitForFinal(rig, id, 15_000), 'bounce');
    const rules = ids.map((id) => eventsOf(rig, id).find((e) => e.type === 'bounce')!.data?.rule);
    assert.ok(rules.includes('held-by-throttle') && rules.includes('no-reply'), `both ways of giving up: ${rules.join(', ')}`);
    const { sqlite } = rig.app.appliance.context.database;
    assert.deepEqual(sqlite.prepare('select coalesce(sum(sent), 0) as sent, coalesce(sum(bounces), 0) as bounces from project_sending_stats').get(), { sent: 0, bounces: 0 });
    // The verdict is cached for 2 s per project.
    await new Promise((resolve) => setTimeout(resolve, 2100));
    const after = await rig.app.api('POST', '/v1/email/send', { toAddress: 'next@inbox.test', fromAddress: 'hello@sender.test', subject: 's', text: 't' });
    assert.equal(after.status, 200, JSON.stringify(after.body));
  } finally {
    await rig.stop();
  }
});

test("a refusal of the sending IP for a blocklist (every project's address) bounces the email but counts in no project's bounce rate, so nobody is paused for it", async () => {
  const listed = 'Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org';
  const rig = await startRig({
    env: { POSTINO_DELIVERY_SUSPENSION_YOUNG_MAX_BOUNCES: '1' },
    sink: { onRcpt: (address) => (address.startsWith('listed') ? { code: 550, message: `5.7.1 ${listed}` } : address.startsWith('bad') ? { code: 550, message: '5.1.1 No such user' } : undefined) },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    for (const to of ['listed1@inbox.test', 'listed2@inbox.test', 'bad1@inbox.test']) assert.equal(await waitForFinal(rig, await send(rig, { toAddress: to, fromAddress: 'hello@sender.test' })), 'bounce');
    const { sqlite } = rig.app.appliance.context.database;
    assert.deepEqual(sqlite.prepare('select sum(sent) as sent, sum(bounces) as bounces from project_sending_stats').get(), { sent: 1, bounces: 1 }, 'only the bounce about the address is counted');
    const allowed = await rig.app.api('POST', '/v1/email/send', { toAddress: 'good@inbox.test', fromAddress: 'hello@sender.test', subject: 's', text: 't' });
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
  } finally {
    await rig.stop();
  }
});
