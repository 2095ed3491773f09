import { test } from 'node:test';
import { spawn, spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, statSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { apiCall } from '../helpers/appliance.js';
import { startChildAppliance } from '../helpers/child.js';
import { waitUntil } from '../helpers/wait-until.js';
import { openSmtpSession } from '../helpers/smtp-raw.js';

const key = 'pst_lifecycle_key_abcdefghijklmnopqrstuvwxyz012345';

test('kill -9 loses nothing that was committed: a restart serves it', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-kill-'));
  const env = { POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key };
  const first = await startChildAppliance(env);
  const base = `http://127.0.0.1:${first.httpPort}`;
  const created: { id: string; apiKey: string }[] = [];
  for (let i = 0; i < 20; i++) {
    const res = await apiCall(base, 'POST', '/v1/project', { name: `Linked ${i}` }, key);
    assert.equal(res.status, 200);
    created.push({ id: res.body.id, apiKey: res.body.apiKey });
  }
  await apiCall(base, 'PATCH', '/v1/project', { name: 'Renamed before the crash' }, key);
  first.child.kill('SIGKILL');
  assert.equal(await first.exited, 'SIGKILL');

  const second = await startChildAppliance(env);
  try {
    const base2 = `http://127.0.0.1:${second.httpPort}`;
    assert.equal((await apiCall(base2, 'GET', '/v1/project', undefined, key)).body.name, 'Renamed before the crash');
    for (const project of created) {
      const res = await apiCall(base2, 'GET', '/v1/project', undefined, project.apiKey);
      assert.equal(res.status, 200);
      assert.equal(res.body.id, project.id);
    }
    assert.doesNotMatch(second.output(), /API key \(shown only this once\)/, 'no new default key after restart');
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
  }
});

test('SIGTERM, SIGINT and SIGHUP stop intake, finish requests in flight, and exit 0 within 10 s', async () => {
  // SIGHUP: the terminal or SSH session of a foreground `npm start` closed. Unhandled, it ended the
  // process at once: requests in flight were cut off (ECONNRESET) and SMTP sessions dropped without 421.
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    const dataDir = mkdtempSync(join(tmpdir(), 'postino-term-'));
    const app = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key });
    const base = `http://127.0.0.1:${app.httpPort}`;
    // A request whose body is still arriving when the signal comes must still be answered.
    const slow = request(`${base}/v1/project`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    const answered = new Promise<{ status: number; body: string }>((resolve, reject) => {
      slow.on('response', (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      slow.on('error', reject);
    });
    slow.write('{"name": "In flight');
    await once(slow, 'socket');
    await new Promise((resolve) => setTimeout(resolve, 300)); // let the server read the headers
    const started = performance.now();
    app.child.kill(signal);
    await new Promise((resolve) => setTimeout(resolve, 100));
    slow.end(' during shutdown"}');
    const response = await answered;
    assert.equal(response.status, 200, response.body);
    assert.equal(JSON.parse(response.body).name, 'In flight during shutdown');
    const code = await app.exited;
    const elapsed = performance.now() - started;
    assert.equal(code, 0, `${signal}: ${app.output()}`);
    assert.ok(elapsed < 10_000, `${signal} took ${elapsed} ms`);
    assert.match(app.output(), /"msg":"postino stopped"/);
    await assert.rejects(fetch(`${base}/healthz`), 'no longer listening');
  }
});

test('the data directory it creates is private, and the database files (keys, secrets) are readable by their owner only', async () => {
  const dataDir = join(mkdtempSync(join(tmpdir(), 'postino-modes-')), 'data');
  const app = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key });
  try {
    assert.equal((await apiCall(`http://127.0.0.1:${app.httpPort}`, 'POST', '/v1/project', { name: 'Modes' }, key)).status, 200);
    assert.equal(statSync(dataDir).mode & 0o777, 0o700);
    for (const file of ['postino.sqlite', 'postino.sqlite-wal', 'postino.sqlite-shm']) assert.equal(statSync(join(dataDir, file)).mode & 0o777, 0o600, file);
  } finally {
    app.child.kill('SIGTERM');
    await app.exited;
  }
});

