import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';

// The README's loop that reads a captured message back (CI sandbox recipe), run as written against a
// stand-in for the appliance: a CI job copies it, so it must fail loudly instead of leaving an empty file.
function readmeLoop(): string {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const block = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes('/v1/captured/$ID'));
  assert.ok(block, 'the README has the read-back loop');
  return block;
}

async function runLoop(answers: { status: number; body: string }[]): Promise<{ status: number | null; requests: number; file: string; stdout: string }> {
  let n = 0;
  const server = createServer((_req, res) => {
    const answer = answers[Math.min(n++, answers.length - 1)];
    res.writeHead(answer.status, { 'content-type': answer.status === 200 ? 'message/rfc822' : 'application/json' }).end(answer.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const dir = mkdtempSync(join(tmpdir(), 'postino-readme-'));
  try {
    const script = readmeLoop().replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`);
    const result = await new Promise<{ status: number | null; stdout: string }>((resolve) => {
      // spawn, not spawnSync: the stand-in server answers on this event loop
      const child = spawn('bash', ['-c', `set -u; ID=6b0965fa1d9a4e9dc6856fac; KEY=ci-test\n${script}`], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
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
