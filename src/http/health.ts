import { createHash, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { version } from '../lib/version.js';
import type { HttpMetrics } from './metrics.js';
import { RawResponse, type Handler, type Routes } from './router.js';

/**
 * `full`: the storage component while writes are refused for lack of space; `busy`: while they are
 * refused because another process holds the database's write lock; `failed`: for good after a
 * failed WAL sync (db/storage-health.ts), or the worker while no message can be built (delivery/create.ts).
 * `disabled`: turned off by the operator (the scheduler); healthy, since it is what was asked for.
 */
export type ComponentState = 'starting' | 'up' | 'stopping' | 'down' | 'full' | 'busy' | 'failed' | 'disabled';

export interface HealthDeps {
  clock: Clock;
  startedAtMs: number;
  metrics: HttpMetrics;
  /** State of each listener/loop; healthz is 200 only when every one is `up` (or `disabled`). */
  components(): Record<string, ComponentState>;
  /** `http.metrics_token`: the bearer token /metrics requires; empty or absent: /metrics is open. */
  metricsToken?: string;
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

  // Public to monitors, but its counts are every project's together (sends, deliveries, queue depth): a
  // tenant's API key must not read them, so a token of its own guards it once the operator sets one.
  const metrics: Handler<null> = async ({ header }) => {
    if (deps.metricsToken) assertMetricsToken(deps.metricsToken, header('authorization'));
    const text = await deps.metrics.registry.metrics();
    return new RawResponse(text, { 'content-type': deps.metrics.registry.contentType });
  };
  routes.public('get', '/metrics', metrics);
  routes.public('head', '/metrics', metrics);
}

/** The Authorization header carries `Bearer <http.metrics_token>`; the same 401 codes as the API's keys. */
function assertMetricsToken(token: string, authorization: string | undefined): void {
  if (authorization === undefined || authorization.trim() === '') {
    throw new AppError('authentication-required', 'Missing Authorization header. /metrics needs "Authorization: Bearer <http.metrics_token>".');
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  if (!match) throw new AppError('authentication-invalid', 'The Authorization header must be "Bearer <http.metrics_token>".');
  // Compared as digests: equal lengths for timingSafeEqual, and no timing that tells how much matched.
  const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();
  if (!timingSafeEqual(digest(match[1]), digest(token))) throw new AppError('authentication-failed', 'The token is not http.metrics_token.');
}
