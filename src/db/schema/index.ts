// One file per aggregate; drizzle-kit reads this index (drizzle.config.ts).
export * from './projects.js';
export * from './templates.js';
export * from './domains.js';
export * from './emails.js';
export * from './settings.js';
export * from './webhooks.js';
export * from './idempotency.js';
export * from './delivery.js';
export * from './contacts.js';
export * from './inbound.js';
export * from './messenger.js';
