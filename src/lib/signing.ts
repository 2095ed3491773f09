import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Signs short payloads for URLs that must work without an API key (tracking pixels, click redirects,
 * attachment and raw-message downloads): `payload.expiry.signature`, HMAC-SHA256, base64url.
 */
export interface UrlSigner {
  /** Token for `payload`, valid until `expiresAtMs` (0 = never expires, for links inside sent emails). */
  sign(payload: string, expiresAtMs?: number): string;
  /** The payload when the token is authentic and not expired at `nowMs`, else undefined. */
  verify(token: string, nowMs: number): string | undefined;
}

export function createUrlSigner(secret: string): UrlSigner {
  const mac = (data: string) => createHmac('sha256', secret).update(data).digest('base64url').slice(0, 32);
  return {
    sign(payload, expiresAtMs = 0) {
      const body = `${Buffer.from(payload).toString('base64url')}.${expiresAtMs.toString(36)}`;
      return `${body}.${mac(body)}`;
    },
    verify(token, nowMs) {
      const parts = token.split('.');
      if (parts.length !== 3) return undefined;
      const body = `${parts[0]}.${parts[1]}`;
      const expected = Buffer.from(mac(body));
      const given = Buffer.from(parts[2]);
      if (expected.length !== given.length || !timingSafeEqual(expected, given)) return undefined;
      const expires = parseInt(parts[1], 36);
      if (expires !== 0 && nowMs > expires) return undefined;
      return Buffer.from(parts[0], 'base64url').toString();
    },
  };
}
