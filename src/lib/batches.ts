/**
 * Runs `write` (one write of at most `batchSize` rows, answering how many it did) until one does fewer,
 * and answers the total: a long job as short writes, so the sends and other writes interleave.
 */
export async function writeInBatches(batchSize: number, write: () => Promise<number>): Promise<number> {
  let total = 0;
  for (;;) {
    const count = await write();
    total += count;
    if (count < batchSize) return total;
  }
}

/**
 * The ids of the leading rows whose sizes add up to at most `maxBytes`, the first one whatever its size:
 * a delete bounded by what it frees. SQLite reads every overflow page of a deleted value to free it
 * (~1 ms per MB here), so a batch bounded by its count alone held the writer thread for seconds when the
 * rows were large.
 */
export function leadingWithinBytes<T>(rows: { id: T; bytes: number }[], maxBytes: number): T[] {
  const ids: T[] = [];
  let total = 0;
  for (const { id, bytes } of rows) {
    total += bytes;
    if (ids.length > 0 && total > maxBytes) break;
    ids.push(id);
  }
  return ids;
}
