import { systemClock } from './clock.js';

/**
 * Structured JSON logs, one line per event (DESIGN convention 10). Never log bodies, keys or private keys.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

const levelRank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export interface LoggerOptions {
  level: LogLevel;
  /** Where lines go; defaults to stdout. Tests pass a collector. */
  write?: (line: string) => void;
  now?: () => Date;
}

export function createLogger(options: LoggerOptions, bound: Record<string, unknown> = {}): Logger {
  const threshold = levelRank[options.level];
  const write = options.write ?? ((line: string) => process.stdout.write(line + '\n'));
  const now = options.now ?? systemClock.now;

  const emit = (level: Exclude<LogLevel, 'silent'>, msg: string, fields?: Record<string, unknown>) => {
    if (levelRank[level] < threshold) return;
    const record = { time: now().toISOString(), level, msg, ...bound, ...fields };
    write(JSON.stringify(record, errorReplacer));
  };

  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (fields) => createLogger(options, { ...bound, ...fields }),
  };
}

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}

export const silentLogger: Logger = createLogger({ level: 'silent' });
