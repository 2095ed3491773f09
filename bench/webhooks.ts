// Webhook dispatch: how fast the outbox drains to a receiver on loopback, and how long the event loop
// is held meanwhile (every other request waits that long). N `email.delivered` events are recorded for
// the config endpoint, then the running appliance's dispatcher POSTs them with its default concurrency.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { createAppliance } from '../src/appliance.js';
import { loadConfig } from '../src/config/load.js';
import { silentLogger } from '../src/lib/logger.js';
import { systemClock } from '../src/lib/clock.js';
import { recordWebhookEvent } from '../src/webhooks/outbox.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const events = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 5000);

export async function benchWebhooks(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'postino-bench-webhooks-'));
  let received = 0;
  const receiver = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      received++;
      response.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const port = (receiver.address() as { port: number }).port;
  const config = loadConfig({
    argv: [],
    cwd: dir,
    env: {
      POSTINO_HTTP_PORT: '0',
      POSTINO_SMTP_PORT: '0',
      POSTINO_SUBMISSION_PORT: '0',
      POSTINO_STORAGE_DATA_DIR: dir,
      POSTINO_LOG_LEVEL: 'silent',
      POSTINO_SCHEDULER_ENABLED: 'false',
      POSTINO_AUTH_API_KEY: 'pst_bench_webhooks_key_0123456789abcdefghijkl',
      POSTINO_WEBHOOKS_URL: `http://127.0.0.1:${port}/hook`,
      POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
      ...(process.env.BENCH_WEBHOOK_CONCURRENCY ? { POSTINO_WEBHOOKS_CONCURRENCY: process.env.BENCH_WEBHOOK_CONCURRENCY } : {}),
    },
  });
  const appliance = createAppliance({ config, log: silentLogger });
  try {
    const { db } = appliance.context.database;
    // Recorded before the dispatcher runs, in a few large writes: this measures the draining only.
    for (let done = 0; done < events; done += 500) {
      await appliance.context.writes.run(() => {
        for (let i = done; i < Math.min(events, done + 500); i++) {
          recordWebhookEvent(db, systemClock, { projectId: appliance.defaultProjectId, type: 'email.delivered', data: { id: `e${i}`, smtpResponse: '250 ok' } });
        }
      });
    }
    const delay = monitorEventLoopDelay({ resolution: 1 });
    const started = performance.now();
    delay.enable();
    await appliance.start();
    const deadline = started + 300_000;
    while (received < events) {
      if (performance.now() > deadline) throw new Error(`only ${received} of ${events} webhooks in 5 minutes`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const seconds = (performance.now() - started) / 1000;
    delay.disable();
    return [
      { name: `${events} email.delivered webhooks to a loopback receiver (concurrency ${config.webhooks.concurrency})`, value: Math.round(events / seconds), unit: 'webhooks/s' },
      { name: 'event-loop delay while dispatching, p99', value: Math.round(delay.percentile(99) / 1e4) / 100, unit: 'ms' },
      { name: 'event-loop delay while dispatching, max', value: Math.round(delay.max / 1e4) / 100, unit: 'ms' },
    ];
  } finally {
    await appliance.stop();
    await new Promise((resolve) => receiver.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchWebhooks()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
