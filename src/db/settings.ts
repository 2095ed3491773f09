import { eq } from 'drizzle-orm';
import { randomBytes } from 'node:crypto';
import type { Db } from './client.js';
import { settings } from './schema/index.js';

/** A setting's value, undefined when it was never written. */
export function readSetting(db: Db, key: string): string | undefined {
  return db.select().from(settings).where(eq(settings.key, key)).get()?.value;
}

/** Writes a setting, replacing its value. */
export function writeSetting(db: Db, key: string, value: string): void {
  db.insert(settings).values({ key, value }).onConflictDoUpdate({ target: settings.key, set: { value } }).run();
}

export function deleteSetting(db: Db, key: string): void {
  db.delete(settings).where(eq(settings.key, key)).run();
}

/** Reads a setting, creating it with `create()` on first use (idempotent across restarts). */
export function getOrCreateSetting(db: Db, key: string, create: () => string): string {
  const existing = db.select().from(settings).where(eq(settings.key, key)).get();
  if (existing) return existing.value;
  db.insert(settings).values({ key, value: create() }).onConflictDoNothing().run();
  return db.select().from(settings).where(eq(settings.key, key)).get()!.value;
}

export function urlSigningSecret(db: Db): string {
  return getOrCreateSetting(db, 'url_signing_secret', () => randomBytes(32).toString('hex'));
}
