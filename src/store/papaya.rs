//! The default store: a `papaya::HashMap`, lock-free for lookups, insertions and
//! removals.
//!
//! Each key's state sits in papaya's own entry (one allocation per key, holding the
//! key and the state), which papaya never moves: a resize copies the entry's pointer
//! to the new table, and a removed entry is freed through papaya's epoch-based
//! reclamation (seize) only once no guard that could hold it is left. So a state
//! found under a guard stays put for as long as the guard does, which is what the
//! compare-and-set loops on it need.
//!
//! What papaya guarantees, and what this store relies on (papaya's docs,
//! "Consistency"): a read establishes happens-before with the write it reads; a
//! lookup never misses a key present throughout it (a replacement is one
//! compare-and-set of the key's slot, not two steps); an insertion of an absent key
//! either stores its value or finds the value another thread stored first; the
//! closures of `compute`, `remove_if` and `retain` may be called more than once
//! when the entry changes under them; and `retain` first completes any resize in
//! progress.
//!
//! Where papaya itself can make a writer wait (papaya 0.2.5, `src/raw/mod.rs`): a
//! write to an entry that a resize is copying waits for that entry's copy
//! (`wait_copied`, the copier hashes the key meanwhile), and a thread that needs the
//! next table while another allocates it waits for that allocation (a mutex held for
//! the allocation and a count, never around user code). Lookups never wait, and a
//! request writes to the map only to insert a new key (papaya never waits on a key
//! that is absent) or to remove or replace its own key's retired or moving state.
//! results/ANALYSIS.md ("papaya by default") says what that leaves.

use super::Store;
use crate::KeyRef;
use papaya::{Compute, HashMap, Operation, ResizeMode};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// Keys a sweep asks about between two of its pauses.
const ASKED_BETWEEN_PAUSES: usize = 1024;
/// Keys a sweep removes under one guard, between two of its pauses.
const REMOVED_AT_ONCE: usize = 1024;

/// Removed entries a thread gathers before it hands them to reclamation as a batch.
/// Each batch handed over costs a heavy memory barrier (seize's `membarrier` system
/// call); seize's default of 32 made that a fifth of a sweep's removals here (1M
/// removals in papaya alone: 386 ms at 32, 309 at 1,024, 2-core EPYC VM). A batch
/// waits at most for the guards of its own thread's next removals: 1,024 entries of
/// 32 bytes for `u64` keys.
const RECLAIMED_AT_ONCE: usize = 1024;

/// Keys and their states in a lock-free papaya map.
pub(crate) struct PapayaStore<K, V, S> {
    map: HashMap<K, V, S>,
}

