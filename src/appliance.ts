import { mkdirSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { hostname } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { hostNames } from './config/host-names.js';
import { ConfigError, settingOrigin } from './config/load.js';
import type { Config } from './config/schema.js';
import { limitLockWaitOnEventLoop, openDatabase, recordStorageFailure, writeTransaction, type DatabaseHandle } from './db/client.js';
import { backupDatabase, unusedDatabaseName } from './db/backup.js';
import { appliedMigrations, migrateDatabase } from './db/migrate.js';
import { fileSystemFull, lockDataDir, nearlyFullBytes, noRoomLeft, unusableDataDir } from './db/data-dir-lock.js';
import { createStorageHealth, statfsFreeBytes, type StorageHealth } from './db/storage-health.js';
import { createWriteQueue, type WriteQueue } from './db/write-queue.js';
import { createWriterThread } from './db/writer-thread.js';
import { bindProcedures } from './write-procedures.js';
import { checkDeliverySettings, createDelivery } from './delivery/create.js';
import { registerDeliveryRoutes } from './delivery/routes.js';
import { readPublishingSettings } from './domains/publishing-settings.js';
import { noteRecordsBasisChange } from './domains/records-basis.js';
import type { DeliveryWorker } from './delivery/worker.js';
import type { SendingGuard } from './delivery/reputation.js';
import { defaultConnectionLimits } from './http/connection-limits.js';
import { createHttpApp, startHttpServer, type HttpServer } from './http/app.js';
import { createMemoryBudget, type MemoryBudget } from './lib/memory-budget.js';
import { registerHealthRoutes, type ComponentState } from './http/health.js';
import { createMetrics, type HttpMetrics } from './http/metrics.js';
import { createRoutes, type Routes } from './http/router.js';
import { parseTrustedProxies, type TrustedProxies } from './http/trusted-proxies.js';
import { systemClock, type Clock } from './lib/clock.js';
import { StartupError, isStorageBusy } from './lib/errors.js';
import { createLogger, type Logger } from './lib/logger.js';
import { createResolver, type Resolver } from './lib/resolver.js';
import { createUrlSigner, type UrlSigner } from './lib/signing.js';
import { canonicalAddress, isLoopbackAddress } from './lib/private-address.js';
import { minRemoteKeyLength } from './projects/keys.js';
import { urlSigningSecret } from './db/settings.js';
import { registerDomainRoutes } from './domains/routes.js';
import { createDomainsService, type DomainsService } from './domains/service.js';
import { registerEmailRoutes } from './emails/routes.js';
import { createSearchRunner, type SearchRunner } from './emails/search-runner.js';
import { createEmailsService, type EmailsService } from './emails/service.js';
import { createHtmlTracker } from './emails/tracking.js';
import { createProjectsRepo } from './projects/repo.js';
import { registerProjectRoutes } from './projects/routes.js';
import { createProjectsService, type ProjectsService } from './projects/service.js';
import { createScheduler, type Job, type Scheduler } from './scheduler/index.js';
import { createBouncesService, type BouncesService } from './bounces/service.js';
import { createInboundSmtp, type InboundSmtp } from './smtp/inbound.js';
import { createMessageSpool } from './smtp/message-spool.js';
import { createSubmissionSmtp, type SubmissionSmtp } from './smtp/submission.js';
import { loadSmtpTls, type TlsMaterial } from './smtp/tls-cert.js';
import { registerSuppressionRoutes } from './suppressions/routes.js';
import { registerContactRoutes } from './contacts/routes.js';
import { createContactsRepo } from './contacts/repo.js';
import { createContactsService } from './contacts/service.js';
import { createMessengerRepo } from './messenger/repo.js';
import { registerMessengerRoutes } from './messenger/routes.js';
import { createMessengerService, type MessengerService } from './messenger/service.js';
import { createInboundRecipients, maxRecipientsPerTransaction } from './inbound/recipients.js';
import { createInboundReceiver } from './inbound/receive.js';
import { createInboundRepo } from './inbound/repo.js';
import { registerInboundRoutes } from './inbound/routes.js';
import { createInboundService } from './inbound/service.js';
import { createTemplatesRepo } from './templates/repo.js';
import { registerTemplateRoutes } from './templates/routes.js';
import { createTemplatesService, type TemplatesService } from './templates/service.js';
import { createSuppressionsService } from './suppressions/service.js';
import { createWebhookDispatcher, type WebhookDispatcher } from './webhooks/dispatcher.js';
import { createWebhookMetrics } from './webhooks/metrics.js';
import { countPendingWebhooks } from './webhooks/repo.js';
import { registerWebhookRoutes } from './webhooks/routes.js';
import { createPacedEmailIndexer, dropFtsShadowStatistics } from './emails/fts-indexer.js';
import { pruneCapturedMessages } from './delivery/capture-retention.js';
import { pruneFinishedEmails } from './emails/retention.js';
import { pruneReceivedEmails } from './inbound/retention.js';
import { assertValidConfigEndpoint, createWebhooksService, type WebhooksService } from './webhooks/service.js';

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
  /** Room to write: the reserve for new mail and the state `/healthz` reports (db/storage-health.ts). */
  storage: StorageHealth;
  metrics: HttpMetrics;
  projects: ProjectsService;
  /** Sending domains: `findVerifiedSendingDomain` (send API), `findSigningKey` (delivery). */
  domains: DomainsService;
  /** Email searches and contact queries, on their own threads (emails/search-runner.ts). */
  searches: SearchRunner;
  /** Send API, email records, tracking; `emails.send` is also the SMTP submission's entry point. */
  emails: EmailsService;
  /** Webhook endpoints; events are recorded with `recordWebhookEvent` from `webhooks/outbox.ts` inside write transactions. */
  webhooks: WebhooksService;
  /** Template CRUD and previews; `templates.findForSend(projectId, {id | name})` resolves a send's template. */
  templates: TemplatesService;
  /** Broadcast drafts; the scheduler's `messenger.run-due` turns queued ones into emails. */
  messenger: MessengerService;
  /** The outbox dispatcher; tests call `runOnce()` with a manual clock. */
  webhookDispatcher: WebhookDispatcher;
  /** Signs URLs that work without an API key (tracking, downloads). */
  signer: UrlSigner;
  /** Asynchronous bounces/complaints at the VERP Return-Path (`bounces.verp.address(emailId, domain)`). */
  bounces?: BouncesService;
  /** Spec §8 suspension rule (delivery feature): `assertSendingAllowed(projectId)` throws `email-sending-paused`. */
  sendingGuard?: SendingGuard;
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
  /** SMTP submission port for apps; 0 when `submission.enabled` is false. */
  readonly submissionPort: number;
}

