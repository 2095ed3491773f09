import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAppliance, type Appliance } from '../../src/appliance.js';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import type { Clock } from '../../src/lib/clock.js';
import { createLogger, type Logger } from '../../src/lib/logger.js';

export const testApiKey = 'pst_test_key_0123456789abcdefghijklmnopqrstuv';

export interface TestAppliance {
  appliance: Appliance;
  config: Config;
  dataDir: string;
  baseUrl: string;
  smtpPort: number;
  apiKey: string;
  /** fetch against the API with the default project's key; JSON in, `{status, body, headers}` out. */
  api(method: string, path: string, body?: unknown, init?: { key?: string | null; headers?: Record<string, string> }): Promise<ApiResponse>;
  logs: string[];
  stop(): Promise<void>;
}

export interface ApiResponse {
  status: number;
  body: any;
  headers: Headers;
}

export interface StartOptions {
  /** Environment-style overrides, e.g. { POSTINO_DELIVERY_MODE: 'capture' }. */
  env?: Record<string, string>;
  /** Reuse a data dir (restart tests); otherwise a fresh temp dir removed on stop. */
  dataDir?: string;
  clock?: Clock;
  keepDataDir?: boolean;
  /** Runs on the built appliance before it starts (its database is open and migrated). */
  beforeStart?: (appliance: Appliance) => void;
}

/** Starts the real appliance in-process on ephemeral ports with a temp data dir. */
export async function startAppliance(options: StartOptions = {}): Promise<TestAppliance> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'postino-test-'));
  const config = loadConfig({
    argv: [],
    cwd: dataDir,
    env: {
      POSTINO_HTTP_PORT: '0',
      POSTINO_SMTP_PORT: '0',
      POSTINO_SMTP_HOST: '127.0.0.1',
      POSTINO_SUBMISSION_PORT: '0',
      POSTINO_SUBMISSION_HOST: '127.0.0.1',
      POSTINO_STORAGE_DATA_DIR: dataDir,
      POSTINO_AUTH_API_KEY: testApiKey,
      POSTINO_LOG_LEVEL: 'debug',
      POSTINO_SCHEDULER_ENABLED: 'false',
      ...options.env,
    },
  });
  const logs: string[] = [];
  const log: Logger = createLogger({ level: config.log.level, write: (line) => logs.push(line) });
  const appliance = createAppliance({ config, clock: options.clock, log });
  options.beforeStart?.(appliance);
  await appliance.start();
  const baseUrl = `http://127.0.0.1:${appliance.httpPort}`;
  return {
    appliance,
    config,
    dataDir,
    baseUrl,
    smtpPort: appliance.smtpPort,
    apiKey: testApiKey,
    logs,
    api: (method, path, body, init) => apiCall(baseUrl, method, path, body, init?.key === undefined ? testApiKey : init.key, init?.headers),
    async stop() {
      await appliance.stop();
      if (!options.dataDir && !options.keepDataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export async function apiCall(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
  key?: string | null,
  headers: Record<string, string> = {},
): Promise<ApiResponse> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (key) (init.headers as Record<string, string>).authorization = `Bearer ${key}`;
  if (body !== undefined) {
    (init.headers as Record<string, string>)['content-type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const response = await fetch(baseUrl + path, init);
  const text = await response.text();
  let parsed: unknown = text;
  if ((response.headers.get('content-type') ?? '').includes('application/json')) parsed = JSON.parse(text);
  return { status: response.status, body: parsed, headers: response.headers };
}
