//! A map split into independently locked shards, so registry updates from
//! many threads rarely meet on one lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard};

const SHARDS: usize = 64;

pub(crate) struct Sharded<K, V> {
    shards: Box<[Mutex<HashMap<K, V>>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl<K: Hash + Eq, V> Sharded<K, V> {
    pub fn new() -> Self {
        Sharded { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), hasher: Default::default() }
    }

    /// Locks the shard holding `key`. A poisoned shard is still used: every
    /// critical section leaves the map consistent before it can panic.
    #[inline]
    pub fn lock<Q: Hash + ?Sized>(&self, key: &Q) -> MutexGuard<'_, HashMap<K, V>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn shard(&self, i: usize) -> MutexGuard<'_, HashMap<K, V>> {
        self.shards[i % SHARDS].lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn shard_count(&self) -> usize {
        SHARDS
    }

    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.shard(i).len()).sum()
    }

    /// Empties every shard (the memory goes with the old maps); returns the
    /// values that were in it.
    pub fn drain(&self) -> Vec<V> {
        (0..SHARDS).flat_map(|i| std::mem::take(&mut *self.shard(i)).into_values()).collect()
    }

    /// Visits every entry, one shard lock at a time.
    pub fn retain(&self, mut f: impl FnMut(&K, &mut V) -> bool) {
        for i in 0..SHARDS {
            self.shard(i).retain(|k, v| f(k, v));
        }
    }
}
