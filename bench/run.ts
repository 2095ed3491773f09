// `npm run bench`: runs every benchmark module in bench/ (or those named: `npm run bench -- storage send`)
// and prints a Markdown table to paste into docs/benchmarks.md.
import { readdirSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { pathToFileURL } from 'node:url';

interface BenchResult {
  name: string;
  value: number | string;
  unit: string;
}

const wanted = process.argv.slice(2);
const files = readdirSync(new URL('.', import.meta.url))
  .filter((file) => /^[a-z-]+\.ts$/.test(file) && file !== 'run.ts')
  .filter((file) => wanted.length === 0 || wanted.some((w) => file.startsWith(w)))
  .sort();

const rows: string[] = [];
for (const file of files) {
  const module = (await import(pathToFileURL(new URL(file, import.meta.url).pathname).href)) as Record<string, unknown>;
  const run = Object.entries(module).find(([name, value]) => name.startsWith('bench') && typeof value === 'function')?.[1] as
    | (() => Promise<BenchResult[]>)
    | undefined;
  if (!run) continue;
  process.stderr.write(`running ${file}…\n`);
  try {
    for (const result of await run()) rows.push(`| ${file.replace(/\.ts$/, '')} | ${result.name} | ${result.value} | ${result.unit} |`);
  } catch (error) {
    rows.push(`| ${file.replace(/\.ts$/, '')} | FAILED: ${(error as Error).message.split('\n')[0]} | | |`);
  }
}

console.log(`Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}\n`);
console.log('| bench | measure | value | unit |');
console.log('|---|---|---|---|');
for (const row of rows) console.log(row);
