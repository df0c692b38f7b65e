//! Single-word states in a slab: each key's word in one slot of a growable array,
//! found by its index, instead of in a box of its own.
//!
//! Why (measured in results/ANALYSIS.md, "Words in a slab"): a box per key was a
//! `malloc` on every new key and a `free` on every forgotten one, 32 bytes of heap for
//! an 8-byte word, and the tail of churn latency (the allocator growing a thread's
//! arena, a fresh page touched every 128 keys). A slot is 8 bytes, taken from a
//! stripe's list of free slots under an uncontended lock, and its pages are touched
//! once and reused.
//!
//! # Reuse
//! A slot is reused only once no reader can still hold its index. Readers reach a
//! slot only through the index's entry, inside a closure the store runs within an
//! `sdd` guard (a lock-free lookup) or under the entry's bucket lock; the store hands
//! a removed entry's slot back through [`Slab::release_later`] after the index has
//! removed it, and that defers the release (`sdd::Guard::defer_execute`) until every
//! guard present then is dropped — the same epoch-based rule by which the index frees
//! removed entries' memory. A reader that met the key's old state has left by then; a
//! reader arriving later cannot find the removed entry. The store's test
//! `a_removed_words_slot_waits_for_its_readers` holds a reader inside a lookup across
//! a removal and many insertions, and fails on a slab that releases at once.
//!
//! # Layout
//! Slot `i` lies in level `log2(i + 2^FIRST_LEVEL)`, of `2^level` slots. A level is
//! allocated zeroed (a large one from the kernel's zero pages: no initialisation pass)
//! when a stripe first reserves slots in it — or, from the million-slot level on,
//! ahead of that by the sweeper thread, which also touches its pages ("Preparation"
//! below). Levels are never freed before the slab, so a slab holds about twice the
//! slots it ever had taken at once, three times once the sweeper thread has prepared
//! the level after the one in use: the keys held, their stripes' reserves, and the
//! slots of keys forgotten but not yet handed back. Those wait for the sweeping thread
//! to see the epoch move on; the sweeper thread (and a `sweep_in_background` thread)
//! sees to that after each sweep (`store::settle_releases`), so they are one sweep's
//! forgotten keys for a few milliseconds. A sweep run by hand (`evict_idle`) hands its
//! slots back once its thread has made a few hundred lookups (three epoch steps at
//! `sdd`'s pace of one per 128 guards).
//!
//! The index stores a slot as its level and offset, worked out when the slot is
//! taken, so a lookup does no arithmetic: it costs one check that the level is there
//! and one bounds check (about ten instructions, results/ANALYSIS.md). The last level
//! holds `2^32` slots: a slab holds fewer than `2^33` words, more keys at once than the
//! memory for their index entries leaves room for.
//!
//! # Preparation
//! A request that first touches a page of the slab pays a page fault (one in 512 new
//! keys: under churn, that was the p99.9). So once a quarter of the level in use is
//! taken, the next sampled insertion asks the sweeper thread to allocate the next level
//! and touch each of its pages ([`Slab::prepare`]); levels below the million-slot one
//! are left to requests (2,048 faults in all). Without a sweeper thread
//! (`manual_eviction()`) requests touch the pages as they take slots.

use super::count::stripe;
use super::home::{Home, Stored};
use crossbeam_utils::CachePadded;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// The first level holds `2^FIRST_LEVEL` slots (2 KiB); each level after it twice as
/// many as the one before.
const FIRST_LEVEL: u32 = 8;
/// Levels are indexed by `log2(i + 2^FIRST_LEVEL)`, at most 32 (offsets are `u32`);
/// the first `FIRST_LEVEL` stay empty, which keeps the arithmetic to one `log2`, and
/// the array is a power of two long, so that a masked level needs no bounds check.
const LEVELS: usize = 64;
/// The last level: offsets in it fill a `u32`.
const LAST_LEVEL: usize = 32;
/// Never-used slots a stripe reserves at once, so that threads taking new slots do
/// not all increment one counter.
const FRESH_BLOCK: usize = 64;
// Levels start at multiples of a block (`2^level - 2^FIRST_LEVEL`), so no block
// straddles two levels.
const _: () = assert!((1 << FIRST_LEVEL) % FRESH_BLOCK == 0);
/// Released slots are pooled in chunks of this many: a stripe that runs out takes a
/// whole chunk under one lock, and a release hands over a sweep's slots chunk by
/// chunk, never slot by slot.
const CHUNK: usize = 1024;
/// Stripes of free slots; each thread takes from one.
const STRIPES: usize = 16;
/// Levels below this one are left to the requests that first use them: 2,048
/// pages in all, spread over the first million keys, too few to reach a
/// percentile. From it on (a million slots, 8 MiB), each level is prepared off the
/// request path; below, preparing ahead would cost a limiter that stays small a
/// thread and pages it never uses (measured: churn throughput from empty, 0.67× the
/// global lock at one thread when preparing from 64 Ki slots, results/ANALYSIS.md).
const FIRST_PREPARED_LEVEL: usize = 20;
/// Words in a 4 KiB page: preparing touches one in every this many.
const PAGE_WORDS: usize = 4096 / 8;

