import assert from 'node:assert/strict';
import { closeSync, openSync, readFileSync } from 'node:fs';
import type { TestContext } from 'node:test';

/**
 * Above this open-file limit a test does not exhaust it: each descriptor held costs kernel memory, and a
 * limit of a million (some container defaults) would take seconds and hundreds of MB to reach.
 */
const maxLimitExhausted = 65_536;

/**
 * Runs `work` while every file descriptor the process may open is in use (/dev/null opened until
 * EMFILE), then frees them all. Where the soft limit is too high to reach, the test is skipped with why
 * (a failure under CI=true, where nothing is silently skipped). Returns undefined when skipped.
 */
export async function withNoFileDescriptorsLeft<T>(t: TestContext, work: () => Promise<T>): Promise<T | undefined> {
  const limit = openFileLimit();
  if (limit > maxLimitExhausted) {
    const why = `the open-file limit is ${limit}, too high to exhaust in a test (run with ulimit -n 20000)`;
    if (process.env.CI === 'true') assert.fail(why);
    t.skip(why);
    return undefined;
  }
  const held: number[] = [];
  try {
    try {
      for (;;) held.push(openSync('/dev/null', 'r'));
    } catch (error) {
      assert.equal((error as NodeJS.ErrnoException).code, 'EMFILE');
    }
    return await work();
  } finally {
    for (const fd of held.splice(0)) closeSync(fd);
  }
}

/** The soft RLIMIT_NOFILE of this process (Linux /proc). */
function openFileLimit(): number {
  const line = /^Max open files\s+(\S+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
  return line?.[1] === 'unlimited' || !line ? Infinity : Number(line[1]);
}
