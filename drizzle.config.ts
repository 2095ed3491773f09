import { defineConfig } from 'drizzle-kit';

// `npm run db:generate` diffs src/db/schema against the last committed snapshot and writes a migration.
export default defineConfig({
  dialect: 'sqlite',
  schema: './src/db/schema/index.ts',
  out: './src/db/migrations',
});
