import { sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Appliance-wide values created once, such as the secret that signs tracking and download URLs. */
export const settings = sqliteTable('settings', {
  key: text('key').primaryKey(),
  value: text('value').notNull(),
});
