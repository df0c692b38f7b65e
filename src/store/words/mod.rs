//! The store of the word algorithms' states: an index of our own, in which each key's
//! state word sits beside the key, so a lookup reads the segment's table header, one
//! tag word and one slot (results/ANALYSIS.md, "The word store").
//!
//! # Shape
//! [`SEGMENTS`] segments, chosen by the hash's top bits; each a table of its own
//! (`table.rs`) behind an `sdd` pointer, the outgrown table while it drains, and a
//! lock. Lookups take no lock: they load the segment's table under an epoch guard and
//! probe it, then the draining one if the key is not there. Insertions, removals and
//! the steps of a growth take the segment's lock, each inside an epoch guard created
//! before the lock and dropped after it: a thread's outermost guard may, as it is
//! created, free what the thread retired (outgrown tables, keys and all), and no
//! table is freed while a segment is held.
//!
//! # Files
//! `growth.rs`: a segment's table outgrown, a new one published and the old one
//! drained into it, each word frozen as it is copied (what a request pays for it, and
//! the freeze); `sweep.rs`: forgetting, a pass over the segments taken in parts by
//! new keys' insertions and the sweeper thread; `table.rs` (and `cell.rs`): one
//! table of key-and-word slots; `tests.rs`.

// The write-once key cell, and the table that writes and reads it: the only
// `unsafe` in the crate (see `cell.rs`).
#[allow(unsafe_code)]
mod cell;
#[allow(unsafe_code)]
mod table;

use super::InPlace;
use super::striped::Striped as KeyCount;
use crate::KeyRef;
use crate::store::{Judged, Pass};
use sdd::{AtomicShared, Guard};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
// Through `crate::sync`, so that shuttle's schedules see the store's own locks and
// words (its tables' pointers are sdd's, std atomics inside).
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, Unpoisoned};
use growth::due_to_grow;
use table::{Found, Table};

/// Segments per store, chosen by the hash's top [`SEGMENT_BITS`] bits.
#[cfg(not(turnstile_shuttle))]
const SEGMENT_BITS: u32 = 10;
/// Segments per store: four under `--cfg turnstile_shuttle`, so that a shuttle test's
/// handful of keys meets a sweep's shares and its walk in the same segments.
#[cfg(turnstile_shuttle)]
const SEGMENT_BITS: u32 = 2;
/// Segments per store.
pub(crate) const SEGMENTS: usize = 1 << SEGMENT_BITS;

/// Keys and their state words (see the module docs).
pub(crate) struct WordStore<K, S> {
    /// A fixed-size array: a segment's index (the hash's top bits) needs no bounds
    /// check.
    segments: Box<[Segment<K>; SEGMENTS]>,
    hasher: S,
    /// Keys stored, for `len` (the segments' counts are under their locks).
    keys: KeyCount,
    /// Segments the sweeper thread has work in: a table to grow before requests fill
    /// it, or one draining.
    due: AtomicUsize,
    /// Set once a sweeper thread has prepared the store: from then on it drains the
    /// segments due, and requests move keys only when a drain falls behind (`behind`)
    /// or the thread has stopped working (`Used::abandoned`). Without one
    /// (`manual_eviction()`), every insertion into a draining segment moves a group, so
    /// that no drain lingers.
    thread_drains: AtomicBool,
    /// The sweeper thread's work so far, counted in holds of a preparation and
    /// segments of a sweep: an insertion into a draining segment that finds it where
    /// it stood `growth::STALLED_AFTER` insertions before takes the thread for gone (ended
    /// by a panic, or never to be woken again) and drains the segment itself.
    progress: AtomicUsize,
    /// Set by a preparation cut short (its `stop` said so), cleared by one that ran to
    /// the end: the next sweep finishes it, so that what a sweep cut short does not
    /// wait for sampled insertions to ask again.
    unfinished: AtomicBool,
    /// Where new keys' shares of a sweep look for a segment (modulo [`SEGMENTS`]):
    /// moved past each segment a share finishes, so that shares spread over the
    /// segments left rather than meet on one.
    hint: AtomicUsize,
}

mod growth;
mod sweep;
#[cfg(test)]
mod tests;

struct Segment<K> {
    /// The table new keys go to; null until the segment's first key.
    table: AtomicShared<Table<K>>,
    /// The outgrown table while its keys move to `table`; null otherwise.
    draining: AtomicShared<Table<K>>,
    /// Held to insert, remove, or move keys.
    lock: Mutex<Used>,
}

