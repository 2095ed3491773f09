import { randomBytes } from 'node:crypto';
import type { Clock } from './clock.js';

/**
 * Ids are 24 lowercase hex characters and time-ordered, like MongoDB ObjectIds (COMPAT.md "Email"):
 * 4 bytes of seconds since the epoch, 5 random bytes fixed per process, 3 bytes of a counter.
 * Clients use ids as cursors, so lexical order must follow creation order within this process.
 */
export function createIdGenerator(processRandom = randomBytes(5).toString('hex'), counterStart = randomBytes(3).readUIntBE(0, 3)): (clock: Clock) => string {
  let counter = counterStart;
  let lastSecond = 0;
  return (clock) => {
    // Never let the seconds part go backwards (clock steps), or cursors would skip records.
    let second = Math.max(Math.floor(clock.nowMs() / 1000), lastSecond);
    counter = (counter + 1) % 0x1000000;
    // The counter wrapped: later ids of this second would sort before earlier ones, so they borrow the
    // next second (real time catches up within a second).
    if (counter === 0) second++;
    lastSecond = second;
    return second.toString(16).padStart(8, '0') + processRandom + counter.toString(16).padStart(6, '0');
  };
}

export const newId = createIdGenerator();

/** The smallest id created at or after `ms`: ids before it are older (retention by primary key range). */
export function idLowerBound(ms: number): string {
  return Math.max(0, Math.floor(ms / 1000)).toString(16).padStart(8, '0') + '0'.repeat(16);
}

export const idPattern = /^[0-9a-f]{24}$/;

export function isId(value: string): boolean {
  return idPattern.test(value);
}

/** URL-safe random token (API keys, secrets, signed URL nonces). */
export function randomToken(bytes = 24): string {
  return randomBytes(bytes).toString('base64url');
}
