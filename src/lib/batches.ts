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

/** Where one write of a walk by id stopped: the last id it is done with, null once none is left. */
export interface CursorStep {
  pruned: number;
  next: string | null;
}

/**
 * Runs `write` from the first id (`''`) on, each from where the one before stopped, until one says none
 * is left, and answers the total: a walk in short writes that does not look again at the rows it kept.
 */
export async function writeFromCursor(write: (afterId: string) => Promise<CursorStep>): Promise<number> {
  let total = 0;
  for (let afterId: string | null = ''; afterId !== null; ) {
    const step = await write(afterId);
    total += step.pruned;
    afterId = step.next;
  }
  return total;
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
