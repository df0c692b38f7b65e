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
//! # Growth, and what a request pays for it
//! An insertion that finds its segment's table out of room (7/8 of its slots full or
//! removed) publishes a new, empty table sized for the segment's keys (larger if keys
//! came, smaller if a sweep forgot them), keeps the old one as draining, and copies
//! nothing. From then on every insertion into the segment first moves one group of
//! the draining table (at most 8 keys) into the new one; when the last group has moved,
//! the draining table is unpublished and freed once no lookup holds it. So no request
//! does more for memory than one allocation of a segment's table, the move of 8 keys
//! and, for the one whose move ends a drain, the old table's free, and no request
//! holds a lock longer than that: a growth that copied a whole segment under its lock,
//! thousands of times in a churn run, set the churn p99.9 (results/ANALYSIS.md, "The
//! word store"). With a sweeper thread the tables
//! from [`AHEAD_FROM`] keys of room on are grown ahead and drained by the thread,
//! while it keeps up, so a request's allocation stays small; insertions then move a
//! group only when a drain falls behind, or when the thread has stood still (its
//! `progress` unmoved over [`STALLED_AFTER`] insertions into the segment: ended by a
//! panic, or idle beside a drain that is not its own), so that no drain lingers with
//! its two tables. A preparation cut short (a sweep was waiting) is finished by the
//! next sweep, not left until sampled insertions ask for another. The new table has
//! room for the segment's keys and one more per group of the draining one, so it
//! never fills before the drain ends.
//!
//! # Sweeps
//! A sweep is a pass over the segments (`crate::evict::Pass`), taken in parts under
//! the segments' locks: each new key's insertion, while a pass is open, takes a share
//! (`sweep_share`: up to [`SHARE_GROUPS`] groups of the first segment from `hint` on
//! that no one holds and the pass has not finished, a `try_lock` each, at most
//! [`SHARE_TRIES`] tried, never a wait), and the sweeper thread walks every segment
//! the shares have not finished (`sweep_walk`, from the last, [`WALKED_AT_ONCE`]
//! groups per hold of a segment's lock, pausing between holds). A segment's place in
//! the pass (`Used::pass`, `cursor`) is kept under its lock, so a group is judged
//! once per pass whoever takes it: a drain left behind moved first, a group a step,
//! then the table's groups in order, the forgettable words removed at once; whoever
//! judges the segment's last group counts it in the pass, once (a growth meanwhile
//! starts the segment again on its new table, its count with it). So no request
//! holds a segment longer than a drain's step does, and a sweep holds one no longer
//! than a preparation's step.

//! # The freeze
//! A request that found a key in the draining table may be about to compare-and-set
//! its word while a move copies it. So a move swaps each word it copies to
//! [`RETIRED`] and copies the value the swap returned: from then on every
//! compare-and-set on the old word fails, and the copy holds the word's last value.
//! The moved slot is then marked removed. A request that meets the frozen word takes
//! the path every retired word sends it down (`remove_retired`, then a new look): the
//! removal takes the segment's lock, finds the key in the new table, not retired, and
//! removes nothing; the new look finds it there. Readers that take a retired word to
//! mean "forgotten" (a peek, a refund) look again under the lock first, as they do for
//! a miss. A word a sweep retired before the move is copied retired, and goes as any
//! retired word goes. Loom model 17 restates the move.

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
use crate::word::RETIRED;
use sdd::{AtomicShared, Guard, Shared, Tag};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
// Through `crate::sync`, so that shuttle's schedules see the store's own locks and
// words (its tables' pointers are sdd's, std atomics inside).
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, Unpoisoned};
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
    /// it stood [`STALLED_AFTER`] insertions before takes the thread for gone (ended
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

