import { bindProcedures } from '../write-procedures.js';
import { writeTransaction, type Sqlite } from './client.js';
import type { WritesWithProcedures } from './write-queue.js';

/**
 * Each write in a transaction of its own, at once: for one-shot tools (the CLI) that run no queue. Not in
 * write-procedures.ts, which the writer thread's bundle imports and which must stay free of client.ts.
 */
export function immediateWrites(sqlite: Sqlite): WritesWithProcedures {
  const procedures = bindProcedures(sqlite);
  return {
    run: async (work) => writeTransaction(sqlite, work),
    call: async (name, args) => writeTransaction(sqlite, () => procedures(name, args)) as never,
  };
}
