import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';

// The README's loops of the CI sandbox recipe (waiting for the appliance, reading a captured message
// back), run as written against a stand-in for the appliance: a CI job copies them, so they must fail
// loudly instead of going on (to a send nothing answers, or with an empty file).
function readmeBlock(marker: string): string {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const block = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes(marker));
  assert.ok(block, `the README has a block with ${marker}`);
  return block;
}

const readmeLoop = () => readmeBlock('/v1/captured/$ID');

/** The start block's wait for readiness, from `ready=` to its check, with 3 tries instead of 60. */
function readinessLoop(): string {
  const lines = readmeBlock('ready=').split('\n');
  const from = lines.findIndex((line) => line === 'ready=');
  const to = lines.findIndex((line) => line.startsWith('[ -n "$ready" ]'));
  assert.ok(from >= 0 && to > from, 'the wait loop and its check');
  return lines.slice(from, to + 1).join('\n').replace('seq 60', 'seq 3');
}

async function runLoop(answers: { status: number; body: string }[], script = readmeLoop()): Promise<{ status: number | null; requests: number; file: string; stdout: string }> {
  let n = 0;
  const server = createServer((_req, res) => {
    const answer = answers[Math.min(n++, answers.length - 1)];
    res.writeHead(answer.status, { 'content-type': answer.status === 200 ? 'message/rfc822' : 'application/json' }).end(answer.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const dir = mkdtempSync(join(tmpdir(), 'postino-readme-'));
  try {
    const runnable = script.replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`);
    const result = await new Promise<{ status: number | null; stdout: string }>((resolve) => {
      // spawn, not spawnSync: the stand-in server answers on this event loop. PID: a process that lives
      // as long as the script (the appliance the readiness loop watches).
      const child = spawn('bash', ['-c', `set -u; ID=6b0965fa1d9a4e9dc6856fac; KEY=ci-test; sleep 30 >/dev/null 2>&1 & PID=$!\n${runnable}\necho "went on"; kill $PID 2>/dev/null; true`], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d));
      child.on('exit', (status: number | null) => resolve({ status, stdout }));
    });
    let file = '';
    try { file = readFileSync(join(dir, 'message.eml'), 'utf8'); } catch { /* none */ }
    return { ...result, requests: n, file };
  } finally {
    server.close();
  }
}

const notYet = { status: 404, body: JSON.stringify({ errorCode: 'not-found', developerMessage: 'Not captured yet: the email is queued. Capture follows within moments of the send; ask again.' }) };

test('README read-back loop: asks again while "Not captured yet", then saves the message', async () => {
  const run = await runLoop([notYet, notYet, { status: 200, body: 'From: a@example.org\r\n\r\nhi\r\n' }]);
  assert.equal(run.status, 0);
  assert.equal(run.file, 'From: a@example.org\r\n\r\nhi\r\n');
});

test('README read-back loop: a 404 that will not change (suppressed, unknown id) fails the job at once, saying why', async () => {
  const gone = { status: 404, body: JSON.stringify({ errorCode: 'not-found', developerMessage: 'No captured message for this email (status suppressed): it was not sent.' }) };
  const run = await runLoop([gone]);
  assert.notEqual(run.status, 0, 'the job fails instead of going on with an empty message.eml');
  assert.equal(run.requests, 1, 'stopped at the first such answer, not after 50 tries');
  assert.match(run.stdout, /status suppressed/, 'the output says why');
});

test('README read-back loop: still not captured after its tries fails the job', async () => {
  const run = await runLoop([notYet]);
  assert.notEqual(run.status, 0);
  assert.match(run.stdout, /Not captured yet/);
});

test('README readiness loop: an appliance that never answers the key fails the job after its tries, instead of going on to the send', async () => {
  const run = await runLoop([{ status: 401, body: '{}' }], readinessLoop());
  assert.notEqual(run.status, 0);
  assert.equal(run.requests, 3);
  assert.match(run.stdout, /not ready/);
  assert.doesNotMatch(run.stdout, /went on/);
});

test('README readiness loop: goes on once the appliance answers the key', async () => {
  const run = await runLoop([{ status: 401, body: '{}' }, { status: 200, body: '{}' }], readinessLoop());
  assert.equal(run.status, 0);
  assert.equal(run.requests, 2);
  assert.match(run.stdout, /went on/);
});