test('an idle SMTP client does not hold the stop: it is answered 421 and the appliance exits 0', async () => {
  const app = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: mkdtempSync(join(tmpdir(), 'postino-idle-')), POSTINO_AUTH_API_KEY: key });
  const idle = await openSmtpSession(app.smtpPort);
  const farewell = idle.reply();
  app.child.kill('SIGTERM');
  assert.match(await farewell, /^421 /);
  assert.equal(await app.exited, 0, app.output());
  assert.doesNotMatch(app.output(), /shutdown took too long/);
  idle.close();
});

test('a generated default key is printed once, on first start only', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-firstkey-'));
  const first = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' });
  // Printed right after the start, below the boot log.
  await waitUntil(() => /\n\s+pst_[A-Za-z0-9_-]+\n/.test(first.output()), 'the generated key printed');
  const printed = /\n\s+(pst_[A-Za-z0-9_-]+)\n/.exec(first.output())?.[1];
  assert.ok(printed, first.output());
  const base = `http://127.0.0.1:${first.httpPort}`;
  assert.equal((await apiCall(base, 'GET', '/v1/project', undefined, printed)).status, 200);
  first.child.kill('SIGTERM');
  await first.exited;
  const output = first.output();
  assert.ok(output.indexOf('"msg":"postino started"') < output.indexOf(printed), `the key comes after the boot log:\n${output}`);
  const second = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' });
  try {
    assert.doesNotMatch(second.output(), /pst_/);
    assert.equal((await apiCall(`http://127.0.0.1:${second.httpPort}`, 'GET', '/v1/project', undefined, printed)).status, 200);
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
  }
});

