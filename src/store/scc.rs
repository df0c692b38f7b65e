//! The store of normal builds: an `scc::HashIndex` of boxed states.
//!
//! Why this map (measured in results/ANALYSIS.md, "The store"): its lookups take no
//! lock and write no shared memory, like papaya's (during a resize a lookup may move
//! one bucket of the old table, if it can lock it without waiting); its
//! buckets hold entries inline, so an insertion takes one bucket lock and growing the
//! table rehashes keys in place instead of following a pointer per entry — under key
//! churn it inserts several times faster than papaya, about as fast as a locked map.
//!
//! States are boxed: `HashIndex` moves entries between buckets when it resizes, and a
//! reader may still be using the old copy, so a state inline in the map could be
//! split in two — a compare-and-set on the old copy lost. Boxed, every copy of the
//! entry points to the one state.

use super::Store;
use super::count::KeyCount;
use crate::KeyRef;
use scc::HashIndex;
use scc::hash_index::Entry;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// Keys and their boxed states in a lock-free-read hash index.
pub(crate) struct SccStore<K, V, S: BuildHasher> {
    map: HashIndex<K, Box<V>, S>,
    /// `HashIndex::len` walks the whole table; this counts insertions and removals.
    keys: KeyCount,
}

impl<K, V, S> Store<K, V, S> for SccStore<K, V, S>
where
    K: Hash + Eq + Clone,
    S: BuildHasher,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        Self {
            map: HashIndex::with_capacity_and_hasher(expected_keys, hasher),
            keys: KeyCount::new(),
        }
    }

    #[inline]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.map.peek_with(key, |_, value| f(value))
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        // A shared lock on the key's bucket: `swap` holds it exclusively from inserting
        // the successor to marking the old entry removed. (scc answers a read of
        // primitive keys and values without the lock; our values are boxes, never
        // primitive, so this always locks.)
        self.map.read_sync(key, |_, value| f(value))
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
        let value = Box::new(value(&owned));
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
                entry.insert_entry(value)
            }
        };
        Some(f(entry.get()))
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let removed = self.map.remove_if_sync(key, |value| pred(value));
        if removed {
            self.keys.add(-1);
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
        self.map.retain_sync(|_, value| {
            let kept = keep(value);
            if !kept {
                // Counted as it goes (the index removes the entry as soon as this
                // returns), so a long pass frees room at a key cap while it runs, and a
                // pass cut short by a panic leaves the count right.
                self.keys.add(-1);
            }
            kept
        });
    }

    fn swap(&self, key: K, current: &V, new: V) -> bool {
        // Under the bucket's lock: the entry is the one the caller saw (by address),
        // and the new one takes its place before the lock is released, so every locked
        // operation sees one or the other. A lock-free `get` can straddle the two
        // steps (insert the successor, mark the old entry removed) and miss the key;
        // see the contract.
        match self.map.entry_sync(key) {
            Entry::Occupied(mut entry) if std::ptr::eq(&**entry.get(), current) => {
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
    K: Hash + Eq,
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
