import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import type { ComposeInput } from '../../src/delivery/compose.js';
import { BuilderThreadLost, createMessageBuilder } from '../../src/delivery/message-builder.js';
import { silentLogger } from '../../src/lib/logger.js';
import { sampleComposeInput } from './compose-input.js';
import { waitUntil } from '../helpers/wait-until.js';
import { addSendingDomain, emailStatus, eventsOf, routeToSink, send, startRig, waitForFinal } from './harness.js';

const input: ComposeInput = { ...sampleComposeInput, text: 'Hello' };

test('a compose/sign thread that dies fails only its own builds, as retryable, and is replaced', { timeout: 20_000 }, async (t) => {
  // The threads the builder starts, as they receive their first build (test-side instrumentation only).
  const threads: Worker[] = [];
  const realPostMessage = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (this: Worker, ...args: Parameters<Worker['postMessage']>) {
    if (!threads.includes(this)) threads.push(this);
    return realPostMessage.apply(this, args);
  };
  const builder = createMessageBuilder({ threads: 2, log: silentLogger });
  t.after(async () => {
    Worker.prototype.postMessage = realPostMessage;
    await builder.close();
  });
  await Promise.all([builder.build(input, undefined, 0), builder.build(input, undefined, 0)]);
  assert.equal(threads.length, 2);

  // Round robin: this build goes to the first thread, which dies in the middle of a long composition.
  const big = { ...input, text: 'Lorem ipsum dolor sit amet, = consectetur. '.repeat(200_000) };
  const doomed = builder.build(big, undefined, 0);
  void threads[0].terminate();
  await assert.rejects(doomed, (error) => error instanceof BuilderThreadLost);

  // Meanwhile builds go to the thread that is left; then the slot gets a new thread.
  const during = await Promise.all([builder.build(input, undefined, 0), builder.build(input, undefined, 0)]);
  for (const message of during) assert.match(message.toString(), /Subject: Hello/);
  await waitUntil(async () => {
    await Promise.all([builder.build(input, undefined, 0), builder.build(input, undefined, 0)]);
    return threads.length === 3;
  }, 'a new thread in the lost one\'s place', 5_000);
});

test('an email whose compose/sign thread dies under it is built again shortly and delivered, not marked error', { timeout: 30_000 }, async (t) => {
  // The first post of builds kills the thread it was posted to (test-side instrumentation only); the
  // email is large enough that its build cannot finish first.
  let killed = false;
  const realPostMessage = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (this: Worker, ...args: Parameters<Worker['postMessage']>) {
    const posted = realPostMessage.apply(this, args);
    // Builds are posted as arrays, those of one event-loop turn together (message-builder.ts).
    if (!killed && Array.isArray(args[0]) && args[0].some((request) => 'input' in request)) {
      killed = true;
      void this.terminate();
    }
    return posted;
  };
  t.after(() => {
    Worker.prototype.postMessage = realPostMessage;
  });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'capture' } });
  try {
    await addSendingDomain(rig, 'sender.test');
    const id = await send(rig, { toAddress: 'max@inbox.test', fromAddress: 'hello@sender.test', html: `<p>${'Lorem ipsum dolor sit amet. '.repeat(30_000)}</p>` });
    assert.equal(await waitForFinal(rig, id, 20_000), 'delivered');
    assert.ok(killed, 'a build thread was killed');
    assert.ok(rig.app.logs.some((line) => line.includes('email build interrupted; trying again shortly')), 'the interrupted build was retried');
    assert.ok(!eventsOf(rig, id).some((event) => event.type === 'error'));
  } finally {
    await rig.stop();
  }
});

test('builds asked for in one turn go to each thread in one post, and each answer reaches its own caller', { timeout: 20_000 }, async (t) => {
  const posts: unknown[][] = [];
  const realPostMessage = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (this: Worker, ...args: Parameters<Worker['postMessage']>) {
    if (Array.isArray(args[0])) posts.push(args[0]);
    return realPostMessage.apply(this, args);
  };
  const builder = createMessageBuilder({ threads: 2, log: silentLogger });
  t.after(async () => {
    Worker.prototype.postMessage = realPostMessage;
    await builder.close();
  });
  const subjects = Array.from({ length: 7 }, (_, i) => `Order ${i}`);
  const messages = await Promise.all(subjects.map((subject) => builder.build({ ...input, subject }, undefined, 0)));
  assert.deepEqual(posts.map((batch) => batch.length), [4, 3], 'round robin over two threads, one post each');
  messages.forEach((message, i) => assert.match(message.toString(), new RegExp(`^Subject: ${subjects[i]}$`, 'm')));
});

test('an email that cannot be built says why in its error event, in one line, through GET /v1/email/{id}', { timeout: 20_000 }, async () => {
  const rig = await startRig();
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    // A sending domain whose stored DKIM key is damaged (a hand edit, a bad restore): signing fails.
    const sqlite = rig.app.appliance.context.database.sqlite;
    sqlite.prepare(`update domains set dkim_private_key = ?`).run('-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n');
    const id = await send(rig, { toAddress: 'max@inbox.test', fromAddress: 'hello@sender.test' });
    assert.equal(await waitForFinal(rig, id), 'error');
    const { body } = await rig.app.api('GET', `/v1/email/${id}`);
    const error = body.email.events.find((event: { type: string }) => event.type === 'error');
    assert.match(error.message, /^compose\/sign failed: .*DECODER/, 'the reason is shown, not only the type');
    assert.doesNotMatch(error.message, /\n|    at /, 'no stack trace (server paths) in the record');
  } finally {
    await rig.stop();
  }
});

test('/healthz says the worker failed while its compose/sign threads keep dying with no build answered, and ok once one builds', { timeout: 60_000 }, async (t) => {
  // Every post of builds kills the thread it was posted to, as a thread that cannot run does
  // (test-side instrumentation only), until the test lets them live: the thread gets `null` instead of
  // the builds and throws on it, uncaught. (Terminating the thread just after posting the builds was a
  // race on a fast machine: the thread sometimes built and answered first, and the email was delivered.)
  let killing = true;
  const realPostMessage = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (this: Worker, ...args: Parameters<Worker['postMessage']>) {
    if (killing && Array.isArray(args[0]) && args[0].some((request) => 'input' in request)) return realPostMessage.call(this, null);
    return realPostMessage.apply(this, args);
  };
  t.after(() => {
    Worker.prototype.postMessage = realPostMessage;
  });
  const rig = await startRig({ env: { POSTINO_DELIVERY_MODE: 'capture', POSTINO_DELIVERY_SIGNING_THREADS: '1', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false' } });
  try {
    const health = async () => {
      const response = await fetch(`${rig.app.baseUrl}/healthz`);
      return { status: response.status, body: (await response.json()) as { status: string; components: Record<string, string> } };
    };
    assert.equal((await health()).status, 200);
    const id = await send(rig, { toAddress: 'max@inbox.test', fromAddress: 'hello@sender.test' });
    await waitUntil(async () => (await health()).status === 503, 'healthz 503 while no message can be built', 30_000);
    const failed = await health();
    assert.equal(failed.body.status, 'unavailable');
    assert.equal(failed.body.components.worker, 'failed');
    assert.equal(emailStatus(rig, id), 'queued', 'the email waits, undelivered');

    killing = false;
    assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    const recovered = await health();
    assert.equal(recovered.status, 200);
    assert.equal(recovered.body.components.worker, 'up');
  } finally {
    await rig.stop();
  }
});
