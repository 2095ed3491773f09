// Runs every test/**/*.test.ts file with node:test through tsx. Optional args filter by path substring:
//   npm test -- projects config
import { readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

const filters = process.argv.slice(2);
const files = readdirSync('test', { recursive: true })
  .map((file) => `test/${file}`)
  .filter((file) => file.endsWith('.test.ts'))
  .filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)))
  .sort();
if (files.length === 0) {
  console.error('no test files matched');
  process.exit(1);
}
// A test that hangs (a regression that leaves it waiting for something that never happens) fails after
// ten minutes with its name, instead of holding the run until CI's own limit. Node 20 applies the limit to
// each file as a whole too, so it is above the slowest file.
// Two files at a time: one at a time (Node's default on two cores) kept one core mostly idle, as much of
// the suite waits on sockets, timers and child processes; the suite took 15.5 minutes on a slow 2-core
// VM that way and ~10 with two. Each file has its own process, ports, temp directories and databases.
const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-timeout=600000', '--test-concurrency=2', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