/// What a segment's tables hold, under the segment's lock.
#[derive(Default)]
struct Used {
    /// Slots of `table` full or removed: it must grow before this passes its room.
    slots: usize,
    /// Keys in `table`.
    keys: usize,
    /// While a table drains, its next group to move.
    next: Option<usize>,
    /// Keys left in the draining table.
    draining: usize,
    /// Counted in the store's `due`.
    due: bool,
    /// Insertions into the segment since the last look at the store's `progress`,
    /// while a drain is under way.
    insertions: u32,
    /// The store's `progress` at that look.
    progress_seen: usize,
    /// Whether `progress` had not moved between the last two looks: insertions then
    /// drain the segment themselves, a group each.
    abandoned: bool,
    /// The pass of forgetting (its generation, `crate::evict::Pass`) the four fields
    /// below are for.
    pass: u64,
    /// Whether the segment is finished in that pass, and counted in it.
    swept: bool,
    /// Groups of `table` judged in that pass.
    cursor: usize,
    /// Keys those groups kept.
    kept: usize,
    /// The earliest instant at which one of them could be forgotten.
    kept_until: u64,
}

/// A key found under its segment's lock: in which table, and its slot.
struct Placed<'g> {
    draining: bool,
    found: Found<'g>,
}

/// Locks a segment. Nothing under the lock leaves `Used` half-changed: a table that
/// cannot be allocated panics before `Used` changes, a drain's step runs the key
/// type's `Hash` and `Clone` before it freezes a word, and a panic in a caller's
/// `first` or `f` (never user code) leaves it consistent too.
///
/// The caller creates its epoch guard *before* this, and keeps it until the lock is
/// released: an outermost `sdd` guard, when created, may free the garbage this thread
/// retired (whole outgrown tables, and with them their keys' destructors), which must
/// not happen while a segment is held.
fn lock<K>(segment: &Segment<K>) -> Held<'_> {
    held(segment.lock.lock().unpoisoned())
}

/// Locks a segment if no one holds it (as [`lock`]), for a share of a sweep, which
/// never waits.
fn try_lock<K>(segment: &Segment<K>) -> Option<Held<'_>> {
    match segment.lock.try_lock() {
        Ok(used) => Some(held(used)),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(held(poisoned.into_inner())),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// A segment's lock, now held (counted in tests).
fn held(used: MutexGuard<'_, Used>) -> Held<'_> {
    #[cfg(test)]
    tests::LOCKS_HELD.with(|held| held.set(held.get() + 1));
    Held(used)
}

/// A segment's lock, held: what `Used` it guards. In tests it also counts the segment
/// locks this thread holds, so that a key's destructor can tell whether it runs under
/// one (`tests::Watched`).
struct Held<'s>(MutexGuard<'s, Used>);

impl std::ops::Deref for Held<'_> {
    type Target = Used;
    fn deref(&self) -> &Used {
        &self.0
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Used {
        &mut self.0
    }
}

#[cfg(test)]
impl Drop for Held<'_> {
    fn drop(&mut self) {
        tests::LOCKS_HELD.with(|held| held.set(held.get() - 1));
    }
}

impl<K> Segment<K> {
    /// The table new keys go to, and the draining one.
    #[inline(always)]
    fn tables<'g>(&self, guard: &'g Guard) -> (Option<&'g Table<K>>, Option<&'g Table<K>>) {
        // Acquire, both: a table's construction, and every key published in it before
        // it was stored, happen before its use. `table` first: a growth stores
        // `draining` before `table`, so whoever sees the new table sees the old one.
        let table = self.table.load(Ordering::Acquire, guard).as_ref();
        let draining = self.draining.load(Ordering::Acquire, guard).as_ref();
        (table, draining)
    }
}

