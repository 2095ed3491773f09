import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { allThreadsCpuMs, busiestThreads, mainThreadCpuMs } from './thread-cpu.js';

export const seconds = Number(process.env.BENCH_SECONDS ?? 10);
export const connections = 50;

export interface WrkStats {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  /** CPU time of this process's main thread (the event loop serving the requests) per request, µs. */
  mainCpuUs: number;
  /** CPU time of the whole process (every thread: writer, checkpointer, GC, thread pool) per request, µs. */
  processCpuUs: number;
}

const cpuUs = (usage: NodeJS.CpuUsage) => usage.user + usage.system;

/** wrk with 50 connections for BENCH_SECONDS (10) against `url`; `script` sets method, body and headers. */
export async function runWrk(url: string, script: string | undefined, dir: string): Promise<WrkStats> {
  // wrk's own latency histogram; the Lua `done` hook prints percentiles in ms and non-2xx counts.
  const report = `
done = function(summary, latency, requests)
  io.write(string.format("RESULT %f %f %f %d\\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status))
end
`;
  const file = join(dir, `wrk-${Math.random().toString(36).slice(2)}.lua`);
  writeFileSync(file, (script ?? '') + report);
  // 2 cores: wrk gets 1 thread, the appliance the rest.
  // Asynchronously: the server under test runs in this process's event loop.
  const cpuBefore = mainThreadCpuMs();
  const processBefore = process.cpuUsage();
  const threadsBefore = process.env.BENCH_DEBUG ? allThreadsCpuMs() : undefined;
  const { stdout: out } = await promisify(execFile)('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', file, url], { encoding: 'utf8' });
  if (threadsBefore) process.stderr.write(`${out}busiest threads:\n${busiestThreads(threadsBefore, allThreadsCpuMs())}\n`);
  const match = /RESULT (\S+) (\S+) (\S+) (\d+)/.exec(out);
  if (!match) throw new Error(`wrk output not understood:\n${out}`);
  const requests = Number(match[1]) * seconds;
  return { rps: Number(match[1]), p50: Number(match[2]), p99: Number(match[3]), non2xx: Number(match[4]), mainCpuUs: ((mainThreadCpuMs() - cpuBefore) * 1000) / requests, processCpuUs: cpuUs(process.cpuUsage(processBefore)) / requests };
}

/** A wrk script that POSTs `body` as JSON with the API key. */
export function postScript(body: unknown, apiKey: string): string {
  return `
wrk.method = "POST"
wrk.body = ${JSON.stringify(JSON.stringify(body))}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer ${apiKey}"
`;
}

