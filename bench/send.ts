// Sustained accepted sends/s at POST /v1/email/send (50 connections, html and template bodies) with
// p50/p99, beside a bare h3 hello-world measured in the same run. Load comes from wrk (a separate
// process, `apt-get install -y wrk`); the appliance (its production bundle) runs in this process with
// synchronous=FULL.
import { execFile } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createApp, defineEventHandler, toNodeListener } from 'h3';
import type * as ApplianceEntry from './lib/appliance-entry.js';
import { buildBenchBundle } from './lib/bundle.js';
import { allThreadsCpuMs, busiestThreads, mainThreadCpuMs } from './lib/thread-cpu.js';

export interface BenchResult {
  name: string;
  /** A number, or several joined by " / " (one per round). */
  value: number | string;
  unit: string;
}

const apiKey = 'pst_bench_key_0123456789abcdefghijklmnopqrstuv';
const seconds = Number(process.env.BENCH_SECONDS ?? 10);
const connections = 50;

interface WrkStats {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  /** CPU time of this process's main thread (the event loop serving the requests) per request, µs. */
  mainCpuUs: number;
  /** CPU time of the whole process (every thread: writer, checkpointer, GC, thread pool) per request, µs. */
  processCpuUs: number;
}

/** The middle element by `key` (the upper middle for an even count). */
function medianBy<T>(items: T[], key: (item: T) => number): T {
  return [...items].sort((a, b) => key(a) - key(b))[Math.floor(items.length / 2)];
}

const cpuUs = (usage: NodeJS.CpuUsage) => usage.user + usage.system;

async function runWrk(url: string, script: string | undefined, dir: string): Promise<WrkStats> {
  // wrk's own latency histogram; the Lua `done` hook prints percentiles in ms and non-2xx counts.
  const report = `
done = function(summary, latency, requests)
  io.write(string.format("RESULT %f %f %f %d\\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status))
end
`;
  const file = join(dir, `wrk-${Math.random().toString(36).slice(2)}.lua`);
  writeFileSync(file, (script ?? '') + report);
  // 2 cores: wrk gets 1 thread, the appliance the rest.
  // Asynchronously: the server under test runs in this process's event loop.
  const cpuBefore = mainThreadCpuMs();
  const processBefore = process.cpuUsage();
  const threadsBefore = process.env.BENCH_DEBUG ? allThreadsCpuMs() : undefined;
  const { stdout: out } = await promisify(execFile)('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', file, url], { encoding: 'utf8' });
  if (threadsBefore) process.stderr.write(`${out}busiest threads:\n${busiestThreads(threadsBefore, allThreadsCpuMs())}\n`);
  const match = /RESULT (\S+) (\S+) (\S+) (\d+)/.exec(out);
  if (!match) throw new Error(`wrk output not understood:\n${out}`);
  const requests = Number(match[1]) * seconds;
  return { rps: Number(match[1]), p50: Number(match[2]), p99: Number(match[3]), non2xx: Number(match[4]), mainCpuUs: ((mainThreadCpuMs() - cpuBefore) * 1000) / requests, processCpuUs: cpuUs(process.cpuUsage(processBefore)) / requests };
}

function postScript(body: unknown): string {
  return `
wrk.method = "POST"
wrk.body = ${JSON.stringify(JSON.stringify(body))}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer ${apiKey}"
`;
}