/** How often the free space of the data directory is read against storage.min_free_mb. */
const freeSpaceCheckMs = 5_000;

/**
 * Builds the whole graph from config: open db → migrate → services → routes → listeners, worker and
 * scheduler. Nothing starts until `start()`; `stop()` stops them all at once (each bounded), then closes the db.
 */
export function createAppliance(options: ApplianceOptions): Appliance {
  const { config } = options;
  const clock = options.clock ?? systemClock;
  const log = options.log ?? createLogger({ level: config.log.level, now: () => clock.now() });
  const resolver = options.resolver ?? createResolver({ servers: config.dns.servers, timeoutMs: config.dns.timeout, tries: config.dns.tries });
  const { trustedProxies, deliverySettings, publishing } = checkConfig(config);
  const { dataDirLock, database, smtpTls, storage, writes } = openStorage(config, log, clock, options.migrationsFolder);
  const metrics = createMetrics();
  const projects = createProjectsService({ repo: createProjectsRepo(database.db, database.sqlite), sqlite: database.sqlite, writes, clock, log });
  // The boot's own writes, after the migrations, said as a full disk when they fail for want of room, as the migrations' are.
  const bootWrite = <T>(write: () => T): T => {
    try {
      return write();
    } catch (error) {
      throw noRoomLeft(error, config.storage.data_dir);
    }
  };
  const { projectId: defaultProjectId, generatedKey } = bootWrite(() => projects.ensureDefaultProject(config.auth.api_key));
  noteRecordsBasisChange(database.db, publishing, log);
  limitLockWaitOnEventLoop(database.sqlite);

  let httpPort = 0;
  let smtpPort = 0;
  let submissionPort = 0;
  const context: ApplianceContext = {
    config,
    clock,
    log,
    resolver,
    database,
    writes,
    storage,
    metrics,
    projects,
    domains: createDomainsService({ db: database.db, sqlite: database.sqlite, writes, clock, log: log.child({ component: 'domains' }), resolver, config, publishing }),
    templates: createTemplatesService({
      repo: createTemplatesRepo(database.db),
      db: database.db,
      writes,
      clock,
      log: log.child({ component: 'templates' }),
      findProject: projects.findProject,
    }),
    webhooks: createWebhooksService({
      db: database.db,
      writes,
      clock,
      log: log.child({ component: 'webhooks' }),
      allowPrivate: config.webhooks.allow_private,
      configUrlOrigin: settingOrigin(config, 'webhooks.url'),
    }),
    webhookDispatcher: createWebhookDispatcher({
      db: database.db,
      writes,
      clock,
      log: log.child({ component: 'webhooks' }),
      resolver,
      policy: {
        allowPrivate: config.webhooks.allow_private,
        timeoutMs: config.webhooks.timeout,
        retryBaseMs: config.webhooks.retry_base,
        retryMaxMs: config.webhooks.retry_max,
        giveUpAfterMs: config.webhooks.give_up_after,
        pollIntervalMs: config.webhooks.poll_interval,
        concurrency: config.webhooks.concurrency,
      },
      metrics: createWebhookMetrics(metrics.registry, countPendingWebhooks(database.sqlite)),
    }),
    signer: createUrlSigner(bootWrite(() => urlSigningSecret(database.db))),
    publicUrl: () => (config.http.public_url || `http://${displayHost(config.http.host)}:${httpPort}`).replace(/\/+$/, ''),
    searches: createSearchRunner(database.sqlite, log.child({ component: 'search' })),
    emails: undefined as unknown as EmailsService, // set right below: the service reads the finished context
    messenger: undefined as unknown as MessengerService, // set right below, from the emails service
  };
  context.emails = createEmailsService(context);
  const contactsRepo = createContactsRepo(database.db);
  context.messenger = createMessengerService({
    db: database.db,
    repo: createMessengerRepo(database.db),
    writes,
    clock,
    log: log.child({ component: 'messenger' }),
    signer: context.signer,
    publicUrl: context.publicUrl,
    linksReachable: linksReachable(config),
    requireVerifiedDomain: config.sending.require_verified_domain,
    emails: context.emails,
    domains: context.domains,
    templates: context.templates,
    projects,
    propertyTypes: contactsRepo.propertyTypes,
    timeZones: contactsRepo.timeZones,
  });

  // One transaction: the sync writes the marker of a configured secret and the endpoint apart. Committed
  // one by one, a start killed between them (a removed webhooks.secret: marker deleted, the endpoint not
  // yet given a new secret) left the next start taking the removed secret, of the whsec_ form, for a
  // generated one, and keeping it for good (webhooks/config-secret.ts).
  bootWrite(() => writeTransaction(database.sqlite, () => context.webhooks.syncConfigEndpoint(defaultProjectId, config.webhooks)));

  // One budget for the API's request bodies and the submission port's messages: they share one heap.
  const memoryBudget = createMemoryBudget(config.http.body_memory_bytes);
  metrics.watchMemoryBudget(memoryBudget);
  metrics.watchStorage(storage);
  const routes = createRoutes({ authenticate: projects.authenticate, log, metrics, bodyLimitBytes: config.http.body_limit_bytes, memoryBudget, trustedProxies });
  const components: Record<string, ComponentState> = { http: 'down', smtp: 'down', worker: 'down', scheduler: 'down', webhooks: 'down' };
  if (config.submission.enabled) components.submission = 'down';
  registerFeatureRoutes(routes, context);
  registerHealthRoutes(routes, { clock, startedAtMs: clock.nowMs(), metrics, metricsToken: config.http.metrics_token, components: () => ({ ...components, worker: workerState(), storage: storage.state }) });

  const app = createHttpApp(routes, { log, metrics });
  // Asynchronous bounces and complaints reach the inbound listener at the VERP Return-Path delivery signs.
  const bounces = createBouncesService({ db: database.db, sqlite: database.sqlite, writes, clock, log: log.child({ component: 'bounces' }), signer: context.signer, localNames: [hostNames(config).smtp, config.domains.mail_hostname, config.delivery.helo_name] });
  // Inbound routes take the other recipients of the same listener (inbound/recipients.ts).
  const inboundRecipients = createInboundRecipients(
    bounces,
    createInboundReceiver({ db: database.db, repo: createInboundRepo(database.db), writes, clock, resolver, hostname: hostNames(config).smtp, log: log.child({ component: 'inbound' }), storage }),
    (projectId, address) => context.domains.findSendingDomain(projectId, address) !== undefined,
  );
  const smtp: InboundSmtp = createInboundSmtp({
    host: config.smtp.host,
    port: config.smtp.port,
    hostname: hostNames(config).smtp,
    maxMessageBytes: config.smtp.max_message_bytes,
    tls: smtpTls,
    log: log.child({ component: 'smtp' }),
    checkRecipient: inboundRecipients.checkRecipient,
    maxRecipients: maxRecipientsPerTransaction,
    receive: inboundRecipients.receive,
    // Routes store whole messages: read into a file when large, parsed once the memory budget has room.
    spool: inDataDir(join(config.storage.data_dir, 'spool-inbound'), () => createMessageSpool(join(config.storage.data_dir, 'spool-inbound'))),
    memoryBudget,
  });
  const delivery = createDelivery({
    config,
    clock,
    log,
    resolver,
    database,
    writes,
    findSigningKey: (projectId, from) => context.domains.findSigningKey(projectId, from),
    returnPath: bounces.verp.address,
    metricsRegistry: metrics.registry,
    trackHtml: createHtmlTracker({ signer: context.signer, publicUrl: context.publicUrl, clickTracking: config.sending.click_tracking, linksReachable: linksReachable(config) }),
    settings: deliverySettings,
  });
  context.bounces = bounces;
  const worker: DeliveryWorker = delivery.worker;
  /** A running worker whose messages cannot be built delivers nothing: said, not `up` (create.ts state). */
  const workerState = (): ComponentState => (components.worker === 'up' ? delivery.state() : components.worker);
  context.sendingGuard = delivery.sendingGuard;
  const scheduler: Scheduler = createScheduler(buildJobs(context), { clock, log: log.child({ component: 'scheduler' }) });
  let submission: SubmissionSmtp | undefined;
  let http: HttpServer | undefined;
  let stopping: Promise<void> | undefined;
  let freeSpaceTimer: NodeJS.Timeout | undefined;

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
    get submissionPort() {
      return submissionPort;
    },
    async start() {
      components.http = 'starting';
      http = await startHttpServer(app, config.http.host, config.http.port, {
        keepAliveTimeoutMs: config.http.keep_alive_timeout,
        connectionLimits: defaultConnectionLimits(trustedProxies),
        log,
      });
      httpPort = http.port;
      components.smtp = 'starting';
      smtpPort = await smtp.start();
      components.smtp = 'up';
      if (config.submission.enabled) {
        components.submission = 'starting';
        submission = createSubmission(context, smtpTls, memoryBudget);
        submissionPort = await submission.start();
        components.submission = 'up';
      }
      worker.start();
      components.worker = 'up';
      context.webhookDispatcher.start();
      components.webhooks = 'up';
      // Not a scheduler job: the reserve holds even where the scheduler is off (benches, some tests).
      freeSpaceTimer = setInterval(() => storage.checkFreeSpace(), freeSpaceCheckMs).unref();
      if (config.scheduler.enabled) scheduler.start();
      else log.warn('scheduler.enabled is false: scheduled emails stay scheduled, domains are not re-verified, and nothing is pruned until it is on');
      components.scheduler = config.scheduler.enabled ? 'up' : 'disabled';
      void projects.resumeDeletions();
      components.http = 'up';
      logStarted(config, log, { httpPort, smtpPort, submissionPort }, context.publicUrl());
      return { httpPort, smtpPort };
    },
    stop() {
      stopping ??= (async () => {
        for (const name of Object.keys(components)) components[name] = 'stopping';
        clearInterval(freeSpaceTimer);
        // Stop intake, delivery and the scheduler together (each bounded: SMTP sessions by
        // smtpCloseTimeoutMs, deliveries by the worker's drain, up to 6 s, runs under way by the scheduler's
        // 2 s), then close the db: all within main.ts's 10 s. The webhook dispatcher too: its POSTs in
        // flight get 2 s. After the drain, either would pass the 10 s; the scheduler also kept starting
        // jobs during the drain (a re-verification waiting on DNS), which then held the close.
        await Promise.all([http?.close(), smtp.stop(), submission?.stop(), worker.stop(), context.webhookDispatcher.stop(), scheduler.stop()]);
        await context.searches.close();
        await writes.close();
        database.close();
        dataDirLock.release();
        for (const name of Object.keys(components)) components[name] = 'down';
        log.info('postino stopped');
      })();
      return stopping;
    },
  };
}

