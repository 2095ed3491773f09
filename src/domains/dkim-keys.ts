import { createHash, generateKeyPair } from 'node:crypto';
import { promisify } from 'node:util';

const generateKeyPairAsync = promisify(generateKeyPair);

export interface DkimKeyPair {
  /** PKCS#8 PEM; stays in the database, never in a response or a log line. */
  privateKeyPem: string;
  /** Base64 DER SubjectPublicKeyInfo, exactly the `p=` tag of the DKIM record (RFC 6376 §3.6.1). */
  publicKeyBase64: string;
}

/** RSA-2048 (RFC 8301 minimum 1024, 2048 recommended). Runs on the libuv pool so the event loop stays free. */
export async function generateDkimKeyPair(): Promise<DkimKeyPair> {
  const { privateKey, publicKey } = await generateKeyPairAsync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
  return { privateKeyPem: privateKey, publicKeyBase64: publicKey.toString('base64') };
}

/**
 * `postino<yyyymm><6 hex of the key>`: unique per key. The month alone named the same selector for the
 * same domain in two projects, or deleted and added again within a month, each with its own key: both
 * records at one name (RFC 6376 §3.6.2.2: undefined), or resolvers still caching the old key.
 */
export function selectorFor(date: Date, publicKeyBase64: string): string {
  const month = `${date.getUTCFullYear()}${String(date.getUTCMonth() + 1).padStart(2, '0')}`;
  return `postino${month}${createHash('sha256').update(publicKeyBase64).digest('hex').slice(0, 6)}`;
}
