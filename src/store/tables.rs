//! The index of normal builds: an `scc::HashIndex`, replaced by one twice its size by
//! the sweeper thread when it fills up, so that no request moves entries or frees the
//! outgrown table.
//!
//! # Why
//! Left to itself, an `scc::HashIndex` that fills up links a table twice the size and
//! makes every operation that touches it meanwhile — lookups included — move a unit of
//! 64 buckets first (80–100 µs), and whichever thread moves the last unit frees the
//! outgrown table (`munmap`: 0.3 ms for 4 MB, 12.8 ms for 256 MB). Both land on
//! requests, and the second grows with the map (results/ANALYSIS.md, "The slowest
//! requests"). Here the sweeper thread builds the larger table, moves every entry into
//! it and drops the outgrown one itself. Entries hold handles (a slab slot), never the
//! states, so moving an entry never splits a state in two.
//!
//! # The move
//! Two tables: `current`, which lookups try first and new keys go to, and while a move
//! is under way `draining`, the outgrown table. The sweeper thread (under a lock, so
//! never two at once; sweeps run alongside):
//! 1. builds a table twice the size and touches its pages (`warm`), publishes the
//!    old one as `draining`, then the new one as `current` (Release stores;
//!    operations load `current` first, so one that sees the new table also sees the
//!    old one draining);
//! 2. waits until every operation that began before is over (an `sdd` grace period:
//!    every operation runs inside a guard). Operations that began before saw the old
//!    table alone and may insert into it; meanwhile operations that see both tables
//!    insert new keys into the old one too, so the two kinds never disagree;
//! 3. seals the old table: from now on new keys go to the new one. It waits again,
//!    for the operations that read "not sealed";
//! 4. moves every entry: holding its bucket in the old table, and the key's bucket in
//!    the new one, inserts the entry into the new table and removes it from the old.
//!    Nothing enters the old table any more, so passes empty it (one, unless a new
//!    bucket was busy: the move takes it without waiting, since a request holding it
//!    may wait for the old bucket, and leaves the entry for the next pass);
//! 5. unpublishes the old table and drops it, and waits out a grace period, by the
//!    end of which `sdd` has freed it on this thread.
//!
//! An operation that sees both tables locks the key's bucket in the new table first,
//! then (if the key is not there) in the old one, and holds both while it works. The
//! move holds both too while an entry is in both tables (with the same handle, for a
//! moment), so a key never has two states, and is never inserted into one table while
//! it is in the other. A request waits at most while the move holds one old bucket
//! (its entries, up to 32, moved) or, having moved an entry, holds that entry's new
//! bucket until it finds the next one: the next old bucket in the first pass, but
//! in a later pass (entries whose new bucket was busy) a scan over emptied buckets. A lock-free lookup tries the new table, then the
//! old one, so it finds a moving key in either, unless the whole move falls between
//! its two looks; it then misses the key, as it can miss a key being swapped (the
//! store contract), and the caller looks again under the locks. Loom model 15
//! (`loom-tests/tests/growth.rs`) restates these steps on loom's primitives and checks
//! them, with a mutant for each of steps 2 and 3 and one for a move that removes the
//! entry from the old table, letting go of its bucket, before it takes the new one.
//! Not modelled: a move that lets go of the new bucket before the old entry is gone
//! (then a removal could release the state's slot while the old copy still names it).
//!
//! A move stopped halfway (a sweep asked for, the limiter dropped, the thread
//! panicked) leaves both tables published: every operation still works, looking in
//! both, and the next preparation finishes the move.
//!
//! # Without the sweeper thread
//! Tables below `FIRST_MOVED_CAPACITY`, every table of a `manual_eviction()`
//! limiter, and tables of boxed states (a box cannot be in two tables) grow by
//! themselves, as described above.

use scc::HashIndex;
use scc::hash_index::Entry;
use sdd::{AtomicShared, Guard, Shared, Tag};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One table and whether it has stopped taking new keys.
struct Table<K, H, S: BuildHasher> {
    index: HashIndex<K, H, S>,
    /// Set while the table drains, once no operation that saw it alone is left: new
    /// keys go to the new table from then on.
    sealed: AtomicBool,
}

