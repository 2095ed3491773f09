import { createHmac, randomBytes } from 'node:crypto';

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): `webhook-signature: v1,<base64 HMAC-SHA256
 * of "<webhook-id>.<webhook-timestamp>.<body>">`. Secret encoding: a secret of the form `whsec_<base64>`
 * (what we generate) keys the HMAC with the base64-DECODED bytes, exactly as the Standard Webhooks
 * libraries do, so receivers can verify with them unchanged; any other secret (user-supplied, e.g. an
 * existing Sidemail secret) keys it with its UTF-8 bytes. The secret itself also travels verbatim in
 * `sidemail-secret` for receivers written against the compatible API.
 */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac('sha256', webhookSecretKey(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}

export function webhookSecretKey(secret: string): Buffer {
  if (secret.startsWith('whsec_')) {
    const decoded = Buffer.from(secret.slice('whsec_'.length), 'base64');
    if (decoded.length > 0) return decoded;
  }
  return Buffer.from(secret, 'utf8');
}

/**
 * A `whsec_` secret as the Standard Webhooks libraries read it: RFC 4648 Base64 of 24 to 64 bytes. Their
 * receivers refuse anything else, and Buffer's lenient decoder would skip stray characters, signing with
 * a key the receiver never derives.
 */
export function isStandardWebhooksSecret(secret: string): boolean {
  const payload = secret.slice('whsec_'.length);
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(payload)) return false;
  const bytes = Buffer.from(payload, 'base64').length;
  return bytes >= 24 && bytes <= 64;
}

/** 24 random bytes, Standard Webhooks style. */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Headers of one POST. `webhook-id` is the event id: stable across retries so receivers can deduplicate. */
export function buildWebhookHeaders(secret: string, eventId: string, timestampSeconds: number, body: string): Record<string, string> {
  return {
    'content-type': 'application/json',
    'user-agent': 'Postino-Webhooks/1',
    'sidemail-secret': secret,
    'webhook-id': eventId,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': signWebhook(secret, eventId, timestampSeconds, body),
  };
}
