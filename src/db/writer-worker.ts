import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';
import { bindProcedures } from '../write-procedures.js';
import { commitBatch } from './batch-transaction.js';
import { createWalSyncer, withoutCommitSync } from './wal-sync.js';
import { toWire, toWireError, type WireOutcome, type WriterMessage, type WriterRequest } from './writer-protocol.js';

/**
 * Worker-thread entry of the writer thread (writer-thread.ts): its own connection with the appliance's
 * write pragmas; each request is one transaction. With synchronous=FULL its COMMIT waits for the disk
 * here, so an answered batch is durable and the event loop never waited.
 */
const options = workerData as { path: string; synchronous: 'FULL' | 'NORMAL'; walSizeLimit: number };
const sqlite = new Database(options.path);
sqlite.pragma('busy_timeout = 5000');
sqlite.pragma('foreign_keys = ON');
sqlite.pragma(`synchronous = ${options.synchronous}`);
// The checkpointer thread (client.ts) checkpoints; a COMMIT here never does.
sqlite.pragma('wal_autocheckpoint = 0');
sqlite.pragma(`journal_size_limit = ${options.walSizeLimit}`);
const runProcedure = bindProcedures(sqlite);
const syncer = createWalSyncer(sqlite);
const post = (message: WriterMessage) => parentPort!.postMessage(message);

parentPort!.on('message', (message: WriterRequest | 'close') => {
  if (message === 'close') {
    syncer?.close();
    sqlite.close();
    post('closed');
    return;
  }
  const writes = message.calls.map((call) => () => runProcedure(call.name, call.args));
  let commitError: unknown;
  const commit = () => commitBatch(sqlite, writes, (error) => (commitError = error)).map(toWire);
  const reply = (outcomes: WireOutcome[]) => post({ id: message.id, outcomes, commitError: commitError === undefined ? undefined : toWireError(commitError) });
  if (!syncer) return reply(commit());
  // As on the main connection (write-queue.ts): commit without the fsync, let the write queue send the
  // next batch, and answer once the WAL is on disk. Nothing is acknowledged before its sync.
  const outcomes = withoutCommitSync(sqlite, commit);
  post({ id: message.id, committed: true });
  syncer.sync().then(
    () => reply(outcomes),
    (error) => {
      commitError = error;
      reply(outcomes.map(() => ({ ok: false, error: toWireError(error) })));
    },
  );
});
post('ready');