/// The tables, and the lock that keeps moves apart.
pub(crate) struct Tables<K, H, S: BuildHasher> {
    current: AtomicShared<Table<K, H, S>>,
    draining: AtomicShared<Table<K, H, S>>,
    /// For the tables to come.
    hasher: S,
    /// Held by a move.
    moving: Mutex<()>,
}

/// The current table's index, and the outgrown table if a move is under way.
type Both<'g, K, H, S> = (&'g HashIndex<K, H, S>, Option<&'g Table<K, H, S>>);

/// Where a key is, or is to go, under the locks that keep it there: see [`Tables::locate`].
pub(crate) struct Located<'g, K, H, S: BuildHasher> {
    /// The key's entry, or the vacant one it is to be inserted into.
    pub(crate) entry: Entry<'g, K, H, S>,
    /// The key's vacant entry in the other table, held as long as `entry`.
    _held: Option<Entry<'g, K, H, S>>,
}

/// The fraction of a table's capacity, in sixteenths, at which the sweeper thread
/// replaces it: below the 13/16 at which the index would grow by itself, leaving room
/// for the keys that arrive while the thread finishes a sweep.
const GROW_AT_SIXTEENTHS: usize = 11;

/// Tables smaller than this (16Mi slots, 256 MiB of `u64` keys and slots) grow by
/// themselves: the sweeper thread takes over from the growth that would free a table
/// of 16Mi slots on a request. Below, what a request pays for a growth is bounded
/// (measured, the slowest request per doubling when requests grow the table, one
/// thread, a 2-core Intel Xeon VM: up to 2.5 ms to 2Mi slots, 3.2 ms at 4Mi, 5.5 ms at
/// 8Mi), and the moves would cost more than they save: on two cores the thread's moves
/// and page touches take a core's share from the requests while they run (throughput
/// 0.83× and a churn p99.9 of about 12 µs against 2–3, results/ANALYSIS.md, "Growth by
/// the sweeper thread"), where the growth they replace costs a request a few
/// milliseconds once per doubling. Unit tests move tables from 4,096 slots, so that a
/// move takes a few thousand keys.
const FIRST_MOVED_CAPACITY: usize = if cfg!(test) { 1 << 12 } else { 1 << 24 };

