/**
 * A small bounded cache: rendering is pure, so anything derived only from its inputs (lexed markdown,
 * highlighted code, chart PNGs) can be memoised; the bound keeps a long-running appliance from growing
 * without limit when templates vary. Eviction is first-in-first-out: refreshing entries on every hit
 * (delete + re-insert) cost more than the occasional re-computation it saves on this hot path.
 *
 * A count alone does not bound memory when entries are derived from sources up to 100 kB (a lexed
 * markdown body of that size is ~10 MB of tokens; a hundred of them ran the heap out): caches keyed by
 * such sources also weigh each entry (by its source length) and keep their total under `maxWeight`. An
 * entry heavier than a quarter of that is returned uncached rather than flushing everything else.
 */
export class Lru<K, V> {
  private readonly map = new Map<K, { value: V; weight: number }>();
  private totalWeight = 0;

  constructor(
    private readonly max: number,
    private readonly limit: { maxWeight: number; weigh: (key: K, value: V) => number } | undefined = undefined,
  ) {}

  get(key: K): V | undefined {
    return this.map.get(key)?.value;
  }

  set(key: K, value: V): V {
    this.delete(key);
    const weight = this.limit ? this.limit.weigh(key, value) : 0;
    if (this.limit && weight > this.limit.maxWeight / 4) return value;
    this.map.set(key, { value, weight });
    this.totalWeight += weight;
    while (this.map.size > this.max || (this.limit && this.totalWeight > this.limit.maxWeight)) {
      this.delete(this.map.keys().next().value as K);
    }
    return value;
  }

  getOrCreate(key: K, create: () => V): V {
    const hit = this.get(key);
    return hit !== undefined ? hit : this.set(key, create());
  }

  get size(): number {
    return this.map.size;
  }

  /** The summed weight of the entries kept (0 without a weight limit). */
  get weight(): number {
    return this.totalWeight;
  }

  private delete(key: K): void {
    const entry = this.map.get(key);
    if (!entry) return;
    this.totalWeight -= entry.weight;
    this.map.delete(key);
  }
}

/** The weight limit of a cache keyed by source text: the characters of the sources it keeps. */
export function sourceChars<V>(maxChars: number): { maxWeight: number; weigh: (key: string, value: V) => number } {
  return { maxWeight: maxChars, weigh: (key) => key.length };
}
