import assert from 'node:assert/strict';
import { pickFairly } from '../../src/webhooks/dispatcher.js';
import { test } from 'node:test';
import { decodeWords } from '../../src/smtp/decode-words.js';
import { planRetry, retryDelayMs } from '../../src/webhooks/backoff.js';
import { signWebhook, webhookSecretKey } from '../../src/webhooks/sign.js';

test('retry delays double from the base, cap at the max, and jitter ±20%', () => {
  const mid = () => 0.5;
  const table: [number, number][] = [
    [1, 30_000],
    [2, 60_000],
    [3, 120_000],
    [7, 1_920_000],
    // At the cap the spread is 80–100 %: the middle is 90 %.
    [8, 3_240_000],
    [50, 3_240_000],
  ];
  for (const [attempt, expected] of table) assert.equal(retryDelayMs(attempt, 30_000, 3_600_000, mid), expected, `attempt ${attempt}`);
  assert.equal(retryDelayMs(1, 30_000, 3_600_000, () => 0), 24_000);
  assert.equal(retryDelayMs(1, 30_000, 3_600_000, () => 1), 36_000);
  // At the cap the jitter only shortens, spread evenly: retry_max is the longest delay between two attempts.
  assert.equal(retryDelayMs(50, 30_000, 3_600_000, () => 1), 3_600_000);
  assert.equal(retryDelayMs(50, 30_000, 3_600_000, () => 0), 2_880_000);
  const capped = Array.from({ length: 1000 }, (_, i) => retryDelayMs(50, 30_000, 3_600_000, () => i / 1000));
  assert.ok(capped.filter((delay) => delay === 3_600_000).length <= 1, 'no herd on exactly retry_max');
});

test('planRetry retries until the deadline, the last retry at the deadline, and gives up after an attempt at or past it', () => {
  const policy = { baseMs: 30_000, maxMs: 3_600_000, giveUpAfterMs: 86_400_000 };
  assert.deepEqual(planRetry({ attempt: 1, nowMs: 1000, firstQueuedAtMs: 1000 }, policy, () => 0.5), { action: 'retry', nextAttemptAt: 31_000 });
  assert.deepEqual(planRetry({ attempt: 30, nowMs: 84_000_000, firstQueuedAtMs: 0 }, policy, () => 0.5), { action: 'retry', nextAttemptAt: 86_400_000 });
  assert.deepEqual(planRetry({ attempt: 31, nowMs: 86_400_000, firstQueuedAtMs: 0 }, policy, () => 0.5), { action: 'give-up' });
});

test('planRetry with a long retry_max still retries for all of give_up_after: a receiver down 20 h of 24 gets the event', () => {
  // retry_max 12 h: the delays reach it after ten doublings of a minute, 17 h after the event.
  const policy = { baseMs: 60_000, maxMs: 12 * 3_600_000, giveUpAfterMs: 24 * 3_600_000 };
  let nowMs = 0;
  const attempts: number[] = [];
  for (let attempt = 1; attempt < 100; attempt++) {
    attempts.push(nowMs);
    const plan = planRetry({ attempt, nowMs, firstQueuedAtMs: 0 }, policy, () => 0.5);
    if (plan.action === 'give-up') break;
    nowMs = plan.nextAttemptAt;
  }
  const last = attempts[attempts.length - 1];
  assert.equal(last, policy.giveUpAfterMs, `the last attempt is at the deadline (it was ${(last / 3_600_000).toFixed(1)} h after the event)`);
  assert.ok(attempts.some((at) => at > 20 * 3_600_000), 'an attempt after the receiver came back at 20 h');
});

test('planRetry never gives up after the first attempt: an event first tried past its deadline (the appliance was down) gets one retry', () => {
  const policy = { baseMs: 30_000, maxMs: 3_600_000, giveUpAfterMs: 86_400_000 };
  const twoDaysLate = 2 * 86_400_000;
  assert.deepEqual(planRetry({ attempt: 1, nowMs: twoDaysLate, firstQueuedAtMs: 0 }, policy, () => 0.5), { action: 'retry', nextAttemptAt: twoDaysLate + 30_000 });
  assert.deepEqual(planRetry({ attempt: 2, nowMs: twoDaysLate + 30_000, firstQueuedAtMs: 0 }, policy, () => 0.5), { action: 'give-up' });
});

test('whsec_ secrets key the HMAC with their base64-decoded bytes; others with UTF-8', () => {
  assert.deepEqual(webhookSecretKey('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'), Buffer.from('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'base64'));
  assert.deepEqual(webhookSecretKey('plain-secret'), Buffer.from('plain-secret'));
  // Standard Webhooks reference vector (standard-webhooks spec test suite).
  assert.equal(
    signWebhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}'),
    'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
  );
});

test('RFC 2047 encoded words in control headers are decoded', () => {
  assert.equal(decodeWords('=?UTF-8?Q?=7B=22name=22=3A=22Ada=22=7D?='), '{"name":"Ada"}');
  assert.equal(decodeWords('=?utf-8?B?w6lsw6h2ZQ==?= =?utf-8?Q?_x?='), 'élève x');
  assert.equal(decodeWords('plain value'), 'plain value');
});

test('pickFairly: one endpoint alone takes every slot; a busy endpoint yields the free ones to the others', () => {
  const queue = (endpointId: string, n: number, firstAt = 0) => Array.from({ length: n }, (_, i) => ({ endpointId, nextAttemptAt: firstAt + i, id: `${endpointId}${i}` }));
  assert.equal(pickFairly([queue('a', 20)], 8, new Map()).length, 8);
  // A hanging receiver's backlog is older, but it already holds 6 slots: the 2 free ones go to b.
  assert.deepEqual(pickFairly([queue('dead', 50), queue('b', 3, 100)], 2, new Map([['dead', 6]])).map((d) => d.id), ['b0', 'b1']);
  // Nothing in flight: alternating, the longest-waiting endpoint first.
  assert.deepEqual(pickFairly([queue('a', 3, 10), queue('b', 3, 0)], 4, new Map()).map((d) => d.id), ['b0', 'a0', 'b1', 'a1']);
  // Only the hanging endpoint has work: it may use the free slots.
  assert.equal(pickFairly([queue('dead', 5)], 2, new Map([['dead', 6]])).length, 2);
});