/// The share of its room, in eighths, past which a segment's table is due to be
/// grown by the sweeper thread, so that requests do not allocate the next one.
const AHEAD: usize = 6;
/// Tables with room for fewer keys than this are left to requests, which grow them
/// and, without a sweeper thread, when a drain falls behind or when the thread stands
/// still (`Used::abandoned`), drain them: a table of
/// this size costs a request the allocation of its next one (up to about 3,500 keys of
/// room: 68 KB for `u64` keys), and a group of 8 keys per
/// step. From 256 keys of room the sweeper thread's share of a fill from empty cost
/// churn throughput at two threads on two cores, for no gain in p99.9
/// (results/ANALYSIS.md, "The word store"). A limiter that stays
/// small never starts a thread for its growth.
const AHEAD_FROM: usize = 2048;
/// The largest table whose pages a request that grows it touches at once (32 pages),
/// rather than leaving each page to fault on the first insertion that reaches it: one
/// call pays up to 32 faults instead of 32 calls paying one each, which put them in
/// the p99.9; touched at once, the churn p99.9 fell at 2 and 4 threads
/// (results/ANALYSIS.md, "The word store").
/// Larger tables, which requests grow only without a sweeper thread or when it falls
/// behind, still fault page by page: a request should not fault in megabytes.
const TOUCHED_ON_REQUESTS: usize = 128 << 10;
/// Groups the sweeper thread moves per hold of a segment's lock.
const MOVED_AT_ONCE: usize = 8;
/// Insertions into a draining segment between two looks at the sweeper thread's
/// `progress`: when it has not moved between two looks, insertions take over the
/// drain (a group each) until it moves again. About 16 ms of churn at 4 M keys/s
/// (a thousand segments), longer than a working thread is kept off its CPU by
/// the time slices of request threads; and one load of a shared line per 64
/// insertions into a draining segment.
const STALLED_AFTER: u32 = 64;
/// Groups of a segment a new key's share of a sweep judges (up to 16 keys, each a load
/// of its word and for a forgettable one a compare-and-set and a tag store: about a
/// drain's step of one group): a stream of new keys needs one key forgotten per key
/// inserted, and a sweep, due at twice the keys the last one kept, visits about two
/// keys per key it forgets, so two groups (8 to 14 keys at the tables' load) keep
/// ahead of the stream whatever the sweeper thread gets of the CPU.
const SHARE_GROUPS: usize = 2;
/// Segments a share tries (a `try_lock` each, never a wait) before it gives up: a
/// segment held (by an insertion, another share or the sweeper thread) or finished is
/// passed over for the next.
const SHARE_TRIES: usize = 4;
/// Groups the sweeper thread's walk judges per hold of a segment's lock: about a
/// preparation's hold of [`MOVED_AT_ONCE`] groups.
const WALKED_AT_ONCE: usize = 8;

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

    /// The segment's table, with room for one more key: grown first if it has no
    /// room (or no table). A drain under way takes a step first, unless the sweeper
    /// thread drains, the table's room outlasts the drain and the thread is still at
    /// work (see `thread_drains`). The caller holds the segment's lock (`used`).
    fn with_room<'g>(
        &self,
        segment: &Segment<K>,
        used: &mut Used,
        guard: &'g Guard,
    ) -> &'g Table<K> {
        // Relaxed: a hint; either way the drain ends before the table fills.
        if !self.thread_drains.load(Ordering::Relaxed)
            || behind(segment, used, guard)
            || self.abandoned(used)
        {
            self.move_group(segment, used, guard);
        }
        match segment.tables(guard) {
            (Some(table), _) if used.slots < table.room() => table,
            _ => self.grow(segment, used, guard),
        }
    }

    /// Whether the drain under way in the segment, if one is, is abandoned: the
    /// sweeper thread's `progress` stood still over the last [`STALLED_AFTER`]
    /// insertions into the segment. Counts this insertion. The caller holds the
    /// segment's lock (`used`).
    fn abandoned(&self, used: &mut Used) -> bool {
        if used.next.is_none() {
            return false;
        }
        used.insertions += 1;
        if used.insertions >= STALLED_AFTER {
            used.insertions = 0;
            // Relaxed: a hint; a thread taken for gone too early or too late costs a
            // request a group's move, or a drain some more insertions.
            let progress = self.progress.load(Ordering::Relaxed);
            used.abandoned = progress == used.progress_seen;
            used.progress_seen = progress;
        }
        used.abandoned
    }

    /// Notes a step of the sweeper thread's work (see `progress`).
    fn advance(&self) {
        // Relaxed: a hint for `abandoned`; it guards no other memory.
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks the segment as work for the sweeper thread.
    fn mark_due(&self, used: &mut Used) {
        if !used.due {
            used.due = true;
            // Relaxed: a hint for the sweeper thread (`wants_preparation`).
            self.due.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Publishes a new table for the segment, sized for its keys, and keeps the old
    /// one draining (see the module docs). The caller holds the segment's lock
    /// (`used`).
    #[cold]
    #[inline(never)]
    fn grow<'g>(&self, segment: &Segment<K>, used: &mut Used, guard: &'g Guard) -> &'g Table<K> {
        // Never while another drains (sized as it is, the new table cannot fill first;
        // but should it, the drain ends here).
        while used.next.is_some() {
            self.move_group(segment, used, guard);
        }
        let mut new = Table::new(groups_needed(segment, used, guard));
        if new.bytes() <= TOUCHED_ON_REQUESTS {
            new.touch();
        }
        self.publish(segment, used, guard, new)
    }

    /// Publishes `new` (with room for [`groups_needed`]) as the segment's table, and
    /// keeps the old one draining. The caller holds the segment's lock (`used`), and
    /// no drain is under way.
    fn publish<'g>(
        &self,
        segment: &Segment<K>,
        used: &mut Used,
        guard: &'g Guard,
        new: Table<K>,
    ) -> &'g Table<K> {
        debug_assert!(used.next.is_none(), "a growth while a drain is under way");
        // Acquire: as in `Segment::tables`; held as a `Shared`, to publish as draining.
        let old = segment.table.get_shared(Ordering::Acquire, guard);
        if !used.swept {
            // A sweep's pass through the segment starts again on the new table, once
            // the old one has drained into it (what it kept so far is counted again).
            used.cursor = 0;
            used.kept = 0;
            used.kept_until = u64::MAX;
        }
        if let Some(old) = old {
            used.next = Some(0);
            used.draining = used.keys;
            used.insertions = 0;
            used.abandoned = false;
            // Relaxed: as in `abandoned`.
            used.progress_seen = self.progress.load(Ordering::Relaxed);
            // Release, both: the new table's construction happens before its use; and
            // `draining` before `table` (see `Segment::tables`).
            segment
                .draining
                .swap((Some(old), Tag::None), Ordering::Release);
        }
        segment
            .table
            .swap((Some(Shared::new(new)), Tag::None), Ordering::Release);
        used.slots = 0;
        used.keys = 0;
        segment
            .tables(guard)
            .0
            .expect("turnstile: a table was just stored")
    }

    /// Moves the next group of the segment's draining table, if one drains, into its
    /// table, each word frozen first (see the module docs); unpublishes the draining
    /// table once its last group has moved. The caller holds the segment's lock
    /// (`used`).
    fn move_group(&self, segment: &Segment<K>, used: &mut Used, guard: &Guard) {
        let Some(at) = used.next else { return };
        let (Some(table), Some(draining)) = segment.tables(guard) else {
            unreachable!("turnstile: a drain under way has both tables")
        };
        // The keys' hashes and copies first: they run the key type's code, which may
        // panic, and a panic must find no word frozen and nothing copied. Then every
        // word of the group frozen, then every key copied: a locked instruction waits
        // for the stores before it, and the copies' stores go to cold lines of the
        // new table (whose home tags are fetched meanwhile).
        let mut copies: [Option<(u64, K, u64)>; 8] = [const { None }; 8];
        for (copy, (_, key, _)) in copies.iter_mut().zip(draining.group_entries(at)) {
            *copy = Some((self.hash(key), key.clone(), 0));
        }
        for (copy, (_, _, word)) in copies.iter_mut().flatten().zip(draining.group_entries(at)) {
            table.prefetch_home(copy.0);
            // Acquire: the word may have been retired by a sweep, whose Release made
            // its watermark visible first; whoever reads the copy through the new
            // table's publication must see that watermark too.
            copy.2 = word.swap(RETIRED, Ordering::Acquire);
        }
        for (hash, key, last) in copies.into_iter().flatten() {
            table.insert(hash, key, last);
        }
        // The group's moved slots marked removed in one store, after every copy is
        // published: a lookup between finds a key in both tables, the draining one's
        // copy frozen.
        let moved = draining.remove_group(at);
        used.slots += moved;
        used.keys += moved;
        used.draining -= moved;
        if at + 1 < draining.groups() {
            used.next = Some(at + 1);
            return;
        }
        used.next = None;
        // Still due if the table filled past its mark meanwhile (the drain was left
        // to the thread): its growth ahead is the thread's next step here.
        if used.due && !due_to_grow(table, used) {
            used.due = false;
            // Relaxed: as in `mark_due`.
            self.due.fetch_sub(1, Ordering::Relaxed);
        }
        // Release: a lookup that reads no draining table relies on it to see every
        // moved key in the new one. The table goes to this thread's collector, which
        // frees it once no lookup holds it.
        let (gone, _) = segment.draining.swap((None, Tag::None), Ordering::Release);
        drop(gone);
    }

    /// Up to `budget` groups of the open pass `generation` in the segment, judged as
    /// of the pass's instant (read here, under the lock): a drain left behind moved
    /// first, a group a step, then the table's groups judged from where the pass left
    /// them, those `judge` rejects removed. The segment is counted in `pass` once, by
    /// whoever judges its last group. Whether the segment is finished in the pass. The
    /// caller holds the segment's lock (`used`).
    #[allow(clippy::too_many_arguments)]
    fn sweep_groups(
        &self,
        segment: &Segment<K>,
        used: &mut Used,
        guard: &Guard,
        pass: &Pass,
        generation: u64,
        budget: &mut usize,
        judge: &mut impl FnMut(&AtomicU64, u64) -> Judged,
    ) -> bool {
        if used.pass != generation {
            used.pass = generation;
            used.swept = false;
            used.cursor = 0;
            used.kept = 0;
            used.kept_until = u64::MAX;
        }
        if used.swept {
            return true;
        }
        while *budget > 0 && used.next.is_some() {
            self.move_group(segment, used, guard);
            *budget -= 1;
        }
        if used.next.is_some() {
            return false;
        }
        let at = pass.at();
        let table = segment.tables(guard).0;
        let groups = table.map_or(0, Table::groups);
        let mut removed = 0;
        if let Some(table) = table {
            while *budget > 0 && used.cursor < groups {
                for (position, _, word) in table.group_entries(used.cursor) {
                    match judge(word, at) {
                        Judged::Kept(until) => {
                            used.kept += 1;
                            used.kept_until = used.kept_until.min(until);
                        }
                        Judged::Removed => {
                            table.remove(position);
                            removed += 1;
                        }
                    }
                }
                used.cursor += 1;
                *budget -= 1;
            }
        }
        if removed > 0 {
            used.keys -= removed;
            self.count(-(removed as isize));
        }
        if used.cursor < groups {
            return false;
        }
        used.swept = true;
        pass.part_done(used.kept, used.kept_until);
        true
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
        // Relaxed: a hint; a segment missed here is grown and drained by requests.
        self.due.load(Ordering::Relaxed) > 0
    }

    /// Grows each segment due, and drains each draining one, [`MOVED_AT_ONCE`] groups
    /// per hold of its lock. Cut short by `stop`, it leaves `unfinished` set for the
    /// next sweep.
    fn prepare(&self, stop: impl Fn() -> bool) {
        // Relaxed: a hint (see the field).
        self.thread_drains.store(true, Ordering::Relaxed);
        for segment in self.segments.iter() {
            loop {
                if !self.wants_preparation() {
                    // Relaxed, every store of it: a hint (see the field); the work it
                    // points to is found under the segments' locks. Set only when cut
                    // short, not while under way, so that a sweep running beside a
                    // preparation (on a request thread) does not take it up too.
                    self.unfinished.store(false, Ordering::Relaxed);
                    return;
                }
                if stop() {
                    // Relaxed: as above.
                    self.unfinished.store(true, Ordering::Relaxed);
                    return;
                }
                self.advance();
                let guard = Guard::new();
                let mut used = lock(segment);
                if !used.due {
                    break;
                }
                if used.next.is_none() {
                    // A growth due: the next table, before requests must allocate it;
                    // allocated and its pages touched without the lock, so that no
                    // request waits on the segment for a system call or a page fault
                    // (nor for as long as the OS leaves this thread off the CPU in
                    // one), then published if the segment still wants it.
                    let groups = groups_needed(segment, &used, &guard);
                    let seen = segment.tables(&guard).0.map(std::ptr::from_ref);
                    drop(used);
                    let Some(mut new) = Table::try_new(groups) else {
                        // No memory for it now: the next sweep tries again. (Relaxed:
                        // as above.)
                        self.unfinished.store(true, Ordering::Relaxed);
                        return;
                    };
                    new.touch();
                    used = lock(segment);
                    let now = segment.tables(&guard).0.map(std::ptr::from_ref);
                    if !used.due
                        || used.next.is_some()
                        || now != seen
                        || groups_needed(segment, &used, &guard) > new.groups()
                    {
                        // A request grew the segment meanwhile, or keys came: look
                        // again. (Should a table since freed and another allocated at
                        // its address pass for the one seen, the table published is
                        // still large enough, checked just above, so only a growth's
                        // timing is wrong.) The unused table is freed without the lock.
                        drop(used);
                        drop(new);
                        continue;
                    }
                    self.publish(segment, &mut used, &guard, new);
                    if used.next.is_none() {
                        used.due = false;
                        // Relaxed: as in `mark_due`.
                        self.due.fetch_sub(1, Ordering::Relaxed);
                        break;
                    }
                }
                for _ in 0..MOVED_AT_ONCE {
                    self.move_group(segment, &mut used, &guard);
                    if used.next.is_none() {
                        break;
                    }
                }
            }
        }
        // Relaxed: as above. Ran to the end: nothing left for a sweep to finish.
        self.unfinished.store(false, Ordering::Relaxed);
    }

    fn sweep_parts(&self) -> usize {
        SEGMENTS
    }

    /// Up to [`SHARE_GROUPS`] groups of the open pass, in the segments from `hint` on
    /// that are not held (a `try_lock` each, at most [`SHARE_TRIES`]) nor finished.
    fn sweep_share(&self, pass: &Pass, mut judge: impl FnMut(&AtomicU64, u64) -> Judged) {
        let mut budget = SHARE_GROUPS;
        // Relaxed: a hint; which segment a share takes is never wrong, only slower.
        let start = self.hint.load(Ordering::Relaxed);
        for offset in 0..SHARE_TRIES {
            let index = start.wrapping_add(offset);
            let segment = &self.segments[index % SEGMENTS];
            // The guard first, then the lock (see `lock`).
            let guard = Guard::new();
            let Some(mut used) = try_lock(segment) else {
                continue;
            };
            // Under the lock: a pass that closed since the caller looked is not
            // swept, and the generation read is the one the segment is counted in.
            let Some(generation) = pass.open_generation() else {
                return;
            };
            let finished = self.sweep_groups(
                segment,
                &mut used,
                &guard,
                pass,
                generation,
                &mut budget,
                &mut judge,
            );
            drop(used);
            drop(guard);
            if !finished {
                return;
            }
            // Relaxed: as above.
            self.hint
                .fetch_max(index.wrapping_add(1), Ordering::Relaxed);
            if budget == 0 {
                return;
            }
        }
    }

    /// Every segment, from the last (shares begin at `hint`, which wraps from the
    /// first), [`WALKED_AT_ONCE`] groups per hold of its lock, `breathe` after each
    /// hold; then a preparation a sweep cut short, finished.
    fn sweep_walk(
        &self,
        pass: &Pass,
        mut judge: impl FnMut(&AtomicU64, u64) -> Judged,
        mut breathe: impl FnMut() -> bool,
    ) -> bool {
        for segment in self.segments.iter().rev() {
            loop {
                self.advance();
                let guard = Guard::new();
                let mut used = lock(segment);
                let Some(generation) = pass.open_generation() else {
                    // Closed: the shares finished it.
                    return true;
                };
                let mut budget = WALKED_AT_ONCE;
                let finished = self.sweep_groups(
                    segment,
                    &mut used,
                    &guard,
                    pass,
                    generation,
                    &mut budget,
                    &mut judge,
                );
                drop(used);
                drop(guard);
                if !breathe() {
                    return false;
                }
                if finished {
                    break;
                }
            }
        }
        // Relaxed: a hint (see the field); set only by `prepare`.
        if self.unfinished.load(Ordering::Relaxed) {
            // A preparation a sweep (or another) cut short: finished now, breathing
            // between its steps as the walk does, rather than when sampled insertions
            // next ask for one. (`stop` is `Fn`: the `FnMut` is borrowed for each call.)
            let breathe = std::cell::RefCell::new(breathe);
            self.prepare(|| !(breathe.borrow_mut())());
        }
        true
    }
}

