// Bundles the appliance (dist/main.js) and the operator CLI (dist/cli.js) with esbuild.
// better-sqlite3 stays external (native addon); migrations are copied beside the bundle.
import { build } from 'esbuild';
import { cpSync, rmSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

/** Every bundle entry; worker-thread scripts are found beside main.js (src/lib/worker-threads.ts). The benches build the same (bench/lib/bundle.ts). */
export const entryPoints = {
  main: 'src/main.ts',
  cli: 'src/cli.ts',
  // Compose + DKIM signing threads (src/delivery/message-builder.ts).
  'delivery-worker': 'src/delivery/build-worker.ts',
  // Email search on its own read connection (src/emails/search-runner.ts).
  'search-worker': 'src/emails/search-worker.ts',
  // The connection that commits accepted email (src/db/writer-thread.ts).
  'writer-worker': 'src/db/writer-worker.ts',
};

/** esbuild options, shared with the benches' bundles (bench/lib/bundle.ts). */
export const bundleOptions = {
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['better-sqlite3'],
  // Bundled CommonJS dependencies call require(); give the ESM bundle one.
  banner: { js: "import { createRequire as __postinoCreateRequire } from 'node:module'; const require = __postinoCreateRequire(import.meta.url);" },
};

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const quiet = process.argv.includes('--quiet');
  const started = performance.now();
  rmSync('dist', { recursive: true, force: true });
  await build({ ...bundleOptions, entryPoints, outdir: 'dist', sourcemap: true, logLevel: quiet ? 'error' : 'warning' });
  cpSync('src/db/migrations', 'dist/migrations', { recursive: true });
  if (!quiet) console.log(`built dist/ in ${Math.round(performance.now() - started)} ms`);
}