/// Where one key's word lies in the slab: what the index stores for the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    level: u8,
    offset: u32,
}

impl Slot {
    /// Slot `index`, at its level and offset.
    fn at(index: usize) -> Self {
        let (level, offset) = place(index);
        assert!(
            level <= LAST_LEVEL,
            "turnstile: a keyed limiter holds fewer than 2^33 keys at once"
        );
        // Both fit: `level <= 32` and offsets below `2^level`.
        Self {
            level: level as u8,
            offset: offset as u32,
        }
    }

    /// The slot's number.
    fn index(self) -> usize {
        (1 << self.level) + self.offset as usize - (1 << FIRST_LEVEL)
    }
}

/// Words in levels of slots, and the slots free to take.
pub struct Slab {
    levels: [OnceLock<Box<[AtomicU64]>>; LEVELS],
    /// The lowest slot never taken: stripes reserve [`FRESH_BLOCK`] at a time from it.
    never_taken: CachePadded<AtomicUsize>,
    stripes: [CachePadded<Mutex<Stripe>>; STRIPES],
    /// Released slots, shared with the deferred releases that fill it.
    released: Arc<Released>,
    /// Levels below this one are prepared (allocated, every page touched).
    prepared: AtomicUsize,
}

/// One stripe's slots to hand out: released ones first, then never-used ones.
#[derive(Default)]
struct Stripe {
    free: Vec<usize>,
    fresh: Range<usize>,
}

/// Chunks of slots released and not yet taken by a stripe.
#[derive(Default)]
struct Released {
    chunks: Mutex<Vec<Vec<usize>>>,
    /// How many chunks `chunks` holds, readable without its lock: a stripe that runs
    /// out looks here first, so that while nothing is released (a slab filling up)
    /// taking a slot never touches the shared lock.
    count: AtomicUsize,
}

/// Slots of removed entries, gathered for one release (a sweep's, or one removal's).
#[derive(Default)]
pub struct Removed {
    chunks: Vec<Vec<usize>>,
}

impl Removed {
    fn push(&mut self, slot: Slot) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(slot.index()),
            // Grown as slots come (a single removal's chunk holds one slot, not a
            // thousand slots' room).
            _ => self.chunks.push(vec![slot.index()]),
        }
    }
}

/// Locks a mutex whose holders never leave its data half-changed: nothing they do
/// under it can panic except an allocation, which aborts.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The level and offset of slot `index`.
#[inline(always)]
fn place(index: usize) -> (usize, usize) {
    let biased = index + (1 << FIRST_LEVEL);
    let level = biased.ilog2() as usize;
    (level, biased - (1 << level))
}

impl Slab {
    /// An empty slab: no level allocated until the first slot is taken.
    pub(crate) fn new() -> Self {
        Self {
            levels: std::array::from_fn(|_| OnceLock::new()),
            never_taken: CachePadded::new(AtomicUsize::new(0)),
            stripes: std::array::from_fn(|_| CachePadded::new(Mutex::default())),
            released: Arc::default(),
            prepared: AtomicUsize::new(FIRST_PREPARED_LEVEL),
        }
    }

    /// The word in `slot`.
    #[inline(always)]
    pub(crate) fn word(&self, slot: &Slot) -> &AtomicU64 {
        let level = usize::from(slot.level) % LEVELS;
        let words = match self.levels[level].get() {
            Some(words) => words,
            None => self.level(level),
        };
        &words[slot.offset as usize]
    }