/**
 * Settings checked before anything is created, some with the API's own rules: a boot that stopped after
 * the default project was made would leave its generated key unseen.
 */
function checkConfig(config: Config) {
  assertPublicUrl(config.http.public_url);
  assertNetworkSettings(config);
  assertSecretsFitTheirReach(config);
  const trustedProxies = trustedProxiesOf(config);
  assertValidConfigEndpoint(config.webhooks, config.webhooks.allow_private);
  return { trustedProxies, deliverySettings: checkDeliverySettings(config), publishing: readPublishingSettings(config, hostname()) };
}

/**
 * The data directory taken (its lock), the TLS pair, the database opened and migrated, and the write
 * queue over it. A failure on the way releases the lock, so the next start is not refused for it.
 */
function openStorage(config: Config, log: Logger, clock: Clock, migrationsFolder: string | undefined) {
  const dataDirLock = lockDataDir(config.storage.data_dir);
  let database: DatabaseHandle;
  let smtpTls: TlsMaterial;
  try {
    smtpTls = inDataDir(join(config.storage.data_dir, 'tls'), () =>
      loadSmtpTls({
        keyPath: config.submission.tls_key,
        certPath: config.submission.tls_cert,
        dataDir: config.storage.data_dir,
        hostname: hostNames(config).submission,
        clock,
      }),
    );
    database = openMigratedDatabase(config, log, migrationsFolder);
  } catch (error) {
    dataDirLock.release();
    throw noRoomLeft(error, config.storage.data_dir);
  }
  log.info('smtp tls', { origin: smtpTls.origin });
  if (smtpTls.mismatch) log.warn(smtpTls.mismatch);
  const storage = createStorageHealth({
    log,
    clock,
    dataDir: config.storage.data_dir,
    minFreeBytes: config.storage.min_free_mb * 1_048_576,
    database: { path: database.sqlite.name, detached: (error) => databaseDetached(database.sqlite, config.storage.data_dir, error, log) },
  });
  storage.checkFreeSpace();
  const writes = createWriteQueue(database.sqlite, log, {
    procedures: bindProcedures(database.sqlite),
    writer: config.storage.writer_thread ? createWriterThread(database.sqlite, log) : undefined,
    storage,
  });
  return { dataDirLock, database, smtpTls, storage, writes };
}

