//! The store of loom builds: a loom `Mutex` around a `HashMap` of `Arc`ed values,
//! exactly as weak as the store contract allows.
//!
//! Every closure runs outside the lock, on a snapshot that other threads may replace
//! or remove meanwhile; a removal re-checks under the lock that it removes the value
//! its predicate saw, and retries otherwise; `retain` calls `keep` twice for every
//! entry and follows the second answer (the contract allows a map that asks twice).
//! So loom explores every interleaving the contract permits, not just the ones a lock
//! around each call would allow.

use super::Store;
use crate::KeyRef;
use crate::sync::{Arc, Mutex};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Keys and their state under one loom mutex; values are `Arc`s so closures run
/// unlocked.
pub(crate) struct LoomStore<K, V, S> {
    map: Mutex<HashMap<K, Arc<V>, S>>,
}

impl<K, V, S> LoomStore<K, V, S>
where
    K: Hash + Eq + Clone,
    S: BuildHasher,
{
    /// The value stored for `key` now.
    fn snapshot<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.map.lock().unwrap().get(key).cloned()
    }
}

impl<K, V, S> Store<K, V, S> for LoomStore<K, V, S>
where
    K: Hash + Eq + Clone,
    S: BuildHasher,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        let map = HashMap::with_capacity_and_hasher(expected_keys, hasher);
        Self {
            map: Mutex::new(map),
        }
    }

    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.snapshot(key).map(|v| f(&v))
    }

    fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        value: impl FnOnce(&K) -> V,
        f: impl FnOnce(&V) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // Made unlocked; dropped unused if another thread stored one first.
        let owned = key.to_key();
        let value = Arc::new(value(&owned));
        self.map.lock().unwrap().entry(owned).or_insert(value);
        // Looked up again under a lock of its own, as the normal store does: the entry
        // may be removed in between.
        self.snapshot(key).map(|stored| f(&stored))
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        loop {
            let Some(seen) = self.snapshot(key) else {
                return false;
            };
            if !pred(&seen) {
                return false;
            }
            let mut map = self.map.lock().unwrap();
            if map.get(key).is_some_and(|v| Arc::ptr_eq(v, &seen)) {
                map.remove(key);
                return true;
            }
            // Replaced or removed since `pred` saw it: try again with what is there.
        }
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        let values: Vec<Arc<V>> = self.map.lock().unwrap().values().cloned().collect();
        let rejected: Vec<Arc<V>> = values
            .into_iter()
            .filter(|v| {
                let _first = keep(v);
                !keep(v)
            })
            .collect();
        self.map
            .lock()
            .unwrap()
            .retain(|_, v| !rejected.iter().any(|r| Arc::ptr_eq(r, v)));
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        let mut map = self.map.lock().unwrap();
        let found = map.get(&key).is_some_and(|v| std::ptr::eq(&**v, current));
        if found {
            map.insert(key, Arc::new(new));
        }
        found
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}