    /// Level `level`, allocated zeroed if this is its first use (by the stripe that
    /// reserves the first block in it, or the thread preparing it; a reader always
    /// finds it allocated).
    #[cold]
    fn level(&self, level: usize) -> &[AtomicU64] {
        self.levels[level].get_or_init(|| bytemuck::allocation::zeroed_slice_box(1 << level))
    }

    /// A slot no entry uses: a released one if this thread's stripe or the pool has
    /// one, else a never-used one.
    pub(crate) fn take(&self) -> Slot {
        let mut stripe = lock(&self.stripes[stripe() % STRIPES]);
        let index = match stripe.free.pop() {
            Some(index) => index,
            None => match self.released.take_chunk() {
                Some(mut chunk) => {
                    let index = chunk.pop();
                    stripe.free = chunk;
                    // Chunks are never empty (`Removed::push` starts one with a slot).
                    index.unwrap_or_else(|| self.fresh(&mut stripe))
                }
                None => self.fresh(&mut stripe),
            },
        };
        drop(stripe);
        Slot::at(index)
    }

    /// A never-used slot from the stripe's reserve, reserving more when it is empty.
    fn fresh(&self, stripe: &mut Stripe) -> usize {
        if let Some(index) = stripe.fresh.next() {
            return index;
        }
        // Relaxed: the counter only hands out distinct ranges, which the read-modify-
        // write guarantees at any ordering; a slot's word is published by the index.
        let start = self.never_taken.fetch_add(FRESH_BLOCK, Ordering::Relaxed);
        // The block lies in one level (levels start at multiples of the block):
        // allocate it before any entry names a slot in it (past the last level,
        // `Slot::at` refuses first). A released slot's level was allocated when the
        // slot was first taken.
        let level = Slot::at(start).level;
        self.level(usize::from(level));
        stripe.fresh = start + 1..start + FRESH_BLOCK;
        start
    }

    /// The last level that should be ready now: the one never-used slots come from,
    /// and once a quarter of it is taken, the next. Preparing the next level takes
    /// far less time than filling the other three quarters (measured under churn at
    /// 2 threads: 57 ms for 8M slots, while 170,000 new keys came); the margin is for
    /// a sweep the thread must finish first.
    fn level_due(&self) -> usize {
        // Relaxed: a heuristic; a stale value prepares a little late or early.
        let (level, offset) = place(self.never_taken.load(Ordering::Relaxed));
        let due = if offset >= 1 << (level - 2) {
            level + 1
        } else {
            level
        };
        due.min(LAST_LEVEL)
    }

    /// Whether a level due is not prepared yet.
    pub(crate) fn wants_preparation(&self) -> bool {
        // Relaxed: a heuristic, as in `level_due`.
        self.level_due() >= self.prepared.load(Ordering::Relaxed)
    }

    /// Allocates every level due and not prepared yet, and touches each of its pages,
    /// so that requests taking slots there meet no fresh page (measured: a request
    /// that first touched a page of the slab was the p99.9 of churn, results/
    /// ANALYSIS.md). Safe while requests use the level: the touch is a
    /// compare-and-set of 0 to 0, which changes no word's value (a word that is not
    /// 0 fails it; one that is 0 gets 0 again) yet is a write, so the kernel maps the
    /// page in for good. Ends early, leaving the level unprepared, once `stopping`
    /// says so (the limiter is being dropped: a level of a gigabyte takes a second).
    pub(crate) fn prepare(&self, stopping: &dyn Fn() -> bool) {
        /// Pages touched between looks at `stopping` (8 MiB).
        const PAGES_PER_LOOK: usize = 2048;
        let touch = |word: &AtomicU64| {
            // Relaxed: the word's value is untouched; only the page matters.
            let _ = word.compare_exchange(0, 0, Ordering::Relaxed, Ordering::Relaxed);
        };
        let due = self.level_due();
        // Relaxed: one thread prepares (the sweeper thread); the count only tells
        // later calls where to start.
        for level in self.prepared.load(Ordering::Relaxed)..=due {
            let words = self.level(level);
            for (page, word) in words.iter().step_by(PAGE_WORDS).enumerate() {
                if page % PAGES_PER_LOOK == 0 && stopping() {
                    return;
                }
                touch(word);
            }
            // The level need not start on a page (the allocator puts its header
            // first), so its last page may hold no word the stride hit.
            if let Some(last) = words.last() {
                touch(last);
            }
            self.prepared.store(level + 1, Ordering::Relaxed);
        }
    }

