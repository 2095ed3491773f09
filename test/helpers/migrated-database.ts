import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type DatabaseHandle } from '../../src/db/client.js';
import { migrateDatabase } from '../../src/db/migrate.js';

/**
 * A migrated database in a new temporary directory (`postino-<name>-…`), holding a project row for each
 * of `projectIds`: for tests of repositories and write procedures on a real file, without an appliance.
 * synchronous=NORMAL: such tests insert tens of thousands of rows, and what they measure is not the sync.
 */
export function openMigratedDatabase(name: string, projectIds: readonly string[] = []): DatabaseHandle {
  const handle = openDatabase({ path: join(mkdtempSync(join(tmpdir(), `postino-${name}-`)), 'postino.sqlite'), synchronous: 'NORMAL' });
  try {
    migrateDatabase(handle.db);
    const project = handle.sqlite.prepare("insert into projects (id, name, is_default, created_at, updated_at) values (?, 'P', 0, 0, 0)");
    for (const id of projectIds) project.run(id);
    return handle;
  } catch (error) {
    handle.close();
    throw error;
  }
}
