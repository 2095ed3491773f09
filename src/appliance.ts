import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Config } from './config/schema.js';
import { openDatabase, type DatabaseHandle } from './db/client.js';
import { migrateDatabase } from './db/migrate.js';
import { createWriteQueue, type WriteQueue } from './db/write-queue.js';
import { createDeliveryWorker, type DeliveryWorker } from './delivery/worker.js';
import { createHttpApp, startHttpServer, type HttpServer } from './http/app.js';
import { registerHealthRoutes, type ComponentState } from './http/health.js';
import { createMetrics, type HttpMetrics } from './http/metrics.js';
import { createRoutes, type Routes } from './http/router.js';
import { systemClock, type Clock } from './lib/clock.js';
import { createLogger, type Logger } from './lib/logger.js';
import { createResolver, type Resolver } from './lib/resolver.js';
import { createUrlSigner, type UrlSigner } from './lib/signing.js';
import { urlSigningSecret } from './db/settings.js';
import { createProjectsRepo } from './projects/repo.js';
import { registerProjectRoutes } from './projects/routes.js';
import { createProjectsService, type ProjectsService } from './projects/service.js';
import { createScheduler, type Job, type Scheduler } from './scheduler/index.js';
import { createInboundSmtp, type InboundSmtp } from './smtp/inbound.js';

export interface ApplianceOptions {
  config: Config;
  clock?: Clock;
  log?: Logger;
  resolver?: Resolver;
  /** Folder of drizzle migrations; defaults to the one shipped beside the code. */
  migrationsFolder?: string;
}

/** Everything the features are built from; tests reach into it to call services directly. */
export interface ApplianceContext {
  config: Config;
  clock: Clock;
  log: Logger;
  resolver: Resolver;
  database: DatabaseHandle;
  writes: WriteQueue;
  metrics: HttpMetrics;
  projects: ProjectsService;
  /** Signs URLs that work without an API key (tracking, downloads). */
  signer: UrlSigner;
  /** Base URL clients and recipients reach the API at (tracking pixels, signed links). */
  publicUrl(): string;
}

export interface Appliance {
  context: ApplianceContext;
  /** Set on first start when the default project's key was generated (printed once by main). */
  generatedApiKey?: string;
  defaultProjectId: string;
  start(): Promise<{ httpPort: number; smtpPort: number }>;
  stop(): Promise<void>;
  readonly httpPort: number;
  readonly smtpPort: number;
}

/**
 * Builds the whole graph from config: open db → migrate → services → routes → listeners, worker and
 * scheduler. Nothing starts until `start()`; `stop()` stops them in reverse order, then closes the db.
 */
export function createAppliance(options: ApplianceOptions): Appliance {
  const { config } = options;
  const clock = options.clock ?? systemClock;
  const log = options.log ?? createLogger({ level: config.log.level, now: () => clock.now() });
  const resolver = options.resolver ?? createResolver({ servers: config.dns.servers });
  const database = openDatabase({ path: join(config.storage.data_dir, 'postino.sqlite'), synchronous: config.storage.synchronous });
  try {
    migrateDatabase(database.db, options.migrationsFolder);
  } catch (error) {
    database.close();
    throw error;
  }
  const writes = createWriteQueue(database.sqlite, log);
  const metrics = createMetrics();
  const projects = createProjectsService({ repo: createProjectsRepo(database.db), sqlite: database.sqlite, clock, log });
  const { projectId: defaultProjectId, generatedKey } = projects.ensureDefaultProject(config.auth.api_key);

  let httpPort = 0;
  let smtpPort = 0;
  const context: ApplianceContext = {
    config,
    clock,
    log,
    resolver,
    database,
    writes,
    metrics,
    projects,
    signer: createUrlSigner(urlSigningSecret(database.db)),
    publicUrl: () => (config.http.public_url || `http://${displayHost(config.http.host)}:${httpPort}`).replace(/\/+$/, ''),
  };

  const routes = createRoutes({ authenticate: projects.authenticate, log, metrics, bodyLimitBytes: config.http.body_limit_bytes });
  const components: Record<string, ComponentState> = { http: 'down', smtp: 'down', worker: 'down', scheduler: 'down' };
  registerFeatureRoutes(routes, context);
  registerHealthRoutes(routes, { clock, startedAtMs: clock.nowMs(), metrics, components: () => ({ ...components }) });

  const app = createHttpApp(routes, { log, metrics });
  const smtp: InboundSmtp = createInboundSmtp({
    host: config.smtp.host,
    port: config.smtp.port,
    hostname: config.smtp.hostname || hostname(),
    maxMessageBytes: config.smtp.max_message_bytes,
    log: log.child({ component: 'smtp' }),
  });
  const worker: DeliveryWorker = createDeliveryWorker({ log: log.child({ component: 'delivery' }), tick: async () => 0 });
  const scheduler: Scheduler = createScheduler(buildJobs(context), { clock, log: log.child({ component: 'scheduler' }) });
  let http: HttpServer | undefined;
  let stopping: Promise<void> | undefined;

  return {
    context,
    generatedApiKey: generatedKey,
    defaultProjectId,
    get httpPort() {
      return httpPort;
    },
    get smtpPort() {
      return smtpPort;
    },
    async start() {
      components.http = 'starting';
      http = await startHttpServer(app, config.http.host, config.http.port);
      httpPort = http.port;
      components.smtp = 'starting';
      smtpPort = await smtp.start();
      components.smtp = 'up';
      worker.start();
      components.worker = 'up';
      if (config.scheduler.enabled) scheduler.start();
      components.scheduler = 'up';
      components.http = 'up';
      log.info('postino started', { httpPort, smtpPort, dataDir: config.storage.data_dir, deliveryMode: config.delivery.mode });
      return { httpPort, smtpPort };
    },
    stop() {
      stopping ??= (async () => {
        for (const name of Object.keys(components)) components[name] = 'stopping';
        // Stop intake first so nothing new is accepted, then drain what is in flight, then close the db.
        await Promise.all([http?.close(), smtp.stop()]);
        await worker.stop();
        await scheduler.stop();
        await writes.drain();
        database.close();
        for (const name of Object.keys(components)) components[name] = 'down';
        log.info('postino stopped');
      })();
      return stopping;
    },
  };
}

/** Each feature registers its routes here; the composition stays in one place. */
function registerFeatureRoutes(routes: Routes, ctx: ApplianceContext): void {
  registerProjectRoutes(routes, ctx.projects);
}

/** Scheduler jobs of every feature. */
function buildJobs(_ctx: ApplianceContext): Job[] {
  return [];
}

function displayHost(host: string): string {
  if (host === '0.0.0.0' || host === '::') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}