    /// Hands `removed`'s slots back for reuse once no reader can hold them: call it
    /// only after the index has removed every entry that named them. The release waits
    /// for every `sdd` guard present now — every lookup that might have found one of
    /// those entries — to end.
    pub(crate) fn release_later(&self, removed: Removed) {
        if removed.chunks.is_empty() {
            return;
        }
        #[cfg(test)]
        if mutant::RELEASE_AT_ONCE.get() {
            self.released.put(removed.chunks);
            return;
        }
        let released = Arc::clone(&self.released);
        sdd::Guard::new().defer_execute(move || released.put(removed.chunks));
    }

    /// Slots released and not yet taken again (stripes' lists included), and slots
    /// ever reserved: for tests.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let pooled: usize = lock(&self.released.chunks).iter().map(Vec::len).sum();
        let striped: usize = self.stripes.iter().map(|s| lock(s).free.len()).sum();
        // Relaxed: a test reads it after the threads that changed it have ended.
        (pooled + striped, self.never_taken.load(Ordering::Relaxed))
    }
}

impl Released {
    /// Adds chunks of released slots.
    fn put(&self, chunks: Vec<Vec<usize>>) {
        let mut pooled = lock(&self.chunks);
        pooled.extend(chunks);
        // Relaxed: a hint; `take_chunk` decides under the lock.
        self.count.store(pooled.len(), Ordering::Relaxed);
    }

    /// One chunk, if any is pooled.
    fn take_chunk(&self) -> Option<Vec<usize>> {
        // Relaxed: a hint, checked again under the lock; a chunk released a moment ago
        // and missed here is taken by the next stripe that runs out.
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut pooled = lock(&self.chunks);
        let chunk = pooled.pop();
        // Relaxed: as in `put`.
        self.count.store(pooled.len(), Ordering::Relaxed);
        chunk
    }
}

/// A single-word state in the scc store lives in a slab (the word algorithms' states
/// go to the word store instead, `map.rs`).
impl Stored for AtomicU64 {
    type Home = Slab;
    const WORD: bool = true;

    #[inline(always)]
    fn of_word(word: &AtomicU64) -> &Self {
        word
    }

    #[inline(always)]
    fn of_word_mut(word: &mut AtomicU64) -> &mut Self {
        word
    }

    #[inline(always)]
    fn into_word(self) -> AtomicU64 {
        self
    }
}

impl Home<AtomicU64> for Slab {
    type Handle = Slot;
    type Removed = Removed;

    fn new(_expected_keys: usize) -> Self {
        Slab::new()
    }

    #[inline]
    fn place(&self, state: AtomicU64) -> Slot {
        let slot = self.take();
        // Relaxed: the index publishes the entry naming this slot (a Release store of
        // its bucket's bitmap, which lookups load with Acquire), so whoever finds the
        // entry sees this word; the slot's previous key has no reader left (see
        // "Reuse" above).
        self.word(&slot)
            .store(state.into_inner(), Ordering::Relaxed);
        slot
    }

    #[inline(always)]
    fn state<'a>(&'a self, handle: &'a Slot) -> &'a AtomicU64 {
        self.word(handle)
    }

    const MOVABLE: bool = true;

    #[inline]
    fn copied(handle: &Slot) -> Slot {
        *handle
    }

    fn removed(handle: &Slot, removed: &mut Removed) {
        removed.push(*handle);
    }

    fn release(&self, removed: Removed) {
        self.release_later(removed);
    }

    fn wants_preparation(&self) -> bool {
        Slab::wants_preparation(self)
    }

    fn prepare(&self, stopping: &dyn Fn() -> bool) {
        Slab::prepare(self, stopping);
    }
}

/// A broken release, for the test that must catch it.
#[cfg(test)]
pub(crate) mod mutant {
    use std::cell::Cell;

    thread_local! {
        /// Releases go back for reuse at once, readers or not.
        pub(crate) static RELEASE_AT_ONCE: Cell<bool> = const { Cell::new(false) };
    }
}

/// Runs `sdd`'s deferred work on this thread until `done` holds, or a bounded number
/// of tries has passed (epochs advance as guards come and go): whether it holds.
#[cfg(test)]
pub(crate) fn collect_until(done: impl Fn() -> bool) -> bool {
    for _ in 0..10_000 {
        if done() {
            return true;
        }
        let guard = sdd::Guard::new();
        guard.accelerate();
        drop(guard);
    }
    done()
}

