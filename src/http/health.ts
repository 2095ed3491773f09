import type { Clock } from '../lib/clock.js';
import { version } from '../lib/version.js';
import type { HttpMetrics } from './metrics.js';
import { RawResponse, type Routes } from './router.js';

/**
 * `full`: the storage component while writes are refused for lack of space; `failed`: for good after a
 * failed WAL sync (db/storage-health.ts).
 * `disabled`: turned off by the operator (the scheduler); healthy, since it is what was asked for.
 */
export type ComponentState = 'starting' | 'up' | 'stopping' | 'down' | 'full' | 'failed' | 'disabled';

export interface HealthDeps {
  clock: Clock;
  startedAtMs: number;
  metrics: HttpMetrics;
  /** State of each listener/loop; healthz is 200 only when every one is `up` (or `disabled`). */
  components(): Record<string, ComponentState>;
}

export function registerHealthRoutes(routes: Routes, deps: HealthDeps): void {
  const health: Parameters<Routes['public']>[2] = ({ setStatus }) => {
    const components = deps.components();
    const ok = Object.values(components).every((state) => state === 'up' || state === 'disabled');
    if (!ok) setStatus(503);
    return {
      status: ok ? 'ok' : 'unavailable',
      version,
      uptimeSeconds: Math.round((deps.clock.nowMs() - deps.startedAtMs) / 1000),
      components,
    };
  };
  // HEAD too: monitors and load balancers often probe with `curl -I`.
  routes.public('get', '/healthz', health);
  routes.public('head', '/healthz', health);

  routes.public('get', '/metrics', async () => {
    const text = await deps.metrics.registry.metrics();
    return new RawResponse(text, { 'content-type': deps.metrics.registry.contentType });
  });
}
