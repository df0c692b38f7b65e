//! The word store's own tests: growth, drains, sweeps and their shares, and what
//! runs under a segment's lock.

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
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
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
        let stored = store.get_or_insert(&key, |_| AtomicU64::new(key + 1), |_| true, |_| false);
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
    use super::sweep::WALKED_AT_ONCE;
    let keys: u64 = if cfg!(miri) { 300 } else { 3_000 };
    let store = WordStore::<u64, OneSegment>::with_hasher(OneSegment, 0);
    for key in 0..keys {
        let stored = store.get_or_insert(&key, |_| AtomicU64::new(key % 4), |_| true, |_| false);
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
    use super::sweep::SHARE_GROUPS;
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
    use super::growth::STALLED_AFTER;
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
