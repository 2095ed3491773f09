import { Counter, Histogram, type Registry } from 'prom-client';
import { scrapedGauge } from '../lib/scraped-gauge.js';

/** Delivery metrics on the appliance's registry (served by `/metrics`). */
export interface DeliveryMetrics {
  recordOutcome(outcome: 'delivered' | 'deferred' | 'bounced' | 'error' | 'suppressed', queuedToFinalMs?: number): void;
  /** A claimed message put back without an attempt: its destination cools down after a 421, or is busy (domain-limiter.ts). */
  recordPostponed(reason: PostponeReason): void;
  /** A connection the destination refused beside others it took: its connection limit was lowered (domain-limiter.ts refusedConnection). */
  recordConnectionRefused(): void;
}

export type PostponeReason = 'destination cooling down' | 'destination busy';

export const noDeliveryMetrics: DeliveryMetrics = { recordOutcome() {}, recordPostponed() {}, recordConnectionRefused() {} };

/** What the queue gauges read at scrape time. */
export interface QueueReadings {
  countQueue(): number;
  /** How long the longest-queued email has been queued; 0 for an empty queue. */
  oldestQueuedAgeMs(): number;
}

export function createDeliveryMetrics(registry: Registry, queue: QueueReadings): DeliveryMetrics {
  const attempts = new Counter({
    name: 'postino_delivery_attempts_total',
    help: 'Delivery attempts by outcome (delivered, deferred, bounced, error, suppressed).',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  // One indexed count per scrape.
  scrapedGauge(registry, 'postino_delivery_queue_depth', 'Rows in the delivery queue (delivery_jobs), due or waiting for a retry; counted at scrape time.', () => queue.countQueue());
  // Queue depth alone cannot tell a stuck queue from a busy one.
  scrapedGauge(
    registry,
    'postino_delivery_oldest_queued_seconds',
    'Age of the email queued longest (delivery_jobs.queued_at), 0 when the queue is empty: it keeps growing when the queue is stuck, where a busy queue drains; read at scrape time.',
    () => queue.oldestQueuedAgeMs() / 1000,
  );
  const latency = new Histogram({
    name: 'postino_delivery_latency_seconds',
    help: 'Time from queueing to delivery of delivered emails.',
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600],
    registers: [registry],
  });
  const postponed = new Counter({
    name: 'postino_delivery_postponed_total',
    help: 'Messages put back without an attempt, by reason: cooling-down (the destination answered 421 / 4.7.x), busy (it would make them wait long for a connection).',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  const connectionsRefused = new Counter({
    name: 'postino_delivery_connections_refused_total',
    help: 'Connections a destination refused (421 / 4.7.x) while it took others: each lowered its connection limit, and the message waited for a connection again, without an attempt.',
    registers: [registry],
  });
  for (const outcome of ['delivered', 'deferred', 'bounced'] as const) attempts.inc({ outcome }, 0);
  for (const reason of ['cooling-down', 'busy'] as const) postponed.inc({ reason }, 0);
  return {
    recordOutcome(outcome, queuedToFinalMs) {
      attempts.inc({ outcome });
      if (outcome === 'delivered' && queuedToFinalMs !== undefined) latency.observe(Math.max(0, queuedToFinalMs) / 1000);
    },
    recordPostponed(reason) {
      postponed.inc({ reason: reason === 'destination busy' ? 'busy' : 'cooling-down' });
    },
    recordConnectionRefused() {
      connectionsRefused.inc();
    },
  };
}
