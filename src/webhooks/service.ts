import { ConfigError, type SettingOrigin } from '../config/load.js';
import type { Db } from '../db/client.js';
import type { WritesWithProcedures } from '../db/write-queue.js';
import { writeFromCursor, writeInBatches } from '../lib/batches.js';
import type { Clock } from '../lib/clock.js';
import { AppError, notFound } from '../lib/errors.js';
import { idLowerBound, isId, newId } from '../lib/ids.js';
import type { Logger } from '../lib/logger.js';
import { refuseWhileProjectDeleting } from '../projects/deletion-guard.js';
import { createWebhooksRepo, type AttemptRow, type DeliveryRow, type EndpointRow } from './repo.js';
import { createWebhookSchema, type CreateWebhookInput, type UpdateWebhookInput } from './schemas.js';
import { isIP } from 'node:net';
import { isLocalhostName, isPrivateAddress } from '../lib/private-address.js';
import { configEndpointSecret } from './config-secret.js';
import { generateWebhookSecret } from './sign.js';
import { redactPassword, refuseMaskedPassword, urlToStore } from './url-credentials.js';

export interface WebhookView {
  id: string;
  url: string;
  /** `["*"]` when the endpoint receives every event. */
  events: string[];
  secret: string;
  enabled: boolean;
  source: 'api' | 'config';
  createdAt: string;
  updatedAt: string;
}

export interface ConfigEndpoint {
  url: string;
  secret: string;
  events: string[];
}

/** Deliveries deleted per write when an endpoint goes (attempts cascade): ~20-30 ms each on the writer thread. */
const endpointPurgeBatch = 1000;

/**
 * Endpoints per project (enabled or not; the list has no pages). Far past any real use, and a bound on
 * the deliveries one event writes.
 */
export const maxEndpointsPerProject = 100;

export interface WebhooksServiceDeps {
  db: Db;
  writes: WritesWithProcedures;
  clock: Clock;
  log: Logger;
  /** webhooks.allow_private: without it a URL naming a private address is refused when it is set. */
  allowPrivate: boolean;
  /** Where webhooks.url is set (settingOrigin): named when the API refuses to change the endpoint it defines. */
  configUrlOrigin?: SettingOrigin;
}

