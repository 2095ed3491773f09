import { generateKeyPair } from 'node:crypto';
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

/** `postino<yyyymm>`: readable, and a later key rotation gets a new month's name beside the old one. */
export function selectorFor(date: Date): string {
  return `postino${date.getUTCFullYear()}${String(date.getUTCMonth() + 1).padStart(2, '0')}`;
}