/**
 * The database file was removed or replaced under the running appliance (storage-health.ts): the write
 * queue stores nothing more (its check of recorded failures), and what the open file still holds, every
 * email accepted until now, is copied out through the open connection before a restart loses it.
 */
function databaseDetached(sqlite: DatabaseHandle['sqlite'], dataDir: string, error: Error, log: Logger): void {
  recordStorageFailure(sqlite, error);
  // After the request that noticed it is answered (refused): the copy holds the event loop while it reads.
  setImmediate(() => rescueDetachedDatabase(sqlite, dataDir, error, log));
}

function rescueDetachedDatabase(sqlite: DatabaseHandle['sqlite'], dataDir: string, error: Error, log: Logger): void {
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const copy = unusedDatabaseName(join(dataDir, 'postino.rescued.sqlite'));
    backupDatabase(sqlite, copy);
    log.error(`${error.message}: what it held is copied to ${copy}. Stop the appliance, then \`restore ${copy}\` (the operator CLI) and start it again`);
  } catch (copyError) {
    log.error(`${error.message}, and what it held could not be copied out; it is lost once the appliance stops`, { error: copyError });
  }
}

/**
 * The HELO name delivery announces, when mail leaves the machine: a machine's own name is often no domain
 * (`vm`, a container's id), and receivers that ask for one (Postfix's reject_non_fqdn_helo_hostname, a
 * common setting) refuse every message. Such refusals do not bounce the recipients (classify.ts
 * refusesSendingHost), but the mail does not go either: said at start, with the setting that fixes it.
 */
