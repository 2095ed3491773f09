import { createAppliance } from './appliance.js';
import { ConfigError, loadProcessConfig } from './config/load.js';
import { StartupError } from './lib/errors.js';

/** Hard limit for a graceful stop; past it the process exits anyway (committed data is safe in WAL). */
const shutdownTimeoutMs = 10_000;

async function main(): Promise<void> {
  const config = loadProcessConfig();
  const appliance = createAppliance({ config });
  if (appliance.generatedApiKey) printGeneratedKey(appliance.generatedApiKey);
  await appliance.start();
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    appliance.context.log.info('shutting down', { signal });
    setTimeout(() => {
      appliance.context.log.error('shutdown took too long; exiting');
      process.exit(1);
    }, shutdownTimeoutMs).unref();
    appliance.stop().then(
      () => process.exit(0),
      (error) => {
        appliance.context.log.error('shutdown failed', { error });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

function printGeneratedKey(key: string): void {
  process.stdout.write(
    [
      '',
      '  Postino created the default project. Its API key (shown only this once):',
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
