/**
 * A small bounded cache: rendering is pure, so anything derived only from its inputs (lexed markdown,
 * highlighted code, chart PNGs) can be memoised; the bound keeps a long-running appliance from growing
 * without limit when templates vary. Eviction is first-in-first-out: refreshing entries on every hit
 * (delete + re-insert) cost more than the occasional re-computation it saves on this hot path.
 */
export class Lru<K, V> {
  private readonly map = new Map<K, V>();

  constructor(private readonly max: number) {}

  get(key: K): V | undefined {
    return this.map.get(key);
  }

  set(key: K, value: V): V {
    this.map.delete(key);
    this.map.set(key, value);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as K);
    return value;
  }

  getOrCreate(key: K, create: () => V): V {
    const hit = this.get(key);
    return hit !== undefined ? hit : this.set(key, create());
  }

  get size(): number {
    return this.map.size;
  }
}
