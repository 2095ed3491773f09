import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Sqlite } from '../../src/db/client.js';
import { createDomainLimiter, maxDestinationWaitMs, type DomainLimiter } from '../../src/delivery/domain-limiter.js';
import { createDeliveryRepo } from '../../src/delivery/repo.js';
import { createReleaseScheduledProcedure } from '../../src/emails/release-scheduled.js';
import { ManualClock } from '../../src/lib/clock.js';
import { openMigratedDatabase } from '../helpers/migrated-database.js';
import { waitUntil } from '../helpers/wait-until.js';
import type { ReceivedMessage } from '../helpers/smtp-sink.js';
import { addSendingDomain, emailStatus, eventsOf, jobOf, routeToSink, send, startRig, waitForFinal, type DeliveryRig } from './harness.js';

/** One session of `ms` to the destination, on a manual clock: its pace is measured from then on. */
async function measuredSession(limiter: DomainLimiter, domain: string, clock: { now: number }, ms: number): Promise<void> {
  const release = await limiter.acquire(domain);
  clock.now += ms;
  release();
}

test('domain limiter: admits while the expected wait is short, then spreads the rest at the destination pace', async () => {
  const clock = { now: 10_000 };
  const limiter = createDomainLimiter(2, () => clock.now);
  // Before any session has ended, one message per connection: the next comes back one (assumed 1 s) session later.
  assert.deepEqual([limiter.admit('slow.test'), limiter.admit('slow.test')], [0, 0]);
  assert.equal(limiter.admit('slow.test'), clock.now + 1_000);
  limiter.leave('slow.test');
  limiter.leave('slow.test');
  // One session of 1 s measured: two connections, one frees every 500 ms.
  await measuredSession(limiter, 'slow.test', clock, 1_000);
  let now = clock.now;
  const admitted = [1, 2, 3, 4, 5, 6].map(() => limiter.admit('slow.test'));
  assert.deepEqual(admitted, [0, 0, 0, 0, 0, 0], `waits of 0, 0, 0.5, 1, 1.5 and 2 s are all within ${maxDestinationWaitMs} ms`);
  const putBack = [limiter.admit('slow.test'), limiter.admit('slow.test')];
  assert.deepEqual(putBack, [now + 2_500 + 500, now + 3_500], 'the next come back one interval apart, after the admitted ones');
  assert.equal(limiter.admit('other.test'), 0, 'another destination is not affected');
  limiter.leave('other.test');

  // Measured sessions set the pace: ten sessions of 4 s move the average most of the way from 1 s to 4 s.
  for (let i = 0; i < 10; i++) await measuredSession(limiter, 'slow.test', clock, 4_000);
  now = clock.now;
  const averageMs = 4_000 - 3_000 * 0.8 ** 10;
  const later = limiter.admit('slow.test');
  assert.ok(Math.abs(later - (now + 6 * (averageMs / 2))) < 1, `five intervals of the six admitted ahead of it, then its own: ${later - now} ms`);
  for (let i = 0; i < 6; i++) limiter.leave('slow.test');
  assert.equal(limiter.admit('slow.test'), 0, 'once the admitted ones are done, the destination takes mail again');

  // However slow the destination, nothing is put back more than an hour ahead.
  const stuck = createDomainLimiter(1, () => clock.now);
  assert.equal(stuck.admit('stuck.test'), 0);
  await measuredSession(stuck, 'stuck.test', clock, 10 * 60_000);
  now = clock.now;
  const putBackTimes = Array.from({ length: 40 }, () => stuck.admit('stuck.test')).filter((at) => at > 0);
  assert.ok(putBackTimes.length > 0);
  assert.ok(putBackTimes.every((at) => at <= now + 60 * 60_000), `put back at most an hour ahead: ${putBackTimes.map((at) => at - now).join(', ')}`);
  assert.equal(putBackTimes.at(-1), now + 60 * 60_000);
});

test('domain limiter: deferred retries refused by a busy destination are spread behind each other, not behind the never-attempted backlog', async () => {
  const clock = { now: 10_000 };
  const limiter = createDomainLimiter(1, () => clock.now);
  await measuredSession(limiter, 'slow.test', clock, 1_000);
  const now = clock.now;
  // One connection, 1 s sessions: three admitted (a wait of up to 2 s), then the backlog is spread a second apart.
  assert.deepEqual([1, 2, 3].map(() => limiter.admit('slow.test')), [0, 0, 0]);
  const spread = Array.from({ length: 50 }, () => limiter.admit('slow.test'));
  assert.equal(spread.at(-1), now + 53_000);
  assert.equal(limiter.admit('slow.test', true), now + 4_000, 'a retry: behind the admitted ones, not behind the never-attempted spread');
  assert.equal(limiter.admit('slow.test', true), now + 5_000, 'the next retry one interval after it: each is written back about once');
  assert.equal(limiter.admit('slow.test'), now + 54_000, 'the never-attempted spread goes on where it was');
});

test('domain limiter: a slot given back without a session does not count as a short session', async () => {
  const clock = { now: -1_000 };
  const limiter = createDomainLimiter(1, () => clock.now);
  await measuredSession(limiter, 'd.test', clock, 1_000);
  assert.deepEqual([1, 2, 3].map(() => limiter.admit('d.test')), [0, 0, 0], 'waits of 0, 1 and 2 s');
  assert.equal(limiter.admit('d.test'), 4_000);
  const unused = await limiter.acquire('d.test');
  unused(false);
  // Counted as a 0 ms session, the average would drop to 800 ms and this would come back at 4,800.
  assert.equal(limiter.admit('d.test'), 5_000);
});

