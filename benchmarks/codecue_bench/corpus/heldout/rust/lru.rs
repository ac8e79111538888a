//! A fixed-capacity LRU cache backed by a slab of nodes linked into a doubly linked list.
//! Indices instead of pointers keep it in safe Rust.

use std::collections::HashMap;
use std::hash::Hash;

const NIL: usize = usize::MAX;

struct Node<K, V> {
    key: K,
    value: V,
    prev: usize,
    next: usize,
}

pub struct LruCache<K, V> {
    capacity: usize,
    map: HashMap<K, usize>,
    nodes: Vec<Node<K, V>>,
    head: usize, // most recently used
    tail: usize, // least recently used
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

impl<K: Hash + Eq + Clone, V> LruCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "capacity must be positive");
        LruCache {
            capacity,
            map: HashMap::with_capacity(capacity),
            nodes: Vec::with_capacity(capacity),
            head: NIL,
            tail: NIL,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn unlink(&mut self, index: usize) {
        let (prev, next) = (self.nodes[index].prev, self.nodes[index].next);
        if prev != NIL {
            self.nodes[prev].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.nodes[next].prev = prev;
        } else {
            self.tail = prev;
        }
    }

    fn push_front(&mut self, index: usize) {
        self.nodes[index].prev = NIL;
        self.nodes[index].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = index;
        }
        self.head = index;
        if self.tail == NIL {
            self.tail = index;
        }
    }

    pub fn get(&mut self, key: &K) -> Option<&V> {
        let index = *self.map.get(key)?;
        self.unlink(index);
        self.push_front(index);
        Some(&self.nodes[index].value)
    }

    pub fn peek(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|&index| &self.nodes[index].value)
    }

    /// Inserts or replaces `key`; returns the evicted entry when the cache was full.
    pub fn put(&mut self, key: K, value: V) -> Option<(K, V)> {
        if let Some(&index) = self.map.get(&key) {
            self.nodes[index].value = value;
            self.unlink(index);
            self.push_front(index);
            return None;
        }
        if self.nodes.len() < self.capacity {
            self.nodes.push(Node { key: key.clone(), value, prev: NIL, next: NIL });
            let index = self.nodes.len() - 1;
            self.map.insert(key, index);
            self.push_front(index);
            return None;
        }
        // Full: reuse the least recently used slot for the new entry.
        let index = self.tail;
        self.unlink(index);
        let old = std::mem::replace(&mut self.nodes[index], Node { key: key.clone(), value, prev: NIL, next: NIL });
        self.map.remove(&old.key);
        self.map.insert(key, index);
        self.push_front(index);
        Some((old.key, old.value))
    }

    /// Keys from most to least recently used.
    pub fn keys(&self) -> Vec<&K> {
        let mut keys = Vec::with_capacity(self.len());
        let mut cursor = self.head;
        while cursor != NIL {
            keys.push(&self.nodes[cursor].key);
            cursor = self.nodes[cursor].next;
        }
        keys
    }
}

/// Memoises `compute` through the cache and counts hits, misses and evictions.
pub fn cached<K: Hash + Eq + Clone, V: Clone>(cache: &mut LruCache<K, V>, stats: &mut Stats, key: K, compute: impl FnOnce(&K) -> V) -> V {
    if let Some(value) = cache.get(&key) {
        stats.hits += 1;
        return value.clone();
    }
    stats.misses += 1;
    let value = compute(&key);
    if cache.put(key, value.clone()).is_some() {
        stats.evictions += 1;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut cache = LruCache::new(2);
        cache.put("a", 1);
        cache.put("b", 2);
        assert_eq!(cache.get(&"a"), Some(&1));
        assert_eq!(cache.put("c", 3), Some(("b", 2)));
        assert_eq!(cache.keys(), vec![&"c", &"a"]);
        assert_eq!(cache.peek(&"b"), None);
    }
}
