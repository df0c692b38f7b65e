//! One segment's table: open addressing over groups of eight slots, each slot a key
//! and its state word side by side, each group's eight tags in one `AtomicU64` of an
//! array of their own.
//!
//! A slot is empty, full or removed. A key is written into an empty slot once and
//! stays until the table is dropped: removal only marks the slot removed, and a
//! removed slot is never used again in this table (the segment's next growth leaves
//! it behind). So a key never changes under a reader, the one fact the lock-free
//! lookup rests on. The `unsafe` here is the write-once key cell's use (`cell.rs`),
//! the statement that zeroed bytes are an empty slot, the prefetch instruction, and
//! the volatile writes that touch a new table's pages.
//!
//! Lookups probe from the key's home group through the groups after it, and stop at
//! the first group with an empty slot: an insertion takes the first empty slot on
//! that path, and slots never become empty again, so a key is never past a group that
//! had an empty slot when it was inserted. A table is grown before it is 7/8 full
//! (full and removed slots together), so every probe ends.
//!
//! The tags are apart from the slots, one byte per slot, as hashbrown keeps its
//! control bytes: the lines a probe reads first are then few (the slots of a million
//! `u64` keys take 24 MB, their tags 1.5 MB) and stay cached, and a lookup reads one
//! tag word and one slot. With the tags in the groups, every new key's probe read a
//! line from memory, and churn ran slower (results/ANALYSIS.md, "The word store").

use super::cell::KeyCell;
use crate::sync::{AtomicU64, Ordering};
use std::borrow::Borrow;

/// Slots per group: one tag byte each in the group's `AtomicU64`.
const GROUP: usize = 8;
/// A never-used slot's tag.
const EMPTY: u8 = 0;
/// A removed key's tag; full slots' tags have the top bit set.
const REMOVED: u8 = 1;
/// Tables smaller than this many groups grow to twice their keys' room, larger ones to
/// half as much again (see [`Table::groups_for`]).
const DOUBLING_GROUPS: usize = 128;
/// Tables smaller than this grow to four times their keys' room.
const QUADRUPLING_GROUPS: usize = 16;
/// `0x01` in every byte.
const LOW_BITS: u64 = u64::from_ne_bytes([0x01; 8]);
/// `0x80` in every byte.
const HIGH_BITS: u64 = u64::from_ne_bytes([0x80; 8]);

/// A full slot's tag for `hash`: the top bit, and seven bits of the hash that neither
/// the segment (the top ten) nor the home group (the low 32) uses.
#[inline(always)]
pub(super) fn tag(hash: u64) -> u8 {
    0x80 | ((hash >> 47) as u8 & 0x7F)
}

/// The bytes of `tags` equal to `byte`, as their top bits. A byte just above a true
/// match may show as one too (the borrow of the subtraction); callers check the byte.
#[inline(always)]
fn matching(tags: u64, byte: u8) -> u64 {
    let differences = tags ^ (LOW_BITS * u64::from(byte));
    differences.wrapping_sub(LOW_BITS) & !differences & HIGH_BITS
}

/// Asks the CPU to fetch `line`'s cache line (for writing, if `write`), without
/// waiting for it.
#[inline(always)]
fn prefetch<T>(line: &T, write: bool) {
    prefetch_address(std::ptr::from_ref(line).cast(), write);
}

/// [`prefetch`] by address: any address, since a prefetch reads nothing and never
/// faults.
#[inline(always)]
fn prefetch_address(at: *const i8, write: bool) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch reads nothing and never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_ET0, _MM_HINT_T0, _mm_prefetch};
        if write {
            _mm_prefetch::<_MM_HINT_ET0>(at);
        } else {
            _mm_prefetch::<_MM_HINT_T0>(at);
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (at, write);
}

/// The page size [`Table::touch`] assumes (the smallest x86-64 and AArch64 page).
#[cfg_attr(turnstile_shuttle, allow(dead_code))]
const PAGE: usize = 4096;

/// Offsets into `len` bytes starting at address `start` whose bytes lie one in each
/// page the bytes span: the first byte, then the first byte of each page after it. An
/// allocation need not start on a page, so striding from the first byte by a page
/// would miss the last page whenever the bytes end past the page the stride last
/// lands in.
#[cfg_attr(turnstile_shuttle, allow(dead_code))]
fn page_offsets(start: usize, len: usize) -> impl Iterator<Item = usize> {
    let next_page = PAGE - start % PAGE;
    (len > 0)
        .then_some(0)
        .into_iter()
        .chain((next_page..len).step_by(PAGE))
}

