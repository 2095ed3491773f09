import { createAppliance } from './appliance.js';
import { ConfigError, loadProcessConfig } from './config/load.js';
import { StartupError } from './lib/errors.js';
import { flushLogs } from './lib/logger.js';

/** Hard limit for a graceful stop; past it the process exits anyway (committed data is safe in WAL). */
const shutdownTimeoutMs = 10_000;

const usage = `Usage: node dist/main.js [--config PATH] [--section.key=value ...]   (npm start -- ...)

Settings come from config.toml (or --config PATH), POSTINO_<SECTION>_<KEY> variables and flags such as
--http.port=8081; config.example.toml lists every one with its default. Operator commands (API keys,
projects): npm run postino -- help
`;

async function main(): Promise<void> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    process.stdout.write(usage);
    return;
  }
  const config = loadProcessConfig();
  const appliance = createAppliance({ config });
  // Listened for from the start: a SIGTERM during the boot (a `docker stop` right after `docker run`)
  // used to kill the process before the generated key was printed, leaving a key no one had seen. It
  // now waits for the boot to end, then stops as usual.
  let started = false;
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    appliance.context.log.info('shutting down', { signal });
    setTimeout(() => {
      appliance.context.log.error('shutdown took too long; exiting');
      process.exit(1);
    }, shutdownTimeoutMs).unref();
    if (started) stopStarted();
  };
  const stopStarted = () =>
    appliance.stop().then(
      () => process.exit(0),
      (error) => {
        appliance.context.log.error('shutdown failed', { error });
        process.exit(1);
      },
    );
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  try {
    await appliance.start();
  } finally {
    // After the start, so it is not lost above the boot log; also when the start fails, since the key
    // exists from now on and is shown only this once.
    if (appliance.generatedApiKey) printGeneratedKey(appliance.generatedApiKey);
  }
  started = true;
  if (stopping) stopStarted();
}

function printGeneratedKey(key: string): void {
  flushLogs(); // the boot's lines are still buffered (logger.ts): the key goes below them
  process.stdout.write(
    [
      '',
      "  The default project's new API key (shown only this once):",
      '',
      `    ${key}`,
      '',
      '  Use it as "Authorization: Bearer <key>". Lost it? `npm run postino -- keys create`.',
      '',
    ].join('\n') + '\n',
  );
}

main().catch((error: unknown) => {
  if (error instanceof ConfigError) {
    process.stderr.write(`postino: configuration error: ${error.message}\n`);
  } else if (error instanceof StartupError) {
    process.stderr.write(`postino: cannot start: ${error.message}\n`);
  } else {
    process.stderr.write(`postino: failed to start: ${(error as Error)?.stack ?? String(error)}\n`);
  }
  process.exit(1);
});
