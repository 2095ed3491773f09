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
  const write = options.write ?? writeStdoutBatched;
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

/**
 * Lines logged in one event-loop turn go out in one write: stdout to a pipe or file is a synchronous
 * write(2) per call in Node, and one per delivered message cost more than formatting the line. The
 * buffer is flushed on the next turn and when the process exits (an uncaught error still gets its
 * line out); only a SIGKILL can lose the last turn's lines.
 */
let pendingLines: string[] = [];
let flushScheduled = false;
let exitHookInstalled = false;

/** Writes the lines logged so far now: output of its own (the generated key) then comes after them. */
export function flushLogs(): void {
  flushStdout();
}

/** Set once stdout failed (its reader went away: `npm start | head`, a dead log pipe); lines are dropped from then on. */
let stdoutLost = false;

function flushStdout(): void {
  flushScheduled = false;
  if (pendingLines.length === 0) return;
  const chunk = pendingLines.join('\n') + '\n';
  pendingLines = [];
  if (!stdoutLost) process.stdout.write(chunk);
}

/**
 * A write to a closed pipe fails with EPIPE as an 'error' event on the stream, which unhandled ended the
 * process: mail stopped for the want of a log reader. The appliance keeps running without its log.
 */
function keepRunningWithoutStdout(): void {
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (stdoutLost) return;
    stdoutLost = true;
    process.stderr.write(`postino: the log on stdout stopped (${error.code ?? error.message}); the appliance keeps running without it\n`);
  });
  // Piped together with stdout, stderr can go the same way: nothing more is written to it then.
  process.stderr.on('error', () => undefined);
}

function writeStdoutBatched(line: string): void {
  pendingLines.push(line);
  if (flushScheduled) return;
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', flushStdout);
    keepRunningWithoutStdout();
  }
  flushScheduled = true;
  setImmediate(flushStdout);
}

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}

export const silentLogger: Logger = createLogger({ level: 'silent' });
