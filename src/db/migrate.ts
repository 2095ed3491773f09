import { migrate } from 'drizzle-orm/better-sqlite3/migrator';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Db } from './client.js';

/**
 * Where the committed drizzle-kit migrations are: beside this file in development (src/db/migrations)
 * and beside the bundle in production (dist/migrations, copied by build.mjs).
 */
export function defaultMigrationsFolder(): string {
  const candidates = [new URL('./migrations', import.meta.url), new URL('./db/migrations', import.meta.url)];
  for (const candidate of candidates) {
    const path = fileURLToPath(candidate);
    if (existsSync(path)) return path;
  }
  throw new Error('migrations folder not found beside the application (expected ./migrations)');
}

/** Applies every migration not yet recorded in the database; a no-op on an up-to-date file. */
export function migrateDatabase(db: Db, migrationsFolder = defaultMigrationsFolder()): void {
  migrate(db, { migrationsFolder });
}
