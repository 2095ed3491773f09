import { createContext, Script } from 'node:vm';

/**
 * Runs `work` on the event loop, interrupted after `limitMs` (vm's watchdog stops the running code from
 * another thread, which nothing else can do to synchronous JavaScript). For third-party code whose cost
 * some inputs make quadratic: marked's lexer, highlight.js. Starting the watchdog costs ~0.1–0.5 ms, so
 * callers run small inputs directly.
 */
export function runWithTimeLimit<T>(work: () => T, limitMs: number): T {
  context.work = work;
  try {
    return script.runInContext(context, { timeout: Math.max(1, Math.round(limitMs)) }) as T;
  } finally {
    context.work = undefined;
  }
}

/** Whether `error` is the watchdog's interruption of `runWithTimeLimit`. */
export function isTimeLimitExceeded(error: unknown): boolean {
  return (error as { code?: string } | null)?.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT';
}

const context = createContext({});
const script = new Script('work()');
