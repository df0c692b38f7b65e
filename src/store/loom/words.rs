//! The word store's stand-in under loom: a loom `Mutex` around a `HashMap` of `Arc`ed
//! values, exactly as weak as the [`InPlace`] contract allows.
//!
//! Every closure runs outside the lock, on a snapshot that other threads may replace
//! or remove meanwhile. An insertion makes its value and applies `first` to it
//! unlocked, then stores it in one locked step if the key is still absent — so it can
//! lose a race, as papaya's can — and a loser looks the key up again, unlocked, and
//! may find it gone. A removal re-checks under the lock that it removes the value its
//! predicate saw, and asks again otherwise; a sweep's walk (one part: the whole map)
//! calls `judge` twice for every entry and follows the second answer (the contract
//! lets it ask more than once), and takes no share; a swap
//! hides the key from lock-free lookups for a moment,
//! as the word store's lookups can miss a key being replaced. Values are `Arc`s, so
//! one is never moved or freed while a closure holds it, as papaya's guards keep
//! theirs. So loom explores every interleaving the contract permits, not just the ones
//! a lock around each call would allow.

use crate::KeyRef;
use crate::store::InPlace;
use crate::store::{Judged, Pass};
use crate::sync::{Arc, Mutex, MutexGuard, yield_now};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, Hash};

/// Keys and their state under one loom mutex; values are `Arc`s so closures run
/// unlocked.
pub(crate) struct LoomWords<K, V, S> {
    map: Mutex<Entries<K, V, S>>,
}

/// What the mutex guards.
struct Entries<K, V, S> {
    map: HashMap<K, Arc<V>, S>,
    /// Addresses of successors a `swap` has stored but not finished with: a lock-free
    /// `get` misses their keys until it has, as the word store's lookup can.
    hidden: Vec<usize>,
    /// The pass of forgetting the map was last swept in (`sweep_walk`).
    swept: u64,
}

impl<K, V, S> LoomWords<K, V, S>
where
    K: Hash + Eq + Clone,
    S: BuildHasher,
{
    /// The entries, for a locked operation: it waits while a swap is under way, as
    /// the word store's locked operations wait for the segment lock a swap holds.
    fn locked(&self) -> MutexGuard<'_, Entries<K, V, S>> {
        loop {
            let entries = self.map.lock().unwrap();
            if entries.hidden.is_empty() {
                return entries;
            }
            drop(entries);
            yield_now();
        }
    }

    /// The value stored for `key` now, as a locked lookup sees it.
    fn snapshot<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.locked().map.get(key).cloned()
    }

    /// The value stored for `key` now, as a lock-free lookup sees it: nothing while a
    /// swap is replacing it.
    fn visible<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let entries = self.map.lock().unwrap();
        let found = entries.map.get(key)?;
        let address = Arc::as_ptr(found) as usize;
        (!entries.hidden.contains(&address)).then(|| Arc::clone(found))
    }
}

impl<K, V, S> InPlace<K, V, S> for LoomWords<K, V, S>
where
    K: Hash + Eq + Clone,
    S: BuildHasher,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        let map = HashMap::with_capacity_and_hasher(expected_keys, hasher);
        Self {
            map: Mutex::new(Entries {
                map,
                hidden: Vec::new(),
                swept: 0,
            }),
        }
    }

    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.visible(key).map(|v| f(&v))
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.snapshot(key).map(|v| f(&v))
    }

    fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        value: impl FnOnce(&K) -> V,
        first: impl FnOnce(&mut V) -> R,
        f: impl FnOnce(&V) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // Made, and the first request applied, unlocked, before the store looks
        // again; dropped unused if another thread stored one first.
        let owned = key.to_key();
        let mut value = value(&owned);
        let first = first(&mut value);
        if let Entry::Vacant(vacant) = self.locked().map.entry(owned) {
            vacant.insert(Arc::new(value));
            return Some(first);
        }
        // Found: looked up again without the insertion's lock, which the contract
        // permits: the entry may be removed, or being swapped, in between.
        self.visible(key).map(|stored| f(&stored))
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
            let mut entries = self.locked();
            if entries.map.get(key).is_some_and(|v| Arc::ptr_eq(v, &seen)) {
                entries.map.remove(key);
                return true;
            }
            // Replaced or removed since `pred` saw it: try again with what is there.
        }
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        let mut entries = self.locked();
        let found = (entries.map.get(&key)).is_some_and(|v| std::ptr::eq(&**v, current));
        if !found {
            return false;
        }
        // Two steps, as a word store's move can straddle: the successor is stored,
        // then the old entry marked removed; a lock-free look in between misses the
        // key, and locked operations wait until the second step.
        let successor = Arc::new(new);
        let address = Arc::as_ptr(&successor) as usize;
        entries.map.insert(key, successor);
        entries.hidden.push(address);
        drop(entries);
        self.map.lock().unwrap().hidden.retain(|&a| a != address);
        true
    }

    fn len(&self) -> usize {
        self.locked().map.len()
    }

    /// One part: the whole map.
    fn sweep_parts(&self) -> usize {
        1
    }

    /// None: loom's models take no share (`crate::evict`'s `share` is not called
    /// under loom); the shuttle tests check the word store's.
    fn sweep_share(&self, _pass: &Pass, _judge: impl FnMut(&V, u64) -> Judged) {}

    /// The one part, walked: `judge` twice on a snapshot of each entry,
    /// unlocked, the second answer followed; the part counted once per pass.
    fn sweep_walk(
        &self,
        pass: &Pass,
        mut judge: impl FnMut(&V, u64) -> Judged,
        _breathe: impl FnMut() -> bool,
    ) -> bool {
        let Some(generation) = pass.open_generation() else {
            return true;
        };
        let values: Vec<Arc<V>> = {
            let entries = self.locked();
            if entries.swept == generation {
                return true;
            }
            entries.map.values().cloned().collect()
        };
        let at = pass.at();
        let (mut kept, mut kept_until) = (0, u64::MAX);
        let rejected: Vec<Arc<V>> = values
            .into_iter()
            .filter(|v| {
                let _first = judge(v, at);
                match judge(v, at) {
                    Judged::Kept(until) => {
                        kept += 1;
                        kept_until = kept_until.min(until);
                        false
                    }
                    Judged::Removed => true,
                }
            })
            .collect();
        let mut entries = self.locked();
        entries
            .map
            .retain(|_, v| !rejected.iter().any(|r| Arc::ptr_eq(r, v)));
        entries.swept = generation;
        pass.part_done(kept, kept_until);
        true
    }
}
