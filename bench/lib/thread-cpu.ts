import { readFileSync } from 'node:fs';

/** utime + stime of this process's main thread in ms (Linux /proc; clock ticks of 10 ms). */
export function mainThreadCpuMs(): number {
  const fields = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}
