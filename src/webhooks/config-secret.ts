import { createHash } from 'node:crypto';
import type { Db } from '../db/client.js';
import { deleteSetting, readSetting, writeSetting } from '../db/settings.js';
import { generateWebhookSecret } from './sign.js';

/** SHA-256 of the `webhooks.secret` last configured (settings row): which stored secret the operator set. */
const settingKey = 'webhooks_configured_secret_sha256';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * The secret of the config endpoint. An empty `webhooks.secret` keeps the stored one when it was
 * generated (receivers need not re-learn it at every start), but not one the operator configured and
 * has removed: that one stayed, sent verbatim in `sidemail-secret` and keying every signature, with no
 * way to rotate it (the endpoint is read-only through the API), whereas the setting says an empty value
 * means a generated secret, as a removed auth.api_key stops working. Only generated secrets have the
 * `whsec_` form without being configured, so a database from before the marker is read right too.
 */
export function configEndpointSecret(db: Db, configured: string, stored: string | undefined): { secret: string; replacedConfigured: boolean } {
  const marker = readSetting(db, settingKey);
  if (configured) {
    if (marker !== sha256(configured)) writeSetting(db, settingKey, sha256(configured));
    return { secret: configured, replacedConfigured: false };
  }
  if (marker !== undefined) deleteSetting(db, settingKey);
  if (stored === undefined) return { secret: generateWebhookSecret(), replacedConfigured: false };
  const wasConfigured = marker === sha256(stored) || !stored.startsWith('whsec_');
  return wasConfigured ? { secret: generateWebhookSecret(), replacedConfigured: true } : { secret: stored, replacedConfigured: false };
}