impl<K, H, S> Tables<K, H, S>
where
    K: Hash + Eq + Clone + 'static,
    H: 'static,
    S: BuildHasher + Clone + 'static,
{
    /// One table for about `expected_keys` keys.
    pub(crate) fn new(hasher: S, expected_keys: usize) -> Self {
        Self {
            current: AtomicShared::new(Table::new(hasher.clone(), expected_keys)),
            draining: AtomicShared::null(),
            hasher,
            moving: Mutex::new(()),
        }
    }

    /// The table new keys go to, and the outgrown one if a move is under way.
    #[inline(always)]
    fn both<'g>(&self, guard: &'g Guard) -> Both<'g, K, H, S> {
        // Acquire: the table's construction happens before its use. `current` first:
        // the move publishes `draining` before `current`, so whoever sees the new
        // table sees the old one draining.
        let current = self.current.load(Ordering::Acquire, guard).as_ref();
        let draining = self.draining.load(Ordering::Acquire, guard).as_ref();
        let current = current.expect("turnstile: the current table is never unpublished");
        let draining = draining.filter(|old| !std::ptr::eq(*old, current));
        (&current.index, draining)
    }

    /// The key's handle, without a lock: the new table, then the outgrown one.
    #[inline(always)]
    pub(crate) fn peek<'g, Q>(&self, key: &Q, guard: &'g Guard) -> Option<&'g H>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        // Acquire: as in `both`.
        let current = self.current.load(Ordering::Acquire, guard).as_ref()?;
        match current.index.peek(key, guard) {
            Some(handle) => Some(handle),
            // Relaxed: only whether to look; `peek_draining` loads it with Acquire.
            None if self.draining.is_null(Ordering::Relaxed) => None,
            None => self.peek_draining(key, guard),
        }
    }

    #[cold]
    #[inline(never)]
    fn peek_draining<'g, Q>(&self, key: &Q, guard: &'g Guard) -> Option<&'g H>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        // Acquire: as in `both`.
        let old = self.draining.load(Ordering::Acquire, guard).as_ref()?;
        old.index.peek(key, guard)
    }

    /// The only table, when no move is under way: operations on it need no more than
    /// its own bucket lock.
    #[inline]
    pub(crate) fn alone<'g>(&self, guard: &'g Guard) -> Option<&'g HashIndex<K, H, S>> {
        match self.both(guard) {
            (current, None) => Some(current),
            (_, Some(_)) => None,
        }
    }

    /// The key's entry, or the vacant entry it is to go into, locked so that no other
    /// operation can insert, move or remove the key meanwhile.
    pub(crate) fn locate<'g>(&self, key: K, guard: &'g Guard) -> Located<'g, K, H, S> {
        let (current, old) = self.both(guard);
        // The new table's bucket first, as the move locks it.
        let entry = current.entry_sync(key);
        let (Some(old), Entry::Vacant(vacant)) = (old, &entry) else {
            return Located { entry, _held: None };
        };
        let in_old = old.index.entry_sync(vacant.key().clone());
        // Acquire, read while holding the old bucket's lock: the seal is stored only
        // once every operation that saw the old table alone is over, so reading it
        // sealed, any insertion of this key such an operation made happened before this
        // load. It needed this bucket's lock, which we have held since before the look
        // above, so it came before that look, which therefore saw it.
        if matches!(in_old, Entry::Occupied(_)) || !old.sealed.load(Ordering::Acquire) {
            // The key is in the old table, or goes there: operations that saw the old
            // table alone may still insert into it, so until it is sealed, so do we.
            Located {
                entry: in_old,
                _held: Some(entry),
            }
        } else {
            Located {
                entry,
                _held: Some(in_old),
            }
        }
    }

    /// Calls `each` once on every table's index, the outgrown one first: a key that
    /// moves while this runs is in the new table before it leaves the old one, so
    /// `each` meets it in one table or both, never neither. A move that begins
    /// meanwhile is followed into the table it publishes. Runs alongside a move,
    /// without waiting for it (each holds one bucket at a time, as the move does).
    pub(crate) fn each_index(&self, mut each: impl FnMut(&HashIndex<K, H, S>)) {
        let guard = Guard::new();
        let mut seen: Vec<*const HashIndex<K, H, S>> = Vec::with_capacity(2);
        loop {
            let (current, old) = self.both(&guard);
            let unseen = |index: &HashIndex<K, H, S>| !seen.contains(&std::ptr::from_ref(index));
            if let Some(old) = old.map(|old| &old.index).filter(|old| unseen(old)) {
                seen.push(old);
                each(old);
            } else if unseen(current) {
                seen.push(current);
                each(current);
            } else {
                return;
            }
        }
    }

    /// Whether the keys (counted by `keys`, only for a table large enough to move)
    /// fill the current table enough for the sweeper thread to replace it. Cheap: for a
    /// sampled insertion.
    pub(crate) fn growth_due(&self, keys: impl FnOnce() -> usize) -> bool {
        let guard = Guard::new();
        match self.both(&guard) {
            (current, None) => full(current, keys),
            // Under way, or left halfway for a sweep: to be finished.
            (_, Some(_)) => true,
        }
    }

    /// Replaces the current table by one twice its size, moving every entry (see the
    /// module docs); `copy` gives a moved entry's handle. Finishes a move left halfway.
    /// Ends early once `stopping` says so, and once the old table is sealed (its first
    /// milliseconds: until then new keys still go to it) once `give_way` does; whether
    /// no move is left to finish. For the sweeper thread only.
    pub(crate) fn grow(
        &self,
        copy: impl Fn(&H) -> H,
        keys: &dyn Fn() -> usize,
        stopping: &dyn Fn() -> bool,
        give_way: &dyn Fn() -> bool,
    ) -> bool {
        let _moving = self.moving.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(old) = self.publish(keys, &copy, stopping) else {
            return true;
        };
        if !old.sealed.load(Ordering::Acquire) {
            if !wait_for_operations(stopping) {
                return false;
            }
            // Release: pairs with `locate`'s Acquire load.
            old.sealed.store(true, Ordering::Release);
        }
        if !wait_for_operations(stopping) {
            return false;
        }
        while !old.index.is_empty() {
            if !self.move_entries(&old.index, &copy, give_way) {
                return false;
            }
        }
        // Release: a lock-free lookup that reads no draining table relies on it to see
        // every moved entry in the new one (its Acquire load in `peek_draining`, or
        // `both`); the moves happen before this store.
        let (gone, _) = self.draining.swap((None, Tag::None), Ordering::Release);
        // The last references: the table goes to this thread's `sdd` collector, which
        // frees it once no lookup reads it, at one of this thread's later guards. Wait
        // for that here rather than hold the memory until the thread next wakes: by the
        // time a grace period that began after the drop is over, so is its release.
        drop(gone);
        drop(old);
        wait_for_operations(stopping);
        true
    }

    /// The table to drain: the one of a move left halfway, else the current one if
    /// `keys` fill it, once a table twice its size has replaced it; else none (also
    /// when `stopping` said so while the new table was being prepared).
    fn publish(
        &self,
        keys: &dyn Fn() -> usize,
        copy: &impl Fn(&H) -> H,
        stopping: &dyn Fn() -> bool,
    ) -> Option<Shared<Table<K, H, S>>> {
        // Shared references, so that no guard is held while the new table is warmed
        // (a guard held that long would keep `sdd`'s epoch from moving).
        let (draining, current) = {
            let guard = Guard::new();
            (
                self.draining.get_shared(Ordering::Acquire, &guard),
                self.current.get_shared(Ordering::Acquire, &guard),
            )
        };
        if let Some(old) = draining {
            return Some(old);
        }
        let old = current.expect("turnstile: the current table is never unpublished");
        if !full(&old.index, keys) {
            return None;
        }
        // Entries only leave the old table from now on: keep it from shrinking,
        // which would make its readers move buckets.
        hold_capacity(&old.index);
        let new = Table::new(
            self.hasher.clone(),
            entries_for(old.index.capacity().saturating_mul(2)),
        );
        if !warm(&new.index, &old.index, copy, stopping) {
            return None;
        }
        let new = Shared::new(new);
        // Release, both: the table's construction happens before any use of it; and
        // `draining` before `current` (see `both`).
        self.draining
            .swap((Some(old.clone()), Tag::None), Ordering::Release);
        self.current.swap((Some(new), Tag::None), Ordering::Release);
        Some(old)
    }

    /// One pass over the outgrown table, moving each entry to the current one; false
    /// if it ended early because `stopping` said so.
    fn move_entries(
        &self,
        old: &HashIndex<K, H, S>,
        copy: &impl Fn(&H) -> H,
        stopping: &dyn Fn() -> bool,
    ) -> bool {
        /// Entries moved between looks at `stopping`.
        const MOVES_PER_LOOK: usize = 4096;
        let guard = Guard::new();
        let (current, _) = self.both(&guard);
        // One old bucket locked at a time, for the entries in it.
        let mut entry = old.begin_sync();
        let mut looked = 0_usize;
        while let Some(from) = entry {
            looked += 1;
            if looked % MOVES_PER_LOOK == 0 && stopping() {
                return false;
            }
            // The new bucket without waiting: a request holding it may be waiting for
            // the old bucket this pass holds (requests lock the new bucket first). Then
            // the entry is left for the next pass.
            entry = match current.try_entry(from.key().clone()) {
                Some(Entry::Vacant(to)) => {
                    // In both tables for a moment, with the same handle, and the new
                    // bucket locked until the old entry is gone: every locked operation
                    // waits for the move, and a lock-free lookup finds either copy.
                    let moved = to.insert_entry(copy(from.get()));
                    let next = from.remove_and_sync();
                    drop(moved);
                    next
                }
                // Never: a key is in one table at a time. Were it in both, every
                // operation would find the new table's entry first; the old one goes
                // (its state kept, never reused: a slot leaked and the key counted
                // twice, rather than a pass that never empties the table).
                Some(Entry::Occupied(_)) => {
                    debug_assert!(false, "a key in both tables");
                    from.remove_and_sync()
                }
                None => from.next_sync(),
            };
        }
        true
    }

    /// The capacity of the table new keys go to: for tests.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.both(&Guard::new()).0.capacity()
    }

    /// Whether a move is under way: for tests.
    #[cfg(test)]
    pub(crate) fn moving(&self) -> bool {
        self.both(&Guard::new()).1.is_some()
    }
}