/// Writes a zero into one byte of each page of `len` bytes at `start`, which are zero
/// and which the caller may write.
#[cfg_attr(turnstile_shuttle, allow(dead_code))]
fn touch_bytes(start: *mut u8, len: usize) {
    for offset in page_offsets(start.addr(), len) {
        // Volatile: the compiler knows zeroed memory is zero and would drop a plain
        // store of zero as a no-op, which would undo the touch.
        // SAFETY: `offset < len`, so in bounds of the caller's allocation, reached
        // through the caller's `&mut` (no other reference into it exists); a zero
        // byte written where a zero byte is leaves every value there as it was (the
        // tags and words stay 0, a key cell stays uninitialised).
        unsafe { start.add(offset).write_volatile(0) };
    }
}

/// The first empty slot of group `at`, whose tags are `tags`, if it has one.
#[inline(always)]
fn first_empty(at: usize, tags: u64) -> Option<Vacancy> {
    let empty = matching(tags, EMPTY);
    (empty != 0).then(|| Vacancy {
        slot: at * GROUP + empty.trailing_zeros() as usize / 8,
    })
}

/// Byte `index` of `tags`.
#[inline(always)]
fn byte(tags: u64, index: usize) -> u8 {
    (tags >> (index * 8)) as u8
}

struct Slot<K> {
    key: KeyCell<K>,
    word: AtomicU64,
}

// SAFETY: all zero bits are a valid slot: the word 0, and the key cell uninitialised,
// which any bits are. (Not shuttle's atomics, which hold a reference: under shuttle
// slots are built one by one, `Table::try_new`.)
#[cfg(not(turnstile_shuttle))]
unsafe impl<K> bytemuck::Zeroable for Slot<K> {}

/// A table of keys and their words (see the module docs).
pub(super) struct Table<K> {
    /// Group `g`'s tags, byte `i` for slot `g * GROUP + i`. Written only under the
    /// segment's lock (or before the table is published), with Release; loaded with
    /// Acquire before any key is read.
    tags: Box<[AtomicU64]>,
    /// Group `g`'s slots: as arrays of [`GROUP`], so that a slot's index in its group
    /// needs no bounds check.
    slots: Box<[[Slot<K>; GROUP]]>,
}

/// The empty slot an insertion of a key would take (see [`Table::probe`]).
pub(super) struct Vacancy {
    slot: usize,
}

/// A key's slot in a table: its position (stable while the table lives) and word.
pub(super) struct Found<'t> {
    pub(super) position: usize,
    pub(super) word: &'t AtomicU64,
}

impl<K> Table<K> {
    /// An empty table of `groups` groups (at least one), allocated zeroed: every tag
    /// empty, and no page written until a key lands in it. Panics if the memory
    /// cannot be had, as a `Vec` that cannot grow does.
    pub(super) fn new(groups: usize) -> Self {
        Self::try_new(groups).expect("turnstile: memory for a table of keys")
    }

    /// [`new`](Self::new), or `None` if the memory cannot be had (or its size does
    /// not fit in a `usize`).
    #[cfg(not(turnstile_shuttle))]
    pub(super) fn try_new(groups: usize) -> Option<Self> {
        let groups = groups.max(1);
        Some(Self {
            tags: bytemuck::allocation::try_zeroed_slice_box(groups).ok()?,
            slots: bytemuck::allocation::try_zeroed_slice_box(groups).ok()?,
        })
    }

    /// [`new`](Self::new) under shuttle, whose atomics are not plain words: each tag
    /// and slot built empty, one by one.
    #[cfg(turnstile_shuttle)]
    pub(super) fn try_new(groups: usize) -> Option<Self> {
        let groups = groups.max(1);
        Some(Self {
            tags: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            slots: (0..groups)
                .map(|_| {
                    std::array::from_fn(|_| Slot {
                        key: KeyCell::empty(),
                        word: AtomicU64::new(0),
                    })
                })
                .collect(),
        })
    }

    /// Groups for a table that is to hold `keys` keys: room for twice as many while
    /// the table is small (fewer than [`DOUBLING_GROUPS`] groups), so that a segment
    /// filling from empty copies each key about once over its growths; then room for
    /// half as many again (about 7/12 full), so that a large table wastes less.
    pub(super) fn groups_for(keys: usize) -> usize {
        let doubled = keys.saturating_mul(2).div_ceil(GROUP / 8 * 7);
        if doubled < QUADRUPLING_GROUPS {
            (doubled * 2).max(1)
        } else if doubled < DOUBLING_GROUPS {
            doubled
        } else {
            (keys.saturating_mul(3) / 2).div_ceil(GROUP / 8 * 7)
        }
    }