test('a SIGTERM during the first boot waits for it: the generated key is printed, then the appliance stops cleanly', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-bootsignal-'));
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    env: { ...process.env, POSTINO_HTTP_PORT: '0', POSTINO_SMTP_PORT: '0', POSTINO_SMTP_HOST: '127.0.0.1', POSTINO_SUBMISSION_PORT: '0', POSTINO_LOG_LEVEL: 'info', POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<number | string>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  let signalled = false;
  const onData = (chunk: Buffer) => {
    out += chunk.toString();
    // Mid-boot: the key exists from here on, the listeners are not up yet.
    if (!signalled && out.includes('"msg":"default project created"')) {
      signalled = true;
      child.kill('SIGTERM');
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const code = await exited;
  assert.ok(signalled, out);
  assert.equal(code, 0, out);
  assert.match(out, /\n\s+pst_[A-Za-z0-9_-]+\n/, 'the key was printed');
  assert.match(out, /"msg":"postino stopped"/);
});

test('a SIGTERM during the synchronous part of the first boot (its TLS key generation) is handled after it: key printed, clean stop', async () => {
  // A preload signals the process from inside the boot's first RSA key generation. Before the handlers
  // were installed ahead of the boot, the default action killed the process there.
  const { out, code, signal } = await firstBootWithPreload('syncsignal', [
    "import crypto from 'node:crypto';",
    "import { syncBuiltinESMExports } from 'node:module';",
    'const generate = crypto.generateKeyPairSync;',
    'let signalled = false;',
    "crypto.generateKeyPairSync = (...args) => { if (!signalled) { signalled = true; process.kill(process.pid, 'SIGTERM'); } return generate(...args); };",
    'syncBuiltinESMExports();',
  ]);
  assert.equal(signal, null, `killed by ${signal}: ${out}`);
  assert.equal(code, 0, out);
  assert.match(out, /"msg":"smtp tls","origin":"generated"/, 'the signal came during the key generation');
  assert.match(out, /\n\s+pst_[A-Za-z0-9_-]+\n/, 'the key was printed');
  assert.match(out, /"msg":"postino stopped"/);
});

test('a first boot killed (kill -9) after its key was made but before it was printed: the next start revokes that key and prints a new one', async () => {
  // The key commits early in the boot and is printed at its end. A preload kills the process at once
  // when the boot's first log lines go out ("default project created": the key exists, not yet printed).
  const { dataDir, out, signal } = await firstBootWithPreload('killedboot', [
    'const write = process.stdout.write.bind(process.stdout);',
    `process.stdout.write = (chunk, ...rest) => { const done = write(chunk, ...rest); if (String(chunk).includes('"msg":"default project created"')) process.kill(process.pid, 'SIGKILL'); return done; };`,
  ]);
  assert.equal(signal, 'SIGKILL', out);
  assert.match(out, /"msg":"default project created"/);
  assert.doesNotMatch(out, /pst_/, 'killed before the key was printed');

  const next = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' });
  try {
    await waitUntil(() => /\n\s+pst_[A-Za-z0-9_-]+\n/.test(next.output()), 'a key printed by the next start');
    const printed = /\n\s+(pst_[A-Za-z0-9_-]+)\n/.exec(next.output())![1];
    assert.match(next.output(), /the API key generated at the previous start was never printed/);
    assert.equal((await apiCall(`http://127.0.0.1:${next.httpPort}`, 'GET', '/v1/project', undefined, printed)).status, 200);
  } finally {
    next.child.kill('SIGTERM');
    await next.exited;
  }
  // That one was printed, and is kept by the starts after it (configured-key.test.ts).
});

test('auth.api_key removed from the config: the key it set is revoked, and a new one is printed when none is left', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-removedkey-'));
  const configured = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key });
  configured.child.kill('SIGTERM');
  await configured.exited;
  const later = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' });
  try {
    await waitUntil(() => /\n\s+pst_[A-Za-z0-9_-]+\n/.test(later.output()), 'a new key printed');
    const printed = /\n\s+(pst_[A-Za-z0-9_-]+)\n/.exec(later.output())![1];
    assert.match(later.output(), /auth\.api_key removed from the configuration: the key it set is revoked/);
    const base = `http://127.0.0.1:${later.httpPort}`;
    assert.equal((await apiCall(base, 'GET', '/v1/project', undefined, key)).status, 401, 'the key from the config no longer works');
    assert.equal((await apiCall(base, 'GET', '/v1/project', undefined, printed)).status, 200);
  } finally {
    later.child.kill('SIGTERM');
    await later.exited;
  }
  // A start that missed its configuration once does not lock the configured key out for good.
  const restored = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key });
  try {
    assert.match(restored.output(), /auth\.api_key is configured again: the key it set, revoked when it was removed, works again/);
    assert.equal((await apiCall(`http://127.0.0.1:${restored.httpPort}`, 'GET', '/v1/project', undefined, key)).status, 200);
  } finally {
    restored.child.kill('SIGTERM');
    await restored.exited;
  }
});

test('a setting refused at boot leaves nothing behind: the next start still creates and prints the key', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-refused-'));
  const refusals: [Record<string, string>, RegExp][] = [
    [{ POSTINO_WEBHOOKS_URL: 'http://127.0.0.1:9/hooks' }, /webhooks\.url: 127\.0\.0\.1 is a private address/],
    [{ POSTINO_DELIVERY_EXTRA_CA_FILE: join(dataDir, 'missing-ca.pem') }, /delivery\.extra_ca_file .* cannot be read/],
    [{ POSTINO_DELIVERY_MODE: 'relay', POSTINO_DELIVERY_RELAY_URL: 'ftp://relay.example.net' }, /delivery\.relay_url/],
    [{ POSTINO_DOMAINS_MAIL_HOSTNAME: 'mx example.net' }, /domains\.mail_hostname must be a fully qualified host name/],
  ];
  for (const [setting, message] of refusals) {
    await assert.rejects(startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '', ...setting }), message);
  }
  const fixed = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' });
  try {
    await waitUntil(() => /\n\s+pst_[A-Za-z0-9_-]+\n/.test(fixed.output()), 'the generated key printed');
  } finally {
    fixed.child.kill('SIGTERM');
    await fixed.exited;
  }
});

