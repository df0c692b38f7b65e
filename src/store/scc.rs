//! The store of boxed states: an `scc::HashIndex` from keys to states in boxes of
//! their own.
//!
//! Why boxes: the index moves entries between buckets when it grows, and a reader may
//! still be using the old copy, so a state inline in an entry could be split in two —
//! a compare-and-set on the old copy lost. So an entry holds a box, and every copy of
//! the entry finds the one state through it. The index frees a removed entry's box
//! itself, once no reader can hold the entry.
//!
//! Why this map (measured in results/ANALYSIS.md, "The store"): its lookups take no
//! lock and write no shared memory, like papaya's; its buckets hold entries inline,
//! so an insertion takes one bucket lock — under key churn it inserts several times
//! faster than papaya, about as fast as a locked map. It grows by itself: an operation
//! that touches it while it grows first moves a unit of its buckets, and whichever
//! moves the last frees the outgrown table (what that costs a request: `evict.rs`).

use super::Store;
use super::count::KeyCount;
use super::stored::Stored;
use crate::KeyRef;
use scc::HashIndex;
use scc::hash_index::Entry;
use sdd::Guard;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// Keys a sweep removes at a time, once it has asked about them.
const REMOVED_AT_ONCE: usize = 1024;

/// Keys and their boxed states in a lock-free-read hash table.
pub(crate) struct SccStore<K, V, S: BuildHasher> {
    index: HashIndex<K, Box<V>, S>,
    /// `HashIndex::len` walks the whole table; this counts insertions and removals.
    keys: KeyCount,
}

impl<K, V, S> Store<K, V, S> for SccStore<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Stored,
    S: BuildHasher + Clone + 'static,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        Self {
            index: HashIndex::with_capacity_and_hasher(expected_keys, hasher),
            keys: KeyCount::new(),
        }
    }

    #[inline]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get_or_else(key, |state| Some(f(state)), || None)
    }

    #[inline]
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let guard = Guard::new();
        match self.index.peek(key, &guard) {
            Some(state) => f(state),
            // Under the same guard: the insertion's own, and scc's inside it, are
            // then nested ones, with no barrier.
            None => missed(),
        }
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // A shared lock on the key's bucket: `swap` holds it exclusively from
        // inserting the successor to marking the old entry removed. (scc answers a read
        // of primitive keys and values without the lock; our values are boxes, never
        // primitive, so this always locks.)
        self.index.read_sync(key, |_, state| f(state))
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
        // The caller has just missed the key: lock its bucket without looking first. The
        // value is made (user code, for per-key quotas) before the lock is taken; if
        // another thread stored the key meanwhile, ours is dropped unused.
        let owned = key.to_key();
        let mut value = value(&owned);
        // Held until the insertion is done: scc's own guards inside it (the bucket's
        // lock, a full bucket's cleanup) are then nested ones, with no barrier.
        let _guard = Guard::new();
        // `first` (the algorithm's step on the new state, never user code) runs under
        // the bucket's lock just before the entry is published; `f` (the step on a
        // stored state: a compare-and-set, or for the sliding log its own lock and
        // `cost` timestamps pushed, which may grow the log) for a thread that lost the
        // race to insert, on the entry it found, also under the lock: no second
        // lookup. Insertions into the bucket and the sweeper wait for them; lock-free
        // lookups do not.
        match self.index.entry_sync(owned) {
            Entry::Occupied(entry) => Some(f(entry.get())),
            Entry::Vacant(entry) => {
                let first = first(&mut value);
                // Boxed under the bucket's lock, so a box is allocated only for a key
                // that is really new.
                entry.insert_entry(Box::new(value));
                // Counted once stored: a `first` that panics stores and counts nothing.
                self.keys.add(1);
                Some(first)
            }
        }
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // One guard for scc's two inside (the bucket's lock, the removal): as in
        // `get_or_insert`.
        let _guard = Guard::new();
        // `remove_if_sync` removes the entry exactly when `pred` answers true (it asks
        // once, under the bucket's lock).
        let removed = self.index.remove_if_sync(key, |state| pred(state));
        if removed {
            self.keys.add(-1);
        }
        removed
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool, mut pause: impl FnMut()) {
        let guard = Guard::new();
        // Never let a sweep shrink the table. scc frees a removed entry only when its
        // bucket is next written or when the table holding it is dropped; a table
        // shrunk away is dropped with every removed entry in it, all at once, on the
        // thread that finishes moving it — a request, as likely as not (1M forgotten
        // keys: a 240 ms stall, measured in results/ANALYSIS.md). Held at its largest
        // size, as DashMap's and papaya's tables are, a table only ever grows, and
        // removed entries are freed a bucket at a time by the insertions that reuse
        // their slots.
        hold_capacity(&self.index);
        // Asked without the bucket's lock, removed under it a batch at a time: a pass
        // that held each bucket while it asked (scc's `retain_sync`) was, whenever the
        // OS preempted the sweeper thread, holding some bucket, and a request inserting
        // into it slept until the thread ran again — 4 to 38 ms under churn with two
        // requesting threads on two cores (results/ANALYSIS.md, "A new key's
        // barriers").
        let mut rejected = Vec::with_capacity(REMOVED_AT_ONCE);
        for (visited, (key, state)) in self.index.iter(&guard).enumerate() {
            if visited % REMOVED_AT_ONCE == REMOVED_AT_ONCE - 1 {
                pause(); // holding no bucket's lock, only the epoch guard
            }
            if !keep(state) {
                rejected.push((key.clone(), std::ptr::from_ref::<V>(state)));
                if rejected.len() == REMOVED_AT_ONCE {
                    self.remove_rejected(&mut rejected);
                }
            }
        }
        self.remove_rejected(&mut rejected);
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        // Under the bucket's lock: the entry is the one the caller saw (by address),
        // and the new one takes its place before the lock is released, so every locked
        // operation sees one or the other. A lock-free `get` can straddle the two
        // steps (insert the successor, mark the old entry removed) and miss the key;
        // see the contract.
        let _guard = Guard::new();
        match self.index.entry_sync(key) {
            Entry::Occupied(mut entry) if std::ptr::eq::<V>(&**entry.get(), current) => {
                entry.update(Box::new(new));
                true
            }
            _ => false,
        }
    }

    fn len(&self) -> usize {
        self.keys.get()
    }
}

