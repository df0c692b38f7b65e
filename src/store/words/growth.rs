//! Growth, and what a request pays for it: a segment's table outgrown, a new one
//! published and the old one drained into it; and the freeze that keeps a word from
//! changing while it is copied.
//!
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
//! # The freeze
//! A request that found a key in the draining table may be about to compare-and-set
//! its word while a move copies it. So a move swaps each word it copies to
//! [`FROZEN`] and copies the value the swap returned: from then on every
//! compare-and-set on the old word fails, and the copy holds the word's last value.
//! The moved slot is then marked removed. A request that meets the frozen word takes
//! the path every retired word sends it down (`remove_retired`, then a new look): the
//! removal takes the segment's lock, finds the key in the new table, not retired, and
//! removes nothing; the new look finds it there. Readers that take a retired word to
//! mean "forgotten" (a peek, a refund) look again under the lock first, as they do for
//! a miss. A word a sweep retired before the move is copied retired, and goes as any
//! retired word goes. Loom model 17 restates the move.

use super::table::Table;
use super::{Segment, Used, WordStore, lock};
use crate::sync::Ordering;
use crate::word::RETIRED;
use sdd::{Guard, Shared, Tag};
use std::hash::{BuildHasher, Hash};

/// What a move leaves in a word it copied: the freeze, named apart from forgetting
/// though it is the same value as [`RETIRED`], so that every path that meets a frozen
/// word already goes where it must (`remove_retired`, which finds the key moved and
/// removes nothing, then a new look), and no state of any algorithm can be it. The
/// keyed path therefore cannot tell a frozen word from a forgotten one; it need not,
/// and pays one hold of the segment's lock when it meets one.
const FROZEN: u64 = RETIRED;

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
pub(super) const MOVED_AT_ONCE: usize = 8;
/// Insertions into a draining segment between two looks at the sweeper thread's
/// `progress`: when it has not moved between two looks, insertions take over the
/// drain (a group each) until it moves again. About 16 ms of churn at 4 M keys/s
/// (a thousand segments), longer than a working thread is kept off its CPU by
/// the time slices of request threads; and one load of a shared line per 64
/// insertions into a draining segment.
pub(super) const STALLED_AFTER: u32 = 64;
impl<K, S> WordStore<K, S>
where
    K: Hash + Eq + Clone + 'static,
    S: BuildHasher,
{
    /// The segment's table, with room for one more key: grown first if it has no
    /// room (or no table). A drain under way takes a step first, unless the sweeper
    /// thread drains, the table's room outlasts the drain and the thread is still at
    /// work (see `thread_drains`). The caller holds the segment's lock (`used`).
    pub(super) fn with_room<'g>(
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
    pub(super) fn advance(&self) {
        // Relaxed: a hint for `abandoned`; it guards no other memory.
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a segment is due: a table to grow ahead, or one draining.
    pub(super) fn has_due(&self) -> bool {
        // Relaxed: a hint; a segment missed here is grown and drained by requests.
        self.due.load(Ordering::Relaxed) > 0
    }

    /// Marks the segment as work for the sweeper thread.
    pub(super) fn mark_due(&self, used: &mut Used) {
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
    pub(super) fn move_group(&self, segment: &Segment<K>, used: &mut Used, guard: &Guard) {
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
            copy.2 = word.swap(FROZEN, Ordering::Acquire);
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

    /// Grows each segment due, and drains each draining one, [`MOVED_AT_ONCE`] groups
    /// per hold of its lock. Cut short by `stop`, it leaves `unfinished` set for the
    /// next sweep.
    pub(super) fn prepare_ahead(&self, stop: impl Fn() -> bool) {
        // Relaxed: a hint (see the field).
        self.thread_drains.store(true, Ordering::Relaxed);
        for segment in self.segments.iter() {
            loop {
                if !self.has_due() {
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
}

/// Whether `table`, the segment's, is to be grown ahead by the sweeper thread: large
/// enough (see [`AHEAD_FROM`]) and past [`AHEAD`] eighths of its room. The caller holds
/// the segment's lock (`used`).
pub(super) fn due_to_grow<K>(table: &Table<K>, used: &Used) -> bool {
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
