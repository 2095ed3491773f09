import { createSocket } from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as ApplianceEntry from './appliance-entry.js';
import { buildBenchBundle } from './bundle.js';

export const benchSynchronous = process.env.BENCH_SYNC ?? 'FULL';

export const benchApiKey = 'pst_bench_key_0123456789abcdefghijklmnopqrstuv';

export interface InProcessAppliance {
  appliance: ReturnType<typeof ApplianceEntry.createAppliance>;
  /** The production bundle's bench entry (its other exports), usable until stop(). */
  entry: typeof ApplianceEntry;
  baseUrl: string;
  /** A temp directory of the bench's own (wrk scripts), removed by stop(). */
  dir: string;
  stop(): Promise<void>;
}

/**
 * The appliance as the production bundle builds it, in this process (so a bench can reach its services),
 * with synchronous=FULL, the writer thread and the scheduler, on a temp data dir. A DNS server that never
 * answers: the delivery worker's first lookup waits out its timeout, so the worker holds one job and does
 * nothing else while the API is measured (delivery throughput is bench/delivery.ts).
 */
export async function startInProcessAppliance(name: string, env: Record<string, string> = {}): Promise<InProcessAppliance> {
  const dir = mkdtempSync(join(tmpdir(), `postino-bench-${name}-`));
  const bundle = await buildBenchBundle(`${name}-${dir.split('-').pop()}`, { 'appliance-entry': 'bench/lib/appliance-entry.ts' });
  const entry = (await import(pathToFileURL(join(bundle, 'appliance-entry.js')).href)) as typeof ApplianceEntry;
  const { createAppliance, loadConfig, silentLogger } = entry;
  const blackholeDns = createSocket('udp4');
  await new Promise<void>((resolve) => blackholeDns.bind(0, '127.0.0.1', resolve));
  const config = loadConfig({
    argv: [],
    cwd: dir,
    env: {
      POSTINO_HTTP_PORT: '0',
      POSTINO_SMTP_PORT: '0',
      POSTINO_SUBMISSION_PORT: '0',
      POSTINO_STORAGE_DATA_DIR: dir,
      // Diagnostics only (BENCH_SYNC=NORMAL: what the WAL sync costs); the figures are FULL.
      POSTINO_STORAGE_SYNCHRONOUS: benchSynchronous,
      // A/B runs: POSTINO_STORAGE_WRITER_THREAD=false commits on the main connection.
      POSTINO_STORAGE_WRITER_THREAD: process.env.POSTINO_STORAGE_WRITER_THREAD ?? 'true',
      POSTINO_AUTH_API_KEY: benchApiKey,
      POSTINO_LOG_LEVEL: 'silent',
      // The FTS indexer job runs during the measurement, as in production (=false for A/B runs without it).
      POSTINO_SCHEDULER_ENABLED: process.env.POSTINO_SCHEDULER_ENABLED ?? 'true',
      POSTINO_SENDING_REQUIRE_VERIFIED_DOMAIN: 'false',
      // The issue measures *accepted* sends. The delivery worker stays on (it is part of the appliance)
      // with one slot, held by a job whose MX lookup never gets an answer.
      POSTINO_DELIVERY_CONCURRENCY: '1',
      POSTINO_DNS_SERVERS: `127.0.0.1:${blackholeDns.address().port}`,
      ...env,
    },
  });
  const appliance = createAppliance({ config, log: silentLogger });
  const cleanup = () => {
    blackholeDns.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(bundle, { recursive: true, force: true });
  };
  try {
    await appliance.start();
  } catch (error) {
    cleanup();
    throw error;
  }
  return {
    appliance,
    entry,
    baseUrl: `http://127.0.0.1:${appliance.httpPort}`,
    dir,
    async stop() {
      await appliance.stop();
      cleanup();
    },
  };
}