    /// Writes each of the table's pages once (a zero byte where a zero already is),
    /// so that the kernel maps them now rather than on the insertions that reach them:
    /// every page the tags and the slots span, the first and the last included, wherever
    /// the allocations start (see [`page_offsets`]). Takes the table by `&mut`, so only
    /// before it is published (publication moves it): on a published table the zeroed
    /// tags would turn full slots back into empty ones.
    #[cfg(not(turnstile_shuttle))]
    pub(super) fn touch(&mut self) {
        // Each length taken before the pointer, so that no reference is made between
        // the pointer's creation and its writes.
        let tags = size_of_val(&*self.tags);
        touch_bytes(self.tags.as_mut_ptr().cast(), tags);
        let slots = size_of_val(&*self.slots);
        touch_bytes(self.slots.as_mut_ptr().cast(), slots);
    }

    /// Nothing to touch under shuttle: its tables are built slot by slot, not zeroed,
    /// and their pages are written already.
    #[cfg(turnstile_shuttle)]
    pub(super) fn touch(&mut self) {}

    /// The table's size in bytes: its tags and its slots.
    pub(super) fn bytes(&self) -> usize {
        size_of_val(&*self.tags) + size_of_val(&*self.slots)
    }

    /// Keys, full or removed, the table may hold before it must grow: 7/8 of its
    /// slots, so that every probe meets an empty slot.
    pub(super) fn room(&self) -> usize {
        self.tags.len() * GROUP / 8 * 7
    }