impl<K, V, S> Store<K, V, S> for PapayaStore<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Send + Sync,
    S: BuildHasher,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        let map = HashMap::builder()
            .collector(seize::Collector::new().batch_size(RECLAIMED_AT_ONCE))
            .hasher(hasher)
            .capacity(expected_keys)
            // Incremental, not blocking: in blocking mode every writer that meets a
            // resize waits until the whole table is copied, so one descheduled
            // copier holds up every insertion; incrementally, a writer copies one
            // chunk and goes on, and waits only to write an entry being copied.
            // Each insertion during a resize copies this many slots: papaya's
            // default, 64, put an insertion's p99 into a growing map at ~12 µs on
            // the 2-core EPYC VM, 8 at ~3 µs at the same throughput.
            .resize_mode(ResizeMode::Incremental(8))
            .build();
        Self { map }
    }

    #[inline]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.map.pin().get(key).map(f)
    }

    #[inline]
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let map = self.map.pin();
        match map.get(key) {
            Some(state) => f(state),
            // Still pinned: the insertion's own pin is then a nested one.
            None => missed(),
        }
    }

    #[inline]
    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // papaya's lookup never misses a key present throughout it: no lock needed.
        self.get(key, f)
    }

    #[inline]
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
        // The caller has just missed the key: no second lookup before inserting.
        let owned = key.to_key();
        let mut value = value(&owned);
        // The first request, on a state no other thread can see yet.
        let first = first(&mut value);
        // `try_insert` with a ready value, not `try_insert_with`: in papaya 0.2.5
        // only the plain insertion helps a resize along; through the closure path a
        // resize stays unfinished and lookups search two tables (~95 ns instead of
        // ~7 ns, measured).
        let map = self.map.pin();
        match map.try_insert(owned, value) {
            Ok(_) => Some(first),
            // Lost the race: our value (and `first`'s work on it) is dropped unused,
            // and the request goes to the winner's state.
            Err(occupied) => Some(f(occupied.current)),
        }
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // papaya removes exactly the entry `pred` answered true for (it asks again
        // if the entry changes first).
        matches!(self.map.pin().remove_if(key, |_, v| pred(v)), Ok(Some(_)))
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool, mut pause: impl FnMut()) {
        // Two passes, so that no guard spans the removals (the asking pass still holds
        // one: papaya's iterator cannot be resumed under a new guard, so what is
        // retired elsewhere meanwhile waits for the pass to end). papaya's own `retain`
        // removes under the one guard its pass holds, and every entry removed while a
        // guard is held waits for it to be freed: the whole pass's removals at once
        // (the 10M-key stream reached 75–85 MB so). Here the first pass only asks, under
        // one guard, and keeps the keys rejected (a rejected state is retired, and no
        // request changes it again); then they are removed a batch at a time, each
        // batch under a guard of its own, so that reclamation frees one batch while
        // the next is removed.
        let mut rejected = Vec::new();
        {
            let map = self.map.pin();
            for (asked, (key, state)) in map.iter().enumerate() {
                if asked % ASKED_BETWEEN_PAUSES == ASKED_BETWEEN_PAUSES - 1 {
                    pause(); // holding no lock, only the pass's guard
                }
                if !keep(state) {
                    rejected.push(key.clone());
                }
            }
        }
        for batch in rejected.chunks(REMOVED_AT_ONCE) {
            let map = self.map.pin();
            for key in batch {
                // Asked again (the contract allows it): the entry may have been
                // removed and stored afresh since; a fresh state is kept unless it too
                // is rejected now.
                let _ = map.remove_if(key, |_, state| !keep(state));
            }
            drop(map);
            pause();
        }
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        let mut new = Some(new);
        // papaya calls the closure again only for a different entry found, or with
        // the cached answer for the same one, so `new` is taken at most once per
        // entry seen, and put back when the entry is not `current`.
        let compute = |entry: Option<(&K, &V)>| match (entry, new.take()) {
            (Some((_, found)), Some(value)) if std::ptr::eq(found, current) => {
                Operation::Insert(value)
            }
            (_, taken) => {
                new = taken;
                Operation::Abort(())
            }
        };
        matches!(
            self.map.pin().compute(key, compute),
            Compute::Updated { .. }
        )
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{PapayaStore, Store};
    use std::sync::{Barrier, Mutex};

    /// A boxed state, as the sliding log's and per-key quotas' are.
    type Counts = PapayaStore<u64, Mutex<u64>, foldhash::fast::RandomState>;

    /// Adds one to a count; what it was before.
    fn add(state: &Mutex<u64>) -> u64 {
        let mut count = state.lock().unwrap();
        *count += 1;
        *count - 1
    }

    /// Adds one to `key`'s count, storing the key first if it is new; how many times
    /// the count had been added to before.
    fn count(store: &Counts, key: u64) -> u64 {
        match store.get(&key, add) {
            Some(before) => before,
            None => store
                .get_or_insert(&key, |_| Mutex::new(0), |state| add(state), add)
                .expect("the papaya store always answers"),
        }
    }

    /// Threads count keys (stored and new, each key by every thread) while the new
    /// keys make the map grow: every key ends with exactly one state holding every
    /// count, so no key was given two states, no count went to a state that lost
    /// the insertion race, and none was lost in a resize.
    #[test]
    fn requests_while_the_map_grows_count_exactly() {
        const THREADS: u64 = 3;
        let old = if cfg!(miri) { 200 } else { 40_000 };
        let store = Counts::with_hasher(Default::default(), 0);
        for key in 0..old {
            count(&store, key);
        }
        let start = Barrier::new(THREADS as usize);
        std::thread::scope(|s| {
            for thread in 0..THREADS {
                let (store, start) = (&store, &start);
                s.spawn(move || {
                    start.wait();
                    let keys: Vec<u64> = (0..2 * old).collect();
                    let order: Box<dyn Iterator<Item = &u64>> = if thread % 2 == 0 {
                        Box::new(keys.iter())
                    } else {
                        Box::new(keys.iter().rev())
                    };
                    for &key in order {
                        count(store, key);
                    }
                });
            }
        });
        assert_eq!(store.len(), 2 * old as usize);
        for key in 0..2 * old {
            let expected = THREADS + u64::from(key < old);
            assert_eq!(count(&store, key), expected, "key {key} counted wrong");
        }
    }

    /// A sweep alongside insertions forgets exactly the keys it rejects: none is
    /// missed, and none of the new keys is taken with them.
    #[test]
    fn a_sweep_while_the_map_grows_forgets_exactly_what_it_rejects() {
        let keys = if cfg!(miri) { 200 } else { 40_000 };
        let store = Counts::with_hasher(Default::default(), 0);
        for key in 0..keys {
            count(&store, key);
        }
        // Every count is 1; the sweep keeps those set back to 0, and the new keys,
        // stored at 0, whether it meets them or not.
        for key in (0..keys).step_by(2) {
            store.get(&key, |state| *state.lock().unwrap() = 0);
        }
        std::thread::scope(|s| {
            s.spawn(|| store.retain(|state| *state.lock().unwrap() == 0, || {}));
            for key in keys..3 * keys {
                let _ = store.get_or_insert(&key, |_| Mutex::new(0), |_| (), |_| ());
            }
        });
        assert_eq!(store.len(), (keys.div_ceil(2) + 2 * keys) as usize);
        for key in 0..3 * keys {
            let kept = store.get(&key, |_| ()).is_some();
            assert_eq!(kept, key >= keys || key % 2 == 0, "key {key}");
        }
    }

    /// A swap replaces exactly the state it names, and a lookup during the swap
    /// never misses the key (papaya replaces an entry in one step).
    #[test]
    fn a_swap_replaces_only_the_state_it_names() {
        let store = Counts::with_hasher(Default::default(), 0);
        let _ = store.get_or_insert(&1, |_| Mutex::new(5), |_| (), |_| ());
        let stale = Mutex::new(5);
        assert!(
            !store.swap(1, &stale, Mutex::new(9)),
            "swapped a state not stored"
        );
        let swapped = store
            .get(&1, |state| store.swap(1, state, Mutex::new(7)))
            .unwrap();
        assert!(swapped);
        assert_eq!(store.get(&1, |state| *state.lock().unwrap()), Some(7));
        assert!(
            !store.swap(2, &stale, Mutex::new(1)),
            "swapped an absent key"
        );
        assert_eq!(store.len(), 1);
    }
}
