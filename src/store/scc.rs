//! The store of normal builds: an `scc::HashIndex` of handles to states kept in a
//! home of their own ([`super::home`]): a slab slot for a single word, a box for
//! anything else.
//!
//! Why this map (measured in results/ANALYSIS.md, "The store"): its lookups take no
//! lock and write no shared memory, like papaya's (during a resize a lookup may move
//! one bucket of the old table, if it can lock it without waiting); its
//! buckets hold entries inline, so an insertion takes one bucket lock and growing the
//! table rehashes keys in place instead of following a pointer per entry — under key
//! churn it inserts several times faster than papaya, about as fast as a locked map.

use super::Store;
use super::count::KeyCount;
use super::home::{Home, Stored};
use crate::KeyRef;
use scc::HashIndex;
use scc::hash_index::Entry;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// What the index holds for a state of type `V`.
type Handle<V> = <<V as Stored>::Home as Home<V>>::Handle;

/// Keys and handles to their states in a lock-free-read hash index.
pub(crate) struct SccStore<K, V: Stored, S: BuildHasher> {
    map: HashIndex<K, Handle<V>, S>,
    /// Where the states are.
    home: V::Home,
    /// `HashIndex::len` walks the whole table; this counts insertions and removals.
    keys: KeyCount,
}

impl<K, V, S> Store<K, V, S> for SccStore<K, V, S>
where
    K: Hash + Eq + Clone,
    V: Stored,
    S: BuildHasher,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        Self {
            map: HashIndex::with_capacity_and_hasher(expected_keys, hasher),
            home: V::Home::new(expected_keys),
            keys: KeyCount::new(),
        }
    }

    #[inline]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.map
            .peek_with(key, |_, handle| f(self.home.state(handle)))
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        // A shared lock on the key's bucket: `swap` holds it exclusively from inserting
        // the successor to marking the old entry removed. (scc answers a read of
        // primitive keys and values without the lock; our values are boxes, never
        // primitive — a box or a `Slot` — so this always locks.)
        self.map
            .read_sync(key, |_, handle| f(self.home.state(handle)))
    }

    #[inline]
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
        // The caller has just missed the key: lock its bucket without looking first. The
        // value is made (user code, for per-key quotas) before the lock is taken; if
        // another thread stored the key meanwhile, ours is dropped unused.
        let owned = key.to_key();
        let value = value(&owned);
        // `f` (the algorithm's step, never user code: a compare-and-set, or for the
        // sliding log its own lock and `cost` timestamps pushed, which may grow the
        // log) runs on the entry under the bucket's lock: the state it sees is the
        // key's, with no second lookup (measured: about 30 instructions of a new key's
        // 860, results/ANALYSIS.md). Insertions into the bucket and the sweeper wait
        // for it; lock-free lookups do not.
        let entry = match self.map.entry_sync(owned) {
            Entry::Occupied(entry) => entry,
            Entry::Vacant(entry) => {
                self.keys.add(1);
                // Placed under the bucket's lock, so a slab slot is taken only for a
                // key that is really new.
                entry.insert_entry(self.home.place(value))
            }
        };
        Some(f(self.home.state(entry.get())))
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let mut handles = Default::default();
        // `remove_if_sync` removes the entry exactly when `pred` answers true (it asks
        // once, under the bucket's lock).
        let removed = self.map.remove_if_sync(key, |handle| {
            let remove = pred(self.home.state(handle));
            if remove {
                V::Home::removed(handle, &mut handles);
            }
            remove
        });
        if removed {
            self.keys.add(-1);
            self.home.release(handles);
        }
        removed
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        // Never let a sweep shrink the table. scc frees a removed entry only when its
        // bucket is next written or when the table holding it is dropped; a table
        // outgrown or shrunk away is dropped with every removed entry in it, all at
        // once, on the thread that finishes moving it — a request, as likely as not
        // (1M forgotten keys: a 240 ms stall, measured in results/ANALYSIS.md). Held
        // at its largest size, as DashMap's and papaya's tables are, the table only
        // ever grows, and removed entries are freed a bucket at a time by the
        // insertions that reuse their slots.
        self.hold_capacity();
        let mut handles = Default::default();
        self.map.retain_sync(|_, handle| {
            let kept = keep(self.home.state(handle));
            if !kept {
                // Counted as it goes (the index removes the entry as soon as this
                // returns: `retain_sync` marks it removed under the bucket's lock
                // before it asks about the next), so a long pass frees room at a key
                // cap while it runs, and a pass cut short by a panic leaves the count
                // right (and its removed states unreleased: kept, never reused early).
                self.keys.add(-1);
                V::Home::removed(handle, &mut handles);
            }
            kept
        });
        // After the pass: every entry noted is out of the index.
        self.home.release(handles);
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        // Under the bucket's lock: the entry is the one the caller saw (by address),
        // and the new one takes its place before the lock is released, so every locked
        // operation sees one or the other. A lock-free `get` can straddle the two
        // steps (insert the successor, mark the old entry removed) and miss the key;
        // see the contract.
        match self.map.entry_sync(key) {
            Entry::Occupied(mut entry) if std::ptr::eq(self.home.state(entry.get()), current) => {
                let mut handles = Default::default();
                V::Home::removed(entry.get(), &mut handles);
                entry.update(self.home.place(new));
                drop(entry);
                self.home.release(handles);
                true
            }
            _ => false,
        }
    }

    fn len(&self) -> usize {
        self.keys.get()
    }

    fn wants_preparation(&self) -> bool {
        self.home.wants_preparation()
    }

    fn prepare(&self, stopping: impl Fn() -> bool) {
        self.home.prepare(&stopping);
    }
}