export function createWebhooksService(deps: WebhooksServiceDeps) {
  const repo = createWebhooksRepo(deps.db);
  /** Endpoints a DELETE is removing, until their row is gone: a second DELETE meanwhile answers false. */
  const deletionsUnderWay = new Set<string>();
  /** Whether webhooks.url is set, as the last syncConfigEndpoint was told: a config endpoint outlives its setting. */
  let configUrlSet: boolean | undefined;
  const iso = (ms: number) => new Date(ms).toISOString();

  const toView = (row: EndpointRow): WebhookView => ({
    id: row.id,
    url: redactPassword(row.url),
    events: normalizeEvents(row.events) ?? ['*'],
    secret: row.secret,
    enabled: row.enabled,
    source: row.source,
    createdAt: iso(row.createdAt),
    updatedAt: iso(row.updatedAt),
  });

  const findEndpoint = (projectId: string, id: string): EndpointRow | undefined => (isId(id) ? repo.getEndpoint(projectId, id) : undefined);

  const requireEndpoint = (projectId: string, id: string): EndpointRow => {
    const row = findEndpoint(projectId, id);
    if (!row) throw notFound('Webhook');
    return row;
  };

  const requireMutable = (row: EndpointRow) => {
    if (row.source === 'config') throw new AppError('conflict', configEndpointRefusal(configUrlSet === false ? 'unset' : deps.configUrlOrigin));
  };

  const deliveryView = (row: DeliveryRow, attempts: AttemptRow[], eventType?: string) => ({
    id: row.id,
    webhookId: row.endpointId,
    eventId: row.eventId,
    eventType,
    status: row.status,
    attemptCount: row.attempts,
    nextAttemptAt: row.nextAttemptAt === null ? null : iso(row.nextAttemptAt),
    lastStatusCode: row.lastStatusCode,
    lastError: row.lastError,
    createdAt: iso(row.createdAt),
    updatedAt: iso(row.updatedAt),
    attempts: attempts.map((a) => ({ id: a.id, time: iso(a.attemptedAt), statusCode: a.statusCode, error: a.error, durationMs: a.durationMs })),
  });

  return {
    list: (projectId: string) => ({ data: repo.listEndpoints(projectId).map(toView) }),

    get: (projectId: string, id: string) => toView(requireEndpoint(projectId, id)),

    async create(projectId: string, input: CreateWebhookInput): Promise<WebhookView> {
      refuseMaskedPassword(input.url);
      assertReachableUrl(input.url, deps.allowPrivate);
      const row = await deps.writes.run(() => {
        refuseWhileProjectDeleting(deps.db, projectId);
        // Every event writes one delivery per enabled endpoint, in the transaction of the email's own change.
        if (repo.listEndpoints(projectId).length >= maxEndpointsPerProject) {
          throw new AppError('conflict', `A project has at most ${maxEndpointsPerProject} webhook endpoints; delete one first.`);
        }
        const now = deps.clock.nowMs();
        const id = newId(deps.clock);
        repo.insertEndpoint({
          id,
          projectId,
          url: input.url,
          events: normalizeEvents(input.events),
          secret: input.secret ?? generateWebhookSecret(),
          enabled: input.enabled ?? true,
          source: 'api',
          createdAt: now,
          updatedAt: now,
        });
        return requireEndpoint(projectId, id);
      });
      deps.log.info('webhook created', { projectId, webhookId: row.id });
      return toView(row);
    },

    async update(projectId: string, id: string, input: UpdateWebhookInput): Promise<WebhookView> {
      if (input.url !== undefined) assertReachableUrl(input.url, deps.allowPrivate);
      const row = await deps.writes.run(() => {
        refuseWhileProjectDeleting(deps.db, projectId);
        const current = requireEndpoint(projectId, id);
        requireMutable(current);
        repo.updateEndpoint(id, {
          ...(input.url !== undefined && { url: urlToStore(input.url, current.url) }),
          ...(input.events !== undefined && { events: normalizeEvents(input.events) }),
          ...(input.secret !== undefined && { secret: input.secret }),
          ...(input.enabled !== undefined && { enabled: input.enabled }),
          updatedAt: deps.clock.nowMs(),
        });
        return requireEndpoint(projectId, id);
      });
      return toView(row);
    },

    /**
     * As for emails, templates and domains, an unknown id is `{deleted: false}`, not an error. The
     * endpoint is disabled first (no new delivery is queued for it), its deliveries go in batches on the
     * writer thread, then the row: one cascading delete held the event loop for seconds.
     */
    async delete(projectId: string, id: string) {
      let claimed = false;
      try {
        const found = await deps.writes.run(() => {
          const endpoint = findEndpoint(projectId, id);
          // Another request is deleting it (its row goes last): that one answers {deleted: true}.
          if (!endpoint || deletionsUnderWay.has(id)) return false;
          requireMutable(endpoint);
          repo.updateEndpoint(id, { enabled: false, updatedAt: deps.clock.nowMs() });
          deletionsUnderWay.add(id);
          claimed = true;
          return true;
        });
        if (!found) return { deleted: false };
        await writeInBatches(endpointPurgeBatch, () => deps.writes.call('webhooks.purge-endpoint-deliveries', { endpointId: id, limit: endpointPurgeBatch }));
        await deps.writes.run(() => repo.deleteEndpoint(id));
      } finally {
        if (claimed) deletionsUnderWay.delete(id);
      }
      deps.log.info('webhook deleted', { projectId, webhookId: id });
      return { deleted: true };
    },

    /** Attempts of an endpoint's deliveries, newest delivery first. */
    listDeliveries(projectId: string, id: string, options: { limit?: number; before?: string }) {
      const endpoint = requireEndpoint(projectId, id);
      const limit = options.limit ?? 20;
      const rows = repo.listDeliveries(endpoint.id, limit + 1, options.before);
      const page = rows.slice(0, limit);
      const attempts = repo.attemptsOf(page.map((r) => r.id));
      const types = new Map(page.map((r) => [r.eventId, repo.getEvent(r.eventId)?.type]));
      return {
        data: page.map((r) => deliveryView(r, attempts.filter((a) => a.deliveryId === r.id), types.get(r.eventId))),
        hasMore: rows.length > limit,
        paginationCursorNext: rows.length > limit ? page[page.length - 1].id : null,
      };
    },

    getDelivery(projectId: string, deliveryId: string) {
      const row = isId(deliveryId) ? repo.getDelivery(projectId, deliveryId) : undefined;
      if (!row) throw notFound('Webhook delivery');
      return deliveryView(row, repo.attemptsOf([row.id]), repo.getEvent(row.eventId)?.type);
    },

    /**
     * Retention (`webhooks.retention`; 0 keeps everything): deletes events older than the cut-off whose
     * deliveries are all final (delivered or failed), with those deliveries and their attempts. An event
     * with a delivery still pending stays, whatever its age. 1,000 events looked at per write, on the
     * writer thread (webhooks/prune.ts).
     */
    async pruneEvents(now: Date, retentionMs: number): Promise<number> {
      if (retentionMs <= 0) return 0;
      const beforeId = idLowerBound(now.getTime() - retentionMs);
      const batch = 1000;
      const pruned = await writeFromCursor((afterId) => deps.writes.call('webhooks.prune-events', { afterId, beforeId, limit: batch }));
      if (pruned > 0) deps.log.info('webhook events pruned', { count: pruned, olderThan: new Date(now.getTime() - retentionMs).toISOString() });
      return pruned;
    },

    /**
     * Replays a delivery as a NEW delivery of the same event to the same endpoint (own attempts, own
     * 24 h retry window); the original keeps its history. Same `webhook-id`, so idempotent receivers
     * that already processed it can tell.
     */
    async replay(projectId: string, deliveryId: string) {
      const replayable = () => {
        const original = isId(deliveryId) ? repo.getDelivery(projectId, deliveryId) : undefined;
        if (!original) throw notFound('Webhook delivery');
        if (!repo.getEndpoint(projectId, original.endpointId)?.enabled) throw new AppError('conflict', 'The endpoint of this delivery is disabled; enable it to replay.');
        return original;
      };
      replayable(); // answered at once, without joining the write queue
      const id = newId(deps.clock);
      const { replayed, eventType } = await deps.writes.run(() => {
        refuseWhileProjectDeleting(deps.db, projectId);
        // Checked again inside the write: retention, or the endpoint's deletion, may have removed the
        // delivery or its event since (the insert would then break a foreign key: a 500, not a 404).
        const original = replayable();
        const now = deps.clock.nowMs();
        repo.insertDelivery({ id, eventId: original.eventId, endpointId: original.endpointId, projectId, status: 'pending', nextAttemptAt: now, createdAt: now, updatedAt: now });
        return { replayed: repo.getDelivery(projectId, id)!, eventType: repo.getEvent(original.eventId)?.type };
      });
      deps.log.info('webhook delivery replayed', { projectId, deliveryId, replayId: id });
      return deliveryView(replayed, [], eventType);
    },

    /**
     * Mirrors the `[webhooks]` config section into the default project's endpoint list: created on first
     * boot, updated when the config changes, disabled when the url is removed (its history is kept).
     * An empty configured secret keeps the stored one when it was generated, so receivers need not re-learn
     * it; a configured one that was removed is replaced (config-secret.ts).
     */
    syncConfigEndpoint(projectId: string, config: ConfigEndpoint): void {
      const now = deps.clock.nowMs();
      const existing = repo.findConfigEndpoint(projectId);
      configUrlSet = Boolean(config.url);
      if (!config.url) {
        if (existing?.enabled) repo.updateEndpoint(existing.id, { enabled: false, updatedAt: now });
        return;
      }
      assertValidConfigEndpoint(config, deps.allowPrivate);
      const events = normalizeEvents(config.events);
      const { secret, replacedConfigured } = configEndpointSecret(deps.db, config.secret, existing?.secret);
      if (replacedConfigured) {
        deps.log.warn('webhooks.secret was removed from the configuration: the config endpoint has a generated secret from now on (GET /v1/webhooks shows it); its receiver must verify with that one', { endpointId: existing?.id });
      }
      if (!existing) {
        repo.insertEndpoint({ id: newId(deps.clock), projectId, url: config.url, events, secret, enabled: true, source: 'config', createdAt: now, updatedAt: now });
        return;
      }
      repo.updateEndpoint(existing.id, { url: config.url, events, secret, enabled: true, updatedAt: now });
    },
  };
}

