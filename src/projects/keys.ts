import { createHash, timingSafeEqual } from 'node:crypto';
import { randomToken } from '../lib/ids.js';

/**
 * The shortest API key (or metrics token) taken from other machines: a failed guess costs one request,
 * and a key of a few characters was found among 1,332 guesses in 1.8 s. A configured shorter one (a CI
 * sandbox's `test`) works from loopback only.
 */
export const minRemoteKeyLength = 16;

/** API keys look like `pst_<32 random bytes, base64url>`; only their SHA-256 is stored. */
export function generateApiKey(): string {
  return `pst_${randomToken(32)}`;
}

/**
 * Keys are long random secrets, so an unsalted SHA-256 is enough: a stolen table reveals no key and
 * cannot be brute-forced. Lookups go by hash, so response time never depends on how much of a key matched.
 */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/**
 * What `keys list` shows of a key, stored in the clear: 10 characters of a generated key (pst_ and 6 of
 * its 43 random ones). A configured auth.api_key can be short ("homelab-key1"): 10 characters were all or
 * nearly all of it, and the unsalted hash gave away the rest. A quarter at most keeps the rest secret.
 */
export function keyPrefix(key: string): string {
  return key.slice(0, Math.min(10, Math.floor(key.length / 4)));
}

export function hashesEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'hex');
  const right = Buffer.from(b, 'hex');
  return left.length === right.length && timingSafeEqual(left, right);
}

/** The project an API key (or the SMTP submission password) stands for; every query is scoped to it. */
export interface AuthenticatedProject {
  id: string;
  parentId: string | null;
}