#[cfg(test)]
mod tests {
    use super::{FIRST_LEVEL, FIRST_PREPARED_LEVEL, Removed, Slab, Slot, collect_until, place};
    use std::collections::HashSet;
    use std::sync::atomic::Ordering;

    #[test]
    fn places_tile_the_levels() {
        let mut expected = (FIRST_LEVEL as usize, 0);
        for index in 0..100_000 {
            assert_eq!(place(index), expected, "slot {index}");
            expected.1 += 1;
            if expected.1 == 1 << expected.0 {
                expected = (expected.0 + 1, 0);
            }
        }
        assert_eq!(place(usize::MAX - (1 << FIRST_LEVEL)), (63, (1 << 63) - 1));
    }

    #[test]
    fn a_slot_names_its_index_and_the_last_level_fills_a_u32() {
        for index in (0..100_000).chain([(1 << 33) - (1 << FIRST_LEVEL) - 1]) {
            assert_eq!(Slot::at(index).index(), index);
        }
        let last = Slot::at((1 << 33) - (1 << FIRST_LEVEL) - 1);
        assert_eq!((last.level, last.offset), (32, u32::MAX));
    }

    #[test]
    fn taken_slots_are_distinct_words_across_threads() {
        let slab = Slab::new();
        let taken: Vec<Vec<Slot>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..5_000).map(|_| slab.take()).collect::<Vec<_>>()))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let slots: HashSet<usize> = taken.iter().flatten().map(|slot| slot.index()).collect();
        assert_eq!(slots.len(), 20_000);
        let words: HashSet<*const _> = taken
            .iter()
            .flatten()
            .map(|slot| std::ptr::from_ref(slab.word(slot)))
            .collect();
        assert_eq!(words.len(), 20_000, "two slots share a word");
    }

    #[test]
    fn preparation_is_wanted_a_quarter_into_a_level_and_readies_the_next() {
        const FIRST: usize = FIRST_PREPARED_LEVEL;
        let start = |level: usize| (1 << level) - (1 << FIRST_LEVEL);
        let slab = Slab::new();
        let mut taken = Vec::new();
        let mut take_until = |slots: usize| {
            while slab.counts().1 < slots {
                taken.push(slab.take());
            }
        };
        // A quarter into the level before the first prepared one: not yet, then due.
        let quarter = start(FIRST - 1) + (1 << (FIRST - 3));
        take_until(quarter - 1_000);
        assert!(!slab.wants_preparation(), "nothing due yet");
        take_until(quarter + 1_000);
        assert!(slab.wants_preparation());
        // Requests got there first: the first prepared level is in use already.
        take_until(start(FIRST) + 5_000);
        assert!(slab.wants_preparation());
        // A word in use, on a word the touch hits (a page boundary of the level),
        // keeps its value.
        let in_use = taken[start(FIRST) + 2 * 512];
        let expected = Slot {
            level: FIRST as u8,
            offset: 1024,
        };
        assert_eq!(in_use, expected);
        slab.word(&in_use).store(7, Ordering::Relaxed);
        // Told to stop at once, it leaves the level unprepared.
        slab.prepare(&|| true);
        assert!(slab.wants_preparation());
        slab.prepare(&|| false);
        assert!(!slab.wants_preparation());
        assert_eq!(slab.word(&in_use).load(Ordering::Relaxed), 7);
        let beyond = slab.levels[FIRST + 1].get();
        assert!(beyond.is_none(), "prepared beyond what is due");
    }

    #[test]
    fn released_slots_are_taken_again_before_new_ones() {
        let slab = Slab::new();
        let slots: Vec<Slot> = (0..3 * 1024 + 5).map(|_| slab.take()).collect();
        let (_, reserved) = slab.counts();
        let mut removed = Removed::default();
        for slot in &slots {
            removed.push(*slot);
        }
        slab.release_later(removed);
        assert!(collect_until(|| slab.counts().0 == slots.len()));
        let again: HashSet<usize> = (0..slots.len()).map(|_| slab.take().index()).collect();
        let before: HashSet<usize> = slots.iter().map(|slot| slot.index()).collect();
        assert_eq!(again, before);
        assert_eq!(slab.counts(), (0, reserved), "a new slot was reserved");
    }
}
