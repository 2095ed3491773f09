import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { StorageHealth } from '../db/storage-health.js';
import type { MemoryBudget } from '../lib/memory-budget.js';

/** Prometheus metrics of one appliance instance; a registry per instance so tests can run several. */
export interface HttpMetrics {
  registry: Registry;
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** Reports the memory budget's bytes in flight and what waits for room. */
  watchMemoryBudget(budget: MemoryBudget): void;
  /** Reports the storage state /healthz shows, and the data directory's free space, for alerts. */
  watchStorage(storage: Pick<StorageHealth, 'state' | 'freeBytes'>): void;
}

const storageStates: StorageHealth['state'][] = ['up', 'full', 'busy', 'failed'];

export function createMetrics(): HttpMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'postino_' });
  const requests = new Counter({
    name: 'postino_http_requests_total',
    help: 'HTTP requests by method, route pattern and status.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'postino_http_request_duration_seconds',
    help: 'HTTP request latency by method and route pattern.',
    labelNames: ['method', 'route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  return {
    registry,
    observeRequest(method, route, status, seconds) {
      requests.inc({ method, route, status: String(status) });
      latency.observe({ method, route }, seconds);
    },
    watchMemoryBudget(budget) {
      new Gauge({
        name: 'postino_body_memory_bytes_in_flight',
        help: 'Bytes of the API request bodies and submitted messages of 64 kB or more being processed (http.body_memory_bytes bounds them).',
        registers: [registry],
        collect() {
          this.set(budget.bytesInFlight);
        },
      });
      new Gauge({
        name: 'postino_body_memory_waiting',
        help: 'API requests and submitted messages of 64 kB or more waiting for others to be answered (http.body_memory_bytes).',
        registers: [registry],
        collect() {
          this.set(budget.waiting);
        },
      });
    },
    watchStorage(storage) {
      new Gauge({
        name: 'postino_storage_state',
        help: 'The storage state /healthz reports: 1 for the current one (full: out of room or below storage.min_free_mb; busy: another process holds the write lock; failed: a WAL sync failed, restart needed).',
        labelNames: ['state'] as const,
        registers: [registry],
        collect() {
          for (const state of storageStates) this.set({ state }, storage.state === state ? 1 : 0);
        },
      });
      new Gauge({
        name: 'postino_storage_free_bytes',
        help: 'Free bytes on the data directory\'s file system at the last reading (every few seconds, and as new mail arrives).',
        registers: [registry],
        collect() {
          // NaN, not prom-client's 0, while no reading succeeded: a low-space alert must not fire on it.
          this.set(storage.freeBytes ?? Number.NaN);
        },
      });
    },
  };
}
