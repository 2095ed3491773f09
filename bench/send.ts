// Sustained accepted sends/s at POST /v1/email/send (50 connections, html and template bodies) with
// p50/p99, beside a bare h3 hello-world measured in the same run. Load comes from wrk (a separate
// process, `apt-get install -y wrk`); the appliance (its production bundle) runs in this process with
// synchronous=FULL.
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import type Database from 'better-sqlite3';
import { join } from 'node:path';
import { createApp, defineEventHandler, readBody, toNodeListener } from 'h3';
import type * as ApplianceEntryModule from './lib/appliance-entry.js';
import { benchApiKey, benchSynchronous, startInProcessAppliance } from './lib/in-process-appliance.js';
import { postScript, runWrk, type WrkStats } from './lib/wrk.js';

type ApplianceEntry = typeof ApplianceEntryModule;

export interface BenchResult {
  name: string;
  /** A number, or several joined by " / " (one per round). */
  value: number | string;
  unit: string;
}

/** The middle element by `key` (the upper middle for an even count). */
function medianBy<T>(items: T[], key: (item: T) => number): T {
  return [...items].sort((a, b) => key(a) - key(b))[Math.floor(items.length / 2)];
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

/**
 * The other reference point, "a handler doing one SQLite insert": the same h3 stack and the
 * appliance's own group commit (synchronous=FULL, WAL synced from the thread pool) on a file of its own,
 * with a handler that reads the JSON body and inserts one row of it. What a durable send can reach on
 * this machine before it authenticates, validates, or writes its record, event and queue rows.
 */
async function oneInsert(dir: string, entry: ApplianceEntry, body: unknown): Promise<WrkStats> {
  const database = entry.openDatabase({ path: join(dir, 'one-insert.sqlite'), synchronous: 'FULL' });
  database.sqlite.exec('create table sends (id integer primary key, to_address text not null, subject text not null, html text)');
  const insert = database.sqlite.prepare('insert into sends (to_address, subject, html) values (?, ?, ?)');
  const writes = entry.createWriteQueue(database.sqlite, entry.silentLogger);
  const app = createApp();
  app.use(
    '/',
    defineEventHandler(async (event) => {
      const send = (await readBody(event)) as { toAddress: string; subject: string; html?: string };
      const id = await writes.run(() => insert.run(send.toAddress, send.subject, send.html ?? null).lastInsertRowid);
      return { id: String(id), status: 'queued' };
    }),
  );
  const server = createServer(toNodeListener(app));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  try {
    return await runWrk(`http://127.0.0.1:${port}/`, postScript(body, benchApiKey), dir);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await writes.close();
    database.close();
  }
}

/** A verified sending domain, written directly: verifying it would need DNS, which the bench does not serve. */
function addVerifiedDomain(sqlite: Database.Database, projectId: string, domain: string): void {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs8', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'der' } });
  sqlite
    .prepare(
      `insert into domains (id, project_id, domain, status, dkim_selector, dkim_private_key, dkim_public_key, dkim_verified, mail_from_domain, mail_from_status, created_at)
       values ('cccccccccccccccccccccccc', ?, ?, 'success', 'bench', ?, ?, 1, ?, 'success', 0)`,
    )
    .run(projectId, domain, privateKey, publicKey.toString('base64'), `bounce.${domain}`);
}

export async function benchSend(): Promise<BenchResult[]> {
  // As installed: a send's sender must be on a verified domain of the project (sending.require_verified_domain).
  const { appliance, entry, dir, stop } = await startInProcessAppliance('send', { POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'true' });
  const results: BenchResult[] = [];
  try {
    const { sqlite } = appliance.context.database;
    addVerifiedDomain(sqlite, appliance.defaultProjectId, 'sender.test');
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

    // BENCH_ONLY=hello|html|template|insert runs one measurement (profiling, A/B runs); default: all, with a warm-up.
    // This VM's speed drifts by up to 2× within minutes, so hello-world and html alternate for
    // BENCH_ROUNDS rounds (default 3) and each ratio compares neighbours; the medians are reported.
    const only = process.env.BENCH_ONLY;
    const skipped: WrkStats = { rps: 0, p50: 0, p99: 0, non2xx: 0, mainCpuUs: 0, processCpuUs: 0 };
    if (only !== 'hello') await runWrk(url, postScript(html, benchApiKey), dir); // warm-up (JIT, page cache)
    const rounds: { hello: WrkStats; html: WrkStats }[] = [];
    for (let i = 0; i < (only ? 1 : Number(process.env.BENCH_ROUNDS ?? 3)); i++) {
      const helloRound = !only || only === 'hello' ? await helloWorld(dir) : skipped;
      const htmlRound = !only || only === 'html' ? await runWrk(url, postScript(html, benchApiKey), dir) : skipped;
      rounds.push({ hello: helloRound, html: htmlRound });
    }
    const hello = medianBy(rounds.map((r) => r.hello), (s) => s.rps);
    const htmlStats = medianBy(rounds.map((r) => r.html), (s) => s.rps);
    const ratios = rounds.map((r) => (100 * r.html.rps) / r.hello.rps);
    const templateStats = !only || only === 'template' ? await runWrk(url, postScript(template, benchApiKey), dir) : skipped;
    const insertStats = !only || only === 'insert' ? await oneInsert(dir, entry, html) : skipped;
    const stored = sqlite.prepare('select count(*) from emails').pluck().get() as number;
    const non2xx = templateStats.non2xx + rounds.reduce((sum, r) => sum + r.html.non2xx, 0);
    if (non2xx > 0) throw new Error(`non-2xx answers: ${non2xx}`);

    const round = (n: number, digits = 0) => Math.round(n * 10 ** digits) / 10 ** digits;
    // With BENCH_ONLY, only the rows of what ran (no ratio against a measurement that was skipped).
    const ran = (kind: 'hello' | 'html' | 'template' | 'insert') => !only || only === kind;
    if (ran('hello')) {
      results.push(
        { name: `h3 hello-world baseline (50 conns, median of ${rounds.length})`, value: round(hello.rps), unit: 'req/s' },
        { name: 'hello-world: event-loop CPU per request', value: round(hello.mainCpuUs), unit: 'µs' },
      );
    }
    if (ran('html')) {
      results.push(
        { name: `send html body (50 conns, synchronous=${benchSynchronous}, median of ${rounds.length})`, value: round(htmlStats.rps), unit: 'accepted/s' },
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
    if (ran('insert')) {
      results.push(
        { name: 'one-insert handler: same stack, body read, one row per request, group commit FULL', value: round(insertStats.rps), unit: 'req/s' },
        { name: 'one-insert handler p99', value: round(insertStats.p99, 2), unit: 'ms' },
        { name: 'one-insert handler: event-loop CPU per request', value: round(insertStats.mainCpuUs), unit: 'µs' },
      );
    }
    if (!only) {
      results.push({ name: 'one-insert handler vs hello-world (median run)', value: round((100 * insertStats.rps) / hello.rps, 1), unit: '%' });
    }
    results.push({ name: 'emails committed during the run', value: stored, unit: 'rows' });
  } finally {
    await stop();
  }
  return results;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchSend()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