function warnUnqualifiedHeloName(config: Config, log: Logger): void {
  const helo = hostNames(config).helo;
  if (config.delivery.mode === 'capture' || helo.includes('.') || addressLiteral.test(helo)) return;
  log.warn('delivery.helo_name is not a fully qualified domain name: receivers that require one refuse every message; set it to this host\'s public name (its PTR record)', { heloName: helo });
}

/** What other machines can use that the operator may not expect: an open /metrics, a short key refused to them. */
function warnOfOpenDoors(config: Config, log: Logger): void {
  const reach = apiReachBeyondLoopback(config);
  if (reach && !config.http.metrics_token) {
    log.warn(`http.metrics_token is not set while ${reach}: /metrics (every project's counts, the failed-key count) is open to anyone who reaches the API; set a token of ${minRemoteKeyLength} characters or more and give it to the scraper`);
  }
  const submissionIsRemote = config.submission.enabled && !isLoopbackAddress(config.submission.host);
  if (submissionIsRemote && config.auth.api_key && config.auth.api_key.length < minRemoteKeyLength) {
    log.warn(`auth.api_key has fewer than ${minRemoteKeyLength} characters: SMTP submission takes it from loopback clients only (it would be guessed in seconds from other machines)`, { submission: hostAndPort(config.submission.host, config.submission.port) });
  }
}

