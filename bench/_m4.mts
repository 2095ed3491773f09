import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAppliance } from '../src/appliance.js';
import { loadConfig } from '../src/config/load.js';
import { silentLogger } from '../src/lib/logger.js';
const dir = mkdtempSync(join(tmpdir(), 'm4-'));
const config = loadConfig({ argv: [], cwd: dir, env: { POSTINO_HTTP_PORT: '0', POSTINO_SMTP_PORT: '0', POSTINO_SUBMISSION_PORT: '0', POSTINO_STORAGE_DATA_DIR: dir, POSTINO_AUTH_API_KEY: 'pst_bench_key_0123456789abcdefghijklmnopqrstuv', POSTINO_LOG_LEVEL: 'silent', POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false', POSTINO_DNS_SERVERS: '127.0.0.1:9' } });
const app = createAppliance({ config, log: silentLogger });
await app.start();
const ctx = app.context;
const N = 20000;
let t = performance.now();
for (let i = 0; i < N; i++) ctx.projects.authenticate('Bearer pst_bench_key_0123456789abcdefghijklmnopqrstuv');
console.log('auth µs', ((performance.now() - t) * 1000) / N);
const html = `<html><body>${'<p>Thanks for your order.</p>'.repeat(40)}</body></html>`;
t = performance.now();
const ps = [];
for (let i = 0; i < N; i++) ps.push(ctx.emails.send(app.defaultProjectId, { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Your receipt', html, text: 'Thanks' } as any));
await Promise.all(ps);
console.log('send (service, no HTTP) µs', ((performance.now() - t) * 1000) / N);
for (const conc of [1, 10, 50]) {
  t = performance.now();
  for (let r = 0; r < N / conc; r++) {
    const b = [];
    for (let i = 0; i < conc; i++) b.push(ctx.emails.send(app.defaultProjectId, { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Your receipt', html, text: 'Thanks' } as any));
    await Promise.all(b);
  }
  const wall = performance.now() - t;
  console.log(`conc ${conc}: wall µs/email`, (wall * 1000) / N);
}
const cpu0 = process.cpuUsage();
t = performance.now();
for (let r = 0; r < N / 50; r++) {
  const b = [];
  for (let i = 0; i < 50; i++) b.push(ctx.emails.send(app.defaultProjectId, { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Your receipt', html, text: 'Thanks' } as any));
  await Promise.all(b);
}
const cpu = process.cpuUsage(cpu0);
console.log('conc 50 cpu µs/email (all threads)', (cpu.user + cpu.system) / N, 'wall', ((performance.now() - t) * 1000) / N);
await app.stop();
