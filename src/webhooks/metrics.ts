import { Counter, type Registry } from 'prom-client';
import { scrapedGauge } from '../lib/scraped-gauge.js';

/**
 * Webhook metrics on the appliance's registry (served by `/metrics`): a receiver that fails shows as
 * attempts `retrying` and deliveries waiting, where /metrics said nothing of webhooks at all.
 */
export interface WebhookMetrics {
  /** One POST whose outcome was recorded: delivered, to be retried, or given up (`webhooks.give_up_after`). */
  recordAttempt(outcome: WebhookAttemptOutcome): void;
}

export type WebhookAttemptOutcome = 'delivered' | 'retrying' | 'failed';

export const noWebhookMetrics: WebhookMetrics = { recordAttempt() {} };

/** Pending deliveries at scrape time: those the dispatcher will send, and those of disabled endpoints. */
export interface PendingWebhookCounts {
  pending(): number;
  paused(): number;
}

export function createWebhookMetrics(registry: Registry, counts: PendingWebhookCounts): WebhookMetrics {
  const attempts = new Counter({
    name: 'postino_webhook_attempts_total',
    help: 'Webhook POSTs by outcome: delivered, retrying (the receiver failed; tried again later), failed (given up after webhooks.give_up_after).',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  scrapedGauge(
    registry,
    'postino_webhook_deliveries_pending',
    'Webhook deliveries to be sent (due, or waiting for a retry), those of disabled endpoints aside; counted at scrape time.',
    () => counts.pending(),
  );
  scrapedGauge(
    registry,
    'postino_webhook_deliveries_paused',
    'Pending webhook deliveries of disabled endpoints: kept, and sent once the endpoint is enabled again; counted at scrape time.',
    () => counts.paused(),
  );
  for (const outcome of ['delivered', 'retrying', 'failed'] as const) attempts.inc({ outcome }, 0);
  return {
    recordAttempt(outcome) {
      attempts.inc({ outcome });
    },
  };
}
