import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { build, type BuildOptions } from 'esbuild';
// @ts-expect-error build.mjs is plain JavaScript without type declarations.
import { bundleOptions, entryPoints } from '../../build.mjs';

/**
 * Benches measure the code as it ships: the production bundle (build.mjs's entries and options, so every
 * worker-thread script sits beside it), plus `extraEntries`. Under tsx every function carries a
 * `__name` wrapper, ~6 % of the send path's event-loop time, that the bundle does not have.
 * Written under node_modules/ so the external better-sqlite3 resolves (ESM ignores NODE_PATH).
 */
export async function buildBenchBundle(name: string, extraEntries: Record<string, string> = {}): Promise<string> {
  const out = join(process.cwd(), 'node_modules', '.postino-bench', name);
  await build({ ...(bundleOptions as BuildOptions), entryPoints: { ...entryPoints, ...extraEntries }, outdir: out, logLevel: 'error' });
  cpSync('src/db/migrations', join(out, 'migrations'), { recursive: true });
  return out;
}