test('a second appliance on the same data directory refuses to start, naming it; the first goes on, and after it stops the data directory is free', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-twice-'));
  const env = { POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key };
  const first = await startChildAppliance(env);
  try {
    await assert.rejects(startChildAppliance(env), /cannot start: Another Postino is already running on the data directory .*postino\.lock is locked/);
    assert.equal((await apiCall(`http://127.0.0.1:${first.httpPort}`, 'GET', '/v1/project', undefined, key)).status, 200);
  } finally {
    first.child.kill('SIGTERM');
    assert.equal(await first.exited, 0);
  }
  const second = await startChildAppliance(env);
  second.child.kill('SIGKILL'); // a crash leaves no stale lock: the OS drops it with the process
  await second.exited;
  const third = await startChildAppliance(env);
  third.child.kill('SIGTERM');
  assert.equal(await third.exited, 0);
});

for (const script of ['start', 'dev']) {
  test(`npm ${script === 'start' ? 'start' : 'run dev'}: SIGTERM to npm stops the appliance too, leaving no process that holds the ports and the data directory`, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), `postino-npm-${script}-`));
    const npm = spawn('npm', ['run', script, '--silent'], {
      env: { ...process.env, POSTINO_HTTP_PORT: '0', POSTINO_SMTP_PORT: '0', POSTINO_SMTP_HOST: '127.0.0.1', POSTINO_SUBMISSION_PORT: '0', POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: key, POSTINO_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    npm.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    npm.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = once(npm, 'exit');
    await waitUntil(() => /"msg":"postino started","httpPort":\d+/.test(out), `npm run ${script} started the appliance`, 60_000);
    const port = Number(/"msg":"postino started","httpPort":(\d+)/.exec(out)![1]);
    assert.equal((await apiCall(`http://127.0.0.1:${port}`, 'GET', '/healthz')).status, 200);
    npm.kill('SIGTERM');
    await exited;
    await waitUntil(
      () => fetch(`http://127.0.0.1:${port}/healthz`).then(() => false, () => true),
      'the appliance behind npm to stop',
      15_000,
    );
    assert.match(out, /"msg":"postino stopped"/);
  });
}

test('a rebuild (npm start, npm run postino) beside a running appliance leaves dist/ untouched when nothing changed', () => {
  // The running appliance loads worker scripts from dist/ later (writer, search, signing threads): the
  // build used to delete dist/ first, and a CLI call in that window left it without its writer thread.
  const build = (cwd = process.cwd()) => spawnSync(process.execPath, [join(process.cwd(), 'build.mjs')], { cwd, encoding: 'utf8' });
  assert.equal(build().status, 0);
  const files = readdirSync('dist', { recursive: true, encoding: 'utf8' }).filter((name) => statSync(join('dist', name)).isFile());
  assert.ok(files.includes('writer-worker.js') && files.includes(join('migrations', '0000_init.sql')), files.join(' '));
  const identity = () => files.map((name) => `${name} ${statSync(join('dist', name)).ino} ${statSync(join('dist', name)).mtimeMs}`);
  const before = identity();
  const again = build();
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, /\(0 files changed\)/);
  assert.deepEqual(identity(), before, 'no file rewritten, none missing');
  // Run from elsewhere (`node ~/postino/build.mjs`), it builds this checkout, not paths under the caller's directory.
  const elsewhere = build(tmpdir());
  assert.equal(elsewhere.status, 0, elsewhere.stderr);
  assert.match(elsewhere.stdout, /\(0 files changed\)/);
});

test('--help prints the usage and exits 0 without starting', () => {
  const help = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts', '--help'], { encoding: 'utf8' });
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^Usage: node dist\/main\.js \[--config PATH\]/);
});