/** `[::]:2525` for an IPv6 address (`:::2525` reads as nothing), `0.0.0.0:2525` otherwise. */
const hostAndPort = (host: string, port: number) => (isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`);

/** The start line, with where each listener is reachable, and what links in mail will point to. */
function logStarted(config: Config, log: Logger, ports: { httpPort: number; smtpPort: number; submissionPort: number }, publicUrl: string): void {
  log.info('postino started', {
    ...ports,
    // Where each listener is reachable: SMTP and submission listen beyond loopback by default, the API does not.
    listening: {
      http: hostAndPort(config.http.host, ports.httpPort),
      smtp: hostAndPort(config.smtp.host, ports.smtpPort),
      submission: config.submission.enabled ? hostAndPort(config.submission.host, ports.submissionPort) : 'disabled',
    },
    // Resolved: a relative data_dir lands where the process started (under systemd without a
    // WorkingDirectory, in /), which the setting as written would not tell.
    dataDir: resolvePath(config.storage.data_dir),
    deliveryMode: config.delivery.mode,
  });
  warnUnqualifiedHeloName(config, log);
  warnOfOpenDoors(config, log);
  // Tracking links are built on the API's address: unreachable by recipients when mail leaves this
  // machine (mx or relay) or the API listens beyond loopback, unless a public URL is configured.
  if (!linksReachable(config)) {
    log.warn('http.public_url is not set: links in mail would point to this address, which recipients cannot reach; until it is set to the public base URL, nothing is tracked and broadcasts cannot be queued', { using: publicUrl });
  } else if (!config.http.public_url && (config.delivery.mode !== 'capture' || !isLoopbackAddress(config.http.host))) {
    log.warn('http.public_url is not set: open-tracking pixels, click links and signed links point to this address; set it to the public base URL if recipients reach the appliance by another', { using: publicUrl });
  }
}

/** The submission listener feeds the same send pipeline as the HTTP API (one email per RCPT). */
function createSubmission(ctx: ApplianceContext, tls: TlsMaterial, memoryBudget: MemoryBudget): SubmissionSmtp {
  const { config } = ctx;
  const name = hostNames(config).submission;
  const log = ctx.log.child({ component: 'submission' });
  return createSubmissionSmtp({
    host: config.submission.host,
    port: config.submission.port,
    hostname: name,
    maxMessageBytes: config.submission.max_message_bytes,
    tls,
    allowInsecureAuth: config.submission.allow_insecure_auth,
    greetingDelay: config.submission.greeting_delay,
    authenticate: ctx.projects.authenticate,
    memoryBudget,
    spool: inDataDir(join(config.storage.data_dir, 'spool'), () => createMessageSpool(join(config.storage.data_dir, 'spool'))),
    send: (projectId, inputs, inlineImages, { messageId, headerRecipients, attachedMessages }) =>
      inputs.length === 1
        ? ctx.emails.send(projectId, inputs[0], { inlineImages, messageId, headerRecipients, attachedMessages }).then((r) => [r])
        : ctx.emails.sendCopies(projectId, inputs, { inlineImages, messageId, headerRecipients, attachedMessages }),
    log,
  });
}

/**
 * Makes what lives in `folder` of the data directory (the generated TLS pair, the submission spool). A
 * folder that cannot be used (a file at its name, one left owned by another user) is the operator's to
 * fix, named as the data directory's: it came out as an errno and a stack trace.
 */
function inDataDir<T>(folder: string, make: () => T): T {
  try {
    return make();
  } catch (error) {
    throw unusableDataDir(error, folder);
  }
}

/** The appliance's database, migrated to this build; closed again when the migration fails. */
function openMigratedDatabase(config: Config, log: Logger, migrationsFolder: string | undefined): DatabaseHandle {
  const databasePath = join(config.storage.data_dir, 'postino.sqlite');
  let database: DatabaseHandle;
  try {
    const droppedStatistics = dropFtsShadowStatistics(databasePath);
    if (droppedStatistics > 0) log.warn('dropped planner statistics of the text search index: they make its merges scan the whole index', { rows: droppedStatistics });
    database = openDatabase({
      path: databasePath,
      synchronous: config.storage.synchronous,
      onCheckpointerLost: (error) => log.error('the checkpointer thread stopped: commits checkpoint the database log themselves from now on (slower); restart the appliance to start it again', { error }),
    });
  } catch (error) {
    throw unusableDataDir(error, databasePath);
  }
  try {
    assertWriteLockFree(database, databasePath);
    const before = appliedMigrations(database.sqlite);
    migrateDatabase(database.db, migrationsFolder);
    const after = appliedMigrations(database.sqlite);
    // An upgrade changes the file for good: the operator should see that it happened, and from where.
    if (after > before && before > 0) log.info('database migrated', { path: databasePath, applied: after - before, migrations: after });
  } catch (error) {
    closeAfterFailedMigration(database);
    throw migrationFailure(error, config);
  }
  return database;
}

/**
 * The boot writes (migrations, the default project and its key, the config's webhook endpoint) before
 * anything answers: with the write lock held by another process, as an operator's `sqlite3` session left
 * inside BEGIN IMMEDIATE holds it, a restart (after a crash, a kill -9, a changed setting) waited
 * busy_timeout (5 s) and stopped with "failed to start: SqliteError: database is locked" and a stack
 * trace. Asked for once, here, with that same wait (an operator CLI's write is short), and said as the
 * thing to do. Taking it and letting it go writes nothing.
 */
function assertWriteLockFree(database: DatabaseHandle, databasePath: string): void {
  try {
    database.sqlite.exec('BEGIN IMMEDIATE');
    database.sqlite.exec('ROLLBACK');
  } catch (error) {
    if (!isStorageBusy(error)) throw error;
    throw new StartupError(
      `another process holds the write lock of ${databasePath} (an sqlite3 session inside a transaction, for one): commit or roll it back (or stop that process), then start again`,
    );
  }
}

/**
 * A migration that failed for want of room, said so. Drizzle's migrator answers a failed statement with
 * a ROLLBACK, and when SQLite has already rolled back by itself (as after SQLITE_FULL) it throws that
 * ROLLBACK's error instead ("Failed to run the query 'ROLLBACK'"), the cause lost: then the free space
 * tells, read against the reserve the operator set for the queue (storage.min_free_mb).
 */
function migrationFailure(error: unknown, config: Config): Error {
  const dataDir = config.storage.data_dir;
  const named = noRoomLeft(error, dataDir);
  if (named !== error) return named;
  const free = statfsFreeBytes(dataDir);
  // With the reserve off (min_free_mb = 0), a few hundred kB left still explain it.
  if (free >= Math.max(config.storage.min_free_mb * 1_048_576, nearlyFullBytes)) return error as Error;
  // The error itself goes along: with little room, a migration may still have failed for another cause.
  const belowReserve = config.storage.min_free_mb > 0 ? ', below storage.min_free_mb' : '';
  return fileSystemFull(dataDir, `${Math.floor(free / 1024)} kB free${belowReserve}, and the database could not be migrated to this build: ${(error as Error).message}`);
}

/**
 * The migration's error is the one to report: on a full disk the close's own checkpoint fails too
 * ("disk I/O error"), and thrown from here it hid the cause. The connection is closed either way.
 */
function closeAfterFailedMigration(database: DatabaseHandle): void {
  try {
    database.close();
  } catch {
    // Reported as the migration's failure, thrown next (drizzle applies the migrations in one transaction).
  }
}

/** Each feature registers its routes here; the composition stays in one place. */
function registerFeatureRoutes(routes: Routes, ctx: ApplianceContext): void {
  registerProjectRoutes(routes, ctx.projects);
  registerDomainRoutes(routes, ctx.domains);
  registerEmailRoutes(routes, ctx.emails);
  registerWebhookRoutes(routes, ctx.webhooks);
  registerTemplateRoutes(routes, ctx.templates);
  registerSuppressionRoutes(routes, createSuppressionsService({ db: ctx.database.db, writes: ctx.writes, clock: ctx.clock }));
  registerInboundRoutes(
    routes,
    createInboundService({ db: ctx.database.db, repo: createInboundRepo(ctx.database.db), writes: ctx.writes, clock: ctx.clock, signer: ctx.signer, publicUrl: ctx.publicUrl, requireVerifiedDomain: ctx.config.sending.require_verified_domain, hostname: hostNames(ctx.config).smtp }),
  );
  registerContactRoutes(routes, createContactsService({ db: ctx.database.db, repo: createContactsRepo(ctx.database.db), writes: ctx.writes, clock: ctx.clock, searches: ctx.searches }));
  registerMessengerRoutes(routes, ctx.messenger);
  registerDeliveryRoutes(routes, { db: ctx.database.db, sqlite: ctx.database.sqlite, clock: ctx.clock, mode: ctx.config.delivery.mode, captureRetentionMs: ctx.config.delivery.capture_retention });
}

/** Scheduler jobs of every feature. */
export function buildJobs(ctx: ApplianceContext): Job[] {
  const indexEmails = createPacedEmailIndexer(ctx.database.sqlite, ctx.writes);
  return [
    // Every minute; the job itself picks the domains whose re-check interval has passed (domains.recheck_*).
    { name: 'domains.reverify', schedule: '0 * * * * *', run: (now) => ctx.domains.reverifyAll(now) },
    // Hourly: the DKIM keys of deleted domains, kept for their queued mail, once that mail is finished.
    { name: 'domains.prune-retired-keys', schedule: '0 41 * * * *', run: (now) => ctx.domains.pruneRetiredKeys(now) },
    { name: 'emails.release-scheduled', schedule: '*/5 * * * * *', run: (now) => ctx.emails.releaseScheduled(now) },
    // Queued broadcasts whose time has come become an email per recipient (messenger/service.ts).
    { name: 'messenger.run-due', schedule: '*/5 * * * * *', run: (now) => ctx.messenger.runDue(now) },
    { name: 'emails.prune-idempotency-keys', schedule: '0 17 * * * *', run: (now) => ctx.emails.pruneIdempotencyKeys(now) },
    // Hourly: finished emails last changed more than emails.retention ago (0s, the default, keeps them).
    { name: 'emails.prune', schedule: '0 35 * * * *', run: (now) => pruneFinishedEmails(ctx.writes, ctx.log, now, ctx.config.emails.retention) },
    { name: 'webhooks.prune', schedule: '0 23 * * * *', run: (now) => ctx.webhooks.pruneEvents(now, ctx.config.webhooks.retention) },
    {
      name: 'delivery.prune-captured',
      schedule: '0 29 * * * *',
      run: (now) => pruneCapturedMessages(ctx.writes, ctx.log, now, ctx.config.delivery.capture_retention),
    },
    // Hourly: received emails older than smtp.received_retention (0s, the default, keeps them).
    { name: 'inbound.prune', schedule: '0 47 * * * *', run: (now) => pruneReceivedEmails(ctx.writes, ctx.log, now, ctx.config.smtp.received_retention) },
    // Trigram indexing off the send path (fts-indexer.ts); search stays exact for rows not indexed yet.
    { name: 'emails.index-fts', schedule: '* * * * * *', run: (now) => indexEmails(now.getTime()) },
  ];
}

/**
 * Whether links in mail (tracking, unsubscribe) can reach the appliance: not when mail leaves this machine
 * (mx, relay) and, with no http.public_url, they would name it by a loopback address (http.host 127.0.0.1,
 * or 0.0.0.0, which the links read as 127.0.0.1). A sandbox's captured mail is read here, on loopback.
 */
export function linksReachable(config: Config): boolean {
  const { host } = config.http;
  return config.delivery.mode === 'capture' || config.http.public_url !== '' || !(isLoopbackAddress(host) || isEveryInterface(host));
}

/** 0.0.0.0 or ::, however written. */
function isEveryInterface(host: string): boolean {
  const canonical = canonicalAddress(host);
  return canonical === '0.0.0.0' || canonical === '::';
}

/**
 * Why other machines reach the API, or undefined: a public http.host, and also a loopback one behind a
 * reverse proxy (the README's VPS setup), which trusted_proxies or a public_url away from loopback tell of.
 */
function apiReachBeyondLoopback(config: Config): string | undefined {
  const { host, trusted_proxies, public_url } = config.http;
  if (!isLoopbackAddress(host)) return `the API listens beyond loopback (http.host = ${host})`;
  if (trusted_proxies.length > 0) return 'a reverse proxy passes other machines\' requests to the API (http.trusted_proxies is set)';
  const publicHost = public_url ? hostOfUrl(public_url) : undefined;
  if (publicHost !== undefined && !isLoopbackAddress(publicHost)) return `other machines reach the API at http.public_url (${public_url})`;
  return undefined;
}

function hostOfUrl(value: string): string | undefined {
  try {
    return new URL(value).hostname.replace(/^\[(.*)\]$/, '$1');
  } catch {
    return undefined;
  }
}

/**
 * A configured API key or metrics token guards an API other machines can reach (projects/keys.ts
 * minRemoteKeyLength). The submission listener takes a short key only from loopback clients
 * (smtp/submission.ts), so it needs no rule here.
 */
function assertSecretsFitTheirReach(config: Config): void {
  const reach = apiReachBeyondLoopback(config);
  if (!reach) return;
  const secrets = [
    ['auth.api_key', config.auth.api_key, 'or leave auth.api_key empty to have one generated'],
    ['http.metrics_token', config.http.metrics_token, 'and put it in the scraper too (Prometheus: authorization.credentials)'],
  ] as const;
  for (const [key, value, otherwise] of secrets) {
    if (value && value.length < minRemoteKeyLength) {
      throw new ConfigError(`${key} must have at least ${minRemoteKeyLength} characters when ${reach}: a shorter one is guessed in seconds. Use a random one, e.g. \`openssl rand -hex 24\`, ${otherwise}`);
    }
  }
}