impl<K, H, S> Table<K, H, S>
where
    K: Hash + Eq,
    S: BuildHasher,
{
    fn new(hasher: S, capacity: usize) -> Self {
        Self {
            index: HashIndex::with_capacity_and_hasher(capacity, hasher),
            sealed: AtomicBool::new(false),
        }
    }
}

/// Touches every page of `new`, not yet published, so that no request meets a fresh
/// one there (measured: a request that first-touched a page of the new table took
/// 20–25 µs on a 2-core Intel Xeon VM, and under churn those were the p99.9, as the
/// slab's once were). scc allocates a table's entries untouched; an insertion writes
/// its bucket's metadata and entry block. So for each page's worth of buckets, one of
/// `old`'s keys that falls there is inserted and removed again, leaving the table
/// empty. False if `stopping` said to stop first.
fn warm<K, H, S>(
    new: &HashIndex<K, H, S>,
    old: &HashIndex<K, H, S>,
    copy: &impl Fn(&H) -> H,
    stopping: &dyn Fn() -> bool,
) -> bool
where
    K: Hash + Eq + Clone,
    S: BuildHasher,
{
    /// Entries looked at between looks at `stopping`.
    const ENTRIES_PER_LOOK: usize = 1 << 16;
    /// Entries per bucket (scc's `BUCKET_LEN`).
    const BUCKET_ENTRIES: usize = 32;
    const PAGE: usize = 4096;
    let per_page = (PAGE / (BUCKET_ENTRIES * size_of::<(K, H)>()).max(1)).max(1);
    let mut untouched = vec![true; (new.capacity() / BUCKET_ENTRIES).div_ceil(per_page)];
    let mut left = untouched.len();
    // One old bucket locked at a time, not one guard held for the pass: a guard held
    // that long would keep `sdd`'s epoch from moving, and every thread's periodic
    // attempt to move it would fail and be made again (measured: under churn, calls
    // over 8 µs by the hundred per 50 ms while such a pass ran). `new` is this
    // thread's alone.
    let mut entry = old.begin_sync();
    let mut looked = 0_usize;
    while let Some(found) = entry {
        if left == 0 {
            break;
        }
        looked += 1;
        if looked % ENTRIES_PER_LOOK == 0 && stopping() {
            return false;
        }
        let page = new.bucket_index(found.key()) / per_page;
        if let Some(untouched @ true) = untouched.get_mut(page) {
            *untouched = false;
            left -= 1;
            if new
                .insert_sync(found.key().clone(), copy(found.get()))
                .is_ok()
            {
                new.remove_sync(found.key());
            }
        }
        entry = found.next_sync();
    }
    true
}

