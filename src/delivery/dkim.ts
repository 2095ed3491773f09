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

/**
 * The header fields the signature covers (Gmail/Yahoo bulk sender requirements: From at least; the rest
 * guard what a reader sees and threads by). Each is also listed once more than it occurs ("oversigning",
 * RFC 6376 §8.15): the extra entry signs its absence, so a copy added to a captured message, a second
 * Subject, a Reply-To or a List-Unsubscribe it never had, breaks the signature.
 */
export const signedHeaderNames = [
  'from',
  'to',
  'cc',
  'reply-to',
  'subject',
  'date',
  'message-id',
  'in-reply-to',
  'references',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'list-unsubscribe',
  'list-unsubscribe-post',
  // A broadcast's (messenger/service.ts): Gmail trusts a Feedback-ID only when it is signed.
  'list-id',
  'feedback-id',
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
  const { signed, names } = pickSignedHeaders(headerLines);
  const tags = [
    'v=1',
    'a=rsa-sha256',
    'c=relaxed/relaxed',
    `d=${key.domain}`,
    `s=${key.selector}`,
    `t=${timestampSec}`,
    `h=${foldNames(names)}`,
    `bh=${bodyHash}`,
  ];
  const headerPrefix = `DKIM-Signature: ${tags.join(';\r\n\t')};\r\n\tb=`;
  const signingInput = signed.map((h) => canonicalizeHeaderRelaxed(h.line)).join('') + canonicalizeHeaderRelaxed(headerPrefix).replace(/\r\n$/, '');
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

/**
 * RFC 6376 §5.4.2: a name listed n times signs its last n instances, bottom up. Every instance present is
 * signed and each name is listed once more: the extra entry matches no field and adds nothing to the
 * signed text (§5.4), but a verifier then takes a field added later into the hash.
 */
function pickSignedHeaders(lines: HeaderLine[]): { signed: HeaderLine[]; names: string[] } {
  const signed: HeaderLine[] = [];
  const names: string[] = [];
  for (const name of signedHeaderNames) {
    const found = lines.filter((line) => line.name === name);
    for (let i = found.length - 1; i >= 0; i--) signed.push(found[i]);
    for (let i = 0; i <= found.length; i++) names.push(name);
  }
  return { signed, names };
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

/** The h= list on lines of at most ~76 characters, folded after a colon (FWS may stand there, RFC 6376 §3.5). */
function foldNames(names: string[]): string {
  const lines = [''];
  for (const [i, name] of names.entries()) {
    const piece = i < names.length - 1 ? `${name}:` : name;
    if (lines[lines.length - 1].length + piece.length > 66) lines.push('');
    lines[lines.length - 1] += piece;
  }
  return lines.join('\r\n\t ');
}

function foldBase64(value: string): string {
  const parts: string[] = [];
  for (let i = 0; i < value.length; i += 72) parts.push(value.slice(i, i + 72));
  return parts.join('\r\n\t ');
}
