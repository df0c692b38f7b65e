//! The store of normal builds: an `scc::HashIndex` of handles ([`super::tables`],
//! which the sweeper thread replaces by a larger one as it fills) to states kept in a
//! home of their own ([`super::home`]): a slab slot for a single word, a box for
//! anything else.
//!
//! Why this map (measured in results/ANALYSIS.md, "The store"): its lookups take no
//! lock and write no shared memory, like papaya's; its buckets hold entries inline,
//! so an insertion takes one bucket lock — under key churn it inserts several times
//! faster than papaya, about as fast as a locked map.

use super::Store;
use super::count::KeyCount;
use super::home::{Home, Stored};
use super::tables::{Tables, hold_capacity};
use crate::KeyRef;
use scc::hash_index::Entry;
use sdd::Guard;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// Keys a sweep removes at a time, once it has asked about them.
const REMOVED_AT_ONCE: usize = 1024;

/// What the index holds for a state of type `V`.
type Handle<V> = <<V as Stored>::Home as Home<V>>::Handle;

/// Keys and handles to their states in lock-free-read hash tables.
pub(crate) struct SccStore<K, V: Stored, S: BuildHasher> {
    tables: Tables<K, Handle<V>, S>,
    /// Where the states are.
    home: V::Home,
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
            tables: Tables::new(hasher, expected_keys),
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
        self.get_or_else(key, |state| Some(f(state)), || None)
    }

    #[inline]
    fn get_or_else<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R, missed: impl FnOnce() -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let guard = Guard::new();
        match self.tables.peek(key, &guard) {
            Some(handle) => f(self.home.state(handle)),
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
        let guard = Guard::new();
        if let Some(index) = self.tables.alone(&guard) {
            // A shared lock on the key's bucket: `swap` holds it exclusively from
            // inserting the successor to marking the old entry removed. (scc answers a
            // read of primitive keys and values without the lock; our values are boxes
            // or slots, never primitive, so this always locks.)
            return index.read_sync(key, |_, handle| f(self.home.state(handle)));
        }
        match self.tables.locate(key.to_key(), &guard).entry {
            Entry::Occupied(entry) => Some(f(self.home.state(entry.get()))),
            Entry::Vacant(_) => None,
        }
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
        let value = value(&owned);
        // Held until the insertion is done: a move waits for every operation that may
        // have seen its tables before (see `tables`).
        let guard = Guard::new();
        // `first` (the algorithm's step on the new state, never user code) runs under
        // the bucket's lock just before the entry is published; `f` (the step on a
        // stored state: a compare-and-set, or for the sliding log its own lock and
        // `cost` timestamps pushed, which may grow the log) for a thread that lost the
        // race to insert, on the entry it found, also under the lock: no second
        // lookup. Insertions into the bucket and the sweeper wait for them; lock-free
        // lookups do not.
        match self.tables.alone(&guard) {
            Some(index) => Some(self.settle(index.entry_sync(owned), value, first, f)),
            None => Some(self.settle(self.tables.locate(owned, &guard).entry, value, first, f)),
        }
    }

    fn remove_if<Q>(&self, key: &Q, pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let mut handles = Default::default();
        let removed = self.remove_noting(key, pred, &mut handles);
        if removed {
            self.home.release(handles);
        }
        removed
    }

    fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        let mut handles = Default::default();
        let mut rejected = Vec::with_capacity(REMOVED_AT_ONCE);
        self.tables.each_index(|index| {
            // Never let a sweep shrink a table. scc frees a removed entry only when
            // its bucket is next written or when the table holding it is dropped; a
            // table shrunk away is dropped with every removed entry in it, all at
            // once, on the thread that finishes moving it — a request, as likely as
            // not (1M forgotten keys: a 240 ms stall, measured in results/ANALYSIS.md).
            // Held at its largest size, as DashMap's and papaya's tables are, a table
            // only ever grows, and removed entries are freed a bucket at a time by the
            // insertions that reuse their slots.
            hold_capacity(index);
            // Asked without the bucket's lock, removed under it a batch at a time: a
            // pass that held each bucket while it asked (scc's `retain_sync`) was,
            // whenever the OS preempted the sweeper thread, holding some bucket, and
            // a request inserting into it slept until the thread ran again — 4 to 38
            // ms under churn with two requesting threads on two cores (results/
            // ANALYSIS.md, "A new key's barriers").
            let guard = Guard::new();
            for (key, handle) in index.iter(&guard) {
                let state = self.home.state(handle);
                if !keep(state) {
                    rejected.push((key.clone(), std::ptr::from_ref(state)));
                    if rejected.len() == REMOVED_AT_ONCE {
                        self.remove_rejected(&mut rejected, &mut handles);
                    }
                }
            }
            self.remove_rejected(&mut rejected, &mut handles);
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
        let mut handles = Default::default();
        let guard = Guard::new();
        let swapped = match self.tables.locate(key, &guard).entry {
            Entry::Occupied(mut entry) if std::ptr::eq(self.home.state(entry.get()), current) => {
                V::Home::removed(entry.get(), &mut handles);
                entry.update(self.home.place(new));
                true
            }
            _ => false,
        };
        drop(guard);
        self.home.release(handles);
        swapped
    }

    fn len(&self) -> usize {
        self.keys.get()
    }

    fn wants_preparation(&self) -> bool {
        self.home.wants_preparation() || (V::Home::MOVABLE && self.tables.growth_due(|| self.len()))
    }

    fn prepare(&self, stopping: impl Fn() -> bool, give_way: impl Fn() -> bool) {
        loop {
            self.home.prepare(&stopping);
            if !V::Home::MOVABLE || give_way() {
                return;
            }
            // The move also gives way to the slab's next level, which new keys need
            // sooner, and resumes after it.
            let slab_due = || self.home.wants_preparation();
            let pause = || stopping() || give_way() || slab_due();
            let done = self
                .tables
                .grow(V::Home::copied, &|| self.len(), &stopping, &pause);
            if done || stopping() || give_way() {
                return;
            }
        }
    }
}