test('a bad config value stops the boot with the key named', async () => {
  await assert.rejects(startChildAppliance({ POSTINO_HTTP_PORT: 'abc' }), /configuration error: http\.port .*whole number/);
});

test('a busy HTTP port stops the boot naming http.port, instead of hopping to another port', async () => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as AddressInfo).port;
  try {
    await assert.rejects(
      startChildAppliance({ POSTINO_HTTP_PORT: String(port), POSTINO_STORAGE_DATA_DIR: mkdtempSync(join(tmpdir(), 'postino-busy-')) }),
      new RegExp(`cannot start: http\\.port: 127\\.0\\.0\\.1:${port} is already in use`),
    );
  } finally {
    blocker.close();
  }
});

test('a failed start says why in the JSON log too (a collector reading stdout saw the boot and then nothing), and a busy SMTP port is no "connection error"', async () => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as AddressInfo).port;
  try {
    await assert.rejects(startChildAppliance({ POSTINO_SMTP_HOST: '127.0.0.1', POSTINO_SMTP_PORT: String(port), POSTINO_STORAGE_DATA_DIR: mkdtempSync(join(tmpdir(), 'postino-busy-smtp-')) }), (error: Error) => {
      assert.match(error.message, new RegExp(`\\{"time":"[^"]+","level":"error","msg":"postino did not start","reason":"cannot start: smtp\\.port: 127\\.0\\.0\\.1:${port} is already in use`));
      assert.doesNotMatch(error.message, /connection error/);
      return true;
    });
  } finally {
    blocker.close();
  }
});

test('a listen address that is not on this machine, or a data directory that cannot be created, stops the boot naming the setting', async () => {
  const dataDir = () => mkdtempSync(join(tmpdir(), 'postino-boot-'));
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine.
  await assert.rejects(startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir(), POSTINO_HTTP_HOST: '192.0.2.1', POSTINO_HTTP_PORT: '18099' }), /cannot start: http\.host: 192\.0\.2\.1 is not an address of this machine/);
  await assert.rejects(startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir(), POSTINO_SMTP_HOST: '192.0.2.1' }), /cannot start: smtp\.host: 192\.0\.2\.1 is not an address of this machine/);
  // Port 0 (any free port) takes another path to the listen: the same message, no stack trace.
  const anyPort = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir(), POSTINO_HTTP_HOST: '192.0.2.1', POSTINO_HTTP_PORT: '0' });
  await assert.rejects(anyPort, /cannot start: http\.host: 192\.0\.2\.1 is not an address of this machine/);
  await assert.rejects(anyPort, (error: Error) => !/\n\s+at /.test(error.message), 'no stack trace');
  const file = join(dataDir(), 'a-file');
  writeFileSync(file, 'not a directory');
  const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: join(file, 'data') });
  await assert.rejects(failure, /cannot start: storage\.data_dir: cannot use .*a-file\/data\/postino\.lock: ENOTDIR/);
  await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), 'no stack trace');
});

test('a data directory the kernel will not create (/proc/x) stops the boot naming it, instead of hanging deaf to SIGTERM', { skip: !existsSync('/proc/self') && 'needs Linux /proc' }, async () => {
  // Node 20's recursive mkdirSync retried this ENOENT forever, on the event loop: no error, no exit.
  const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: '/proc/postino-audit/data' });
  await assert.rejects(failure, /cannot start: storage\.data_dir: cannot use \/proc\/postino-audit\/data\/postino\.lock: ENOENT: .*mkdir '\/proc\/postino-audit'/);
  await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), 'no stack trace');
});

