'use strict';

/**
 * A least-recently-used cache with optional per-entry time-to-live.
 * A Map keeps insertion order, so re-inserting on access moves a key to the "newest" end
 * and the first key is always the least recently used.
 */
class LRUCache {
  /**
   * @param {object} options
   * @param {number} options.max      most entries kept
   * @param {number} [options.ttl]    default lifetime in ms (0 = forever)
   * @param {function} [options.onEvict] called with (key, value, reason)
   */
  constructor({ max, ttl = 0, onEvict = null } = {}) {
    if (!Number.isInteger(max) || max <= 0) {
      throw new TypeError(`max must be a positive integer, got ${max}`);
    }
    this.max = max;
    this.ttl = ttl;
    this.onEvict = onEvict;
    this.entries = new Map();
    this.hits = 0;
    this.misses = 0;
  }

  get size() {
    return this.entries.size;
  }

  _expired(entry, now = Date.now()) {
    return entry.expiresAt !== 0 && entry.expiresAt <= now;
  }

  _evict(key, entry, reason) {
    this.entries.delete(key);
    if (this.onEvict) this.onEvict(key, entry.value, reason);
  }

  get(key) {
    const entry = this.entries.get(key);
    if (entry === undefined) {
      this.misses++;
      return undefined;
    }
    if (this._expired(entry)) {
      this._evict(key, entry, 'expired');
      this.misses++;
      return undefined;
    }
    this.entries.delete(key);
    this.entries.set(key, entry);
    this.hits++;
    return entry.value;
  }

  has(key) {
    const entry = this.entries.get(key);
    return entry !== undefined && !this._expired(entry);
  }

  set(key, value, { ttl = this.ttl } = {}) {
    if (this.entries.has(key)) this.entries.delete(key);
    this.entries.set(key, { value, expiresAt: ttl > 0 ? Date.now() + ttl : 0 });
    while (this.entries.size > this.max) {
      const [oldestKey, oldest] = this.entries.entries().next().value;
      this._evict(oldestKey, oldest, 'capacity');
    }
    return this;
  }

  delete(key) {
    const entry = this.entries.get(key);
    if (entry === undefined) return false;
    this._evict(key, entry, 'deleted');
    return true;
  }

  prune() {
    const now = Date.now();
    let removed = 0;
    for (const [key, entry] of this.entries) {
      if (this._expired(entry, now)) {
        this._evict(key, entry, 'expired');
        removed++;
      }
    }
    return removed;
  }

  /** Return the cached value, or compute it with `loader(key)` and cache the result. */
  async getOrLoad(key, loader) {
    const cached = this.get(key);
    if (cached !== undefined) return cached;
    const value = await loader(key);
    this.set(key, value);
    return value;
  }

  stats() {
    const total = this.hits + this.misses;
    return { size: this.size, hits: this.hits, misses: this.misses, hitRate: total ? this.hits / total : 0 };
  }

  *[Symbol.iterator]() {
    for (const [key, entry] of this.entries) {
      if (!this._expired(entry)) yield [key, entry.value];
    }
  }
}

module.exports = { LRUCache };

if (require.main === module) {
  const evicted = [];
  const cache = new LRUCache({ max: 2, onEvict: (key, _value, reason) => evicted.push(`${key}:${reason}`) });
  cache.set('a', 1).set('b', 2);
  cache.get('a');
  cache.set('c', 3);
  console.log([...cache], evicted, cache.stats());
}
