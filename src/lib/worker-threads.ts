import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * Worker-thread entries live beside the code that starts them: `<name>.js` beside the bundle (build.mjs
 * entries in dist/), `<source>.ts` beside the source under tsx (tests, `npm run dev`).
 */
export function findWorkerScript(base: string, bundled: string, source: string): URL | undefined {
  const candidates = [new URL(`./${bundled}`, base), new URL(`./${source}`, base)];
  return candidates.find((url) => url.protocol === 'file:' && existsSync(fileURLToPath(url)));
}

/**
 * Under tsx the worker source is TypeScript: register tsx's loader inside the thread first, since
 * workers do not reliably inherit the parent's module hooks.
 */
export function spawnWorker(script: URL, options: WorkerOptions = {}): Worker {
  if (!script.pathname.endsWith('.ts')) return new Worker(script, options);
  const source = `import('tsx/esm/api').then((api) => { api.register(); return import(${JSON.stringify(script.href)}); })`;
  return new Worker(source, { ...options, eval: true });
}