test('domain limiter: room for put-back messages once fewer than two per connection are admitted, none while cooling down', async () => {
  const clock = { now: -1_000 };
  const limiter = createDomainLimiter(2, () => clock.now, { baseMs: 1_000, maxMs: 1_000 });
  await measuredSession(limiter, 'd.test', clock, 1_000);
  let now = 0;
  assert.equal(limiter.roomForPutBack('d.test'), 0, 'nothing put back: nothing to take back');
  const admitted = Array.from({ length: 6 }, () => limiter.admit('d.test'));
  assert.deepEqual(admitted, [0, 0, 0, 0, 0, 0]);
  assert.ok(limiter.admit('d.test') > now, 'the seventh is put back');
  assert.equal(limiter.roomForPutBack('d.test'), 0, 'six admitted: more than two per connection');
  for (let i = 0; i < 4; i++) limiter.leave('d.test');
  assert.equal(limiter.roomForPutBack('d.test'), 2, 'two admitted of four');
  for (let i = 0; i < 2; i++) limiter.leave('d.test');
  assert.equal(limiter.roomForPutBack('d.test'), 4, 'idle, and still remembered while its put-back message waits');
  limiter.recordThrottle('d.test');
  assert.equal(limiter.roomForPutBack('d.test'), 0, 'cooling down');
  now = clock.now = 1_500;
  assert.equal(limiter.roomForPutBack('d.test'), 2, 'after the cool-down one connection probes: two');
  limiter.putBackDrained('d.test', 0);
  assert.equal(limiter.roomForPutBack('d.test'), 2, 'a take-back that started before the last put-back says nothing of it');
  limiter.putBackDrained('d.test', 1_500);
  assert.equal(limiter.roomForPutBack('d.test'), 0, 'none left to take back');
});

test('domain limiter: a destination recovering from a throttle (one probe at a time) admits fewer', async () => {
  const clock = { now: -1_000 };
  const limiter = createDomainLimiter(5, () => clock.now, { baseMs: 100, maxMs: 1_000 });
  await measuredSession(limiter, 'busy.test', clock, 1_000);
  limiter.recordThrottle('busy.test');
  const now = (clock.now = 200);
  const decisions = [1, 2, 3, 4].map(() => limiter.admit('busy.test'));
  assert.deepEqual(decisions.slice(0, 3), [0, 0, 0], 'one session of ~1 s at a time: waits of 0, 1 and 2 s');
  assert.ok(decisions[3] >= now + 3_000, `the fourth would wait 3 s: put back to ${decisions[3]}`);
});

test('taking back put-back jobs: never-attempted, unleased, future ones of the destination, earliest first; any destination through a relay', () => {
  const handle = openMigratedDatabase('takeback', ['aaaaaaaaaaaaaaaaaaaaaaaa']);
  try {
    const { sqlite } = handle;
    const now = 1_000_000;
    const jobs: [id: string, domain: string, nextAttemptAt: number, attempts: number, leaseUntil: number | null][] = [
      ['put-back-later', 'd.test', now + 9_000, 0, null],
      ['put-back-sooner', 'd.test', now + 5_000, 0, null],
      ['deferred-retry', 'd.test', now + 1_000, 1, null], // a 4xx's retry keeps its schedule
      ['in-flight', 'd.test', now + 2_000, 0, now + 2_000], // leased: its attempt is running
      ['already-due', 'd.test', now - 1, 0, null],
      ['other-domain', 'e.test', now + 3_000, 0, null],
    ];
    for (const [id, domain, nextAttemptAt, attempts, leaseUntil] of jobs) {
      const emailId = id.padEnd(24, '0');
      sqlite
        .prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, 'aaaaaaaaaaaaaaaaaaaaaaaa', 'queued', ?, 'a@s.test', 'S', 'text', 0, 0, 0)`)
        .run(emailId, `x@${domain}`);
      sqlite
        .prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, lease_until, queued_at) values (?, 'aaaaaaaaaaaaaaaaaaaaaaaa', ?, ?, ?, ?, 0)`)
        .run(emailId, domain, nextAttemptAt, attempts, leaseUntil);
    }
    const repo = createDeliveryRepo(sqlite, handle.db, new ManualClock(new Date(now).toISOString()));
    const dueNow = () => (sqlite.prepare('select email_id from delivery_jobs where next_attempt_at = ? order by email_id').pluck().all(now) as string[]).map((id) => id.replace(/0+$/, ''));
    assert.equal(repo.pullForward('d.test', now, 1), 1);
    assert.deepEqual(dueNow(), ['put-back-sooner'], 'earliest first, as many as asked');
    assert.equal(repo.pullForward('d.test', now, 10), 1, 'the retry, the leased job and the due one stay');
    assert.deepEqual(dueNow(), ['put-back-later', 'put-back-sooner']);
    assert.equal(repo.pullForward(undefined, now, 10), 1, 'through a relay every destination is one');
    assert.deepEqual(dueNow(), ['other-domain', 'put-back-later', 'put-back-sooner']);
  } finally {
    handle.close();
  }
});

