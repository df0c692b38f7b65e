//! A [`Map`] under loom: a loom `Mutex` around a `HashMap` of `Arc`ed values, standing
//! in for papaya.
//!
//! Every closure runs outside the lock, on a snapshot that other threads may replace
//! or remove meanwhile. An insertion stores its value in one locked step if the key is
//! absent — so it can lose a race, as papaya's can — and a loser's `f` runs on the
//! winner's value, unlocked. A removal re-checks under the lock that it removes the
//! value its predicate saw, and asks again otherwise (papaya asks again when the entry
//! changed). A pass takes a snapshot of the entries when it begins and visits them
//! unlocked, so an entry removed or replaced meanwhile may still be visited, and one
//! inserted meanwhile is not. Values are `Arc`s, so one is never moved or freed while a
//! closure holds it, as papaya's guards keep theirs.

use crate::KeyRef;
use crate::store::{Map, Passes};
use crate::sync::{Arc, Mutex};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, Hash};

/// Keys and their states under one loom mutex; values are `Arc`s so closures run
/// unlocked.
pub(crate) struct LoomMap<K, V, S> {
    map: Mutex<HashMap<K, Arc<V>, S>>,
}

/// A pass: the entries as they were when it began, and how many it has visited.
pub(crate) struct Snapshot<K, V> {
    entries: Vec<(K, Arc<V>)>,
    visited: usize,
}

impl<K, V, S> LoomMap<K, V, S>
where
    K: Hash + Eq,
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

impl<K, V, S> Passes for LoomMap<K, V, S> {
    type Pass = Snapshot<K, V>;
}

impl<K, V, S> Map<K, V, S> for LoomMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync,
    V: Send + Sync,
    S: BuildHasher + Send + Sync,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::with_capacity_and_hasher(expected_keys, hasher)),
        }
    }

    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.snapshot(key).map(|value| f(&value))
    }

    fn insert<R>(&self, key: K, value: V, f: impl FnOnce(&V) -> R) -> Result<(), R> {
        let stored = match self.map.lock().unwrap().entry(key) {
            Entry::Vacant(vacant) => {
                vacant.insert(Arc::new(value));
                return Ok(());
            }
            Entry::Occupied(occupied) => Arc::clone(occupied.get()),
        };
        // Unlocked, on what was stored: it may be removed or replaced meanwhile.
        Err(f(&stored))
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
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

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        let mut map = self.map.lock().unwrap();
        match map.get_mut(&key) {
            Some(found) if std::ptr::eq(&**found, current) => {
                *found = Arc::new(new);
                true
            }
            _ => false,
        }
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }

    fn pass(map: std::sync::Arc<Self>) -> Snapshot<K, V> {
        let entries = map
            .map
            .lock()
            .unwrap()
            .iter()
            .map(|(key, value)| (key.clone(), Arc::clone(value)))
            .collect();
        Snapshot {
            entries,
            visited: 0,
        }
    }

    fn advance(pass: &mut Snapshot<K, V>, budget: usize, mut visit: impl FnMut(&K, &V)) -> bool {
        for _ in 0..budget {
            let Some((key, value)) = pass.entries.get(pass.visited) else {
                return false;
            };
            visit(key, value);
            pass.visited += 1;
        }
        pass.visited < pass.entries.len()
    }
}
