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