/** http.public_url is put in front of every tracking and signed link: an http(s) base URL or nothing. */
function assertPublicUrl(value: string): void {
  if (!value) return;
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) throw new ConfigError(`http.public_url must be an http(s) base URL such as https://mail.example.com, got ${JSON.stringify(value)}`);
}

/**
 * Names that go on the wire, and into DNS records when domains.mail_hostname (checked with the domains)
 * is not set: one with a space would break every EHLO, a greeting or an MX record (a name that is not
 * fully qualified is a warning at start, `warnUnqualifiedHeloName`: a sandbox or a relay on the LAN takes
 * it). And two listeners on one port: the second failed to bind at boot, as if another program held it.
 */
function assertNetworkSettings(config: Config): void {
  const names: [string, string, boolean][] = [
    ['delivery.helo_name', config.delivery.helo_name, true],
    ['smtp.hostname', config.smtp.hostname, false],
    ['submission.hostname', config.submission.hostname, false],
  ];
  for (const [setting, value, literalAllowed] of names) {
    if (!value || hostName.test(value) || (literalAllowed && addressLiteral.test(value))) continue;
    const literal = literalAllowed ? ' or an address literal such as [203.0.113.5]' : '';
    throw new ConfigError(`${setting} must be a host name such as mta.example.net (letters, digits, hyphens and dots)${literal}, got ${JSON.stringify(value)}`);
  }
  assertDistinctPorts(config);
}