test('taking back put-back jobs does not read the deferred retries before them (100,000 in a real file)', () => {
  const project = 'aaaaaaaaaaaaaaaaaaaaaaaa';
  const handle = openMigratedDatabase('takeback-cost', [project]);
  try {
    const { sqlite } = handle;
    const now = 10_000_000;
    const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, ?, 'queued', ?, 'a@s.test', 'S', 'text', 0, 0, 0)`);
    const job = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at) values (?, ?, 'big.test', ?, ?, 0)`);
    const retries = 100_000;
    sqlite.transaction(() => {
      // A big destination greylisted (or deferred) a large send: its retries are due over the next hour,
      // and the messages it put back come after them.
      for (let i = 0; i < retries; i++) {
        const id = `r${String(i).padStart(23, '0')}`;
        email.run(id, project, `u${i}@big.test`);
        job.run(id, project, now + 60_000 + i * 30, 1);
      }
      for (let i = 0; i < 50; i++) {
        const id = `p${String(i).padStart(23, '0')}`;
        email.run(id, project, `v${i}@big.test`);
        job.run(id, project, now + 3_100_000 + i, 0);
      }
    })();
    const statements = recordingStatements(sqlite);
    const repo = createDeliveryRepo(statements.sqlite, handle.db, new ManualClock(new Date(now).toISOString()));
    // Each read every retry due before the put-back messages (50-90 ms, on the event loop, at every
    // session end of the destination while it has messages put back): they now search indexes that
    // hold never-attempted jobs only.
    assert.equal(sqlite.transaction(() => repo.pullForward('big.test', now, 5))(), 5);
    assert.equal(sqlite.transaction(() => repo.pullForward(undefined, now, 5))(), 5);
    assert.match(statements.planOf('indexed by delivery_jobs_put_back_idx'), /SEARCH delivery_jobs USING INDEX delivery_jobs_put_back_idx \(recipient_domain=\? AND next_attempt_at>\? AND next_attempt_at<\?\)/);
    assert.match(statements.planOf('indexed by delivery_jobs_put_back_any_idx'), /SEARCH delivery_jobs USING INDEX delivery_jobs_put_back_any_idx \(next_attempt_at>\? AND next_attempt_at<\?\)/);
    for (const index of ['delivery_jobs_put_back_idx', 'delivery_jobs_put_back_any_idx']) assert.ok(holdsNeverAttemptedOnly(sqlite, index), `${index} holds never-attempted jobs only`);
    const dueNow = sqlite.prepare('select email_id from delivery_jobs where next_attempt_at = ? order by email_id').pluck().all(now);
    assert.deepEqual(dueNow, Array.from({ length: 10 }, (_, i) => `p${String(i).padStart(23, '0')}`), 'the put-back messages, earliest first; the retries keep their schedule');
  } finally {
    handle.close();
  }
});

