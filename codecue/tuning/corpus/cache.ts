// A least-recently-used cache with time-to-live entries.

export interface CacheOptions {
  maxEntries: number;
  ttlMs?: number;
}

interface Entry<V> {
  value: V;
  expiresAt: number | null;
}

/** An LRU cache: the least recently used entry goes first when the cache is full. */
export class LruCache<K, V> {
  private readonly entries = new Map<K, Entry<V>>();
  private hits = 0;
  private misses = 0;

  constructor(private readonly options: CacheOptions) {
    if (options.maxEntries < 1) {
      throw new Error("maxEntries must be at least 1");
    }
  }

  get(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined || this.isExpired(entry)) {
      this.misses += 1;
      this.entries.delete(key);
      return undefined;
    }
    this.hits += 1;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.value;
  }

  set(key: K, value: V): void {
    const ttl = this.options.ttlMs;
    this.entries.delete(key);
    this.entries.set(key, { value, expiresAt: ttl ? Date.now() + ttl : null });
    while (this.entries.size > this.options.maxEntries) {
      const oldest = this.entries.keys().next().value as K;
      this.entries.delete(oldest);
    }
  }

  stats(): { hits: number; misses: number; ratio: number } {
    const total = this.hits + this.misses;
    return { hits: this.hits, misses: this.misses, ratio: total === 0 ? 0 : this.hits / total };
  }

  private isExpired(entry: Entry<V>): boolean {
    return entry.expiresAt !== null && entry.expiresAt < Date.now();
  }
}

export function memoize<A extends unknown[], R>(fn: (...args: A) => R, cache: LruCache<string, R>): (...args: A) => R {
  return (...args: A): R => {
    const key = JSON.stringify(args);
    const cached = cache.get(key);
    if (cached !== undefined) {
      return cached;
    }
    const result = fn(...args);
    cache.set(key, result);
    return result;
  };
}
