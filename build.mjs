// Bundles the appliance (dist/main.js) and the operator CLI (dist/cli.js) with esbuild.
// better-sqlite3 stays external (native addon), and so does mailauth: loaded from node_modules with the
// first inbound message (inbound/auth-verdicts.ts) or the first SPF record that needs receivers' evaluation
// (domains/verify.ts), its 3 MB of code (undici, joi, asn1js) would cost every appliance ~10 MB of RSS at rest. Migrations are copied beside the bundle.
import { build } from 'esbuild';
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

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
  external: ['better-sqlite3', 'mailauth'],
  // Bundled CommonJS dependencies call require(); give the ESM bundle one.
  banner: { js: "import { createRequire as __postinoCreateRequire } from 'node:module'; const require = __postinoCreateRequire(import.meta.url);" },
};

/**
 * Writes `bytes` to `path` unless it already holds them, through a temporary file renamed over it. `npm
 * start` and `npm run postino` build first, possibly while the appliance runs from dist/ (the CLI is meant
 * to run beside it): the running process loads worker scripts later, and must never find a file missing
 * or half written. An unchanged build touches nothing.
 */
function replaceIfChanged(path, bytes) {
  try {
    if (Buffer.compare(readFileSync(path), bytes) === 0) return false;
  } catch {
    // Not there yet.
  }
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, bytes);
  renameSync(temporary, path);
  return true;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  // Paths below are the checkout's, wherever the command is run from (`node ~/postino/build.mjs`);
  // esbuild took the working directory when it was imported, so it is told too.
  process.chdir(dirname(fileURLToPath(import.meta.url)));
  const quiet = process.argv.includes('--quiet');
  const started = performance.now();
  const result = await build({ ...bundleOptions, entryPoints, absWorkingDir: process.cwd(), outdir: 'dist', sourcemap: true, write: false, logLevel: quiet ? 'error' : 'warning' });
  let changed = 0;
  for (const file of result.outputFiles) if (replaceIfChanged(relative(process.cwd(), file.path), file.contents)) changed++;
  for (const name of readdirSync('src/db/migrations', { recursive: true, withFileTypes: true })) {
    if (!name.isFile()) continue;
    const source = join(name.parentPath ?? name.path, name.name);
    if (replaceIfChanged(join('dist/migrations', relative('src/db/migrations', source)), readFileSync(source))) changed++;
  }
  if (!quiet) console.log(`built dist/ in ${Math.round(performance.now() - started)} ms (${changed} files changed)`);
}
