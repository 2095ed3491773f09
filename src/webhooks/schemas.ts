import { z } from 'zod';
import { idCursor, pageLimit } from '../http/validate.js';
import { webhookEventTypes } from './outbox.js';
import { isStandardWebhooksSecret } from './sign.js';
import { credentialsDecode } from './url-credentials.js';

const allowed: readonly string[] = [...webhookEventTypes, '*'];
const eventType = z.string().refine((v) => allowed.includes(v), `must be one of ${allowed.join(', ')}`);
/**
 * `events`: a list of event types, or `"*"` / `["*"]` / null / omitted for every event. An empty list is
 * refused: a client sending `[]` to silence an endpoint must not get every event instead.
 */
const events = z.preprocess(
  (v) => (v === '*' ? null : v),
  z.array(eventType).min(1, 'must name at least one event type, or ["*"] for every event (to pause an endpoint, set enabled to false)').max(50).nullable(),
);

const webhookUrl = z
  .string()
  .max(2048)
  .refine((value) => {
    try {
      const url = new URL(value);
      return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname.length > 0;
    } catch {
      return false;
    }
  }, 'must be an http(s) URL')
  .refine((value) => !URL.canParse(value) || credentialsDecode(new URL(value)), 'its user name and password must be valid percent-encoding (a % followed by two hex digits)');

/**
 * Any secret of 8 to 256 printable ASCII characters, spaces only inside: it travels verbatim in the
 * sidemail-secret header, which carries nothing else unchanged (receivers trim a header's outer spaces).
 * One that claims the whsec_ form must be a valid one.
 */
const secret = z
  .string()
  .min(8)
  .max(256)
  .regex(/^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/, 'must be printable ASCII, with no space at either end (it is sent verbatim in the sidemail-secret header)')
  .refine(
    (value) => !value.startsWith('whsec_') || isStandardWebhooksSecret(value),
    'a whsec_ secret is whsec_ followed by the Base64 (RFC 4648) of 24 to 64 random bytes (Standard Webhooks); a secret without the prefix is used as its UTF-8 bytes',
  );

export const createWebhookSchema = z.object({
  url: webhookUrl,
  events: events.optional(),
  secret: secret.optional(),
  enabled: z.boolean().optional(),
});
export type CreateWebhookInput = z.infer<typeof createWebhookSchema>;

export const updateWebhookSchema = z
  .object({
    url: webhookUrl.optional(),
    events: events.optional(),
    secret: secret.optional(),
    enabled: z.boolean().optional(),
  })
  .refine((value) => Object.keys(value).length > 0, 'nothing to update');
export type UpdateWebhookInput = z.infer<typeof updateWebhookSchema>;

export const listDeliveriesQuery = z.object({
  limit: pageLimit(100, 20),
  paginationCursorNext: idCursor,
});