impl<K, V, S> SccStore<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Stored,
    S: BuildHasher + Clone + 'static,
{
    /// Removes `key`'s entry if `pred` holds for its state, noting its handle in
    /// `handles` for release; whether it did.
    fn remove_noting<Q>(
        &self,
        key: &Q,
        mut pred: impl FnMut(&V) -> bool,
        handles: &mut <V::Home as Home<V>>::Removed,
    ) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let guard = Guard::new();
        let removed = match self.tables.alone(&guard) {
            // `remove_if_sync` removes the entry exactly when `pred` answers true (it
            // asks once, under the bucket's lock).
            Some(index) => index.remove_if_sync(key, |handle| {
                let remove = pred(self.home.state(handle));
                if remove {
                    V::Home::removed(handle, handles);
                }
                remove
            }),
            None => match self.tables.locate(key.to_key(), &guard).entry {
                Entry::Occupied(entry) if pred(self.home.state(entry.get())) => {
                    V::Home::removed(entry.get(), handles);
                    entry.remove_entry();
                    true
                }
                _ => false,
            },
        };
        if removed {
            self.keys.add(-1);
        }
        removed
    }

    /// Removes each key `retain` rejected, if its entry still holds the state it was
    /// rejected for (compared by address: the pass's guard keeps a removed state's
    /// memory from being reused meanwhile). An entry replaced since (a key moved to a
    /// new quota) or removed and stored afresh (by a request that met its retired
    /// state) holds another state and stays.
    fn remove_rejected(
        &self,
        rejected: &mut Vec<(K, *const V)>,
        handles: &mut <V::Home as Home<V>>::Removed,
    ) {
        for (key, state) in rejected.drain(..) {
            self.remove_noting(&key, |current| std::ptr::eq(current, state), handles);
        }
    }
}

impl<K, V, S> SccStore<K, V, S>
where
    K: Hash + Eq,
    V: Stored,
    S: BuildHasher,
{
    /// `f` on the state of the key `entry` holds, storing `value` there first if the
    /// entry is vacant.
    #[inline(always)]
    fn settle<R>(
        &self,
        entry: Entry<'_, K, Handle<V>, S>,
        mut value: V,
        first: impl FnOnce(&mut V) -> R,
        f: impl FnOnce(&V) -> R,
    ) -> R {
        match entry {
            Entry::Occupied(entry) => f(self.home.state(entry.get())),
            Entry::Vacant(entry) => {
                let first = first(&mut value);
                // Placed under the bucket's lock, so a slab slot is taken only for a
                // key that is really new.
                entry.insert_entry(self.home.place(value));
                // Counted once stored: a `first` that panics stores and counts nothing.
                self.keys.add(1);
                first
            }
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
            let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| (), |_| ());
        }
        let grown = store.tables.capacity();
        store.retain(|_| false);
        assert_eq!(store.len(), 0);
        assert_eq!(store.tables.capacity(), grown, "the table shrank");
        // And keeps it while keys come back.
        for key in 100_000..100_100 {
            let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| (), |_| ());
        }
        assert_eq!(store.tables.capacity(), grown);
        assert_eq!(store.len(), 100);
    }
}

/// The sweeper thread's move to a larger table (`tables.rs`), with requests running.
#[cfg(test)]
mod growth {
    use super::{SccStore, Store};
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    type Words = SccStore<u64, AtomicU64, foldhash::fast::RandomState>;

    /// Adds one to `key`'s word, storing the key first if it is new; how many times
    /// the word had been added to before.
    fn count(store: &Words, key: u64) -> u64 {
        // Relaxed: each test reads the words after the threads that add have ended.
        let add = |word: &AtomicU64| word.fetch_add(1, Ordering::Relaxed);
        match store.get(&key, add) {
            Some(before) => before,
            None => store
                .get_or_insert(&key, |_| AtomicU64::new(0), |word| add(word), add)
                .expect("the scc store always answers"),
        }
    }