test('a data directory path the system cannot follow (a symlink loop, a name too long, a link to nothing) stops the boot naming the setting, without a stack trace', async () => {
  const loop = join(mkdtempSync(join(tmpdir(), 'postino-loop-')), 'data');
  symlinkSync(loop, loop);
  const long = join(mkdtempSync(join(tmpdir(), 'postino-long-')), 'd'.repeat(300));
  for (const [dataDir, code] of [[loop, 'ELOOP'], [long, 'ENAMETOOLONG']]) {
    const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir });
    await assert.rejects(failure, new RegExp(`cannot start: storage\\.data_dir: cannot use .*postino\\.lock: ${code}`), code);
    await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), `${code}: no stack trace`);
  }
  // A link whose target is gone answers mkdir "file already exists": the message says what it is instead.
  const dangling = join(mkdtempSync(join(tmpdir(), 'postino-dangling-')), 'data');
  symlinkSync('/nonexistent/postino-data', dangling);
  await assert.rejects(startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dangling }), /cannot start: storage\.data_dir: cannot use .*: .*data is a symbolic link to \/nonexistent\/postino-data, which does not exist/);
});

test('a database file that is not one (corrupt, or another file at its name) stops the boot naming it, without a stack trace', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-notadb-'));
  writeFileSync(join(dataDir, 'postino.sqlite'), 'garbage, not a SQLite file'.repeat(200));
  const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir });
  await assert.rejects(failure, /cannot start: .*postino\.sqlite cannot be read as a database \(SQLite: file is not a database\): restore it from a backup/);
  await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), 'no stack trace');
});

/**
 * A small tmpfs, for a real full file system (root only); undefined where it cannot be mounted. Filled
 * to the brim, then `roomBytes` are given back.
 */
function mountFullFileSystem(roomBytes: number): { dir: string; unmount(): void } | undefined {
  const dir = mkdtempSync(join(tmpdir(), 'postino-fullfs-'));
  if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir]).status !== 0) return undefined;
  const filler = join(dir, 'filler');
  spawnSync('dd', ['if=/dev/zero', `of=${filler}`, 'bs=4k']);
  if (roomBytes > 0) truncateSync(filler, Math.max(0, statSync(filler).size - roomBytes));
  return { dir, unmount: () => spawnSync('umount', [dir]) };
}

const canMount = (() => {
  const probe = process.getuid?.() === 0 ? mountFullFileSystem(0) : undefined;
  probe?.unmount();
  return probe ? false : 'needs root to mount a small tmpfs';
})();

test('a first start on a full file system stops the boot saying the disk is full, without a stack trace', { skip: canMount }, async () => {
  // No room at all (the lock is refused), and room for the lock and the TLS key but not the database.
  for (const room of [0, 128 * 1024]) {
    const fs = mountFullFileSystem(room)!;
    try {
      const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: join(fs.dir, 'data') });
      await assert.rejects(failure, /cannot start: storage\.data_dir: the file system of .*\/data is full \(.*\): free some space on it/, `room ${room}`);
      await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), `room ${room}: no stack trace`);
    } finally {
      fs.unmount();
    }
  }
});

test('a file where the tls/ or spool/ folder of the data directory goes stops the boot naming it, without a stack trace', async () => {
  for (const folder of ['tls', 'spool']) {
    const dataDir = mkdtempSync(join(tmpdir(), 'postino-subdir-'));
    writeFileSync(join(dataDir, folder), 'not a directory');
    const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir });
    await assert.rejects(failure, new RegExp(`cannot start: storage\\.data_dir: cannot use .*/${folder}: EEXIST`), folder);
    await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), `${folder}: no stack trace`);
  }
});

test('a configured certificate file that cannot be read stops the boot naming the setting', async () => {
  await assert.rejects(
    startChildAppliance({
      POSTINO_STORAGE_DATA_DIR: mkdtempSync(join(tmpdir(), 'postino-tls-')),
      POSTINO_SUBMISSION_TLS_KEY: '/nonexistent/key.pem',
      POSTINO_SUBMISSION_TLS_CERT: '/nonexistent/cert.pem',
    }),
    /cannot start: submission\.tls_key: cannot read \/nonexistent\/key\.pem \(ENOENT\)/,
  );
});