/// Whether `table`, the segment's, is to be grown ahead by the sweeper thread: large
/// enough (see [`AHEAD_FROM`]) and past [`AHEAD`] eighths of its room. The caller holds
/// the segment's lock (`used`).
fn due_to_grow<K>(table: &Table<K>, used: &Used) -> bool {
    table.room() >= AHEAD_FROM && used.slots > table.room() / 8 * AHEAD
}

/// Groups for the segment's next table: room for its keys and one more per group of
/// its table, which will drain into it (see `behind`). The caller holds the
/// segment's lock (`used`).
fn groups_needed<K>(segment: &Segment<K>, used: &Used, guard: &Guard) -> usize {
    let old_groups = segment.tables(guard).0.map_or(0, |old| old.groups());
    Table::<K>::groups_for(used.keys + old_groups + 1)
}

/// Whether a drain under way must take a step before the next insertion: whether
/// the table's room left no longer exceeds the draining keys plus one insertion per
/// group still to move. The table is sized with that much room (`grow`), so a drain
/// left to the sweeper thread still ends before the table fills. The caller holds the
/// segment's lock (`used`).
fn behind<K>(segment: &Segment<K>, used: &Used, guard: &Guard) -> bool {
    let Some(next) = used.next else { return false };
    let (Some(table), Some(draining)) = segment.tables(guard) else {
        return false;
    };
    let room_left = table.room().saturating_sub(used.slots);
    room_left <= used.draining + (draining.groups() - next) + 1
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

#[cfg(test)]
mod tests {
    use super::{InPlace, SEGMENTS, WordStore};
    use crate::store::{Judged, Pass};
    use crate::sync::{AtomicU64, Ordering};
    use crate::word::RETIRED;
    use std::cell::Cell;
    use std::sync::Arc;

    type Words<K> = WordStore<K, foldhash::fast::RandomState>;

    thread_local! {
        /// Passes this thread's tests opened so far (a store's segments remember the
        /// last pass they were finished in, by its number).
        static PASSES: Cell<u64> = const { Cell::new(1) };
    }

    /// A pass over a store's segments, open, forgetting as of 0.
    fn pass() -> Pass {
        let number = PASSES.with(|passes| passes.replace(passes.get() + 1));
        Pass::opened(number, 0, SEGMENTS)
    }

    impl<K, S> WordStore<K, S>
    where
        K: std::hash::Hash + Eq + Clone + 'static,
        S: std::hash::BuildHasher + Clone + 'static,
    {
        /// A whole sweep, walked: removes every key whose word `keep` rejects,
        /// `pause` between holds of a segment's lock.
        fn retain(&self, mut keep: impl FnMut(&AtomicU64) -> bool, mut pause: impl FnMut()) {
            let pass = pass();
            let walked = self.sweep_walk(
                &pass,
                |word, _| {
                    if keep(word) {
                        Judged::Kept(u64::MAX)
                    } else {
                        Judged::Removed
                    }
                },
                || {
                    pause();
                    true
                },
            );
            assert!(walked);
            assert!(pass.close_if_done().is_some(), "a walk finishes its pass");
        }
    }

    thread_local! {
        /// Segment locks this thread holds (kept by `lock` and `Held`).
        pub(super) static LOCKS_HELD: Cell<usize> = const { Cell::new(0) };
        /// Updates of a store's key count made on this thread (kept by `count`).
        pub(super) static KEY_COUNT_UPDATES: Cell<usize> = const { Cell::new(0) };
        /// [`Watched`] keys dropped on this thread: all, and those dropped while it held
        /// a segment's lock.
        static WATCHED_DROPS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    }

    /// A key that notes, when dropped, whether its thread held a segment's lock: an
    /// outgrown table's keys are dropped when the epoch collector frees the table.
    #[derive(Hash, PartialEq, Eq, Clone, Debug)]
    struct Watched(u64);

    // Looked up and stored by its number (hashed alike: the derived `Hash` hashes
    // the one field), so that no `Watched` is made but the stored keys.
    impl std::borrow::Borrow<u64> for Watched {
        fn borrow(&self) -> &u64 {
            &self.0
        }
    }

    impl From<u64> for Watched {
        fn from(key: u64) -> Self {
            Watched(key)
        }
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            let locked = LOCKS_HELD.with(Cell::get) > 0;
            WATCHED_DROPS.with(|drops| {
                let (all, under_lock) = drops.get();
                drops.set((all + 1, under_lock + usize::from(locked)));
            });
        }
    }

    /// A hasher that sends every key to segment 0, spread over its groups: one
    /// segment grows, drains and is swept as a store's thousand would be.
    #[derive(Clone, Default)]
    struct OneSegment;

    struct OneSegmentHasher(u64);

    impl std::hash::BuildHasher for OneSegment {
        type Hasher = OneSegmentHasher;
        fn build_hasher(&self) -> OneSegmentHasher {
            OneSegmentHasher(0)
        }
    }

    impl std::hash::Hasher for OneSegmentHasher {
        fn finish(&self) -> u64 {
            // The top bits, which choose the segment, clear.
            self.0 >> super::SEGMENT_BITS
        }
        fn write(&mut self, bytes: &[u8]) {
            for &byte in bytes {
                self.0 =
                    (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            }
        }
    }

    /// Keys enough to grow every segment's table a few times (fewer under miri).
    const MANY: u64 = if cfg!(miri) { 200 } else { 20_000 };

    fn insert<K: std::hash::Hash + Eq + Clone + 'static>(store: &Words<K>, key: K, word: u64) {
        let stored = store.get_or_insert(&key, |_| AtomicU64::new(word), |_| true, |_| false);
        assert_eq!(stored, Some(true), "the key was new");
    }

    fn word<K: std::hash::Hash + Eq + Clone + 'static>(store: &Words<K>, key: &K) -> Option<u64> {
        store.get(key, |word| word.load(Ordering::Relaxed))
    }

    #[test]
    fn keys_grown_through_many_tables_keep_their_words() {
        let store = Words::with_hasher(Default::default(), 0);
        for key in 0..MANY {
            insert(&store, key, key * 3);
        }
        assert_eq!(store.len(), MANY as usize);
        for key in 0..MANY {
            assert_eq!(word(&store, &key), Some(key * 3));
            assert_eq!(
                store.get_locked(&key, |w| w.load(Ordering::Relaxed)),
                Some(key * 3)
            );
        }
        assert_eq!(word(&store, &MANY), None);
    }

    /// A key whose `Clone` panics while [`FRAGILE_BELOW`] is above it: a drain's step
    /// clones the keys it moves.
    #[derive(Hash, PartialEq, Eq, Debug)]
    struct Fragile(u64);

    static FRAGILE_BELOW: AtomicU64 = AtomicU64::new(0);

    impl Clone for Fragile {
        fn clone(&self) -> Self {
            assert!(
                self.0 >= FRAGILE_BELOW.load(Ordering::Relaxed),
                "a key's clone panicked (on purpose)"
            );
            Fragile(self.0)
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs tens of thousands of keys to drain")]
    fn a_key_panicking_in_a_drain_loses_no_word() {
        let store = Words::with_hasher(Default::default(), 0);
        for key in 0..MANY {
            insert(&store, Fragile(key), key + 1);
        }
        // Clones of the stored keys panic from now on; new keys' do not.
        FRAGILE_BELOW.store(MANY, Ordering::Relaxed);
        let (mut next, mut stored) = (MANY, 0);
        let panicked = loop {
            assert!(next < MANY * 20, "no drain's step met a stored key");
            let key = Fragile(next);
            next += 1;
            let insertion = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                store.get_or_insert(&key, |_| AtomicU64::new(0), |_| true, |_| false)
            }));
            match insertion {
                Ok(_) => stored += 1,
                Err(_) => break key,
            }
        };
        FRAGILE_BELOW.store(0, Ordering::Relaxed);
        // Nothing frozen, nothing lost: every stored key keeps its word, the key whose
        // insertion panicked is absent, and the drain goes on from where it stopped.
        assert_eq!(word(&store, &panicked), None);
        assert_eq!(store.len(), MANY as usize + stored);
        for key in 0..MANY {
            assert_eq!(word(&store, &Fragile(key)), Some(key + 1), "key {key}");
        }
        insert(&store, panicked, 0);
        for key in MANY * 20..MANY * 22 {
            insert(&store, Fragile(key), 0);
        }
        for key in 0..MANY {
            assert_eq!(word(&store, &Fragile(key)), Some(key + 1), "key {key}");
        }
    }

    #[test]
    fn a_stored_key_is_found_not_stored_again() {
        let store = Words::with_hasher(Default::default(), 0);
        insert(&store, "k".to_string(), 7);
        let again = store.get_or_insert(
            "k",
            |_| AtomicU64::new(9),
            |_| "stored",
            |word| {
                if word.load(Ordering::Relaxed) == 7 {
                    "found"
                } else {
                    "wrong word"
                }
            },
        );
        assert_eq!(again, Some("found"));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn removal_takes_only_what_its_predicate_accepts_and_room_comes_back() {
        let store = Words::with_hasher(Default::default(), 0);
        // Insert and remove many times over: the removed slots must not exhaust the
        // tables (a growth leaves them behind), and each key comes back fresh.
        for round in 0..3 {
            for key in 0..MANY {
                insert(&store, key, round);
            }
            assert!(!store.remove_if(&0, |w| w.load(Ordering::Relaxed) != round));
            for key in 0..MANY {
                assert!(store.remove_if(&key, |w| w.load(Ordering::Relaxed) == round));
            }
            assert_eq!(store.len(), 0);
            assert_eq!(word(&store, &1), None);
            assert!(!store.remove_if(&1, |_| true), "already gone");
        }
    }

    #[test]
    fn retain_removes_exactly_the_rejected_keys() {
        let store = Words::with_hasher(Default::default(), 0);
        for key in 0..MANY {
            insert(&store, key, key % 3);
        }
        let (mut asked, mut pauses) = (0, 0);
        store.retain(
            |word| {
                asked += 1;
                word.load(Ordering::Relaxed) != 0
            },
            || pauses += 1,
        );
        assert_eq!(asked, MANY as usize);
        // One before each segment, one after each step of a drain left behind, and one
        // between holds of a segment's removals.
        assert!(pauses >= SEGMENTS, "a pause before each segment: {pauses}");
        for key in 0..MANY {
            assert_eq!(word(&store, &key).is_some(), key % 3 != 0, "key {key}");
        }
        assert_eq!(store.len(), (0..MANY).filter(|key| key % 3 != 0).count());
    }

    #[test]
    fn swap_replaces_only_the_word_it_was_shown() {
        let store = Words::with_hasher(Default::default(), 0);
        insert(&store, 1_u64, 10);
        let stale = AtomicU64::new(10);
        assert!(
            !store.swap(1, &stale, AtomicU64::new(20)),
            "not the stored word"
        );
        let swapped = store.get(&1, |current| {
            let current: *const AtomicU64 = current;
            store.swap_at(1, current, 20)
        });
        assert_eq!(swapped, Some(true));
        assert_eq!(word(&store, &1), Some(20));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn string_keys_are_dropped_once_with_their_tables() {
        // Under miri this also checks that every key written is dropped exactly once
        // (a leak or a double drop fails the run).
        let store = Words::with_hasher(Default::default(), 0);
        let keys: Vec<String> = (0..MANY).map(|key| format!("key-{key}")).collect();
        for key in &keys {
            insert(&store, key.clone(), 1);
        }
        for key in keys.iter().step_by(2) {
            assert!(store.remove_if(key.as_str(), |_| true));
        }
        for (index, key) in keys.iter().enumerate() {
            assert_eq!(word(&store, key).is_some(), index % 2 == 1);
        }
        drop(store);
    }

    /// A hasher that gives every key the same hash: every key in one segment, one
    /// home group, one probe chain.
    #[derive(Clone, Default)]
    struct SameHash;

    impl std::hash::BuildHasher for SameHash {
        type Hasher = SameHash;
        fn build_hasher(&self) -> SameHash {
            SameHash
        }
    }

    impl std::hash::Hasher for SameHash {
        fn finish(&self) -> u64 {
            0x9E37_79B9_7F4A_7C15
        }
        fn write(&mut self, _: &[u8]) {}
    }

    /// The worst hasher still makes a store that works, only slowly: probes wrap
    /// around the table past full groups, growths and drains move the one chain, a
    /// sweep and the sweeper thread's preparation find every key.
    #[test]
    fn every_key_on_one_probe_chain_still_works() {
        let keys: u64 = if cfg!(miri) { 60 } else { 3_000 };
        let store = WordStore::<u64, SameHash>::with_hasher(SameHash, 0);
        let insert = |key: u64| {
            let stored =
                store.get_or_insert(&key, |_| AtomicU64::new(key + 1), |_| true, |_| false);
            assert_eq!(stored, Some(true), "key {key} was new");
        };
        (0..keys).for_each(insert);
        store.retain(|word| word.load(Ordering::Relaxed) % 2 == 0, || {});
        (keys..2 * keys).for_each(insert);
        store.prepare(|| false);
        assert!(store.remove_if(&(2 * keys - 1), |_| true));
        for key in 0..2 * keys - 1 {
            let expected = (key >= keys || (key + 1) % 2 == 0).then_some(key + 1);
            let found = store.get(&key, |word| word.load(Ordering::Relaxed));
            assert_eq!(found, expected, "key {key}");
        }
        assert_eq!(store.len(), (keys / 2 + keys - 1) as usize);
    }

    #[test]
    fn presized_segments_hold_their_share_without_growing() {
        let store = Words::with_hasher(Default::default(), SEGMENTS * 4);
        for key in 0..MANY {
            insert(&store, key, 1);
        }
        assert_eq!(store.len(), MANY as usize);
    }

    /// Threads racing to store the same keys: each key is stored once, and every
    /// thread's request lands on the one word (counted by `fetch_add`).
    #[test]
    fn racing_insertions_store_each_key_once() {
        let store = Arc::new(Words::with_hasher(Default::default(), 0));
        let keys = if cfg!(miri) { 20 } else { 5_000 };
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let mut stored = 0;
                    for key in 0..keys {
                        let new = store.get_or_insert(
                            &key,
                            |_| AtomicU64::new(0),
                            |word| {
                                *word.get_mut() += 1;
                                true
                            },
                            |word| {
                                word.fetch_add(1, Ordering::Relaxed);
                                false
                            },
                        );
                        stored += usize::from(new == Some(true));
                    }
                    stored
                })
            })
            .collect();
        let stored: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(stored, keys as usize);
        assert_eq!(store.len(), keys as usize);
        for key in 0..keys {
            assert_eq!(word(&store, &key), Some(3), "key {key}");
        }
    }

    /// Requests that compare-and-set words while another thread grows their segments
    /// over and over: no increment is lost to a move (the freeze sends a request that
    /// met the old word to the new table, through the lock).
    #[test]
    fn no_update_is_lost_to_a_growth() {
        let store = Arc::new(Words::with_hasher(Default::default(), 0));
        // Keys counted on, spread over the segments; their groups move at every growth.
        let counted: u64 = if cfg!(miri) { 8 } else { 2_048 };
        for key in 0..counted {
            insert(&*store, key, 0);
        }
        let rounds: u64 = if cfg!(miri) { 4 } else { 40 };
        let counter = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    for key in 0..counted {
                        // The word protocol in small: a CAS loop; a retired (frozen)
                        // word sends it to the locked removal, then to a new look.
                        loop {
                            let done = store.get(&key, |word| {
                                let current = word.load(Ordering::Relaxed);
                                current != RETIRED
                                    && word
                                        .compare_exchange(
                                            current,
                                            current + 1,
                                            Ordering::Relaxed,
                                            Ordering::Relaxed,
                                        )
                                        .is_ok()
                            });
                            if done == Some(true) {
                                break;
                            }
                            store.remove_if(&key, |word| word.load(Ordering::Relaxed) == RETIRED);
                        }
                    }
                }
            })
        };
        // Keys that fill every segment, so each grows and drains again and again.
        for key in counted..counted + MANY * 8 {
            insert(&*store, key, 0);
        }
        counter.join().unwrap();
        for key in 0..counted {
            assert_eq!(word(&*store, &key), Some(rounds), "key {key}");
        }
    }

    /// Outgrown tables are freed (their keys dropped) by the epoch collector when a
    /// thread creates its outermost guard; every operation that locks a segment
    /// creates its guard before the lock, so no table is ever freed under one.
    #[test]
    fn no_table_is_freed_while_a_segment_is_locked() {
        let keys: u64 = if cfg!(miri) { 100 } else { 2_000 };
        let store = WordStore::<Watched, OneSegment>::with_hasher(OneSegment, 0);
        // Only locked operations, by `u64`, so that the only `Watched` keys are the
        // tables' own: each operation creates this thread's outermost guard, so each
        // is where the collector may free what earlier growths retired.
        for key in 0..keys {
            let stored = store.get_or_insert(&key, |_| AtomicU64::new(key), |_| true, |_| false);
            assert_eq!(stored, Some(true));
        }
        // Until the collector frees a table: other tests' threads may hold the epoch
        // back for a while.
        let mut rounds = 0;
        while WATCHED_DROPS.with(Cell::get).0 == 0 {
            assert!(rounds < 10_000, "no outgrown table was freed");
            rounds += 1;
            for key in 0..keys {
                let word = store.get_locked(&key, |w| w.load(Ordering::Relaxed));
                assert_eq!(word, Some(key));
            }
        }
        for key in (0..keys).step_by(2) {
            assert!(store.remove_if(&key, |_| true));
        }
        let (all, under_lock) = WATCHED_DROPS.with(Cell::get);
        assert!(all > 0);
        assert_eq!(under_lock, 0, "keys dropped while a segment was locked");
        assert_eq!(LOCKS_HELD.with(Cell::get), 0);
    }

    /// A sweep that forgets thousands of keys in one segment removes them at most
    /// [`WALKED_AT_ONCE`](super::WALKED_AT_ONCE) groups per hold of the segment's lock,
    /// pausing between holds, and updates the key count once per hold: seen from the
    /// pauses, the count never falls by more than a hold's groups between two of them.
    #[test]
    fn a_sweep_removes_a_bounded_batch_per_hold() {
        use super::WALKED_AT_ONCE;
        let keys: u64 = if cfg!(miri) { 300 } else { 3_000 };
        let store = WordStore::<u64, OneSegment>::with_hasher(OneSegment, 0);
        for key in 0..keys {
            let stored =
                store.get_or_insert(&key, |_| AtomicU64::new(key % 4), |_| true, |_| false);
            assert_eq!(stored, Some(true));
        }
        let rejected = (0..keys).filter(|key| key % 4 != 0).count();
        let mut seen = vec![store.len()];
        let before = KEY_COUNT_UPDATES.with(Cell::get);
        store.retain(
            |word| word.load(Ordering::Relaxed) == 0,
            || seen.push(store.len()),
        );
        let updates = KEY_COUNT_UPDATES.with(Cell::get) - before;
        seen.push(store.len());
        assert_eq!(store.len(), keys as usize - rejected);
        let falls: Vec<usize> = seen.windows(2).map(|w| w[0] - w[1]).collect();
        let largest = falls.iter().copied().max().unwrap_or(0);
        assert!(
            largest <= WALKED_AT_ONCE * 8,
            "{largest} keys removed between two pauses"
        );
        assert!(
            falls.iter().filter(|&&fall| fall > 0).count() > 1,
            "several holds"
        );
        assert_eq!(
            updates,
            falls.iter().filter(|&&fall| fall > 0).count(),
            "one update per hold"
        );
        for key in 0..keys {
            let word = store.get(&key, |word| word.load(Ordering::Relaxed));
            assert_eq!(word.is_some(), key % 4 == 0, "key {key}");
        }
    }

    /// Keys over every segment, judged by a pass taken in shares and then walked:
    /// each key is judged once, those rejected are removed, and the pass counts
    /// exactly the keys kept and the earliest instant one of them could go, each
    /// segment once, whoever finished it.
    #[test]
    fn shares_and_a_walk_count_each_segment_once() {
        let store = Words::with_hasher(Default::default(), 0);
        let keys = if cfg!(miri) { 300 } else { 20_000 };
        for key in 0..keys {
            // Kept until `key + 100`, or forgettable (word 0).
            insert(&store, key, if key % 3 == 0 { 0 } else { key + 100 });
        }
        let pass = pass();
        let judged = Cell::new(0);
        let judge = |word: &AtomicU64, _at: u64| {
            judged.set(judged.get() + 1);
            match word.load(Ordering::Relaxed) {
                0 => Judged::Removed,
                until => Judged::Kept(until),
            }
        };
        for _ in 0..100 {
            store.sweep_share(&pass, judge);
        }
        assert!(pass.close_if_done().is_none(), "segments left to the walk");
        let shared = judged.get();
        assert!(shared > 0, "the shares judged keys");
        // A walk stopped after a few holds, then one to the end.
        let mut holds = 0;
        assert!(!store.sweep_walk(&pass, judge, || {
            holds += 1;
            holds < 5
        }));
        assert!(store.sweep_walk(&pass, judge, || true));
        // Shares of a finished pass judge nothing.
        store.sweep_share(&pass, judge);
        let closed = pass.close_if_done().expect("every segment finished");
        let kept = (0..keys).filter(|key| key % 3 != 0).count();
        assert_eq!(judged.get(), keys as usize, "each key judged once");
        assert_eq!(closed.kept, kept);
        assert_eq!(closed.kept_until, 101);
        assert_eq!(store.len(), kept);
        for key in 0..keys {
            assert_eq!(word(&store, &key).is_some(), key % 3 != 0, "key {key}");
        }
    }

    /// A share judges at most [`SHARE_GROUPS`](super::SHARE_GROUPS) groups, and none of
    /// a segment another thread holds: it never waits for a lock.
    #[test]
    fn a_share_is_bounded_and_never_waits() {
        use super::SHARE_GROUPS;
        let store = WordStore::<u64, OneSegment>::with_hasher(OneSegment, 0);
        for key in 0..1_000 {
            insert_one(&store, key);
        }
        let pass = pass();
        let judged = Cell::new(0);
        let judge = |_: &AtomicU64, _| {
            judged.set(judged.get() + 1);
            Judged::Kept(u64::MAX)
        };
        {
            // Held here (a std mutex's `try_lock` on its holder's thread fails).
            let _held = super::lock(&store.segments[0]);
            store.sweep_share(&pass, judge);
            assert_eq!(judged.get(), 0, "a held segment is passed over");
        }
        // Shares passed over it (to the empty segments after it); they come back to
        // it once the hint wraps around.
        for _ in 0..=SEGMENTS {
            store.sweep_share(&pass, judge);
            assert!(judged.get() <= SHARE_GROUPS * 8, "{} judged", judged.get());
            if judged.get() > 0 {
                return;
            }
        }
        panic!("no share came back to the segment");
    }

    /// A segment that grows while a pass is part-way through it is judged again on its
    /// new table, and counted once, with what that table holds.
    #[test]
    #[cfg_attr(miri, ignore = "grows a table of thousands of keys")]
    fn a_growth_mid_pass_counts_the_segment_once() {
        let store = WordStore::<u64, OneSegment>::with_hasher(OneSegment, 0);
        let mut next = 0;
        while next < 2_000 {
            insert_one(&store, next);
            next += 1;
        }
        let pass = pass();
        let judge = |_: &AtomicU64, _| Judged::Kept(7);
        store.sweep_share(&pass, judge);
        let groups = |store: &WordStore<u64, OneSegment>| {
            let guard = sdd::Guard::new();
            store.segments[0]
                .tables(&guard)
                .0
                .map(|table| table.groups())
        };
        let before = groups(&store);
        while groups(&store) == before {
            insert_one(&store, next);
            next += 1;
        }
        assert!(store.sweep_walk(&pass, judge, || true));
        let closed = pass.close_if_done().expect("finished");
        assert_eq!(closed.kept, next as usize, "every key counted once");
        assert_eq!(closed.kept_until, 7);
    }

    /// Groups left to move in segment 0's drain, if one is under way.
    fn drain_left<K, S>(store: &WordStore<K, S>) -> Option<usize> {
        let segment = &store.segments[0];
        let guard = sdd::Guard::new();
        let used = super::lock(segment);
        let draining = segment.tables(&guard).1;
        used.next
            .map(|next| draining.expect("a drain has its table").groups() - next)
    }

    /// Inserts key `key` (new) into a store of [`OneSegment`].
    fn insert_one(store: &WordStore<u64, OneSegment>, key: u64) {
        let stored = store.get_or_insert(&key, |_| AtomicU64::new(key), |_| true, |_| false);
        assert_eq!(stored, Some(true), "key {key} was new");
    }

    /// Once a sweeper thread has prepared the store, insertions leave drains to it
    /// while it works (its `progress` moves), and take them over, a group per
    /// insertion, once it has done nothing for `STALLED_AFTER` of them: a drain does
    /// not linger with its two tables when the thread has died.
    #[test]
    #[cfg_attr(miri, ignore = "needs a drain of a hundred groups")]
    fn insertions_finish_a_drain_the_thread_abandoned() {
        use super::STALLED_AFTER;
        let store = WordStore::<u64, OneSegment>::with_hasher(OneSegment, 0);
        store.prepare(|| false);
        let mut next = 0;
        // A drain of a hundred groups or more: its new table has room enough that
        // `behind` leaves it to the thread for several hundred insertions.
        let left = loop {
            insert_one(&store, next);
            next += 1;
            if let Some(left) = drain_left(&store).filter(|&left| left >= 100) {
                break left;
            }
        };
        // A thread at work elsewhere: its progress moves, and nobody moves a group here.
        for round in 0..3 * STALLED_AFTER {
            if round % 10 == 0 {
                store.advance();
            }
            insert_one(&store, next);
            next += 1;
        }
        assert_eq!(
            drain_left(&store),
            Some(left),
            "the drain was left to the thread"
        );
        // The thread gone: within the next look, and a group an insertion after it.
        for _ in 0..STALLED_AFTER as usize + left {
            insert_one(&store, next);
            next += 1;
        }
        assert_eq!(drain_left(&store), None, "insertions finished the drain");
        for key in 0..next {
            assert_eq!(store.get(&key, |w| w.load(Ordering::Relaxed)), Some(key));
        }
    }

    /// A preparation cut short (a sweep was waiting) is finished by the next sweep:
    /// the segment due is grown ahead and drained without another request for
    /// preparation.
    #[test]
    #[cfg_attr(miri, ignore = "needs a table of two thousand keys' room")]
    fn the_next_sweep_finishes_a_preparation_cut_short() {
        let store = WordStore::<u64, OneSegment>::with_hasher(OneSegment, 0);
        store.prepare(|| false);
        let mut next = 0;
        while !store.wants_preparation() {
            insert_one(&store, next);
            next += 1;
        }
        let room = |store: &WordStore<u64, OneSegment>| {
            let guard = sdd::Guard::new();
            store.segments[0].tables(&guard).0.map(|table| table.room())
        };
        let before = room(&store);
        store.prepare(|| true);
        assert!(store.wants_preparation(), "cut short before its first step");
        let mut pauses = 0;
        store.retain(|_| true, || pauses += 1);
        assert!(
            !store.wants_preparation(),
            "the sweep finished the preparation"
        );
        assert_eq!(drain_left(&store), None, "and its drain");
        assert!(room(&store) > before, "the segment's table was grown ahead");
        assert!(
            pauses > super::SEGMENTS,
            "the preparation's steps paused too"
        );
        for key in 0..next {
            assert_eq!(store.get(&key, |w| w.load(Ordering::Relaxed)), Some(key));
        }
        // Finished, it leaves the next sweep nothing to finish.
        assert!(!store.unfinished.load(Ordering::Relaxed));
    }
}