async function helloWorld(dir: string): Promise<WrkStats> {
  const app = createApp();
  app.use('/', defineEventHandler(() => ({ hello: 'world' })));
  const server = createServer(toNodeListener(app));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  try {
    return await runWrk(`http://127.0.0.1:${port}/`, undefined, dir);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

export async function benchSend(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-send-'));
  const bundle = await buildBenchBundle(`send-${dir.split('-').pop()}`, { 'appliance-entry': 'bench/lib/appliance-entry.ts' });
  const { createAppliance, loadConfig, silentLogger } = (await import(pathToFileURL(join(bundle, 'appliance-entry.js')).href)) as typeof ApplianceEntry;
  // A DNS server that never answers: the delivery worker's first lookup waits out its timeout, so the
  // worker holds one job and does nothing else while the accept path is measured (delivery throughput
  // is bench/delivery.ts).
  const blackholeDns = createSocket('udp4');
  await new Promise<void>((resolve) => blackholeDns.bind(0, '127.0.0.1', resolve));
  const config = loadConfig({
    argv: [],
    cwd: dir,
    env: {
      POSTINO_HTTP_PORT: '0',
      POSTINO_SMTP_PORT: '0',
      POSTINO_SUBMISSION_PORT: '0',
      POSTINO_STORAGE_DATA_DIR: dir,
      POSTINO_STORAGE_SYNCHRONOUS: 'FULL',
      // A/B runs: POSTINO_STORAGE_WRITER_THREAD=false commits on the main connection.
      POSTINO_STORAGE_WRITER_THREAD: process.env.POSTINO_STORAGE_WRITER_THREAD ?? 'true',
      POSTINO_AUTH_API_KEY: apiKey,
      POSTINO_LOG_LEVEL: 'silent',
      POSTINO_SCHEDULER_ENABLED: 'true', // the FTS indexer job runs during the measurement, as in production
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      // The issue measures *accepted* sends. The delivery worker stays on (it is part of the appliance)
      // with one slot, held by a job whose MX lookup never gets an answer.
      POSTINO_DELIVERY_CONCURRENCY: '1',
      POSTINO_DNS_SERVERS: `127.0.0.1:${blackholeDns.address().port}`,
    },
  });
  const appliance = createAppliance({ config, log: silentLogger });
  const results: BenchResult[] = [];
  try {
    await appliance.start();
    const { sqlite } = appliance.context.database;
    sqlite
      .prepare('insert into templates (id, project_id, name, subject, content, created_at, updated_at) values (?, ?, ?, ?, ?, 0, 0)')
      .run('bbbbbbbbbbbbbbbbbbbbbbbb', appliance.defaultProjectId, 'Welcome', 'Welcome {name}', JSON.stringify([
        { type: 'text', text: 'Hello **{name}**, thanks for joining {company}.' },
        { type: 'button', label: 'Confirm', url: 'https://example.com/confirm?u={name}' },
        { type: 'list', items: ['One', 'Two', 'Three'] },
      ]));
    const url = `http://127.0.0.1:${appliance.httpPort}/v1/email/send`;
    const html = { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', subject: 'Your receipt', html: `<html><body>${'<p>Thanks for your order.</p>'.repeat(40)}</body></html>`, text: 'Thanks for your order.' };
    const template = { toAddress: 'ann@example.com', fromAddress: 'app@sender.test', templateName: 'Welcome', templateProps: { name: 'Ann', company: 'Acme' } };

    // BENCH_ONLY=hello|html|template runs one measurement (profiling, A/B runs); default: all, with a warm-up.
    // This VM's speed drifts by up to 2× within minutes, so hello-world and html alternate for
    // BENCH_ROUNDS rounds (default 3) and each ratio compares neighbours; the medians are reported.
    const only = process.env.BENCH_ONLY;
    const skipped: WrkStats = { rps: 0, p50: 0, p99: 0, non2xx: 0, mainCpuUs: 0, processCpuUs: 0 };
    if (only !== 'hello') await runWrk(url, postScript(html), dir); // warm-up (JIT, page cache)
    const rounds: { hello: WrkStats; html: WrkStats }[] = [];
    for (let i = 0; i < (only ? 1 : Number(process.env.BENCH_ROUNDS ?? 3)); i++) {
      const helloRound = !only || only === 'hello' ? await helloWorld(dir) : skipped;
      const htmlRound = !only || only === 'html' ? await runWrk(url, postScript(html), dir) : skipped;
      rounds.push({ hello: helloRound, html: htmlRound });
    }
    const hello = medianBy(rounds.map((r) => r.hello), (s) => s.rps);
    const htmlStats = medianBy(rounds.map((r) => r.html), (s) => s.rps);
    const ratios = rounds.map((r) => (100 * r.html.rps) / r.hello.rps);
    const templateStats = !only || only === 'template' ? await runWrk(url, postScript(template), dir) : skipped;
    const stored = sqlite.prepare('select count(*) from emails').pluck().get() as number;
    const non2xx = templateStats.non2xx + rounds.reduce((sum, r) => sum + r.html.non2xx, 0);
    if (non2xx > 0) throw new Error(`non-2xx answers: ${non2xx}`);

    const round = (n: number, digits = 0) => Math.round(n * 10 ** digits) / 10 ** digits;
    // With BENCH_ONLY, only the rows of what ran (no ratio against a measurement that was skipped).
    const ran = (kind: 'hello' | 'html' | 'template') => !only || only === kind;
    if (ran('hello')) {
      results.push(
        { name: `h3 hello-world baseline (50 conns, median of ${rounds.length})`, value: round(hello.rps), unit: 'req/s' },
        { name: 'hello-world: event-loop CPU per request', value: round(hello.mainCpuUs), unit: 'µs' },
      );
    }
    if (ran('html')) {
      results.push(
        { name: `send html body (50 conns, synchronous=FULL, median of ${rounds.length})`, value: round(htmlStats.rps), unit: 'accepted/s' },
        { name: 'send html body p50 (median run)', value: round(htmlStats.p50, 2), unit: 'ms' },
        { name: 'send html body p99 (median run)', value: round(htmlStats.p99, 2), unit: 'ms' },
        { name: 'send html body p99 (worst run)', value: round(Math.max(...rounds.map((r) => r.html.p99)), 2), unit: 'ms' },
        { name: 'send html body: event-loop CPU per accepted email', value: round(htmlStats.mainCpuUs), unit: 'µs' },
        { name: 'send html body: process CPU per accepted email (all threads)', value: round(htmlStats.processCpuUs), unit: 'µs' },
      );
    }
    if (!only) {
      results.push(
        { name: 'send html body vs hello-world (median of the rounds)', value: round(medianBy(ratios, (r) => r), 1), unit: '%' },
        { name: 'send html body vs hello-world (each round)', value: ratios.map((r) => round(r, 1)).join(' / '), unit: '%' },
      );
    }
    if (ran('template')) {
      results.push(
        { name: 'send template body (50 conns)', value: round(templateStats.rps), unit: 'accepted/s' },
        { name: 'send template body p50', value: round(templateStats.p50, 2), unit: 'ms' },
        { name: 'send template body p99', value: round(templateStats.p99, 2), unit: 'ms' },
      );
    }
    results.push({ name: 'emails committed during the run', value: stored, unit: 'rows' });
  } finally {
    await appliance.stop();
    blackholeDns.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(bundle, { recursive: true, force: true });
  }
  return results;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchSend()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