impl<K, V, S> SccStore<K, V, S>
where
    K: Hash + Eq,
    V: Stored,
    S: BuildHasher,
{
    /// Raises the table's minimum capacity to its capacity now, so that it never
    /// shrinks below the largest size it has had.
    fn hold_capacity(&self) {
        let capacity = self.map.capacity();
        let minimum = *self.map.capacity_range().start();
        if capacity > minimum
            && let Some(reservation) = self.map.reserve(capacity - minimum)
        {
            // Kept for the map's whole life: dropping the reservation would lower the
            // minimum again. Forgetting it leaks nothing (it only borrows the map).
            std::mem::forget(reservation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SccStore, Store};
    use std::sync::atomic::AtomicU64;

    type Words = SccStore<u64, AtomicU64, foldhash::fast::RandomState>;

    #[test]
    fn a_sweep_that_empties_the_map_leaves_its_table_as_large_as_it_was() {
        let store = Words::with_hasher(Default::default(), 0);
        for key in 0..100_000 {
            let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| ());
        }
        let grown = store.map.capacity();
        store.retain(|_| false);
        assert_eq!(store.len(), 0);
        assert_eq!(store.map.capacity(), grown, "the table shrank");
        // And keeps it while keys come back.
        for key in 100_000..100_100 {
            let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| ());
        }
        assert_eq!(store.map.capacity(), grown);
        assert_eq!(store.len(), 100);
    }
}

/// A removed key's slot, while a reader that found the key still uses its word.
#[cfg(test)]
mod reuse {
    use super::{SccStore, Store};
    use crate::store::slab::{collect_until, mutant};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;

    type Words = SccStore<u64, AtomicU64, foldhash::fast::RandomState>;

    /// Key 0's word when the reader finds it.
    const MARK: u64 = 12_345;

    /// What a reader of key 0, inside its lookup across the key's removal and 2,000
    /// insertions, saw: whether a new key was given its word, and the word's value when
    /// the reader looked again. Then, the reader gone, whether new keys reuse it.
    fn reader_across_removal(store: &Words) -> (bool, u64, bool) {
        let _ = store.get_or_insert(&0, |_| AtomicU64::new(MARK), |_| ());
        let address = |word: &AtomicU64| std::ptr::from_ref(word) as usize;
        let old = store.get(&0, address).unwrap();
        let inserted = |keys: std::ops::Range<u64>| -> HashSet<usize> {
            keys.map(|key| store.get_or_insert(&key, |_| AtomicU64::new(0), address))
                .map(Option::unwrap)
                .collect()
        };
        let (entered, wait) = (mpsc::channel(), mpsc::channel::<()>());
        std::thread::scope(|s| {
            let reader = s.spawn(move || {
                store.get(&0, |word| {
                    entered.0.send(()).unwrap();
                    wait.1.recv().unwrap();
                    // Relaxed: the test's channel orders the writes it looks for.
                    word.load(Ordering::Relaxed)
                })
            });
            entered.1.recv().unwrap();
            store.retain(|_| false);
            // Give the release every chance to run early: epochs advance only once
            // the reader leaves, so this comes back without it.
            collect_until(|| false);
            let given = inserted(1..2_001).contains(&old);
            wait.0.send(()).unwrap();
            let seen = reader.join().unwrap().unwrap();
            // The reader gone, the release runs and the slot goes to a new key.
            collect_until(|| false);
            let reused = inserted(2_001..4_001).contains(&old);
            (given, seen, reused)
        })
    }

    #[test]
    fn a_removed_words_slot_waits_for_its_readers() {
        let store = Words::with_hasher(Default::default(), 0);
        let (given, seen, reused) = reader_across_removal(&store);
        assert!(!given, "a new key was given a word a reader still held");
        assert_eq!(seen, MARK, "the reader's word changed under it");
        assert!(reused, "the slot was never reused");
    }

    #[test]
    fn a_sweeping_thread_that_settles_hands_its_slots_back() {
        let store = Words::with_hasher(Default::default(), 0);
        for key in 0..5_000 {
            let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| ());
        }
        let released = std::thread::scope(|s| {
            s.spawn(|| {
                store.retain(|_| false);
                // Other tests' lookups may hold the epoch back for a while: settle until
                // the release has run, a bounded number of times.
                for _ in 0..1_000 {
                    crate::store::settle_releases();
                    if store.home.counts().0 == 5_000 {
                        break;
                    }
                }
                store.home.counts().0
            })
            .join()
            .unwrap()
        });
        assert_eq!(released, 5_000);
    }

    #[test]
    fn a_release_that_does_not_wait_is_caught() {
        mutant::RELEASE_AT_ONCE.set(true);
        let store = Words::with_hasher(Default::default(), 0);
        let (given, seen, _) = reader_across_removal(&store);
        mutant::RELEASE_AT_ONCE.set(false);
        assert!(given);
        assert_ne!(seen, MARK);
    }
}