impl<K, S> WordStore<K, S>
where
    K: Hash + Eq + Clone + 'static,
    S: BuildHasher,
{
    #[inline(always)]
    fn hash<Q: ?Sized + Hash>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline(always)]
    fn segment(&self, hash: u64) -> &Segment<K> {
        &self.segments[(hash >> (64 - SEGMENT_BITS)) as usize]
    }

    /// Where `key` is in its segment. The caller holds the segment's lock. (A plain
    /// probe: `find`'s prefetches serve a lookup that may insert next.)
    fn locate<'g, Q>(
        &self,
        segment: &Segment<K>,
        hash: u64,
        key: &Q,
        guard: &'g Guard,
    ) -> Option<Placed<'g>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        let (table, draining) = segment.tables(guard);
        if let Some(Ok(found)) = table.map(|table| table.probe(hash, key)) {
            return Some(Placed {
                draining: false,
                found,
            });
        }
        let found = draining?.probe(hash, key).ok()?;
        Some(Placed {
            draining: true,
            found,
        })
    }

    #[inline]
    /// `f` on the word of `key` if present, else `missed()`: a lookup under one epoch
    /// guard of the segment's tables.
    pub(crate) fn get_or_else<Q, R>(
        &self,
        key: &Q,
        f: impl FnOnce(&AtomicU64) -> R,
        missed: impl FnOnce() -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let hash = self.hash(key);
        let segment = self.segment(hash);
        let guard = Guard::new();
        // Acquire: as in `Segment::tables`.
        let table = segment.table.load(Ordering::Acquire, &guard);
        let word = match table.as_ref().and_then(|table| table.find(hash, key)) {
            Some(found) => Some(found.word),
            // Relaxed: only whether to look; `find_draining` loads it again with
            // Acquire. A table that drained since `table` was loaded has moved every key.
            None if !segment.draining.is_null(Ordering::Relaxed) => {
                find_draining(segment, hash, key, &guard)
            }
            None => None,
        };
        // `f` in one place: the algorithm's step, inlined once.
        match word {
            Some(word) => f(word),
            // Under the same guard: an insertion's own is then a nested one.
            None => missed(),
        }
    }

    /// Removes the full slot `placed`. The caller holds the segment's lock (`used`).
    fn remove_at(&self, segment: &Segment<K>, placed: &Placed<'_>, used: &mut Used, guard: &Guard) {
        let (table, draining) = segment.tables(guard);
        let position = placed.found.position;
        if placed.draining {
            draining
                .expect("turnstile: a key found draining")
                .remove(position);
            used.draining -= 1;
        } else {
            table
                .expect("turnstile: a key found in the table")
                .remove(position);
            used.keys -= 1;
        }
        self.count(-1);
    }

    /// Adds `n` to the store's key count. In tests it also counts the updates, so that
    /// a test can check a sweep updates the count once per hold, not once per key.
    fn count(&self, n: isize) {
        #[cfg(test)]
        tests::KEY_COUNT_UPDATES.with(|updates| updates.set(updates.get() + 1));
        self.keys.add(n);
    }

    /// `swap` with the current word given by address: `new` stored as `key`'s word if
    /// its word is the one at `current`.
    pub(crate) fn swap_at(&self, key: K, current: *const AtomicU64, new: u64) -> bool {
        let hash = self.hash(&key);
        let segment = self.segment(hash);
        // The guard first, then the lock (see `lock`).
        let guard = Guard::new();
        let mut used = lock(segment);
        // Room first: the step of a drain it takes may move the key.
        let table = self.with_room(segment, &mut used, &guard);
        match self.locate(segment, hash, &key, &guard) {
            // Under the lock, the successor is stored before the old slot is marked
            // removed; a lock-free lookup between the two finds either.
            Some(placed) if std::ptr::eq(placed.found.word, current) => {
                table.insert(hash, key, new);
                used.slots += 1;
                used.keys += 1;
                self.remove_at(segment, &placed, &mut used, &guard);
                self.count(1);
                true
            }
            _ => false,
        }
    }
}

