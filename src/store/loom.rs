//! The store of loom builds: a loom `Mutex` around a `HashMap` of `Arc`ed values.
//!
//! It keeps the same contract as the papaya store with primitives loom can see, so
//! loom explores every interleaving of turnstile's protocols around it.

use super::Store;
use crate::KeyRef;
use crate::sync::{Arc, Mutex};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Keys and their state under one loom mutex; values are `Arc`s so `f` runs unlocked.
pub(crate) struct LoomStore<K, V, S> {
    map: Mutex<HashMap<K, Arc<V>, S>>,
}

impl<K, V, S> Store<K, V, S> for LoomStore<K, V, S>
where
    K: Hash + Eq,
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
        let value = self.map.lock().unwrap().get(key).cloned();
        value.map(|v| f(&v))
    }

    fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        value: impl FnOnce(&K) -> V,
        f: impl FnOnce(&V) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let stored = {
            let mut map = self.map.lock().unwrap();
            match map.get(key) {
                Some(v) => v.clone(),
                None => {
                    let key = key.to_key();
                    let value = Arc::new(value(&key));
                    map.entry(key).or_insert(value).clone()
                }
            }
        };
        f(&stored)
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let mut map = self.map.lock().unwrap();
        let remove = map.get(key).is_some_and(|v| pred(v));
        if remove {
            map.remove(key);
        }
        remove
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        self.map.lock().unwrap().retain(|_, v| keep(v));
    }

    fn replace<Q>(&self, key: &Q, mut replace: impl FnMut(Option<&V>) -> Option<V>) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let mut map = self.map.lock().unwrap();
        match replace(map.get(key).map(|v| &**v)) {
            Some(value) => {
                map.insert(key.to_key(), Arc::new(value));
                true
            }
            None => false,
        }
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}