export type WebhooksService = ReturnType<typeof createWebhooksService>;

/**
 * Why the config endpoint cannot be changed through the API, and where it can: it always said "the
 * configuration file", and an operator who set POSTINO_WEBHOOKS_URL looked for a file setting that
 * was not there. The file's path is not shown (an API key is not a shell on the machine).
 */
function configEndpointRefusal(origin: SettingOrigin | 'unset' | undefined): string {
  // syncConfigEndpoint disabled it and kept its deliveries.
  if (origin === 'unset') return 'This webhook was defined by webhooks.url, which is no longer set: it is kept, disabled, with its deliveries; setting webhooks.url again enables it.';
  switch (origin?.kind) {
    case 'env':
      return `This webhook is defined by the environment variable ${origin.name} (webhooks.url); change it there.`;
    case 'flag':
      return `This webhook is defined by the command-line flag ${origin.name}; change it there.`;
    case 'file':
      return 'This webhook is defined in the configuration file (url under [webhooks]); change it there.';
    default:
      return 'This webhook is defined by webhooks.url (url under [webhooks] in the configuration file, or POSTINO_WEBHOOKS_URL); change it there.';
  }
}

/**
 * A URL that names a private address (an IP literal, or localhost) can never be delivered to without
 * webhooks.allow_private: refused now rather than retried for a day. A host name is checked at each
 * delivery instead (post.ts), where its addresses are resolved: DNS may change.
 */