impl<K, S> InPlace<K, AtomicU64, S> for WordStore<K, S>
where
    K: Hash + Eq + Clone + 'static,
    S: BuildHasher + Clone + 'static,
{
    fn with_hasher(hasher: S, expected_keys: usize) -> Self {
        let per_segment = expected_keys.div_ceil(SEGMENTS);
        let segments: Box<[Segment<K>]> = (0..SEGMENTS)
            .map(|_| Segment {
                // A presize that cannot be allocated is skipped: the segment starts
                // empty and grows as keys come.
                table: match (per_segment > 0)
                    .then(|| Table::try_new(Table::<K>::groups_for(per_segment)))
                    .flatten()
                {
                    Some(table) => AtomicShared::new(table),
                    None => AtomicShared::null(),
                },
                draining: AtomicShared::null(),
                lock: Mutex::default(),
            })
            .collect();
        // Built on the heap and then typed as an array: `Box::new(array::from_fn(..))`
        // would build the segments (about 100 KB) on the stack first.
        let Ok(segments) = segments.try_into() else {
            unreachable!("turnstile: SEGMENTS segments were made")
        };
        Self {
            segments,
            hasher,
            keys: KeyCount::new(),
            due: AtomicUsize::new(0),
            thread_drains: AtomicBool::new(false),
            progress: AtomicUsize::new(0),
            unfinished: AtomicBool::new(false),
            hint: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get_or_else(key, |word| Some(f(word)), || None)
    }

    fn get_locked<Q, R>(&self, key: &Q, f: impl FnOnce(&AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let hash = self.hash(key);
        let segment = self.segment(hash);
        let guard = Guard::new();
        let _used = lock(segment);
        let placed = self.locate(segment, hash, key, &guard)?;
        Some(f(placed.found.word))
    }

    #[inline]
    fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        value: impl FnOnce(&K) -> AtomicU64,
        first: impl FnOnce(&mut AtomicU64) -> R,
        f: impl FnOnce(&AtomicU64) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let owned = key.to_key();
        let mut value = value(&owned);
        let hash = self.hash(key);
        let segment = self.segment(hash);
        let guard = Guard::new();
        let mut used = lock(segment);
        // Room first (a drain's step may move the key), then one probe that finds the
        // key or the slot it will take.
        let table = self.with_room(segment, &mut used, &guard);
        let vacancy = match table.probe(hash, key) {
            Ok(found) => return Some(f(found.word)),
            Err(vacancy) => vacancy,
        };
        let draining = segment.tables(&guard).1;
        if let Some(Ok(found)) = draining.map(|draining| draining.probe(hash, key)) {
            // Another thread stored the key first (in either table): under the lock,
            // as the contract allows.
            return Some(f(found.word));
        }
        // `first` (the algorithm's step on the new state, never user code) under the
        // lock, just before the key is published.
        let first = first(&mut value);
        table.insert_at(vacancy, hash, owned, value.into_inner());
        used.slots += 1;
        used.keys += 1;
        if due_to_grow(table, &used) {
            self.mark_due(&mut used);
        }
        // Counted once stored: a `first` that panics stores and counts nothing.
        self.count(1);
        Some(first)
    }

    fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&AtomicU64) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let hash = self.hash(key);
        let segment = self.segment(hash);
        let guard = Guard::new();
        let mut used = lock(segment);
        match self.locate(segment, hash, key, &guard) {
            Some(placed) if pred(placed.found.word) => {
                self.remove_at(segment, &placed, &mut used, &guard);
                true
            }
            _ => false,
        }
    }

    fn swap(&self, key: K, current: &AtomicU64, new: AtomicU64) -> bool {
        self.swap_at(key, current, new.into_inner())
    }

    fn len(&self) -> usize {
        self.keys.sum()
    }

    fn wants_preparation(&self) -> bool {
        self.has_due()
    }

    /// The segments due grown ahead and drained (`growth.rs`).
    fn prepare(&self, stop: impl Fn() -> bool) {
        self.prepare_ahead(stop);
    }

    fn sweep_parts(&self) -> usize {
        SEGMENTS
    }

    /// A share of the open pass (`sweep.rs`).
    fn sweep_share(&self, pass: &Pass, judge: impl FnMut(&AtomicU64, u64) -> Judged) {
        self.share(pass, judge);
    }

    /// The sweeper thread's walk of the open pass (`sweep.rs`).
    fn sweep_walk(
        &self,
        pass: &Pass,
        judge: impl FnMut(&AtomicU64, u64) -> Judged,
        breathe: impl FnMut() -> bool,
    ) -> bool {
        self.walk(pass, judge, breathe)
    }
}

/// `key`'s word in the segment's draining table, if it is there: out of line, so that
/// a lookup's common path carries none of it.
#[cold]
#[inline(never)]
fn find_draining<'g, K, Q>(
    segment: &Segment<K>,
    hash: u64,
    key: &Q,
    guard: &'g Guard,
) -> Option<&'g AtomicU64>
where
    K: Borrow<Q> + 'g,
    Q: ?Sized + Eq,
{
    // Acquire: as in `Segment::tables`.
    let draining = segment.draining.load(Ordering::Acquire, guard).as_ref()?;
    // A plain probe: insertions go to the new table, not this one.
    Some(draining.probe(hash, key).ok()?.word)
}