    /// The group a key with `hash` probes first (multiply-shift: any number of groups).
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        ((u64::from(hash as u32) * self.tags.len() as u64) >> 32) as usize
    }

    /// Asks the CPU to fetch the tags of the group a key with `hash` probes first,
    /// without waiting: a drain's step announces its group's keys before it inserts
    /// them, so their misses overlap.
    #[inline(always)]
    pub(super) fn prefetch_home(&self, hash: u64) {
        prefetch(&self.tags[self.home(hash)], false);
    }

    /// Asks the CPU to fetch group `at`'s slots for reading, without waiting: issued
    /// beside the load of the group's tags, so that the two misses overlap. For
    /// reading, not writing: most lookups find their key, and a denial writes nothing,
    /// so its line must stay shared in every core's cache that holds it; a write
    /// prefetch (`prefetchw`, where the target has it) would take it exclusive from
    /// them on every check, as a write does.
    #[inline(always)]
    fn prefetch_group(&self, at: usize) {
        // No bounds check: `wrapping_add` only computes an address, and a prefetch of
        // any address is harmless.
        let first = self.slots.as_ptr().wrapping_add(at);
        prefetch_address(first.cast(), false);
        prefetch_address(first.cast::<i8>().wrapping_add(64), false);
    }

    /// The next group on a probe.
    #[inline(always)]
    fn next(&self, group: usize) -> usize {
        if group + 1 == self.tags.len() {
            0
        } else {
            group + 1
        }
    }

    /// The slot holding `key` (whose hash is `hash`), if it is full. Takes no lock.
    /// The home group's slots are fetched (for reading) beside its tags, so that a
    /// hit's slot, or the vacancy a miss's insertion will write, comes with them; a
    /// miss's vacancy is then fetched for writing, the insertion's store being next.
    /// Under churn a new key's slot store waited at the next locked instruction for
    /// its line, which the prefetches shorten (results/ANALYSIS.md, "The word store").
    /// Only a miss asks for a line to write: on the default x86-64 target both kinds
    /// compile to `prefetcht0` (no `prfchw`), and where the target has `prefetchw`, a
    /// found key's line is not taken exclusive by the lookup (a denial writes nothing).
    #[inline(always)]
    pub(super) fn find<Q>(&self, hash: u64, key: &Q) -> Option<Found<'_>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        self.prefetch_group(self.home(hash));
        match self.probe(hash, key) {
            Ok(found) => Some(found),
            Err(vacancy) => {
                prefetch(self.slot(vacancy.slot), true);
                None
            }
        }
    }

    /// The slot holding `key` (whose hash is `hash`), or the vacancy an insertion of
    /// it would take: the first empty slot on its probe. Takes no lock; a vacancy
    /// stays the insertion's only while the caller holds the segment's lock.
    #[inline(always)]
    pub(super) fn probe<Q>(&self, hash: u64, key: &Q) -> Result<Found<'_>, Vacancy>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        let tag = tag(hash);
        let home = self.home(hash);
        match self.probe_group(home, tag, key) {
            Some(answer) => answer,
            None => self.probe_past(home, tag, key),
        }
    }

    /// [`probe`](Self::probe) past a full home group: out of line, so that the common
    /// case (the home group answers) carries no loop.
    #[cold]
    #[inline(never)]
    fn probe_past<Q>(&self, home: usize, tag: u8, key: &Q) -> Result<Found<'_>, Vacancy>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        let mut at = home;
        loop {
            at = self.next(at);
            if let Some(answer) = self.probe_group(at, tag, key) {
                return answer;
            }
        }
    }

    /// Group `at`'s answer to a probe for `key` (whose tag is `tag`): its slot, the
    /// group's first empty slot, or `None` if the group is full of other keys (the
    /// probe goes on).
    #[inline(always)]
    fn probe_group<Q>(&self, at: usize, tag: u8, key: &Q) -> Option<Result<Found<'_>, Vacancy>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        // Acquire: pairs with the Release store that published each full slot, so its
        // key and word are visible before they are read.
        let tags = self.tags[at].load(Ordering::Acquire);
        let group = &self.slots[at];
        let mut candidates = matching(tags, tag);
        while candidates != 0 {
            let index = candidates.trailing_zeros() as usize / 8 % GROUP;
            candidates &= candidates - 1;
            let slot = &group[index];
            // SAFETY: the byte is a full slot's tag, loaded with Acquire above, so the
            // key's write happened before; it is never written again.
            if byte(tags, index) == tag && unsafe { slot.key.get() }.borrow() == key {
                return Some(Ok(Found {
                    position: at * GROUP + index,
                    word: &slot.word,
                }));
            }
        }
        first_empty(at, tags).map(Err)
    }

    /// The slot at `position`.
    #[inline(always)]
    fn slot(&self, position: usize) -> &Slot<K> {
        &self.slots[position / GROUP][position % GROUP]
    }

    /// Stores `key` with `word` in the first empty slot of its probe, and answers the
    /// slot's position. The caller holds the segment's lock (or alone holds the
    /// table), has found no full slot for the key, and has checked [`room`](Self::room).
    pub(super) fn insert(&self, hash: u64, key: K, word: u64) -> usize {
        let mut at = self.home(hash);
        loop {
            // Relaxed: only the lock's holder writes tags, and the lock orders its
            // writes before ours.
            if let Some(vacancy) = first_empty(at, self.tags[at].load(Ordering::Relaxed)) {
                return self.insert_at(vacancy, hash, key, word);
            }
            at = self.next(at);
        }
    }

    /// Stores `key` with `word` in `vacancy`, and answers the slot's position. The
    /// caller has held the segment's lock since [`probe`](Self::probe) answered the
    /// vacancy for this key, and has checked [`room`](Self::room).
    pub(super) fn insert_at(&self, vacancy: Vacancy, hash: u64, key: K, word: u64) -> usize {
        let (at, index) = (vacancy.slot / GROUP, vacancy.slot % GROUP);
        // Relaxed: only the lock's holder writes tags, and the lock orders its writes
        // before ours.
        let tags = self.tags[at].load(Ordering::Relaxed);
        // Checked in every build (one comparison of a word already loaded): the key
        // cell below may be written only into an empty slot.
        assert_eq!(
            byte(tags, index),
            EMPTY,
            "turnstile: a vacancy that is not empty"
        );
        let slot = self.slot(vacancy.slot);
        // SAFETY: the slot is empty (its tag says so, and tags never return to empty),
        // and readers read keys only of full or removed slots, so no thread reads it
        // until the Release store below publishes it.
        unsafe { slot.key.write(key) };
        // Relaxed: published with the tag just below.
        slot.word.store(word, Ordering::Relaxed);
        let tags = tags | (u64::from(tag(hash)) << (index * 8));
        // Release: publishes the key and word to lookups' Acquire loads.
        self.tags[at].store(tags, Ordering::Release);
        vacancy.slot
    }

    /// Marks every full slot of group `at` removed, and answers how many there were.
    /// The caller holds the segment's lock.
    pub(super) fn remove_group(&self, at: usize) -> usize {
        // Relaxed: only the lock's holder writes tags.
        let tags = self.tags[at].load(Ordering::Relaxed);
        // 0x01 in each full byte (top bit set), which becomes REMOVED; others stay.
        let full = (tags & HIGH_BITS) >> 7;
        let removed = (tags & !(full * 0xFF)) | (full * u64::from(REMOVED));
        // Release: as in `remove`.
        self.tags[at].store(removed, Ordering::Release);
        full.count_ones() as usize
    }

    /// Marks the full slot at `position` removed. The caller holds the segment's lock.
    pub(super) fn remove(&self, position: usize) {
        let (tags, index) = (&self.tags[position / GROUP], position % GROUP);
        // Relaxed: only the lock's holder writes tags.
        let current = tags.load(Ordering::Relaxed);
        debug_assert!(
            byte(current, index) & 0x80 != 0,
            "removing a slot that is not full"
        );
        let removed = current & !(0xFF << (index * 8)) | (u64::from(REMOVED) << (index * 8));
        // Release: a lookup that sees the slot removed has seen everything before.
        tags.store(removed, Ordering::Release);
    }

    /// Groups in the table.
    pub(super) fn groups(&self) -> usize {
        self.tags.len()
    }

    /// Every full slot: its position, key and word. Takes no lock; a slot filled or
    /// removed meanwhile may or may not be seen.
    #[cfg(test)]
    pub(super) fn entries(&self) -> impl Iterator<Item = (usize, &K, &AtomicU64)> {
        (0..self.groups()).flat_map(|at| self.group_entries(at))
    }

    /// The full slots of group `at`, as [`entries`](Self::entries).
    pub(super) fn group_entries(&self, at: usize) -> impl Iterator<Item = (usize, &K, &AtomicU64)> {
        // Acquire: as in `find`.
        let tags = self.tags[at].load(Ordering::Acquire);
        let slots = &self.slots[at];
        let full = move |(index, _): &(usize, &Slot<K>)| byte(tags, *index) & 0x80 != 0;
        slots
            .iter()
            .enumerate()
            .filter(full)
            .map(move |(index, slot)| {
                // SAFETY: a full slot's tag, loaded with Acquire: as in `find`.
                (at * GROUP + index, unsafe { slot.key.get() }, &slot.word)
            })
    }
}

