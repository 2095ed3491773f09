import { createHash, createPrivateKey, sign as rsaSign, type KeyObject } from 'node:crypto';

/**
 * DKIM signing (RFC 6376), rsa-sha256 with relaxed/relaxed canonicalization. Canonicalization and the
 * body hash are cheap; the RSA private-key operation (~0.7 ms for a 2048-bit key) is the CPU cost of
 * delivery, so the signer runs on the delivery worker threads (message-builder.ts) and caches parsed KeyObjects.
 */
export interface DkimKey {
  domain: string;
  selector: string;
  privateKeyPem: string;
}

/** Headers signed when present (Gmail/Yahoo bulk sender requirements: From at least; the rest guard content). */
export const signedHeaderNames = [
  'from',
  'to',
  'cc',
  'reply-to',
  'subject',
  'date',
  'message-id',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'list-unsubscribe',
  'list-unsubscribe-post',
] as const;

export interface DkimSigner {
  /** Returns the message with a DKIM-Signature header prepended. */
  sign(message: Buffer, key: DkimKey, timestampSec: number): Promise<Buffer>;
  close(): Promise<void>;
}

export interface PreparedSignature {
  /** What the RSA signature is computed over: canonical signed headers + the DKIM-Signature header without b=. */
  signingInput: string;
  /** The DKIM-Signature header up to and including `b=`, folded, without the signature value. */
  headerPrefix: string;
}

/** Builds everything except the RSA signature; pure and synchronous. */
export function prepareSignature(message: Buffer, key: DkimKey, timestampSec: number): PreparedSignature {
  const { headerLines, body } = splitMessage(message);
  const bodyHash = createHash('sha256').update(canonicalizeBodyRelaxed(body)).digest('base64');
  const present = pickSignedHeaders(headerLines);
  const tags = [
    'v=1',
    'a=rsa-sha256',
    'c=relaxed/relaxed',
    `d=${key.domain}`,
    `s=${key.selector}`,
    `t=${timestampSec}`,
    `h=${present.map((h) => h.name).join(':')}`,
    `bh=${bodyHash}`,
  ];
  const headerPrefix = `DKIM-Signature: ${tags.join(';\r\n\t')};\r\n\tb=`;
  const signingInput = present.map((h) => canonicalizeHeaderRelaxed(h.line)).join('') + canonicalizeHeaderRelaxed(headerPrefix).replace(/\r\n$/, '');
  return { signingInput, headerPrefix };
}

export function assembleSigned(message: Buffer, prepared: PreparedSignature, signatureB64: string): Buffer {
  return Buffer.concat([Buffer.from(`${prepared.headerPrefix}${foldBase64(signatureB64)}\r\n`, 'latin1'), message]);
}

/** Signs on the calling thread; each delivery worker thread holds one (parsed keys cached per domain and selector). */
export function createInlineDkimSigner(): DkimSigner {
  // By domain and selector, not by the PEM: a worker thread receives a new copy of the PEM string with
  // every message, and hashing its 1.7 kB for the lookup was a measurable part of the thread's time.
  const keys = new Map<string, { pem: string; keyObject: KeyObject }>();
  return {
    async sign(message, key, timestampSec) {
      const prepared = prepareSignature(message, key, timestampSec);
      const cacheKey = `${key.domain}\n${key.selector}`;
      let cached = keys.get(cacheKey);
      if (cached?.pem !== key.privateKeyPem) {
        if (keys.size > 1000) keys.clear();
        keys.set(cacheKey, (cached = { pem: key.privateKeyPem, keyObject: createPrivateKey(key.privateKeyPem) }));
      }
      const signature = rsaSign('sha256', Buffer.from(prepared.signingInput, 'utf8'), cached.keyObject).toString('base64');
      return assembleSigned(message, prepared, signature);
    },
    close: async () => {},
  };
}

interface HeaderLine {
  name: string;
  /** The full header field including its name and the trailing CRLF. */
  line: string;
}

function splitMessage(message: Buffer): { headerLines: HeaderLine[]; body: Buffer } {
  let end = message.indexOf('\r\n\r\n');
  const headerText = end < 0 ? message.toString('utf8') : message.subarray(0, end + 2).toString('utf8');
  const body = end < 0 ? Buffer.alloc(0) : message.subarray(end + 4);
  const headerLines: HeaderLine[] = [];
  for (const raw of headerText.split(/\r\n(?![ \t])/)) {
    if (raw === '') continue;
    const colon = raw.indexOf(':');
    if (colon <= 0) continue;
    headerLines.push({ name: raw.slice(0, colon).trim().toLowerCase(), line: raw + '\r\n' });
  }
  if (end < 0) end = message.length;
  return { headerLines, body };
}

/** RFC 6376 §5.4.2: with several instances the signer signs from the bottom up; ours has one of each. */
function pickSignedHeaders(lines: HeaderLine[]): HeaderLine[] {
  const out: HeaderLine[] = [];
  for (const name of signedHeaderNames) {
    const found = lines.filter((line) => line.name === name);
    if (found.length > 0) out.push(found[found.length - 1]);
  }
  return out;
}

/** RFC 6376 §3.4.2: lowercase name, unfold, collapse whitespace, trim around the colon and at the end. */
export function canonicalizeHeaderRelaxed(line: string): string {
  const colon = line.indexOf(':');
  const name = line.slice(0, colon).trim().toLowerCase();
  const value = line
    .slice(colon + 1)
    .replace(/\r\n/g, '')
    .replace(/[ \t]+/g, ' ')
    .trim();
  return `${name}:${value}\r\n`;
}

/** RFC 6376 §3.4.4: collapse whitespace, drop trailing whitespace per line and trailing empty lines. */
export function canonicalizeBodyRelaxed(body: Buffer | string): Buffer {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'latin1') : body;
  // Quoted-printable and base64 parts, nearly every body composed here, have no whitespace to collapse:
  // only the trailing empty lines go, and the bytes are hashed as they are, without a string copy.
  const collapses = bytes.includes(0x09) || bytes.includes('  ') || bytes.includes(' \r\n') || bytes[bytes.length - 1] === 0x20;
  if (!collapses) return withOneFinalCrlf(bytes);
  const text = bytes
    .toString('latin1')
    .replace(/[ \t]+\r\n/g, '\r\n')
    .replace(/[ \t]+/g, ' ')
    .replace(/[ \t]+$/, '');
  return withOneFinalCrlf(Buffer.from(text, 'latin1'));
}

/** Trailing empty lines dropped; a non-empty body ends with exactly one CRLF. */
function withOneFinalCrlf(bytes: Buffer): Buffer {
  let end = bytes.length;
  while (end >= 2 && bytes[end - 2] === 0x0d && bytes[end - 1] === 0x0a) end -= 2;
  if (end === 0) return Buffer.alloc(0);
  if (end === bytes.length) return Buffer.concat([bytes, crlf]);
  return bytes.subarray(0, end + 2);
}

const crlf = Buffer.from('\r\n');

function foldBase64(value: string): string {
  const parts: string[] = [];
  for (let i = 0; i < value.length; i += 72) parts.push(value.slice(i, i + 72));
  return parts.join('\r\n\t ');
}
