import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import type { Registry } from 'prom-client';
import { hostNames } from '../config/host-names.js';
import { ConfigError } from '../config/load.js';
import type { Config } from '../config/schema.js';
import type { DatabaseHandle } from '../db/client.js';
import type { WriteQueue } from '../db/write-queue.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { Resolver } from '../lib/resolver.js';
import { createMessageBuilder } from './message-builder.js';
import { createDeliveryMetrics } from './metrics.js';
import { createOldestQueuedReader, createQueueDepthReader } from './repo.js';
import { createMtaSts } from './mta-sts.js';
import { onDeliveryQueued } from './queue-signal.js';
import { createSendingGuard, type SendingGuard } from './reputation.js';
import { parseRelayUrl } from './relay-url.js';
import { createDeliveryEngine, type DeliveryEngine, type SigningKeyLookup } from './service.js';
import { createSmtpClient } from './smtp-client.js';
import { createDeliveryWorker, type DeliveryWorker } from './worker.js';

/** Composition of the delivery feature from the appliance's parts (called once by appliance.ts). */
export interface DeliveryParts {
  worker: DeliveryWorker;
  engine: DeliveryEngine;
  sendingGuard: SendingGuard;
  /**
   * The worker's state for /healthz: `failed` while no compose/sign thread can build a message
   * (message-builder.ts `failing`): every email waits, and the loop itself still runs.
   */
  state(): 'up' | 'failed';
}

export function createDelivery(deps: {
  config: Config;
  clock: Clock;
  log: Logger;
  resolver: Resolver;
  database: DatabaseHandle;
  writes: WriteQueue;
  findSigningKey: SigningKeyLookup;
  /** VERP Return-Path builder (bounces feature). */
  returnPath?: (emailId: string, mailFromDomain: string) => string;
  /** Prometheus registry served by /metrics (delivery counters, queue depth, latency). */
  metricsRegistry?: Registry;
  /** Open pixel and click rewriting, applied at composition (emails feature). */
  trackHtml?: (html: string, emailId: string, openTracked: boolean) => string;
  /** What checkDeliverySettings read at boot. */
  settings: DeliverySettings;
}): DeliveryParts {
  const { config } = deps;
  const { ca } = deps.settings;
  const log = deps.log.child({ component: 'delivery' });
  const mtaSts = config.delivery.mta_sts_enabled
    ? createMtaSts({
        resolver: deps.resolver,
        log,
        nowMs: () => deps.clock.nowMs(),
        port: config.delivery.mta_sts_port,
        timeoutMs: config.delivery.mta_sts_timeout,
        ca,
        allowPrivate: config.delivery.allow_private_mx,
        recordTtlMs: config.delivery.dns_cache_ttl,
      })
    : undefined;
  const sqlite = deps.database.sqlite;
  const queueDepth = createQueueDepthReader(sqlite);
  const oldestQueuedAt = createOldestQueuedReader(sqlite);
  const metrics = deps.metricsRegistry
    ? createDeliveryMetrics(deps.metricsRegistry, {
        countQueue: queueDepth,
        oldestQueuedAgeMs: () => {
          const queuedAt = oldestQueuedAt();
          return queuedAt === undefined ? 0 : Math.max(0, deps.clock.nowMs() - queuedAt);
        },
      })
    : undefined;
  const sendingGuard = createSendingGuard({
    sqlite: deps.database.sqlite,
    clock: deps.clock,
    policy: {
      enabled: config.delivery.suspension_enabled,
      windowMs: config.delivery.suspension_window,
      minVolume: config.delivery.suspension_min_volume,
      youngMaxBounces: config.delivery.suspension_young_max_bounces,
      youngMaxComplaints: config.delivery.suspension_young_max_complaints,
    },
  });
  const builder = createMessageBuilder({ threads: config.delivery.signing_threads, log });
  const engine = createDeliveryEngine({
    db: deps.database.db,
    sqlite: deps.database.sqlite,
    writes: deps.writes,
    clock: deps.clock,
    log,
    resolver: deps.resolver,
    relayResolver: config.dns.servers.length > 0 ? deps.resolver : undefined,
    config: config.delivery,
    findSigningKey: deps.findSigningKey,
    returnPath: deps.returnPath,
    trackHtml: deps.trackHtml,
    projectPaused: (projectId) => {
      const verdict = sendingGuard.verdict(projectId);
      return verdict.paused ? verdict.reason : undefined;
    },
    mtaSts,
    metrics,
    builder,
    smtp: createSmtpClient({
      heloName: hostNames(config).helo,
      connectTimeoutMs: config.delivery.connect_timeout,
      greetingTimeoutMs: config.delivery.greeting_timeout,
      socketTimeoutMs: config.delivery.socket_timeout,
      idleTimeoutMs: config.delivery.idle_connection_timeout,
      maxMessagesPerConnection: 100,
      maxConnectionsPerGroup: config.delivery.per_domain_concurrency,
      maxIdleConnections: idleConnectionsKept(config.delivery.concurrency),
      ca,
      log,
    }),
  });
  const worker = createDeliveryWorker({ log, tick: () => engine.tick(), recover: () => engine.recover(), halt: () => engine.halt(), drain: () => engine.drain(), idleDelayMs: 250 });
  onDeliveryQueued(deps.database.db, () => worker.poke());
  return { worker, engine, sendingGuard, state: () => (builder.failing ? 'failed' : 'up') };
}

/**
 * Idle outbound connections kept, all destinations together. A slot that finishes a message takes the
 * next one at once, so more idle connections than twice the slots are rarely reused within
 * idle_connection_timeout; each still holds a file descriptor (smtp-client.ts maxIdleConnections).
 */
function idleConnectionsKept(concurrency: number): number {
  return Math.max(50, 2 * concurrency);
}

export interface DeliverySettings {
  /** CA certificates for verified TLS; undefined keeps Node's defaults. */
  ca: string[] | undefined;
}

/**
 * The delivery settings that can only be judged by reading them (the relay URL, the CA file): checked
 * at boot, naming the key, rather than at the first delivery, and before anything is created, since a
 * boot that stopped after creating the default project would leave its generated key unseen.
 */
export function checkDeliverySettings(config: Config): DeliverySettings {
  const { mode, relay_url } = config.delivery;
  if (mode === 'relay' || relay_url) parseRelayUrl(relay_url);
  // Setting the URL and forgetting the mode (the homelab behind a blocked port 25) sent mail direct to MX
  // without a word. Capture may override a relay configuration (a CI run of a production config).
  if (mode === 'mx' && relay_url) {
    throw new ConfigError('delivery.relay_url is set but delivery.mode is "mx", which delivers to the MX hosts and never uses it: set delivery.mode = "relay" to send through it, or remove delivery.relay_url');
  }
  return { ca: loadTrustedCa(config.delivery.extra_ca_file) };
}

/** System roots plus `delivery.extra_ca_file` (a private PKI); undefined keeps Node's defaults. */
function loadTrustedCa(file: string): string[] | undefined {
  if (!file) return undefined;
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(`delivery.extra_ca_file "${file}" cannot be read: ${(error as Error).message}`);
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(`delivery.extra_ca_file "${file}" holds no PEM certificate`);
  return [...rootCertificates, pem];
}
