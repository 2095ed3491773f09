import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eq } from 'drizzle-orm';
import { webhookEvents } from '../../src/db/schema/index.js';
import { startSmtpSink, type Reply } from '../helpers/smtp-sink.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, emailStatus, eventsOf, jobOf, routeToSink, send, startRig, verifyDkim, verifyWithDkimpy, waitForEvent, waitForFinal, type DeliveryRig } from './harness.js';

/**
 * Direct-to-MX delivery against a real DNS server and a real SMTP sink on loopback. The sink's replies
 * are scripted per recipient address so one appliance serves every scenario.
 */
describe('delivery in mx mode', () => {
  let rig: DeliveryRig;
  let key: { selector: string; publicKey: string; mailFromDomain: string };
  const rcptScript = new Map<string, Reply[]>();
  const dataScript = new Map<string, Reply[]>();
  /** MAIL FROM replies by recipient: the sink sees the sender first, so the test names whose mail it is. */
  const mailScript: Reply[] = [];

  before(async () => {
    rig = await startRig({
      sink: {
        onMail: () => mailScript.shift(),
        onRcpt: (address) => rcptScript.get(address)?.shift(),
        onData: (message) => dataScript.get(message.rcptTo[0])?.shift(),
      },
    });
    key = await addSendingDomain(rig, 'sender.test');
    await rig.app.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/postino', events: ['email.delivered', 'email.bounce'] });
  });
  after(() => rig.stop());

  test('delivers a DKIM-signed message that verifies independently, with VERP envelope and HELO name', async (t) => {
    routeToSink(rig.dns, 'inbox.test');
    const id = await send(rig, { toAddress: 'alice@inbox.test', fromAddress: 'hello@sender.test', fromName: 'Sénder Ltd', subject: 'Grüße aus Köln', html: '<p>Hi <b>Alice</b></p>\n<p>Line two</p>\n', text: 'Hi Alice\nLine two\rLine three' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const message = rig.sink.messages.find((m) => m.rcptTo[0] === 'alice@inbox.test')!;
    assert.ok(message, 'sink received the message');
    // VERP: bounce-<emailId>-<tag>@<mailFromDomain>; the tag is a MAC of the id (src/bounces/verp.ts).
    assert.equal(message.mailFrom, rig.app.appliance.context.bounces!.verp.address(id, key.mailFromDomain));
    assert.equal(message.heloName, 'mta.postino.test');
    const raw = message.raw.toString();
    assert.match(raw, /^DKIM-Signature: v=1;\s+a=rsa-sha256;\s+c=relaxed\/relaxed;/);
    assert.match(raw, new RegExp(`Message-ID: <${id}@sender\\.test>`));
    assert.match(raw, /Subject: =\?UTF-8\?/);

    const results = await verifyDkim(message.raw, rig.dns.address);
    assert.equal(results.length, 1);
    assert.equal(results[0].status.result, 'pass', JSON.stringify(results[0].status));
    assert.equal(results[0].signingDomain, 'sender.test');
    const pythonVerdict = verifyWithDkimpy(message.raw, `v=DKIM1; k=rsa; p=${key.publicKey}`);
    if (pythonVerdict !== undefined) assert.equal(pythonVerdict, true, 'dkimpy verifies the signature');
    else if (process.env.CI === 'true') assert.fail('python3-dkim is required in CI (apt-get install -y python3-dkim)');
    else t.diagnostic('python3-dkim not installed: second verifier skipped');

    const events = eventsOf(rig, id).filter((e) => e.type === 'delivered');
    assert.equal(events.length, 1);
    assert.equal(events[0].data?.mxHost, 'mx.inbox.test');
    assert.match(String(events[0].data?.smtpResponse), /^250 /);
    assert.equal(jobOf(rig, id), undefined, 'the queue row is gone once final');
    const hooks = rig.app.appliance.context.database.db.select().from(webhookEvents).where(eq(webhookEvents.type, 'email.delivered')).all();
    const hook = hooks.find((h) => h.data.id === id);
    assert.ok(hook, 'email.delivered recorded in the outbox');
    assert.match(String(hook.data.smtpResponse), /^250 /);
    assert.equal(hook.data.messageId, `<${id}@sender.test>`, 'the Message-ID the message carried');
  });

  test('a message with a tampered body fails verification (the check can fail)', async () => {
    const message = rig.sink.messages.find((m) => m.rcptTo[0] === 'alice@inbox.test')!;
    const tampered = Buffer.from(message.raw.toString().replace('Hi Alice', 'Hi Mallory'));
    const results = await verifyDkim(tampered, rig.dns.address);
    assert.notEqual(results[0].status.result, 'pass');
  });

  test('4xx is deferred on the retry schedule, then delivered', async () => {
    routeToSink(rig.dns, 'grey.test');
    rcptScript.set('bob@grey.test', [{ code: 451, message: '4.7.1 Greylisted, try again later' }]);
    const id = await send(rig, { toAddress: 'bob@grey.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const types = eventsOf(rig, id).map((e) => e.type);
    assert.deepEqual(types.filter((t) => t === 'deferred' || t === 'delivered'), ['deferred', 'delivered']);
    const deferred = eventsOf(rig, id).find((e) => e.type === 'deferred')!;
    assert.match(String(deferred.data?.smtpResponse), /^451 4\.7\.1/);
    assert.ok(deferred.data?.nextAttemptAt);
  });

  test('5xx bounces, suppresses the address, and the next send is suppressed', async () => {
    routeToSink(rig.dns, 'gone.test');
    rcptScript.set('carol@gone.test', [{ code: 550, message: '5.1.1 No such user' }]);
    const id = await send(rig, { toAddress: 'carol@gone.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'bounce');
    const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
    assert.equal(bounce.data?.bounceType, 'hard');
    assert.equal(bounce.data?.recipientSuppressed, true);
    assert.match(String(bounce.data?.smtpResponse), /^550 5\.1\.1/);
    const hook = rig.app.appliance.context.database.db.select().from(webhookEvents).where(eq(webhookEvents.type, 'email.bounce')).all().find((h) => h.data.id === id);
    assert.equal(hook?.data.bounceType, 'hard');

    const list = await rig.app.api('GET', '/v1/suppressions');
    assert.equal(list.status, 200);
    const entry = list.body.data.find((s: { emailAddress: string }) => s.emailAddress === 'carol@gone.test');
    assert.equal(entry.reason, 'hard-bounce');
    assert.ok(entry.createdAt);

    const again = await rig.app.api('POST', '/v1/email/send', { toAddress: 'carol@gone.test', fromAddress: 'hello@sender.test', subject: 'x', text: 'x' });
    assert.equal(again.body.suppressed, true);
    assert.equal((await rig.app.api('GET', `/v1/email/${again.body.id}`)).body.email.status, 'suppressed');
    const received = rig.sink.messages.filter((m) => m.rcptTo[0] === 'carol@gone.test').length;
    assert.equal(received, 0);

    const removed = await rig.app.api('DELETE', '/v1/suppressions/carol%40gone.test');
    assert.deepEqual(removed.body, { deleted: true });
    const third = await rig.app.api('POST', '/v1/email/send', { toAddress: 'carol@gone.test', fromAddress: 'hello@sender.test', subject: 'x', text: 'x' });
    assert.equal(third.body.status, 'queued');
    assert.equal(await waitForFinal(rig, third.body.id), 'delivered');
  });

  test('a refusal about the message, the sender or the sending IP bounces without suppressing the address', async () => {
    routeToSink(rig.dns, 'picky.test');
    const suppressed = async () => ((await rig.app.api('GET', '/v1/suppressions')).body.data as { emailAddress: string }[]).map((s) => s.emailAddress);
    const cases: { to: string; script: () => void; response: RegExp }[] = [
      { to: 'blocked@picky.test', script: () => rcptScript.set('blocked@picky.test', [{ code: 550, message: '5.7.1 Client host blocked using zen.spamhaus.org' }]), response: /^550 5\.7\.1 Client host blocked/ },
      { to: 'spam@picky.test', script: () => dataScript.set('spam@picky.test', [{ code: 554, message: '5.7.1 Message rejected as spam' }]), response: /^554 5\.7\.1/ },
      { to: 'big@picky.test', script: () => dataScript.set('big@picky.test', [{ code: 552, message: '5.3.4 Message size exceeds fixed limit' }]), response: /^552 5\.3\.4/ },
      // A bare 550 after DATA is about the content; the same at MAIL FROM is about the sender.
      { to: 'content@picky.test', script: () => dataScript.set('content@picky.test', [{ code: 550, message: 'Message refused' }]), response: /^550 Message refused/ },
      { to: 'sender@picky.test', script: () => mailScript.push({ code: 553, message: '5.1.8 Sender address rejected: Domain not found' }), response: /^553 5\.1\.8/ },
      // Exim's sender verification callout (cPanel's default) refuses our bounce address at RCPT TO, with
      // a bare 550 over three lines: about the sender, not about the recipient it answers.
      {
        to: 'callout@picky.test',
        script: () => rcptScript.set('callout@picky.test', [{ code: 550, message: 'Verification failed for <bounce@bounce.sender.test>\nUnrouteable address\nSender verify failed' }]),
        response: /^550 Verification failed for .* Sender verify failed$/,
      },
      // Postfix names the sender too, with an enhanced code of the addressing subject (reject_unlisted_sender).
      { to: 'unlisted@picky.test', script: () => rcptScript.set('unlisted@picky.test', [{ code: 550, message: '5.1.0 <bounce@bounce.sender.test>: Sender address rejected: undeliverable address' }]), response: /^550 5\.1\.0 .*Sender address rejected/ },
      // This host refused, as Postfix answers reject_non_fqdn_helo_hostname and reject_unknown_client_hostname at RCPT TO.
      { to: 'helo@picky.test', script: () => rcptScript.set('helo@picky.test', [{ code: 504, message: '5.5.2 <vm>: Helo command rejected: need fully-qualified hostname' }]), response: /^504 5\.5\.2 .*Helo command rejected/ },
      { to: 'rdns@picky.test', script: () => rcptScript.set('rdns@picky.test', [{ code: 550, message: '5.7.25 Client host rejected: cannot find your hostname, [127.0.0.1]' }]), response: /^550 5\.7\.25 / },
    ];
    const bouncesCounted = () => rig.app.appliance.context.database.sqlite.prepare('select coalesce(sum(bounces), 0) from project_sending_stats').pluck().get() as number;
    for (const { to, script, response } of cases) {
      script();
      const countedBefore = bouncesCounted();
      const id = await send(rig, { toAddress: to, fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id), 'bounce', to);
      // A refusal of this host (its blocklisting, its HELO name, its reverse DNS) counts against no project (spec §8).
      if (/^(blocked|helo|rdns)@/.test(to)) assert.equal(bouncesCounted(), countedBefore, `${to}: not counted`);
      const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
      assert.match(String(bounce.data?.smtpResponse), response, to);
      assert.equal(bounce.data?.bounceType, 'hard', to);
      assert.equal(bounce.data?.recipientSuppressed, false, to);
    }
    assert.deepEqual((await suppressed()).filter((a) => a.endsWith('@picky.test')), []);
    // The next message to such an address goes out.
    const again = await send(rig, { toAddress: 'spam@picky.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, again), 'delivered');
  });

  test('an enhanced code with no text after it is still read: a bare 550 5.7.1 bounces without suppressing, a bare 450 4.7.1 is a throttle', async () => {
    // Some servers answer with the codes alone (`550 5.7.1`, RFC 3463): the enhanced code was taken
    // for text, so the refusal counted as a bare 5xx to RCPT TO and suppressed the address for good.
    routeToSink(rig.dns, 'terse.test');
    rcptScript.set('policy@terse.test', [{ code: 550, message: '5.7.1' }]);
    const id = await send(rig, { toAddress: 'policy@terse.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'bounce');
    const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
    assert.equal(bounce.data?.smtpResponse, '550 5.7.1');
    assert.equal(bounce.data?.recipientSuppressed, false);
    const suppressed = ((await rig.app.api('GET', '/v1/suppressions')).body.data as { emailAddress: string }[]).map((s) => s.emailAddress);
    assert.ok(!suppressed.includes('policy@terse.test'), 'a policy refusal does not suppress the address');

    rcptScript.set('slow@terse.test', [{ code: 450, message: '4.7.1' }]);
    const slow = await send(rig, { toAddress: 'slow@terse.test', fromAddress: 'hello@sender.test' });
    const deferred = await waitForEvent(rig, slow, 'deferred');
    assert.equal(deferred.data?.smtpResponse, '450 4.7.1');
    assert.equal(deferred.data?.rule, 'throttle-4.7');
    assert.equal(await waitForFinal(rig, slow), 'delivered');
  });

  test('first MX down → second MX', async () => {
    // 127.0.0.2 is loopback but nothing listens there on the sink port: connection refused.
    rig.dns.set('backup.test', 'MX', [
      { preference: 10, exchange: 'down.backup.test' },
      { preference: 20, exchange: 'up.backup.test' },
    ]);
    rig.dns.set('down.backup.test', 'A', ['127.0.0.2']);
    rig.dns.set('up.backup.test', 'A', ['127.0.0.1']);
    const id = await send(rig, { toAddress: 'dave@backup.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    const delivered = eventsOf(rig, id).find((e) => e.type === 'delivered')!;
    assert.equal(delivered.data?.mxHost, 'up.backup.test');
    assert.equal(delivered.data?.attempt, 1);
  });

  test('one attempt tries the first five usable addresses in MX preference order; hosts without an address take none of them', async () => {
    // mx1 and mx2 have no address; mx3 to mx9 are loopback addresses where nothing listens (refused at once).
    rig.dns.set('many.test', 'MX', Array.from({ length: 9 }, (_, i) => ({ preference: 10 * (i + 1), exchange: `mx${i + 1}.many.test` })));
    for (let i = 3; i <= 9; i++) rig.dns.set(`mx${i}.many.test`, 'A', [`127.0.0.${i}`]);
    const id = await send(rig, { toAddress: 'mo@many.test', fromAddress: 'hello@sender.test' });
    const deferred = await waitForEvent(rig, id, 'deferred');
    const tried = String(deferred.data?.smtpResponse).match(/mx\d\.many\.test\[/g);
    assert.deepEqual(tried, ['mx3.many.test[', 'mx4.many.test[', 'mx5.many.test[', 'mx6.many.test[', 'mx7.many.test[']);

    // Five hosts without an address ahead of one that works: delivered there.
    rig.dns.set('sixth.test', 'MX', Array.from({ length: 6 }, (_, i) => ({ preference: 10 * (i + 1), exchange: `mx${i + 1}.sixth.test` })));
    rig.dns.set('mx6.sixth.test', 'A', ['127.0.0.1']);
    const sixth = await send(rig, { toAddress: 'six@sixth.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, sixth), 'delivered');
    assert.equal(eventsOf(rig, sixth).find((e) => e.type === 'delivered')!.data?.mxHost, 'mx6.sixth.test');
  });

  test('an address shared by several MX hosts (or a host listed twice) is tried once: the backup past them is reached', async () => {
    // Three MX names on the same two dead addresses, then a backup: each address came once per name,
    // so the five-address budget went on three tries of 127.0.0.2 and the backup was never tried.
    rig.dns.set('shared.test', 'MX', [
      { preference: 10, exchange: 'a.shared.test' },
      { preference: 20, exchange: 'b.shared.test' },
      { preference: 20, exchange: 'b.shared.test' },
      { preference: 30, exchange: 'c.shared.test' },
      { preference: 50, exchange: 'backup.shared.test' },
    ]);
    for (const host of ['a', 'b', 'c']) rig.dns.set(`${host}.shared.test`, 'A', ['127.0.0.2', '127.0.0.3']);
    rig.dns.set('backup.shared.test', 'A', ['127.0.0.1']);
    const id = await send(rig, { toAddress: 'sam@shared.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered', JSON.stringify(eventsOf(rig, id)));
    const delivered = eventsOf(rig, id).find((e) => e.type === 'delivered')!;
    assert.equal(delivered.data?.mxHost, 'backup.shared.test');
    assert.equal(delivered.data?.attempt, 1);
  });

  test('an MX host with ten addresses, the first five down: its other addresses are reached (each attempt shuffles them)', async () => {
    // Seven dead loopback addresses first, as DNS (and the appliance's cache) lists them, then three where
    // a sink listens. An attempt tries five addresses: in the listed order, the same five dead ones every
    // time, and the mail was never delivered. Shuffled, an attempt misses all three live ones 1 time in 12.
    const extra = await Promise.all(['127.0.0.2', '127.0.0.3'].map((host) => startSmtpSink({ host, port: rig.sink.port })));
    try {
      rig.dns.set('crowded.test', 'MX', [{ preference: 10, exchange: 'mx.crowded.test' }]);
      rig.dns.set('mx.crowded.test', 'A', [...Array.from({ length: 7 }, (_, i) => `127.0.0.${i + 20}`), '127.0.0.1', '127.0.0.2', '127.0.0.3']);
      const id = await send(rig, { toAddress: 'cora@crowded.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id, 15_000), 'delivered', JSON.stringify(eventsOf(rig, id)));
      assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.mxHost, 'mx.crowded.test');
    } finally {
      await Promise.all(extra.map((sink) => sink.stop()));
    }
  });

  test('an MX naming an IP address instead of a host is not used (RFC 1035 §3.3.9: EXCHANGE is a host name)', async () => {
    // The sink listens on 127.0.0.1: followed as an address, the mail went there.
    rig.dns.set('numeric.test', 'MX', [{ preference: 10, exchange: '127.0.0.1' }]);
    const id = await send(rig, { toAddress: 'nina@numeric.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'bounce');
    const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
    assert.match(String(bounce.data?.smtpResponse), /^550 5\.4\.4 .*127\.0\.0\.1 is an IP address/);
    assert.equal(rig.sink.messages.filter((m) => m.rcptTo[0] === 'nina@numeric.test').length, 0);

    // Beside a valid MX it is skipped, and the valid one takes the mail.
    rig.dns.set('numeric2.test', 'MX', [
      { preference: 10, exchange: '127.0.0.1' },
      { preference: 20, exchange: 'mx.numeric2.test' },
    ]);
    rig.dns.set('mx.numeric2.test', 'A', ['127.0.0.1']);
    const second = await send(rig, { toAddress: 'nina@numeric2.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, second), 'delivered');
    assert.equal(eventsOf(rig, second).find((e) => e.type === 'delivered')!.data?.mxHost, 'mx.numeric2.test');
  });

  test('an MX naming an address literal ([127.0.0.1], as written in an email domain) bounces at once like a bare IP, not deferred for days', async () => {
    // Resolvers refuse the bracketed form as a name (EBADNAME), which read as a lookup failing for now.
    rig.dns.set('literal.test', 'MX', [{ preference: 10, exchange: '[127.0.0.1]' }]);
    const id = await send(rig, { toAddress: 'lena@literal.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'bounce');
    assert.deepEqual(eventsOf(rig, id).map((e) => e.type), ['queued', 'bounce']);
    const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
    assert.match(String(bounce.data?.smtpResponse), /^550 5\.4\.4 .*\[127\.0\.0\.1\] is an IP address/);
    assert.equal(rig.sink.messages.filter((m) => m.rcptTo[0] === 'lena@literal.test').length, 0);
  });

  test('no MX → the A record of the domain (RFC 5321 §5.1)', async () => {
    rig.dns.set('plain.test', 'A', ['127.0.0.1']);
    const id = await send(rig, { toAddress: 'erin@plain.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'delivered');
    assert.equal(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.mxHost, 'plain.test');
  });

  test('null MX (RFC 7505) bounces at once without connecting', async () => {
    rig.dns.set('nomail.test', 'MX', [{ preference: 0, exchange: '.' }]);
    rig.dns.set('nomail.test', 'A', ['127.0.0.1']);
    const id = await send(rig, { toAddress: 'frank@nomail.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'bounce');
    const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
    assert.match(String(bounce.data?.smtpResponse), /^556 5\.1\.10/);
    assert.equal(rig.sink.messages.filter((m) => m.rcptTo[0] === 'frank@nomail.test').length, 0);
  });

  test('NXDOMAIN bounces; SERVFAIL defers and delivers once DNS recovers', async () => {
    const gone = await send(rig, { toAddress: 'gina@does-not-exist.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, gone), 'bounce');
    assert.match(String(eventsOf(rig, gone).find((e) => e.type === 'bounce')!.data?.smtpResponse), /NXDOMAIN/);

    routeToSink(rig.dns, 'flaky.test');
    rig.dns.fail('flaky.test', 'SERVFAIL');
    const id = await send(rig, { toAddress: 'hank@flaky.test', fromAddress: 'hello@sender.test' });
    await waitForEvent(rig, id, 'deferred');
    assert.equal(emailStatus(rig, id), 'queued');
    rig.dns.clearFailure('flaky.test');
    assert.equal(await waitForFinal(rig, id), 'delivered');
  });

  test('MX hosts that have no address for sure bounce (5.4.4); one whose lookup fails for now defers', async () => {
    // The MX names a host that does not exist (NXDOMAIN), as Postfix's "Host not found".
    rig.dns.set('ghost.test', 'MX', [{ preference: 10, exchange: 'nowhere.ghost.test' }]);
    const ghost = await send(rig, { toAddress: 'ivy@ghost.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, ghost), 'bounce');
    const bounce = eventsOf(rig, ghost).find((e) => e.type === 'bounce')!;
    assert.match(String(bounce.data?.smtpResponse), /^550 5\.4\.4 No address for the mail hosts of ghost\.test: Host nowhere\.ghost\.test has no usable address/);
    assert.equal(bounce.data?.attempt, 1, 'at once, not after days of retries');

    // One host gone for good, the other failing for now: wait for the second.
    rig.dns.set('half.test', 'MX', [
      { preference: 10, exchange: 'gone.half.test' },
      { preference: 20, exchange: 'later.half.test' },
    ]);
    rig.dns.set('later.half.test', 'A', ['127.0.0.1']);
    rig.dns.fail('later.half.test', 'SERVFAIL');
    const half = await send(rig, { toAddress: 'jay@half.test', fromAddress: 'hello@sender.test' });
    await waitForEvent(rig, half, 'deferred');
    assert.equal(emailStatus(rig, half), 'queued');
    rig.dns.clearFailure('later.half.test');
    assert.equal(await waitForFinal(rig, half), 'delivered');
  });
});

describe('delivery policy', () => {
  test('private MX addresses are refused unless delivery.allow_private_mx', async () => {
    const rig = await startRig({ env: { POSTINO_DELIVERY_ALLOW_PRIVATE_MX: 'false' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'internal.test');
      const id = await send(rig, { toAddress: 'ivy@internal.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id), 'bounce');
      const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
      assert.match(String(bounce.data?.smtpResponse), /^550 5\.4\.4 .*private/);
      assert.equal(rig.sink.messages.length, 0);
      // The appliance's own rule, not the recipient's: nothing to clean up once private MX is allowed.
      assert.equal(bounce.data?.recipientSuppressed, false);
      assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data, []);

      // Private IPv4 addresses, and an AAAA answer not waited for: its IPv6 addresses may be usable, so it waits.
      rig.dns.set('dualstack.test', 'MX', [{ preference: 10, exchange: 'mx.dualstack.test' }]);
      rig.dns.set('mx.dualstack.test', 'A', ['10.0.0.5']);
      rig.dns.fail('mx.dualstack.test', 'timeout', 'AAAA');
      const waiting = await send(rig, { toAddress: 'dee@dualstack.test', fromAddress: 'hello@sender.test' });
      const deferred = await waitForEvent(rig, waiting, 'deferred', 10_000);
      assert.match(String(deferred.data?.smtpResponse), /private/);
    } finally {
      await rig.stop();
    }
  });

  test('a give-up after days of refusals of the sending IP (4.7.x) bounces without suppressing the address', async () => {
    const rig = await startRig({ env: { POSTINO_DELIVERY_GIVE_UP_AFTER: '3s', POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '100ms', POSTINO_DELIVERY_THROTTLE_BACKOFF_MAX: '100ms' }, sink: { onRcpt: () => ({ code: 450, message: '4.7.1 Client host [127.0.0.1] blocked using zen.example' }) } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'blocking.test');
      const id = await send(rig, { toAddress: 'kim@blocking.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id, 10_000), 'bounce');
      const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
      assert.equal(bounce.data?.gaveUp, true);
      assert.match(String(bounce.data?.smtpResponse), /4\.7\.1 .*blocked/);
      assert.equal(bounce.data?.recipientSuppressed, false);
      assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data, []);
    } finally {
      await rig.stop();
    }
  });

  test('a give-up after days of bare 421 throttling (no enhanced code) bounces without suppressing the address', async () => {
    // Guards the throttle clause of the give-up rule: a busy destination saying "try again later" until
    // give_up_after says nothing about the mailbox, so the address must not be suppressed for every later email.
    const rig = await startRig({ env: { POSTINO_DELIVERY_GIVE_UP_AFTER: '3s', POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '100ms', POSTINO_DELIVERY_THROTTLE_BACKOFF_MAX: '100ms' }, sink: { onRcpt: () => ({ code: 421, message: 'Too many concurrent SMTP connections; please try again later' }) } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'busy.test');
      const id = await send(rig, { toAddress: 'kim@busy.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id, 15_000), 'bounce');
      const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
      assert.equal(bounce.data?.gaveUp, true);
      assert.equal(bounce.data?.rule, 'throttle-421');
      assert.equal(bounce.data?.recipientSuppressed, false);
      assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data, []);
    } finally {
      await rig.stop();
    }
  });

  test('a give-up after failures where nothing answered (DNS timeouts, unreachable hosts) bounces without suppressing the address', async () => {
    // As likely this side's outage (its resolver, a blocked port 25) as the recipient's: once fixed, the
    // address must still get mail.
    const rig = await startRig({ env: { POSTINO_DELIVERY_GIVE_UP_AFTER: '2s', POSTINO_DNS_TIMEOUT: '200ms', POSTINO_DNS_TRIES: '1' } });
    try {
      await addSendingDomain(rig, 'sender.test');
      rig.dns.fail('silent.test', 'timeout');
      const id = await send(rig, { toAddress: 'kim@silent.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id, 15_000), 'bounce');
      const bounce = eventsOf(rig, id).find((e) => e.type === 'bounce')!;
      assert.equal(bounce.data?.gaveUp, true);
      assert.equal(bounce.data?.recipientSuppressed, false);
      assert.deepEqual((await rig.app.api('GET', '/v1/suppressions')).body.data, []);
    } finally {
      await rig.stop();
    }
  });

  test('a message still deferred after give_up_after bounces (soft) and is suppressed', async () => {
    // Long enough that the first attempt (which may start the signer threads, slow on a loaded machine)
    // ends before it: the test wants at least one deferral before the give-up.
    const rig = await startRig({ env: { POSTINO_DELIVERY_GIVE_UP_AFTER: '3s' }, sink: { onRcpt: () => ({ code: 452, message: '4.2.2 Mailbox full' }) } });
    try {
      await addSendingDomain(rig, 'sender.test');
      routeToSink(rig.dns, 'full.test');
      const id = await send(rig, { toAddress: 'jack@full.test', fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id, 10_000), 'bounce');
      const events = eventsOf(rig, id);
      assert.ok(events.filter((e) => e.type === 'deferred').length >= 1);
      const bounce = events.find((e) => e.type === 'bounce')!;
      assert.equal(bounce.data?.bounceType, 'soft');
      assert.equal(bounce.data?.gaveUp, true);
      const list = await rig.app.api('GET', '/v1/suppressions');
      assert.equal(list.body.data[0].reason, 'give-up');
    } finally {
      await rig.stop();
    }
  });
});

test('a destination where no host answers is held off like a throttling one: the rest of its backlog waits without attempts', async () => {
  const rig = await startRig({ env: { POSTINO_DELIVERY_THROTTLE_BACKOFF_BASE: '3s' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    // Loopback where nothing listens: every connection refused.
    rig.dns.set('dead.test', 'MX', [{ preference: 10, exchange: 'mx.dead.test' }]);
    rig.dns.set('mx.dead.test', 'A', ['127.0.0.2']);
    const first = await send(rig, { toAddress: 'a@dead.test', fromAddress: 'hello@sender.test' });
    await waitForEvent(rig, first, 'deferred');
    const backlog = await Promise.all([1, 2, 3].map((i) => send(rig, { toAddress: `b${i}@dead.test`, fromAddress: 'hello@sender.test' })));
    const heldBack = (id: string) => {
      const job = jobOf(rig, id);
      return job !== undefined && job.leaseUntil === null && job.nextAttemptAt > Date.now() + 1_000;
    };
    await waitUntil(() => backlog.every(heldBack), 'the backlog put back to the end of the hold');
    for (const id of backlog) {
      assert.equal(jobOf(rig, id)?.attempts, 0, 'no attempt made');
      assert.deepEqual(eventsOf(rig, id).map((e) => e.type), ['queued']);
    }
  } finally {
    await rig.stop();
  }
});

test('with the DNS cache off, messages for a domain whose lookup is under way share it', async () => {
  const rig = await startRig({ env: { POSTINO_DELIVERY_DNS_CACHE_TTL: '0s' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'slowdns.test');
    rig.dns.hold('slowdns.test');
    const ids = await Promise.all([1, 2, 3].map((i) => send(rig, { toAddress: `s${i}@slowdns.test`, fromAddress: 'hello@sender.test' })));
    const mxQueries = () => rig.dns.queries.filter((q) => q.name === 'slowdns.test' && q.type === 'MX').length;
    await waitUntil(() => mxQueries() > 0, 'the MX lookup under way');
    // Time for the other two to reach their lookup (claimed together, admitted: 5 per connection cap).
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(mxQueries(), 1);
    rig.dns.release('slowdns.test');
    for (const id of ids) assert.equal(await waitForFinal(rig, id), 'delivered');
  } finally {
    await rig.stop();
  }
});

test('equal-preference MX hosts share the mail while their answer is cached', async () => {
  // Both names lead to the sink, so the first host tried takes the message and its name is the one
  // recorded. With the answer cached, the order must still be drawn per message: the cached order
  // sent every message to one of them for the cache's lifetime.
  const rig = await startRig({ env: { POSTINO_DELIVERY_DNS_CACHE_TTL: '60s' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    rig.dns.set('pair.test', 'MX', [
      { preference: 10, exchange: 'left.pair.test' },
      { preference: 10, exchange: 'right.pair.test' },
    ]);
    rig.dns.set('left.pair.test', 'A', ['127.0.0.1']);
    rig.dns.set('right.pair.test', 'A', ['127.0.0.1']);
    const hosts = new Map<string, number>();
    // One at a time, so every message uses the cached answer of the first lookup. 16 messages all on
    // one host by chance: 2 in 65,536.
    for (let i = 0; i < 16; i++) {
      const id = await send(rig, { toAddress: `p${i}@pair.test`, fromAddress: 'hello@sender.test' });
      assert.equal(await waitForFinal(rig, id), 'delivered');
      const host = String(eventsOf(rig, id).find((e) => e.type === 'delivered')!.data?.mxHost);
      hosts.set(host, (hosts.get(host) ?? 0) + 1);
    }
    assert.deepEqual([...hosts.keys()].sort(), ['left.pair.test', 'right.pair.test'], `deliveries per host: ${JSON.stringify([...hosts])}`);
  } finally {
    await rig.stop();
  }
});