test('a key that does not match its certificate, or a file that is no PEM, stops the boot naming the settings, before any API key is made', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postino-tls-'));
  const { generateSelfSigned } = await import('../../src/smtp/tls-cert.js');
  const one = generateSelfSigned('one.test', new Date());
  const other = generateSelfSigned('other.test', new Date());
  writeFileSync(join(dir, 'key.pem'), other.key);
  writeFileSync(join(dir, 'cert.pem'), one.cert);
  writeFileSync(join(dir, 'junk.pem'), 'not a pem file');
  const dataDir = join(dir, 'data');
  for (const [keyFile, message] of [['key.pem', /key values mismatch/], ['junk.pem', /no start line|PEM|DECODER/]] as const) {
    const failure = startChildAppliance({ POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '', POSTINO_SUBMISSION_TLS_KEY: join(dir, keyFile), POSTINO_SUBMISSION_TLS_CERT: join(dir, 'cert.pem') });
    await assert.rejects(failure, /cannot start: submission\.tls_key \/ submission\.tls_cert .*: not a usable key and certificate/);
    await assert.rejects(failure, message);
    await assert.rejects(failure, (error: Error) => !/\n\s+at /.test(error.message), 'no stack trace');
  }
  // Refused before the database was opened: no project, so no API key that would never be shown.
  assert.equal(existsSync(join(dataDir, 'postino.sqlite')), false);
});

test('the boot log names the data directory resolved: a relative storage.data_dir lands where the process started', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'postino-relative-'));
  const app = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: relative(process.cwd(), dataDir) });
  try {
    const started = JSON.parse(app.output().split('\n').find((line) => line.includes('"msg":"postino started"'))!);
    assert.equal(started.dataDir, dataDir);
  } finally {
    app.child.kill('SIGTERM');
    await app.exited;
  }
});

test('a log reader that goes away (npm start | head) leaves the appliance running, not dead of EPIPE', async () => {
  const app = await startChildAppliance({ POSTINO_STORAGE_DATA_DIR: mkdtempSync(join(tmpdir(), 'postino-epipe-')), POSTINO_AUTH_API_KEY: 'pst_epipe_0123456789abcdefghijklmnopqr' });
  try {
    const stderr: string[] = [];
    app.child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    app.child.stdout!.destroy(); // the reader's end of the pipe closes, as when `head` exits
    const base = `http://127.0.0.1:${app.httpPort}`;
    // Every request logs a line at info: the writes after the close fail with EPIPE.
    for (let i = 0; i < 20; i++) assert.equal((await fetch(`${base}/no-such-route-${i}`)).status, 404);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(app.child.exitCode, null, `exited: ${stderr.join('')}`);
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    assert.match(stderr.join(''), /the log on stdout stopped \(EPIPE\); the appliance keeps running without it/);
  } finally {
    app.child.kill('SIGTERM');
    await app.exited;
  }
});

/**
 * A first boot of src/main.ts, on a new data directory, with `preload` as a module loaded before it (to
 * interrupt the boot at a chosen point): how it exited, what it printed, and its data directory.
 */
async function firstBootWithPreload(name: string, preload: string[]): Promise<{ dataDir: string; out: string; code: number | null; signal: string | null }> {
  const dir = mkdtempSync(join(tmpdir(), `postino-${name}-`));
  const hook = join(dir, 'preload.mjs');
  writeFileSync(hook, preload.join('\n'));
  const dataDir = join(dir, 'data');
  const child = spawn(process.execPath, ['--import', hook, '--import', 'tsx', 'src/main.ts'], {
    env: { ...process.env, POSTINO_HTTP_PORT: '0', POSTINO_SMTP_PORT: '0', POSTINO_SMTP_HOST: '127.0.0.1', POSTINO_SUBMISSION_PORT: '0', POSTINO_LOG_LEVEL: 'info', POSTINO_STORAGE_DATA_DIR: dataDir, POSTINO_AUTH_API_KEY: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  return { dataDir, out, code, signal };
}