function assertReachableUrl(url: string, allowPrivate: boolean): void {
  if (allowPrivate) return;
  const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
  const named = isLocalhostName(host) || (isIP(host) && isPrivateAddress(host)) ? host : undefined;
  if (named) throw new AppError('parameters-invalid', `url: ${named} is a private address; webhooks are not sent there unless webhooks.allow_private is set.`);
}

/**
 * The configured endpoint obeys the API's rules for endpoints, checked at boot: a bad URL or event name
 * would otherwise be retried and fail for a day, logged at info. Its secret and events are checked also
 * while no URL is set, so a typo does not wait for the day the URL is. Pure: the appliance calls it
 * before it creates anything (a failed boot must not leave a generated API key nobody saw).
 */
export function assertValidConfigEndpoint(config: ConfigEndpoint, allowPrivate: boolean): void {
  const schema = config.url ? createWebhookSchema : createWebhookSchema.partial({ url: true });
  const parsed = schema.safeParse({ ...(config.url ? { url: config.url } : {}), events: config.events?.length ? config.events : null, ...(config.secret ? { secret: config.secret } : {}) });
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => {
      const [field, index] = issue.path;
      return `webhooks.${String(field)}: ${typeof index === 'number' ? `${JSON.stringify(config.events?.[index])} ` : ''}${issue.message}`;
    });
    throw new ConfigError([...new Set(problems)].join('; '));
  }
  if (!config.url) return;
  try {
    assertReachableUrl(config.url, allowPrivate);
  } catch (error) {
    throw new ConfigError(`webhooks.${(error as Error).message}`);
  }
}

/** null means every event; stored that way so new event types reach "all events" endpoints. */
function normalizeEvents(events: string | string[] | null | undefined): string[] | null {
  if (events === undefined || events === null || events === '*') return null;
  const list = Array.isArray(events) ? events : [events];
  if (list.length === 0 || list.includes('*')) return null;
  return [...new Set(list)];
}
