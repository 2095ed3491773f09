// Bundles the appliance (dist/main.js) and the operator CLI (dist/cli.js) with esbuild.
// better-sqlite3 stays external (native addon); migrations are copied beside the bundle.
import { build } from 'esbuild';
import { cpSync, rmSync } from 'node:fs';

const quiet = process.argv.includes('--quiet');
const started = performance.now();
rmSync('dist', { recursive: true, force: true });
await build({
  // delivery-worker: compose + DKIM signing threads (src/delivery/message-builder.ts finds it beside main.js);
  // search-worker: email search on its own read connection (src/emails/search-runner.ts);
  // writer-worker: the connection that commits accepted email (src/db/writer-thread.ts).
  entryPoints: {
    main: 'src/main.ts',
    cli: 'src/cli.ts',
    'delivery-worker': 'src/delivery/build-worker.ts',
    'search-worker': 'src/emails/search-worker.ts',
    'writer-worker': 'src/db/writer-worker.ts',
  },
  outdir: 'dist',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  sourcemap: true,
  external: ['better-sqlite3'],
  logLevel: quiet ? 'error' : 'warning',
  // Bundled CommonJS dependencies call require(); give the ESM bundle one.
  banner: { js: "import { createRequire as __postinoCreateRequire } from 'node:module'; const require = __postinoCreateRequire(import.meta.url);" },
});
cpSync('src/db/migrations', 'dist/migrations', { recursive: true });
if (!quiet) console.log(`built dist/ in ${Math.round(performance.now() - started)} ms`);