impl<K, V, S> SccStore<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Stored,
    S: BuildHasher + Clone + 'static,
{
    /// Removes each key `retain` rejected, if its entry still holds the state it was
    /// rejected for (compared by address: the pass's guard keeps a removed state's
    /// memory from being reused meanwhile). An entry replaced since (a key moved to a
    /// new quota) or removed and stored afresh (by a request that met its retired
    /// state) holds another state and stays.
    fn remove_rejected(&self, rejected: &mut Vec<(K, *const V)>) {
        for (key, state) in rejected.drain(..) {
            self.remove_if(&key, |current| std::ptr::eq(current, state));
        }
    }
}

/// Raises `index`'s minimum capacity to its capacity now, so that it never shrinks
/// below the largest size it has had.
fn hold_capacity<K, V, S>(index: &HashIndex<K, V, S>)
where
    K: Hash + Eq,
    S: BuildHasher,
{
    let capacity = index.capacity();
    let minimum = *index.capacity_range().start();
    if capacity > minimum
        && let Some(reservation) = index.reserve(capacity - minimum)
    {
        // Kept for the index's whole life: dropping the reservation would lower the
        // minimum again. Forgetting it leaks nothing (it only borrows the index).
        std::mem::forget(reservation);
    }
}

#[cfg(test)]
mod tests {
    use super::{SccStore, Store};
    use sdd::Guard;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Barrier, Mutex, mpsc};

    /// A boxed state, as the sliding log's and per-key quotas' are.
    type Counts = SccStore<u64, Mutex<u64>, foldhash::fast::RandomState>;

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
                .expect("the scc store always answers"),
        }
    }

    /// Stores `key` with a count of `value` (nothing if it is there already).
    fn insert(store: &Counts, key: u64, value: u64) {
        let _ = store.get_or_insert(&key, |_| Mutex::new(value), |_| (), |_| ());
    }

    /// A store with keys `0..keys`, each counted once.
    fn filled(keys: u64) -> Counts {
        let store = Counts::with_hasher(Default::default(), 0);
        for key in 0..keys {
            count(&store, key);
        }
        store
    }

    #[test]
    fn a_sweep_that_empties_the_map_leaves_its_table_as_large_as_it_was() {
        let store = Counts::with_hasher(Default::default(), 0);
        for key in 0..100_000 {
            insert(&store, key, 0);
        }
        let grown = store.index.capacity();
        store.retain(|_| false, || {});
        assert_eq!(store.len(), 0);
        assert_eq!(store.index.capacity(), grown, "the table shrank");
        // And keeps it while keys come back.
        for key in 100_000..100_100 {
            insert(&store, key, 0);
        }
        assert_eq!(store.index.capacity(), grown);
        assert_eq!(store.len(), 100);
    }

    /// Threads count keys (stored and new, each key by every thread) while the new
    /// keys make the index grow: every key ends with exactly one state holding every
    /// count, so no key was given two states and no count was lost in a moved entry.
    #[test]
    fn requests_while_the_index_grows_count_exactly() {
        const THREADS: u64 = 3;
        for round in 0..4 {
            let old = 40_000;
            let store = filled(old);
            let before = store.index.capacity();
            let start = Barrier::new(THREADS as usize);
            std::thread::scope(|s| {
                for thread in 0..THREADS {
                    let (store, start) = (&store, &start);
                    s.spawn(move || {
                        start.wait();
                        // Old keys, and new ones every thread also counts, each
                        // thread from its own end.
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
            assert!(store.index.capacity() > before, "round {round}: no growth");
            assert_eq!(store.len(), 2 * old as usize, "round {round}");
            for key in 0..2 * old {
                let expected = THREADS + u64::from(key < old);
                assert_eq!(
                    count(&store, key),
                    expected,
                    "round {round}: key {key} counted wrong"
                );
            }
        }
    }

    /// A locked look never misses a key that is there while new keys make the index
    /// grow; removals meanwhile remove exactly the keys asked for.
    #[test]
    fn locked_looks_and_removals_while_the_index_grows_are_exact() {
        let keys = 40_000;
        let store = filled(keys);
        let before = store.index.capacity();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Relaxed: a flag to stop looking; the scope's join orders the rest.
                while !done.load(Ordering::Relaxed) {
                    for key in (0..keys).step_by(7) {
                        if key % 2 == 1 {
                            continue;
                        }
                        assert!(
                            store.get_locked(&key, |_| ()).is_some(),
                            "key {key} missed under the lock"
                        );
                    }
                }
            });
            s.spawn(|| {
                for key in (1..keys).step_by(2) {
                    assert!(store.remove_if(&key, |_| true), "key {key} not removed");
                }
            });
            for key in keys..3 * keys {
                insert(&store, key, 0);
            }
            done.store(true, Ordering::Relaxed);
        });
        assert!(store.index.capacity() > before, "no growth");
        assert_eq!(store.len(), (keys.div_ceil(2) + 2 * keys) as usize);
        for key in 0..3 * keys {
            let kept = key >= keys || key % 2 == 0;
            assert_eq!(store.get(&key, |_| ()).is_some(), kept, "key {key}");
        }
    }

    /// A sweep alongside insertions that make the index grow forgets exactly the keys
    /// it rejects: none is missed, and the growth brings none of them back.
    #[test]
    fn a_sweep_while_the_index_grows_forgets_exactly_what_it_rejects() {
        for round in 0..4 {
            let keys = 40_000;
            let store = filled(keys);
            let before = store.index.capacity();
            // Every count is 1 (each key counted once); the sweep keeps those set to 0,
            // and the new keys, stored at 0, whether it meets them or not.
            for key in (0..keys).step_by(2) {
                store.get(&key, |state| *state.lock().unwrap() = 0);
            }
            std::thread::scope(|s| {
                s.spawn(|| store.retain(|state| *state.lock().unwrap() == 0, || {}));
                for key in keys..3 * keys {
                    insert(&store, key, 0);
                }
            });
            assert!(store.index.capacity() > before, "round {round}: no growth");
            let expected = keys.div_ceil(2) + 2 * keys;
            assert_eq!(store.len(), expected as usize, "round {round}");
            for key in 0..3 * keys {
                let kept = store.get(&key, |_| ()).is_some();
                assert_eq!(
                    kept,
                    key >= keys || key % 2 == 0,
                    "round {round}: key {key}"
                );
            }
        }
    }

    /// A removed key's box stays while a reader that found the key still uses it: no
    /// new key is given its memory, and the reader sees the state it found.
    #[test]
    fn a_removed_keys_box_waits_for_its_readers() {
        /// Key 0's count when the reader finds it.
        const MARK: u64 = 12_345;
        let store = Counts::with_hasher(Default::default(), 0);
        insert(&store, 0, MARK);
        let address = |state: &Mutex<u64>| std::ptr::from_ref(state) as usize;
        let old = store.get(&0, address).unwrap();
        let (entered, wait) = (mpsc::channel(), mpsc::channel::<()>());
        std::thread::scope(|s| {
            let store = &store;
            let reader = s.spawn(move || {
                store.get(&0, |state| {
                    entered.0.send(()).unwrap();
                    wait.1.recv().unwrap();
                    *state.lock().unwrap()
                })
            });
            entered.1.recv().unwrap();
            store.retain(|_| false, || {});
            // Give the box every chance to be freed early: epochs advance only once
            // the reader leaves, so these come back without it.
            for _ in 0..10_000 {
                Guard::new().accelerate();
            }
            // Insertions into the key's bucket would free it, were the epoch past.
            let given = (1..2_001).any(|key| {
                insert(store, key, 0);
                store.get(&key, address) == Some(old)
            });
            wait.0.send(()).unwrap();
            let seen = reader.join().unwrap().unwrap();
            assert!(!given, "a new key was given a box a reader still held");
            assert_eq!(seen, MARK, "the reader's state changed under it");
        });
    }
}
