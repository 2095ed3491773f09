import { createAppliance, type Appliance } from './appliance.js';
import { ConfigError, loadProcessConfig } from './config/load.js';
import { StartupError } from './lib/errors.js';
import { createLogger, flushLogs } from './lib/logger.js';

/** Hard limit for a graceful stop; past it the process exits anyway (committed data is safe in WAL). */
const shutdownTimeoutMs = 10_000;

const usage = `Usage: node dist/main.js [--config PATH] [--section.key=value ...]   (npm start -- ...)

Settings come from config.toml (or --config PATH), POSTINO_<SECTION>_<KEY> variables and flags such as
--http.port=8081; config.example.toml lists every one with its default. Operator commands (API keys,
projects, backup and restore): npm run postino -- help
`;

async function main(): Promise<void> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    process.stdout.write(usage);
    return;
  }
  const config = loadProcessConfig();
  // Listened for from the start, before the appliance is created: a SIGTERM during the boot (a `docker
  // stop` right after `docker run`) used to kill the process before the generated key was printed,
  // leaving a key no one had seen. A signal is handled once the synchronous part of the boot is over;
  // it then waits for the boot to end, and stops as usual.
  let appliance: Appliance | undefined;
  let started = false;
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      // A second Ctrl-C used to be ignored without a word.
      appliance?.context.log.warn(`already stopping (at most ${shutdownTimeoutMs / 1000} s); send SIGKILL to stop at once`, { signal });
      return;
    }
    stopping = true;
    // The boot failed before the appliance existed (its error is on its way out): nothing to stop.
    if (!appliance) return process.exit(1);
    const { log } = appliance.context;
    log.info('shutting down', { signal });
    setTimeout(() => {
      log.error('shutdown took too long; exiting');
      process.exit(1);
    }, shutdownTimeoutMs).unref();
    if (started) stopStarted(appliance);
  };
  const stopStarted = (running: Appliance) =>
    running.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        running.context.log.error('shutdown failed', { error });
        process.exit(1);
      },
    );
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // The terminal or SSH session of a foreground start closed (or a HUP sent to reload, which the appliance
  // has not: its settings are read at boot). Left to Node's default it ended the process at once, cutting
  // off requests in flight and SMTP sessions without their 421: the same graceful stop instead.
  process.on('SIGHUP', () => stop('SIGHUP'));
  appliance = createAppliance({ config });
  try {
    await appliance.start();
  } finally {
    // After the start, so it is not lost above the boot log; also when the start fails, since the key
    // exists from now on and is shown only this once.
    if (appliance.generatedApiKey) await showGeneratedKey(appliance);
  }
  started = true;
  if (stopping) stopStarted(appliance);
}

/**
 * Prints the key, then records that it was: a start killed before the print leaves the key marked
 * unshown, and the next start revokes it and prints a new one (projects/service.ts revokeUnshownKey).
 */
async function showGeneratedKey(appliance: Appliance): Promise<void> {
  printGeneratedKey(appliance.generatedApiKey!);
  try {
    await appliance.context.projects.generatedKeyShown();
  } catch (error) {
    // Not recorded (a full disk): the next start takes the key for one never shown, and prints another.
    appliance.context.log.warn('could not record that the generated API key was printed: the next start revokes it and prints a new one', { error: (error as Error).message });
  }
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
  // The boot's lines are still buffered (logger.ts): the reason goes below them, not above a log that
  // then read like a start that went well.
  const reason = error instanceof ConfigError ? `configuration error: ${error.message}` : error instanceof StartupError ? `cannot start: ${error.message}` : undefined;
  // In the JSON log too: a log collector reading stdout saw the boot's lines and the process gone.
  createLogger({ level: 'error' }).error('postino did not start', { reason: reason ?? (error as Error)?.message ?? String(error) });
  flushLogs();
  process.stderr.write(`postino: ${reason ?? `failed to start: ${(error as Error)?.stack ?? String(error)}`}\n`);
  process.exit(1);
});