impl<K> Drop for Table<K> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<K>() {
            // Nothing to drop in the slots: a table of `u64` keys goes without a look
            // at its tags (thousands of them, on whichever thread frees it).
            return;
        }
        let groups = self.tags.iter_mut().zip(self.slots.iter_mut());
        for (tags, slots) in groups {
            let tags = *tags.get_mut();
            for (index, slot) in slots.iter_mut().enumerate() {
                if byte(tags, index) != EMPTY {
                    // SAFETY: a full or removed slot holds a key, written once; the
                    // table is being dropped, so no reference to it remains.
                    unsafe { slot.key.drop_key() };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PAGE, Table, page_offsets};
    use std::collections::BTreeSet;

    /// The pages `len` bytes at `start` span, and those `page_offsets` lands in.
    fn pages(start: usize, len: usize) -> (BTreeSet<usize>, Vec<usize>) {
        let spanned = (start / PAGE..=(start + len - 1) / PAGE).collect();
        let touched = page_offsets(start, len)
            .inspect(|&offset| assert!(offset < len, "offset {offset} past {len} bytes"))
            .map(|offset| (start + offset) / PAGE)
            .collect();
        (spanned, touched)
    }

    #[test]
    fn every_page_a_slice_spans_is_touched_once_wherever_it_starts() {
        let starts = [0, 8, PAGE / 2, PAGE - 8, 7 * PAGE + 24];
        let lens = [
            1,
            8,
            PAGE - 8,
            PAGE,
            PAGE + 8,
            2 * PAGE,
            3 * PAGE + 100,
            10 * PAGE,
        ];
        for start in starts {
            for len in lens {
                let (spanned, touched) = pages(start, len);
                let unique: BTreeSet<usize> = touched.iter().copied().collect();
                assert_eq!(unique.len(), touched.len(), "a page touched twice");
                assert_eq!(unique, spanned, "{len} bytes from {start}");
            }
        }
        // Two pages' worth from the middle of a page ends in a third page, which a
        // stride of a page from the first byte misses.
        assert_eq!(pages(PAGE / 2, 2 * PAGE).1.len(), 3);
        assert_eq!(page_offsets(0, 0).count(), 0);
    }

    #[test]
    fn a_touched_table_is_still_empty() {
        // Several pages of tags and slots (a few under miri, which checks that every
        // write stays in its allocation).
        let groups = if cfg!(miri) { 1_100 } else { 20_000 };
        let mut table = Table::<String>::new(groups);
        table.touch();
        assert_eq!(table.entries().count(), 0);
        assert!(table.probe(7, "seven").is_err(), "a vacancy, not a key");
        table.insert(7, "seven".to_string(), 70);
        let found = table.probe(7, "seven").ok().expect("stored");
        assert_eq!(found.word.load(crate::sync::Ordering::Relaxed), 70);
    }
}