/// The entries to ask scc for so that a table has `capacity` slots: it sizes a table
/// for `n` entries at `n · 5/4` slots, rounded up to a power of two.
fn entries_for(capacity: usize) -> usize {
    capacity / 5 * 4
}

/// Whether the keys `keys` counts fill `index` enough for the sweeper thread to
/// replace it; counted only for a table large enough to move.
fn full<K: Hash + Eq, H, S: BuildHasher>(
    index: &HashIndex<K, H, S>,
    keys: impl FnOnce() -> usize,
) -> bool {
    let capacity = index.capacity();
    capacity >= FIRST_MOVED_CAPACITY && keys() >= capacity / 16 * GROW_AT_SIXTEENTHS
}

/// Raises `index`'s minimum capacity to its capacity now, so that it never shrinks
/// below the largest size it has had.
pub(crate) fn hold_capacity<K, H, S>(index: &HashIndex<K, H, S>)
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

/// Waits until every operation that began before the call is over: every `sdd` guard
/// present now has been dropped. False if `stopping` said to stop first.
fn wait_for_operations(stopping: &dyn Fn() -> bool) -> bool {
    let over = Arc::new(AtomicBool::new(false));
    let mark = Arc::clone(&over);
    // Runs once no guard present now remains (sdd's epoch rule, the same by which
    // the index frees removed entries).
    Guard::new().defer_execute(move || {
        // Release: read with Acquire below.
        mark.store(true, Ordering::Release);
    });
    // Acquire: what those operations did happens before the deferred closure ran.
    while !over.load(Ordering::Acquire) {
        if stopping() {
            return false;
        }
        let guard = Guard::new();
        guard.accelerate();
        drop(guard);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    true
}
