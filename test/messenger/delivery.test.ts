import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { addSendingDomain, routeToSink, startRig, verifyDkim, type DeliveryRig } from '../delivery/harness.js';
import { waitUntil } from '../helpers/wait-until.js';

/**
 * A broadcast delivered direct to MX (a real DNS server and SMTP sink on loopback) from a verified domain:
 * the message is DKIM-signed over its List-Unsubscribe headers, and the one-click request a mailbox
 * provider makes from the delivered header (RFC 8058 §3.2) unsubscribes the contact.
 */
let rig: DeliveryRig;
const publicUrl = 'https://mail.sender.test';

before(async () => {
  // One-click needs an https link (RFC 8058 §3), so the links name a public https address; the test posts to the appliance.
  rig = await startRig({ env: { POSTINO_HTTP_PUBLIC_URL: publicUrl } });
  await addSendingDomain(rig, 'sender.test');
  routeToSink(rig.dns, 'inbox.test');
});
after(async () => {
  await rig?.stop();
});

test('a delivered broadcast is signed over List-Unsubscribe, and its one-click link unsubscribes', async () => {
  const { app, sink } = rig;
  assert.equal((await app.api('POST', '/v1/contacts', { emailAddress: 'reader@inbox.test' })).status, 200);
  const draft = await app.api('POST', '/v1/messenger', { fromAddress: 'news@sender.test', subject: 'Signed news', html: '<p>News</p>', status: 'queued' });
  assert.equal(draft.status, 200, JSON.stringify(draft.body));
  await app.appliance.context.messenger.runDue(new Date());
  await waitUntil(() => sink.messages.some((m) => m.rcptTo.includes('reader@inbox.test')), 'the broadcast at the sink');
  const message = sink.messages.find((m) => m.rcptTo.includes('reader@inbox.test'))!;

  const [signature] = await verifyDkim(message.raw, rig.dns.address);
  assert.equal(signature.status.result, 'pass', JSON.stringify(signature.status));
  const signed = /\bh=([^;]+)/.exec(message.raw.toString().replace(/\r\n\s+/g, ' '))![1].replace(/\s+/g, '').toLowerCase().split(':');
  for (const name of ['list-unsubscribe', 'list-unsubscribe-post', 'list-id', 'feedback-id']) assert.ok(signed.includes(name), signed.join(':'));

  const headers = message.raw.toString().split('\r\n\r\n')[0].replace(/\r\n\s+/g, ' ');
  const link = /^List-Unsubscribe: <([^>]+)>$/m.exec(headers)?.[1];
  assert.ok(link?.startsWith(`${publicUrl}/t/u/`), headers);
  assert.match(headers, /^List-Unsubscribe-Post: List-Unsubscribe=One-Click$/m);
  const oneClick = await fetch(link!.replace(publicUrl, app.baseUrl), { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' });
  assert.equal(oneClick.status, 200);
  assert.equal((await app.api('GET', '/v1/contacts/reader@inbox.test')).body.contact.isSubscribed, false);
});

test("a queued broadcast whose sender's domain fails a re-check before its time still goes, as accepted mail does (it was held until DNS was fixed, however late)", async () => {
  const { app, sink } = rig;
  await addSendingDomain(rig, 'flaky-news.test');
  assert.equal((await app.api('POST', '/v1/contacts', { emailAddress: 'monday@inbox.test' })).status, 200);
  const draft = await app.api('POST', '/v1/messenger', { fromAddress: 'news@flaky-news.test', subject: 'Monday news', html: '<p>News</p>', status: 'queued' });
  assert.equal(draft.status, 200, JSON.stringify(draft.body));
  const { sqlite } = app.appliance.context.database;
  // The re-check found the DKIM record missing (a DNS slip), after the broadcast was queued.
  sqlite.prepare(`update domains set status = 'failed', dkim_verified = 0 where domain = 'flaky-news.test'`).run();
  assert.equal((await app.api('POST', '/v1/email/send', { fromAddress: 'news@flaky-news.test', toAddress: 'new@inbox.test', subject: 'new', text: 'x' })).body.errorCode, 'from-address-unverified', 'new sends are refused');
  await app.appliance.context.messenger.runDue(new Date());
  await waitUntil(() => sink.messages.some((m) => m.rcptTo.includes('monday@inbox.test')), 'the broadcast at the sink');
  assert.equal((await app.api('GET', `/v1/messenger/${draft.body.id}`)).body.data.status, 'DONE');
});
