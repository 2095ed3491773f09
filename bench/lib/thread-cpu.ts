import { readdirSync, readFileSync } from 'node:fs';

/** utime + stime of this process's main thread in ms (Linux /proc; clock ticks of 10 ms). */
export function mainThreadCpuMs(): number {
  return cpuMsOf(`/proc/self/task/${process.pid}/stat`);
}

/** utime + stime in ms of another process: all its threads, or its main thread only. */
export function processCpuMs(pid: number, mainThreadOnly = false): number {
  return cpuMsOf(mainThreadOnly ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`);
}

function cpuMsOf(statFile: string): number {
  const fields = readFileSync(statFile, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** utime + stime in ms of every thread of a process (this one by default), by thread id (name from /proc comm). */
export function allThreadsCpuMs(pid: number | 'self' = 'self'): Map<string, { name: string; ms: number }> {
  const threads = new Map<string, { name: string; ms: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1].split(' ');
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      threads.set(tid, { name, ms: (Number(fields[11]) + Number(fields[12])) * 10 });
    } catch {
      /* the thread ended meanwhile */
    }
  }
  return threads;
}

/** The busiest threads between two allThreadsCpuMs() snapshots, as "name tid: ms" lines (µs per operation with `operations`). */
export function busiestThreads(before: Map<string, { name: string; ms: number }>, after: Map<string, { name: string; ms: number }>, top = 8, operations?: number): string {
  return [...after]
    .map(([tid, t]) => ({ tid, name: t.name, ms: t.ms - (before.get(tid)?.ms ?? 0) }))
    .sort((a, b) => b.ms - a.ms)
    .slice(0, top)
    .map((t) => `${t.name} ${t.tid}: ${t.ms} ms${operations ? ` (${((t.ms * 1000) / operations).toFixed(0)} µs each)` : ''}`)
    .join('\n');
}
