import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';
import { bindProcedures } from '../write-procedures.js';
import { commitReplayableBatch } from './batch-transaction.js';
import { toWire, toWireError, type WriterMessage, type WriterRequest } from './writer-protocol.js';

/**
 * Worker-thread entry of the writer thread (writer-thread.ts): its own connection with the appliance's
 * write pragmas; each request is one transaction. Where the appliance runs synchronous=FULL on a WAL file
 * this connection is NORMAL: its COMMIT skips the fsync and the write queue syncs the WAL before anyone
 * hears of the batch (writer-thread.ts).
 */
const options = workerData as { path: string; synchronous: 'FULL' | 'NORMAL'; walSizeLimit: number; lockWaitMs: number };
// The main connection made the file; one gone since (a removed data directory) is not made again, empty.
const sqlite = new Database(options.path, { fileMustExist: true });
// A write lock held by another process is waited for this long, then the batch fails storage-busy (client.ts).
sqlite.pragma(`busy_timeout = ${options.lockWaitMs}`);
sqlite.pragma('foreign_keys = ON');
sqlite.pragma(`synchronous = ${options.synchronous}`);
// A write run in a savepoint (a batch replayed after a failing write, batch-transaction.ts; or a
// statement SQLite journals itself) copies every page it touches that the batch already changed to the
// statement journal first. Past 64 KiB that journal spills to a temp file: one pwrite per
// page, ~2 per accepted email under the send load. In memory it is a copy; it holds one write's pages at
// a time (cleared at each RELEASE), and this connection runs only bounded write procedures. Measured: the
// html send's CPU per email −14 %, accepted sends/s +15 % (docs/benchmarks.md).
sqlite.pragma('temp_store = MEMORY');
// The checkpointer thread (client.ts) checkpoints; a COMMIT here never does.
sqlite.pragma('wal_autocheckpoint = 0');
sqlite.pragma(`journal_size_limit = ${options.walSizeLimit}`);
const runProcedure = bindProcedures(sqlite);
const post = (message: WriterMessage) => parentPort!.postMessage(message);

parentPort!.on('message', (message: WriterRequest | 'close') => {
  if (message === 'close') {
    sqlite.close();
    post('closed');
    return;
  }
  const writes = message.calls.map((call) => () => runProcedure(call.name, call.args));
  let commitError: unknown;
  // Write procedures may run twice (write-procedures.ts): a batch with a failing write runs again with savepoints.
  const outcomes = commitReplayableBatch(sqlite, writes, (error) => (commitError = error)).map(toWire);
  post({ id: message.id, outcomes, commitError: commitError === undefined ? undefined : toWireError(commitError) });
});
post('ready');
