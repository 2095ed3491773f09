// Entry of the send bench's bundle (bench/lib/bundle.ts): the appliance as the production bundle builds it.
export { createAppliance } from '../../src/appliance.js';
export { loadConfig } from '../../src/config/load.js';
export { silentLogger } from '../../src/lib/logger.js';
// The one-insert baseline of the send bench: the same storage primitives with a handler doing nothing else.
export { openDatabase } from '../../src/db/client.js';
export { createWriteQueue } from '../../src/db/write-queue.js';
