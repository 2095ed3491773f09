import { sql } from 'drizzle-orm';

/**
 * A named placeholder for an update's `set()`, for statements prepared once: drizzle's types accept a bare
 * `sql.placeholder()` in conditions and inserted values but not in `set()`, which takes it wrapped in SQL.
 */
export const setPlaceholder = (name: string) => sql`${sql.placeholder(name)}`;
