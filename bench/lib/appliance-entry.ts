// Entry of the send bench's bundle (bench/lib/bundle.ts): the appliance as the production bundle builds it.
export { createAppliance } from '../../src/appliance.js';
export { loadConfig } from '../../src/config/load.js';
export { silentLogger } from '../../src/lib/logger.js';
