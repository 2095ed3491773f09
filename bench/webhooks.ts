// Webhook dispatch: how fast the outbox drains to a receiver on loopback, and how long the event loop
// is held meanwhile (every other request waits that long). N `email.delivered` events are recorded for
// the config endpoint, then the running appliance's dispatcher POSTs them with its default concurrency.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { recordWebhookEvent } from '../src/webhooks/outbox.js';
import { startAppliance } from '../test/helpers/appliance.js';
import { startReceiver } from '../test/webhooks/receiver.js';

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const events = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 5000);

export async function benchWebhooks(): Promise<BenchResult[]> {
  const receiver = await startReceiver();
  const t = await startAppliance({
    env: {
      POSTINO_LOG_LEVEL: 'silent',
      POSTINO_WEBHOOKS_URL: receiver.url('/hook'),
      POSTINO_WEBHOOKS_ALLOW_PRIVATE: 'true',
      ...(process.env.BENCH_WEBHOOK_CONCURRENCY ? { POSTINO_WEBHOOKS_CONCURRENCY: process.env.BENCH_WEBHOOK_CONCURRENCY } : {}),
    },
  });
  const { context, defaultProjectId } = t.appliance;
  try {
    // Recorded with the dispatcher stopped, in a few large writes: this measures the draining only.
    await context.webhookDispatcher.stop();
    for (let done = 0; done < events; done += 500) {
      await context.writes.run(() => {
        for (let i = done; i < Math.min(events, done + 500); i++) {
          recordWebhookEvent(context.database.db, context.clock, { projectId: defaultProjectId, type: 'email.delivered', data: { id: `e${i}`, smtpResponse: '250 ok' } });
        }
      });
    }
    const delay = monitorEventLoopDelay({ resolution: 1 });
    const started = performance.now();
    delay.enable();
    context.webhookDispatcher.start();
    const deadline = started + 300_000;
    while (receiver.requests.length < events) {
      if (performance.now() > deadline) throw new Error(`only ${receiver.requests.length} of ${events} webhooks in 5 minutes`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const seconds = (performance.now() - started) / 1000;
    delay.disable();
    return [
      { name: `${events} email.delivered webhooks to a loopback receiver (concurrency ${t.config.webhooks.concurrency})`, value: Math.round(events / seconds), unit: 'webhooks/s' },
      { name: 'event-loop delay while dispatching, p99', value: Math.round(delay.percentile(99) / 1e4) / 100, unit: 'ms' },
      { name: 'event-loop delay while dispatching, max', value: Math.round(delay.max / 1e4) / 100, unit: 'ms' },
    ];
  } finally {
    await t.stop();
    await receiver.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const r of await benchWebhooks()) console.log(`${r.name}: ${r.value} ${r.unit}`);
}