test('emails set for one moment are bulk mail however the release batches cut them (a newsletter larger than a batch)', () => {
  const project = 'aaaaaaaaaaaaaaaaaaaaaaaa';
  const handle = openMigratedDatabase('release', [project]);
  try {
    const { sqlite } = handle;
    const now = 10_000_000;
    const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, scheduled_at, created_at, updated_at) values (?, ?, 'scheduled', 'x@d.test', 'a@s.test', 'S', 'text', 0, ?, 0, 0)`);
    const id = (prefix: string, n: number) => `${prefix}${String(n).padStart(24 - prefix.length, '0')}`;
    // A reminder set for a moment of its own, then a newsletter of 6 set for 9:00, released 2 at a time:
    // its first shares a batch with the reminder, its last is alone in its own (releaseScheduledBatch is
    // 500: so are a newsletter of 501's last email, and the first of one due behind 499 others).
    email.run(id('remind', 0), project, now - 30_000);
    for (let n = 0; n < 6; n++) email.run(id('news', n), project, now);
    const release = createReleaseScheduledProcedure(sqlite);
    let released = 0;
    for (let batch = 0; batch < 4; batch++) released += release({ nowMs: now, eventIds: [id(`ev${batch}a`, 0), id(`ev${batch}b`, 0)] });
    assert.equal(released, 7);
    const lanes = Object.fromEntries(sqlite.prepare(`select email_id, bulk from delivery_jobs`).raw().all() as [string, number][]);
    assert.deepEqual(lanes, { [id('remind', 0)]: 0, ...Object.fromEntries([0, 1, 2, 3, 4, 5].map((n) => [id('news', n), 1])) });
  } finally {
    handle.close();
  }
});

test('claims take every lane in turn: each project\'s single sends and its bulk mail (batches, emails scheduled for one moment)', () => {
  const [a, b] = ['aaaaaaaaaaaaaaaaaaaaaaaa', 'bbbbbbbbbbbbbbbbbbbbbbbb'];
  const handle = openMigratedDatabase('lanes', [a, b]);
  try {
    const { sqlite } = handle;
    const now = 10_000_000;
    const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, scheduled_at, created_at, updated_at) values (?, ?, ?, 'x@d.test', 'a@s.test', 'S', 'text', 0, ?, 0, 0)`);
    const job = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at, bulk) values (?, ?, 'd.test', ?, ?, 0, ?)`);
    const id = (prefix: string, n: number) => `${prefix}${String(n).padStart(24 - prefix.length, '0')}`;
    sqlite.transaction(() => {
      // Project a: a newsletter of 1,000 batched emails, 100,000 deferred retries not due yet, and 300 scheduled for now.
      for (let n = 0; n < 1_000; n++) (email.run(id('news', n), a, 'queued', null), job.run(id('news', n), a, now - 60_000 + n, 0, 1));
      for (let n = 0; n < 100_000; n++) (email.run(id('retry', n), a, 'queued', null), job.run(id('retry', n), a, now + 60_000 + n, 1, 1));
      for (let n = 0; n < 300; n++) email.run(id('sched', n), a, 'scheduled', now);
      // A reminder of project a set for a moment of its own: a single send when it comes due.
      email.run(id('remind', 0), a, 'scheduled', now - 30_000);
      // Then a password reset of project a, and a batch of project b.
      email.run(id('reset', 0), a, 'queued', null);
      job.run(id('reset', 0), a, now - 1_000, 0, 0);
      for (let n = 0; n < 3; n++) (email.run(id('shop', n), b, 'queued', null), job.run(id('shop', n), b, now - 500 + n, 0, 1));
    })();
    const released = createReleaseScheduledProcedure(sqlite)({ nowMs: now, eventIds: Array.from({ length: 301 }, (_, n) => id('ev', n)) });
    assert.equal(released, 301);
    assert.equal(sqlite.prepare(`select count(*) from delivery_jobs where email_id like 'sched%' and bulk = 1`).pluck().get(), 300, 'emails set for one moment are bulk mail');
    assert.equal(sqlite.prepare(`select bulk from delivery_jobs where email_id like 'remind%'`).pluck().get(), 0, 'a lone scheduled email is a single send');
    sqlite.prepare(`delete from delivery_jobs where email_id like 'remind%'`).run(); // the claims below count the other lanes

    const statements = recordingStatements(sqlite);
    const repo = createDeliveryRepo(statements.sqlite, handle.db, new ManualClock(new Date(now).toISOString()));
    const claimed = sqlite.transaction(() => repo.claimDue(now, 6, 60_000))().map(({ job: claimedJob }) => claimedJob.emailId.replace(/0+\d*$/, ''));
    // In due order these were six newsletter emails, the reset and b's batch after all 1,300.
    assert.deepEqual(claimed, ['news', 'reset', 'shop', 'news', 'shop', 'news'], 'the lane due longest first, then each in turn');

    // One seek per project and lane, whatever the backlog: the 100,000 retries not due are not read.
    assert.equal(sqlite.transaction(() => repo.claimDue(now, 20, 60_000))().length, 20);
    assert.match(statements.planOf('with recursive project'), /SEARCH delivery_jobs USING COVERING INDEX delivery_jobs_lane_due_idx \(project_id>\?\)/);
    const plan = statements.planOf('indexed by delivery_jobs_lane_due_idx');
    assert.match(plan, /SEARCH delivery_jobs USING INDEX delivery_jobs_lane_due_idx \(project_id=\? AND bulk=\? AND next_attempt_at<\?\)/);
    assert.doesNotMatch(plan, /TEMP B-TREE/);
  } finally {
    handle.close();
  }
});

test('claims of one or two jobs (a saturated engine claims as slots free) still take every lane in turn', () => {
  const projects = ['aaaaaaaaaaaaaaaaaaaaaaaa', 'bbbbbbbbbbbbbbbbbbbbbbbb', 'cccccccccccccccccccccccc'];
  const handle = openMigratedDatabase('lanes-small', projects);
  try {
    const { sqlite } = handle;
    const now = 10_000_000;
    const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, ?, 'queued', 'x@d.test', 'a@s.test', 'S', 'text', 0, 0, 0)`);
    const job = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at, bulk) values (?, ?, 'd.test', ?, 0, 0, ?)`);
    const id = (prefix: string, n: number) => `${prefix}${String(n).padStart(24 - prefix.length, '0')}`;
    sqlite.transaction(() => {
      // Projects a and b each queued a newsletter of 200 a minute ago; then a's password reset and c's receipt.
      for (const [p, prefix] of [[projects[0], 'newsa'], [projects[1], 'newsb']] as const) {
        for (let n = 0; n < 200; n++) (email.run(id(prefix, n), p), job.run(id(prefix, n), p, now - 60_000 + n, 1));
      }
      (email.run(id('reset', 0), projects[0]), job.run(id('reset', 0), projects[0], now - 1_000, 0));
      (email.run(id('receipt', 0), projects[2]), job.run(id('receipt', 0), projects[2], now - 500, 0));
    })();
    const repo = createDeliveryRepo(sqlite, handle.db, new ManualClock(new Date(now).toISOString()));
    const claimsUntil = (limit: number, wanted: string[]) => {
      const seen = new Set<string>();
      for (let claim = 1; claim <= 500; claim++) {
        for (const { job: claimedJob } of sqlite.transaction(() => repo.claimDue(now, limit, 60_000))()) seen.add(claimedJob.emailId.replace(/0+\d*$/, ''));
        if (wanted.every((lane) => seen.has(lane))) return claim;
      }
      return Infinity;
    };
    // In one due order (what the lanes came down to with fewer slots free than lanes waiting) the reset
    // and the receipt waited for both newsletters: 400 claims of one.
    const ofOne = claimsUntil(1, ['reset', 'receipt']);
    assert.ok(ofOne <= 4, `four lanes waiting: each within four claims of one (the reset and the receipt took ${ofOne})`);
    const ofTwo = claimsUntil(2, ['newsa', 'newsb']);
    assert.ok(ofTwo <= 2, `and each newsletter keeps its turn (${ofTwo} claims of two)`);
  } finally {
    handle.close();
  }
});

test('with more lanes than a claim takes, a claim reads the next lanes in turn, not every lane', () => {
  const projects = Array.from({ length: 50 }, (_, n) => `p${String(n).padStart(23, '0')}`);
  const handle = openMigratedDatabase('lanes-many', projects);
  try {
    const { sqlite } = handle;
    const now = 10_000_000;
    const email = sqlite.prepare(`insert into emails (id, project_id, status, to_address, from_address, subject, content_kind, is_open_tracked, created_at, updated_at) values (?, ?, 'queued', 'x@d.test', 'a@s.test', 'S', 'text', 0, 0, 0)`);
    const job = sqlite.prepare(`insert into delivery_jobs (email_id, project_id, recipient_domain, next_attempt_at, attempts, queued_at, bulk) values (?, ?, 'd.test', ?, 0, 0, ?)`);
    sqlite.transaction(() => {
      // Fifty projects sending at once, each with mail in both lanes: a hundred lanes.
      projects.forEach((project, p) => {
        for (let n = 0; n < 10; n++) {
          const emailId = `e${String(p * 100 + n).padStart(23, '0')}`;
          (email.run(emailId, project), job.run(emailId, project, now - 1_000 + n, n % 2));
        }
      });
    })();
    const statements = recordingStatements(sqlite);
    const repo = createDeliveryRepo(statements.sqlite, handle.db, new ManualClock(new Date(now).toISOString()));
    const served = new Set<string>();
    for (let claim = 0; claim < 100; claim++) {
      for (const { job: claimed } of sqlite.transaction(() => repo.claimDue(now, 1, 60_000))()) served.add(`${claimed.projectId}:${Number(claimed.emailId.slice(-1)) % 2}`);
    }
    assert.equal(served.size, 100, 'a hundred claims of one served each of the hundred lanes once');
    // One lane read per claim of one (every lane was read at every claim: 10,000 reads).
    assert.equal(statements.readsOf('indexed by delivery_jobs_lane_due_idx'), 100);
  } finally {
    handle.close();
  }
});

/**
 * The query plans of the repository's own statements: `sqlite` with its `prepare` recorded, so a test
 * reads how the statements it runs search (what they read), not how long they took on this machine.
 */
function recordingStatements(sqlite: Sqlite): { sqlite: Sqlite; planOf: (marker: string) => string; readsOf: (marker: string) => number } {
  const prepared: string[] = [];
  const reads = new Map<string, number>();
  const counted = (source: string, statement: ReturnType<Sqlite['prepare']>) =>
    new Proxy(statement, {
      get(target, property) {
        const value = Reflect.get(target, property, target) as unknown;
        if (property !== 'all' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
        return (...args: unknown[]) => (reads.set(source, (reads.get(source) ?? 0) + 1), value.apply(target, args));
      },
    });
  const recording = new Proxy(sqlite, {
    get(target, property) {
      if (property === 'prepare') return (source: string) => (prepared.push(source), counted(source, target.prepare(source)));
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const planOf = (marker: string) => {
    const source = prepared.find((sql) => sql.includes(marker));
    assert.ok(source, `a statement of the repository with ${marker}`);
    const parameters = (source.match(/\?/g) ?? []).map(() => null);
    return (sqlite.prepare(`explain query plan ${source}`).all(...parameters) as { detail: string }[]).map((row) => row.detail).join('; ');
  };
  /** How many times the statement with `marker` was read with `all` so far. */
  const readsOf = (marker: string) => [...reads].filter(([source]) => source.includes(marker)).reduce((sum, [, count]) => sum + count, 0);
  return { sqlite: recording, planOf, readsOf };
}

/** An index's definition holds only never-attempted jobs (a partial index). */
const holdsNeverAttemptedOnly = (sqlite: Sqlite, index: string) =>
  /WHERE attempts = 0$/.test(sqlite.prepare(`select sql from sqlite_master where type = 'index' and name = ?`).pluck().get(index) as string);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Four delivery slots, one connection per destination, and a sink that answers DATA after `beforeReply`. */
async function startFourSlotRig(beforeReply: (message: ReceivedMessage) => Promise<void>): Promise<DeliveryRig> {
  const rig = await startRig({ env: { POSTINO_DELIVERY_CONCURRENCY: '4', POSTINO_DELIVERY_PER_DOMAIN_CONCURRENCY: '1' }, sink: { beforeReply } });
  await addSendingDomain(rig, 'sender.test');
  return rig;
}

describe('a slow destination does not hold up mail for the others', () => {
  let rig: DeliveryRig;
  const sessionMs = 500;
  // slow.test holds its first answer until fast.test's message has arrived (at most 15 s), then answers
  // each message after half a second. So fast.test comes first only if it was not queued behind slow.test.
  let fastArrived!: () => void;
  const slowGate = new Promise<void>((resolve) => {
    fastArrived = resolve;
    setTimeout(resolve, 15_000).unref();
  });

  before(async () => {
    rig = await startFourSlotRig((message) => {
      if (!message.rcptTo.some((to) => to.endsWith('@slow.test'))) return (fastArrived(), Promise.resolve());
      return slowGate.then(() => sleep(sessionMs));
    });
    routeToSink(rig.dns, 'slow.test');
    routeToSink(rig.dns, 'fast.test');
  });
  after(() => rig.stop());

  test('a message for another domain goes out while the slow backlog drains', async () => {
    const slow: string[] = [];
    for (let n = 1; n <= 8; n++) slow.push(await send(rig, { toAddress: `u${n}@slow.test`, fromAddress: 'hello@sender.test' }));
    const fast = await send(rig, { toAddress: 'someone@fast.test', fromAddress: 'hello@sender.test' });

    assert.equal(await waitForFinal(rig, fast), 'delivered');
    const order = rig.sink.messages.map((m) => m.rcptTo[0]);
    // Without the admission check all four slots held slow.test mail (one in its session, three waiting
    // for it) and the fast.test message was claimed only after the last slow one: five slow deliveries first.
    assert.equal(order.indexOf('someone@fast.test'), 0, `fast.test is delivered while slow.test holds its first answer: ${order.join(', ')}`);

    for (const id of slow) assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    const slowOrder = rig.sink.messages.map((m) => m.rcptTo[0]).filter((to) => to.endsWith('@slow.test'));
    assert.equal(slowOrder.length, 8, 'each slow.test message delivered once');
    assert.equal(new Set(slowOrder).size, 8);
    const putBackAsAttempt = slow.flatMap((id) => eventsOf(rig, id)).filter((event) => event.type === 'deferred');
    assert.deepEqual(putBackAsAttempt, [], 'being put back is not an attempt');
    // Operators see it in /metrics.
    const metrics = await (await fetch(`${rig.app.baseUrl}/metrics`)).text();
    const putBack = Number(/^postino_delivery_postponed_total\{reason="busy"\} (\d+)$/m.exec(metrics)?.[1]);
    assert.ok(putBack >= 1, `slow.test messages put back: ${putBack}`);
    assert.match(metrics, /^postino_delivery_postponed_total\{reason="cooling-down"\} 0$/m);
  });
});

describe('a destination that speeds up takes back what it put back', () => {
  let rig: DeliveryRig;
  let slowAnswersLeft = 3;
  let slowAnswersEndedAt = 0;

  before(async () => {
    // The first three messages take 1.5 s each (a new connection's handshake, a cold server), then none.
    rig = await startFourSlotRig(() => (slowAnswersLeft-- > 0 ? sleep(1_500).then(() => void (slowAnswersEndedAt = Date.now())) : Promise.resolve()));
    routeToSink(rig.dns, 'warm.test');
  });
  after(() => rig.stop());

  test('messages put back at the slow pace go out as soon as the destination has room', async () => {
    const ids: string[] = [];
    for (let n = 1; n <= 16; n++) ids.push(await send(rig, { toAddress: `u${n}@warm.test`, fromAddress: 'hello@sender.test' }));
    for (const id of ids) assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    const afterSlowMs = Date.now() - slowAnswersEndedAt;
    // The slow sessions set the pace to ~1.2 s a message: the 13 messages put back were due over the ~12 s
    // after the slow answers ended (~11 s measured without the take-back). Taken back as soon as the
    // sessions got short, they are out within a second or so.
    assert.ok(afterSlowMs < 5_000, `the last message went out ${afterSlowMs} ms after the slow answers ended`);
    const metrics = await (await fetch(`${rig.app.baseUrl}/metrics`)).text();
    assert.ok(Number(/^postino_delivery_postponed_total\{reason="busy"\} (\d+)$/m.exec(metrics)?.[1]) >= 1, 'some were put back');
    assert.equal(new Set(rig.sink.messages.map((m) => m.rcptTo[0])).size, 16);
    assert.equal(rig.sink.messages.length, 16, 'each delivered once');
  });
});

describe('a large send does not hold up a single email queued after it', () => {
  let rig: DeliveryRig;
  const lists = Array.from({ length: 10 }, (_, i) => `list${i}.test`);
  const sessionMs = 40;

  before(async () => {
    // Default slots (20, 5 per domain); every message takes 40 ms: 2,000 take ~4 s, at most ~500 a second.
    rig = await startRig({ sink: { beforeReply: () => sleep(sessionMs) } });
    await addSendingDomain(rig, 'sender.test');
    for (const domain of [...lists, 'reset.test']) routeToSink(rig.dns, domain);
  });
  after(() => rig.stop());

  /** Queues `count` emails in batches of 50 (COMPAT.md "Email": one array item per recipient), spread over the list domains. */
  async function queueNewsletter(count: number, key?: string, from = 'news@sender.test'): Promise<string[]> {
    const ids: string[] = [];
    for (let sent = 0; sent < count; sent += 50) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `r${sent + i}@${lists[(sent + i) % lists.length]}`, fromAddress: from, subject: 'News', text: 'This month' }));
      const response = await rig.app.api('POST', '/v1/email/send', items, { key });
      assert.equal(response.status, 200, JSON.stringify(response.body));
      ids.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    return ids;
  }

  test('a password reset sent after 2,000 batched emails goes out before most of them', async () => {
    await queueNewsletter(2_000);
    const queuedAt = Date.now();
    const receivedBefore = rig.sink.messages.length;
    const reset = await send(rig, { toAddress: 'someone@reset.test', fromAddress: 'auth@sender.test', subject: 'Reset your password' });
    assert.equal(await waitForFinal(rig, reset, 60_000), 'delivered');
    const waitedMs = Date.now() - queuedAt;
    const before = rig.sink.messages.findIndex((m) => m.rcptTo[0] === 'someone@reset.test') - receivedBefore;
    // In queue order it waited for the rest of the newsletter: ~1,700 messages, ~8 s here; 50,000 at a
    // real MX's second a message are 40 minutes. Now it goes with the next claim, after those in flight.
    assert.ok(before < 100, `${before} newsletter messages were delivered after the reset was queued, before it (${waitedMs} ms)`);
    await rig.sink.waitFor(2_001, 60_000);
  });

  test("another project's batch is not held up behind one project's newsletter", async () => {
    const other = await rig.app.api('POST', '/v1/project', { name: 'Shop' });
    const key = other.body.apiKey as string;
    const domain = await rig.app.api('POST', '/v1/domains', { domain: 'shop.test' }, { key });
    assert.equal(domain.status, 200, JSON.stringify(domain.body));
    rig.app.appliance.context.database.sqlite.prepare("update domains set status = 'success', dkim_verified = 1, mail_from_status = 'success' where domain = 'shop.test'").run();
    const received = rig.sink.messages.length;
    await queueNewsletter(2_000);
    const shop = await queueNewsletter(50, key, 'orders@shop.test');
    for (const id of shop) assert.equal(await waitForFinal(rig, id, 60_000), 'delivered');
    const fromShop = rig.sink.messages.slice(received).map((m) => /^From: orders@shop\.test\r$/m.test(m.raw.toString()));
    assert.equal(fromShop.filter(Boolean).length, 50);
    const before = fromShop.slice(0, fromShop.lastIndexOf(true)).filter((shop) => !shop).length;
    assert.ok(before < 500, `${before} of the first project's newsletter went out before the other project's 50 emails`);
    await rig.sink.waitFor(received + 2_050, 60_000);
  });
});

describe('a backlog for a destination that takes no more is held in bulk, not claimed and put back message by message', () => {
  let rig: DeliveryRig;
  let openTarpit!: () => void;
  const tarpitGate = new Promise<void>((resolve) => (openTarpit = resolve));

  before(async () => {
    // tarpit.test holds every answer until the gate opens: its five sessions never end meanwhile.
    rig = await startRig({
      sink: { beforeReply: (message) => (message.rcptTo.some((to) => to.endsWith('@tarpit.test')) ? tarpitGate : Promise.resolve()) },
      env: { POSTINO_SCHEDULER_ENABLED: 'true' }, // releases the scheduled backlog
    });
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'tarpit.test');
    routeToSink(rig.dns, 'fast.test');
  });
  after(async () => {
    openTarpit();
    await rig.stop();
  });

  /** Schedules `count` emails to `domain` in batches of 50 for `scheduledAt`: released together into the project's bulk lane. */
  async function scheduleBatches(domain: string, count: number, scheduledAt: Date, prefix = 'r'): Promise<string[]> {
    const ids: string[] = [];
    for (let sent = 0; sent < count; sent += 50) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `${prefix}${sent + i}@${domain}`, fromAddress: 'news@sender.test', subject: 'News', text: 'This month', scheduledAt: scheduledAt.toISOString() }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      ids.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    return ids;
  }

  /** Waits until the scheduler has released the email (waitForFinal takes `scheduled` as final). */
  async function waitForRelease(id: string, timeoutMs: number): Promise<void> {
    for (const deadline = Date.now() + timeoutMs; emailStatus(rig, id) === 'scheduled'; await sleep(25)) {
      if (Date.now() > deadline) throw new Error(`email ${id} not released after ${timeoutMs} ms`);
    }
  }

  const busyPutBacks = async () => Number(/^postino_delivery_postponed_total\{reason="busy"\} (\d+)$/m.exec(await (await fetch(`${rig.app.baseUrl}/metrics`)).text())?.[1]);

  test('mail queued behind it goes out, and the backlog is taken back at its pace once the destination answers', async () => {
    // A backlog of 4,000 due at once (a scheduled send released), then mail due a second later behind it.
    // Room for 80 requests on a loaded machine before the release time, and for the release of 4,000 after it.
    const releaseAt = Date.now() + 10_000;
    const tarpit = await scheduleBatches('tarpit.test', 4_000, new Date(releaseAt));
    const fast = await scheduleBatches('fast.test', 50, new Date(releaseAt + 1_000));
    for (const id of fast) assert.equal(await waitForRelease(id, 30_000).then(() => waitForFinal(rig, id, 30_000)), 'delivered');
    // Message by message, each of the 4,000 was claimed and written back before the mail behind it
    // (18 s for 20,000 in an audit); held in bulk, only those claimed before the destination's sessions
    // showed it slow (half a second) and the hold's first write are.
    const putBack = await busyPutBacks();
    assert.ok(putBack >= 1 && putBack < 2_000, `${putBack} of 4,000 tarpit.test messages put back one by one`);
    const stillHeld = tarpit.filter((id) => jobOf(rig, id)?.nextAttemptAt !== undefined && jobOf(rig, id)!.nextAttemptAt > Date.now() + 30 * 60_000);
    assert.ok(stillHeld.length > 2_000, `${stillHeld.length} held about an hour ahead, to be taken back from there`);

    // Mail for it that comes later is held too, to the same time: the held backlog is not written again.
    const heldAt = new Map(stillHeld.map((id) => [id, jobOf(rig, id)!.nextAttemptAt]));
    await sleep(1_100); // past the once-a-second limit on holds
    const later = await scheduleBatches('tarpit.test', 100, new Date(Date.now() + 1_000), 'later');
    // Claimed, and put back one by one or held: due later, not leased.
    const putBackOrHeld = (id: string) => {
      const job = jobOf(rig, id);
      return job !== undefined && job.leaseUntil === null && job.nextAttemptAt > Date.now();
    };
    await waitUntil(() => later.every(putBackOrHeld), 'the later mail put back or held', 15_000);
    const moved = stillHeld.filter((id) => jobOf(rig, id)?.nextAttemptAt !== heldAt.get(id));
    assert.deepEqual(moved, [], 'the held backlog stays where it was');
    tarpit.push(...later);

    openTarpit();
    // Taken back as its sessions end, not at the hour.
    for (const id of tarpit) assert.equal(await waitForRelease(id, 30_000).then(() => waitForFinal(rig, id, 60_000)), 'delivered');
    const tarpitDeliveries = rig.sink.messages.filter((m) => m.rcptTo[0].endsWith('@tarpit.test'));
    assert.equal(tarpitDeliveries.length, 4_100, 'each once');
    assert.equal(new Set(tarpitDeliveries.map((m) => m.rcptTo[0])).size, 4_100);
    assert.deepEqual(tarpit.flatMap((id) => eventsOf(rig, id)).filter((event) => event.type === 'deferred'), [], 'held is not an attempt');
  });
});

describe('a backlog held for a busy destination is taken back after a restart, not an hour later', () => {
  let rig: DeliveryRig;
  let openTarpit!: () => void;
  const tarpitGate = new Promise<void>((resolve) => (openTarpit = resolve));

  before(async () => {
    rig = await startRig({ sink: { beforeReply: (message) => (message.rcptTo.some((to) => to.endsWith('@tarpit.test')) ? tarpitGate : Promise.resolve()) } });
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'tarpit.test');
  });
  after(async () => {
    openTarpit();
    await rig.stop();
  });

  test('the restarted appliance takes the held mail back at the destination\'s pace', async () => {
    const ids: string[] = [];
    for (let sent = 0; sent < 500; sent += 50) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `r${sent + i}@tarpit.test`, fromAddress: 'news@sender.test', subject: 'News', text: 'This month' }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      ids.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    const held = (id: string) => (jobOf(rig, id)?.nextAttemptAt ?? 0) > Date.now() + 30 * 60_000;
    await waitUntil(() => ids.filter(held).length >= 400, 'most of the backlog held an hour ahead', 15_000);
    openTarpit(); // the stop waits for the five sessions under way
    await rig.restart();
    for (const id of ids) assert.equal(await waitForFinal(rig, id, 30_000), 'delivered');
    assert.equal(new Set(rig.sink.messages.map((m) => m.rcptTo[0])).size, 500);
  });
});

test('a paused project\'s held mail is not taken back and held again in a loop after a restart', async () => {
  const rig = await startRig({
    env: { POSTINO_DELIVERY_SUSPENSION_YOUNG_MAX_BOUNCES: '1' },
    sink: { onRcpt: (address) => (address.startsWith('bad') ? { code: 550, message: '5.1.1 No such user' } : undefined) },
  });
  try {
    await addSendingDomain(rig, 'sender.test');
    routeToSink(rig.dns, 'inbox.test');
    const releaseAt = new Date(Date.now() + 1_500);
    const backlog: string[] = [];
    for (let batch = 0; batch < 4; batch++) {
      const items = Array.from({ length: 50 }, (_, i) => ({ toAddress: `q${batch * 50 + i}@inbox.test`, fromAddress: 'hello@sender.test', subject: 'S', text: 'T', scheduledAt: releaseAt.toISOString() }));
      const response = await rig.app.api('POST', '/v1/email/send', items);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      backlog.push(...(response.body as { id: string }[]).map((item) => item.id));
    }
    // Two bounces pause the young project (§8); its released backlog is then held, not sent.
    for (const to of ['bad1@inbox.test', 'bad2@inbox.test']) assert.equal(await waitForFinal(rig, await send(rig, { toAddress: to, fromAddress: 'hello@sender.test' })), 'bounce');
    // The suspension verdict is read again after a moment (reputation.ts); released after it, the backlog is held.
    await sleep(2_100);
    await rig.app.appliance.context.emails.releaseScheduled(new Date());
    const held = (id: string) => {
      const job = jobOf(rig, id);
      return job !== undefined && job.leaseUntil === null && job.nextAttemptAt > Date.now() + 60_000;
    };
    await waitUntil(() => backlog.every(held), 'the paused project\'s backlog held');

    await rig.restart();
    await sleep(2_000);
    // Each taken back at most once, then left past what the destination takes back; before, each was
    // taken back and held again about twice a second for as long as the hold lasted.
    const states = new Set<string>();
    for (const started = Date.now(); Date.now() - started < 3_000; await sleep(50)) {
      for (const id of backlog) states.add(`${id}:${jobOf(rig, id)?.nextAttemptAt}`);
    }
    assert.ok(states.size <= backlog.length * 2, `${states.size} states of ${backlog.length} held jobs in 3 s`);
    assert.ok(backlog.every(held), 'still held');
    assert.equal(rig.sink.messages.filter((m) => m.rcptTo[0].startsWith('q')).length, 0, 'nothing of a paused project is sent');
  } finally {
    await rig.stop();
  }
});