    /// A store with keys `0..n`, each counted once, whose table they fill enough to
    /// be replaced: the store and `n` (at least `at_least`).
    fn full(at_least: u64) -> (Words, u64) {
        let store = Words::with_hasher(Default::default(), 0);
        let mut keys = 0;
        while keys < at_least || !store.tables.growth_due(|| store.len()) {
            count(&store, keys);
            keys += 1;
        }
        (store, keys)
    }

    #[test]
    fn a_full_table_is_replaced_by_one_twice_its_size_with_every_key_kept() {
        let (store, keys) = full(50_000);
        let before = store.tables.capacity();
        store.prepare(|| false, || false);
        assert_eq!(store.tables.capacity(), 2 * before);
        assert!(!store.tables.moving());
        assert!(
            !store.wants_preparation(),
            "the new table is due again at once"
        );
        assert_eq!(store.len(), keys as usize);
        for key in 0..keys {
            assert_eq!(count(&store, key), 1, "key {key} lost its state");
        }
    }

    #[test]
    fn a_table_that_is_not_full_is_kept() {
        let store = Words::with_hasher(Default::default(), 0);
        count(&store, 1);
        let before = store.tables.capacity();
        store.prepare(|| false, || false);
        assert_eq!(store.tables.capacity(), before);
    }

    /// Threads count keys (old and new, each key by every thread) while the table is
    /// replaced: every key ends with exactly one word holding every count, so no key
    /// was given two states and no count was lost in a moved one.
    #[test]
    fn requests_during_a_move_count_exactly() {
        const THREADS: u64 = 3;
        for round in 0..4 {
            let (store, old) = full(40_000);
            let start = Barrier::new(THREADS as usize + 1);
            let mut moved = false;
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
                start.wait();
                store.prepare(|| false, || false);
                moved = !store.tables.moving();
            });
            assert!(moved, "round {round}: the move did not finish");
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

    /// A locked look never misses a key that is there, moving or not; removals during
    /// the move remove exactly the keys asked for.
    #[test]
    fn locked_looks_and_removals_during_a_move_are_exact() {
        let (store, keys) = full(40_000);
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
            store.prepare(|| false, || false);
            done.store(true, Ordering::Relaxed);
        });
        assert_eq!(store.len(), keys.div_ceil(2) as usize);
        for key in 0..keys {
            assert_eq!(store.get(&key, |_| ()).is_some(), key % 2 == 0, "key {key}");
        }
    }

    /// A sweep alongside a move forgets exactly the keys it rejects: none is missed,
    /// and the move brings none of them back.
    #[test]
    fn a_sweep_during_a_move_forgets_exactly_what_it_rejects() {
        for round in 0..4 {
            let (store, keys) = full(40_000);
            // Every word is 1 (each key counted once); the sweep keeps those set to 0.
            for key in (0..keys).step_by(2) {
                // Relaxed: read by the sweep after the scope's spawn orders it.
                store.get(&key, |word| word.store(0, Ordering::Relaxed));
            }
            std::thread::scope(|s| {
                // Relaxed: as above.
                s.spawn(|| store.retain(|word| word.load(Ordering::Relaxed) == 0));
                store.prepare(|| false, || false);
            });
            assert!(!store.tables.moving(), "round {round}");
            assert_eq!(store.len(), keys.div_ceil(2) as usize, "round {round}");
            for key in 0..keys {
                let kept = store.get(&key, |_| ()).is_some();
                assert_eq!(kept, key % 2 == 0, "round {round}: key {key}");
            }
        }
    }

    #[test]
    fn a_move_stopped_halfway_leaves_every_key_findable_and_is_finished_later() {
        let (store, keys) = full(50_000);
        let looks = std::cell::Cell::new(0);
        // Stops at its first look after publishing the new table.
        store.prepare(
            || {
                looks.set(looks.get() + 1);
                true
            },
            || false,
        );
        assert!(looks.get() > 0);
        assert!(store.tables.moving());
        for key in 0..keys {
            assert_eq!(count(&store, key), 1, "key {key}");
        }
        count(&store, u64::MAX);
        store.prepare(|| false, || false);
        assert!(!store.tables.moving());
        assert_eq!(store.len(), keys as usize + 1);
        for key in 0..keys {
            assert_eq!(count(&store, key), 2, "key {key}");
        }
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
        let _ = store.get_or_insert(&0, |_| AtomicU64::new(MARK), |_| (), |_| ());
        let address = |word: &AtomicU64| std::ptr::from_ref(word) as usize;
        let old = store.get(&0, address).unwrap();
        let inserted = |keys: std::ops::Range<u64>| -> HashSet<usize> {
            keys.map(|key| {
                let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| (), |_| ());
                store.get(&key, address).unwrap()
            })
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
            // The reader gone, the release runs and the slot goes to a new key: once
            // the epoch has moved on, which other tests' lookups in this process may
            // hold back for a while, so a bounded number of rounds.
            let reused = (0..200_u64).any(|round| {
                collect_until(|| false);
                std::thread::sleep(std::time::Duration::from_millis(1));
                let first = 2_001 + round * 2_000;
                inserted(first..first + 2_000).contains(&old)
            });
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
            let _ = store.get_or_insert(&key, |_| AtomicU64::new(0), |_| (), |_| ());
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