const hostName = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$/;
const addressLiteral = /^\[(?:IPv6:)?[0-9A-Fa-f.:]+\]$/;

function assertDistinctPorts(config: Config): void {
  const listeners: [string, string, number][] = [
    ['http.port', config.http.host, config.http.port],
    ['smtp.port', config.smtp.host, config.smtp.port],
    ...(config.submission.enabled ? [['submission.port', config.submission.host, config.submission.port] as [string, string, number]] : []),
  ];
  for (const [i, [setting, host, port]] of listeners.entries()) {
    if (port === 0) continue;
    const clash = listeners.slice(0, i).find(([, otherHost, otherPort]) => otherPort === port && (canonicalAddress(otherHost) === canonicalAddress(host) || isEveryInterface(host) || isEveryInterface(otherHost)));
    if (clash) throw new ConfigError(`${setting} and ${clash[0]} are both ${port}: each listener needs a port of its own`);
  }
}

function trustedProxiesOf(config: Config): TrustedProxies {
  try {
    return parseTrustedProxies(config.http.trusted_proxies);
  } catch (error) {
    throw new ConfigError(`http.trusted_proxies: ${(error as Error).message} (each entry is the address, or the network, of a proxy in front of the API)`);
  }
}

function displayHost(host: string): string {
  if (isEveryInterface(host)) return '127.0.0.1';
  const canonical = canonicalAddress(host);
  return isIPv6(canonical) ? `[${canonical}]` : canonical;
}

