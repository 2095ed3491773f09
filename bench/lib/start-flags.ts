import { readFileSync } from 'node:fs';

/**
 * The Node flags `npm start` runs the appliance with (package.json's start script, `node <flags>
 * dist/main.js`), so a bench that starts the appliance as a process measures it as it runs: the heap
 * limit changes how much garbage V8 keeps resident, hence the RSS figures.
 */
export function applianceNodeFlags(): string[] {
  const start = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts.start;
  const command = /node((?:\s+--\S+)*)\s+dist\/main\.js/.exec(start);
  if (!command) throw new Error(`package.json start script does not run "node … dist/main.js": ${start}`);
  return command[1].trim().split(/\s+/).filter(Boolean);
}
