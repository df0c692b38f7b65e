//! The papaya map: a `papaya::HashMap`, lock-free for lookups, insertions and
//! removals. Each generation of the ring (`ring/`) is one, and so is the per-key mutex
//! baseline's map.
//!
//! Each key's state sits in papaya's own entry (one allocation per key, holding the
//! key and the state), which papaya never moves: a resize copies the entry's pointer
//! to the new table, and a removed entry is freed through papaya's epoch-based
//! reclamation (seize) only once no guard that could hold it is left. So a state
//! found under a guard stays put for as long as the guard does, which is what the
//! compare-and-set loops on it need.
//!
//! What papaya guarantees, and what this map relies on (papaya's docs,
//! "Consistency"): a read establishes happens-before with the write it reads; a
//! lookup never misses a key present throughout it (a replacement is one
//! compare-and-set of the key's slot, not two steps); an insertion of an absent key
//! either stores its value or finds the value another thread stored first; the
//! closures of `compute` and `remove_if` may be called more than once when the entry
//! changes under them; and iteration first completes any resize in progress.
//!
//! Where papaya itself can make a writer wait (papaya 0.2.5, `src/raw/mod.rs`): a
//! write to an entry that a resize is copying waits for that entry's copy
//! (`wait_copied`, the copier hashes the key meanwhile), and a thread that needs the
//! next table while another allocates it waits for that allocation (a mutex held for
//! the allocation and a count, never around user code). Lookups never wait. Requests
//! insert into the young generation (a new key, or a relocated copy that may find the
//! key stored first), insert a new key's claim into the old one while claims are
//! open, replace their own key's state when it moves to a new quota, and, through
//! their shares of a drain, remove from the old one. Nothing is inserted into the old
//! generation once its drain opens, and the drain's first pass finishes any resize
//! left from its time as the young map, so no resize runs while it drains (`ring/`).

mod pass;

use super::{Map, Passes};
use crate::KeyRef;
use papaya::{Compute, HashMap, Operation, ResizeMode};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// Removed entries a thread gathers before it hands them to reclamation as a batch.
/// Each batch handed over costs a heavy memory barrier (seize's `membarrier` system
/// call); seize's default of 32 made that a large share of a sweep's removals
/// (results/ANALYSIS.md, "papaya underneath"). A batch waits at most for the guards of
/// its own thread's next removals: 1,024 entries of 32 bytes for `u64` keys.
const RECLAIMED_AT_ONCE: usize = 1024;

/// A thread hands its batch of removed entries and outgrown tables to reclamation at
/// least once in this many insertions, full or not. A table outgrown in a resize goes
/// into the batch of the thread that finished the resize, usually a request's, and a
/// thread that only inserts fills its batch (1,024 objects) with the few tables it
/// retires only after many resizes: a drain's removals on another thread left tables,
/// and the entries papaya keeps on them, unreclaimed for good (the live heap grew with
/// every key streamed). Each hand-over is one heavy memory barrier: once in this many
/// insertions it costs a new key next to nothing (results/ANALYSIS.md, "papaya
/// underneath").
const FLUSHED_EVERY: u32 = 4096;

/// Keys and their states in a lock-free papaya map.
pub(crate) struct PapayaMap<K, V, S> {
    map: HashMap<K, V, S>,
}

impl<K, V, S> Passes for PapayaMap<K, V, S> {
    type Pass = pass::Pass<K, V, S>;
}

impl<K, V, S> Map<K, V, S> for PapayaMap<K, V, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
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
            // default, 64, put an insertion's p99 into a growing map well above
            // 8's at the same throughput (results/ANALYSIS.md, "papaya
            // underneath").
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
    fn insert<R>(&self, key: K, value: V, f: impl FnOnce(&V) -> R) -> Result<(), R> {
        // `try_insert` with a ready value, not `try_insert_with`: in papaya 0.2.5
        // only the plain insertion helps a resize along; through the closure path a
        // resize stays unfinished and lookups search two tables, many times
        // slower (results/ANALYSIS.md, "papaya underneath").
        let map = self.map.pin();
        let inserted = match map.try_insert(key, value) {
            Ok(_) => Ok(()),
            // Lost the race: our value is dropped unused.
            Err(occupied) => Err(f(occupied.current)),
        };
        drop(map);
        if due_for_flush() {
            self.flush();
        }
        inserted
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

    fn pass(map: Arc<Self>) -> Self::Pass {
        pass::Pass::new(map)
    }

    fn finish_resize(&self) {
        // papaya's iteration begins by completing a resize in progress; on this
        // thread's own guard, so the outgrown table goes into its batch (see
        // `pass::Pass::new`).
        let _finished = self.map.pin().iter();
    }

    fn advance(pass: &mut Self::Pass, budget: usize, visit: impl FnMut(&K, &V)) -> bool {
        pass.advance(budget, visit)
    }
}

impl<K, V, S> PapayaMap<K, V, S> {
    /// The papaya map itself, for the pass over it.
    fn map(&self) -> &HashMap<K, V, S> {
        &self.map
    }

    /// Hands this thread's batch of retired objects to reclamation (a heavy barrier).
    #[cold]
    #[inline(never)]
    fn flush(&self) {
        papaya::Guard::flush(&self.map.guard());
    }
}

/// Whether this thread's insertion is one of the one-in-[`FLUSHED_EVERY`] that hand its
/// batch over.
#[inline]
fn due_for_flush() -> bool {
    thread_local! {
        static INSERTIONS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    INSERTIONS.with(|insertions| {
        let n = insertions.get().wrapping_add(1);
        insertions.set(n);
        n % FLUSHED_EVERY == 0
    })
}

#[cfg(test)]
mod tests {
    use super::{Map, PapayaMap};
    use std::sync::{Arc, Barrier, Mutex};

    /// A boxed state, as the sliding log's and per-key quotas' are.
    type Counts = PapayaMap<u64, Mutex<u64>, foldhash::fast::RandomState>;

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
            None => match store.insert(key, Mutex::new(1), add) {
                Ok(()) => 0,
                Err(before) => before,
            },
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

    /// A pass advanced a few entries at a time, from two threads in turn, removing
    /// what it visits, empties the map: it visits every entry once, and a removal
    /// during a visit does not disturb it.
    #[test]
    fn a_pass_in_steps_from_several_threads_visits_every_entry_once() {
        let keys = if cfg!(miri) { 100 } else { 20_000 };
        let store = Arc::new(Counts::with_hasher(Default::default(), 0));
        for key in 0..keys {
            count(&store, key);
        }
        let pass = Mutex::new(Counts::pass(Arc::clone(&store)));
        let visited = Mutex::new(vec![0u8; keys as usize]);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    loop {
                        let mut pass = pass.lock().unwrap();
                        let more = Counts::advance(&mut pass, 7, |&key, state| {
                            visited.lock().unwrap()[key as usize] += 1;
                            assert!(store.remove_if(&key, |found| std::ptr::eq(found, state)));
                        });
                        if !more {
                            return;
                        }
                    }
                });
            }
        });
        assert!(visited.into_inner().unwrap().iter().all(|&v| v == 1));
        assert_eq!(store.len(), 0);
    }

    /// A swap replaces exactly the state it names, and a lookup during the swap
    /// never misses the key (papaya replaces an entry in one step).
    #[test]
    fn a_swap_replaces_only_the_state_it_names() {
        let store = Counts::with_hasher(Default::default(), 0);
        assert!(store.insert(1, Mutex::new(5), |_| ()).is_ok());
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
