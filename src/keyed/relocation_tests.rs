//! Relocation (`relocate_word`) checked, above every single-word algorithm: no state
//! ever carries the relocation bit, a relocated word keeps the value it was frozen at
//! for every thread that meets it, and no request changes it again.

use crate::Quota;
use crate::algorithm::{Blocked, Retirement, Rules};
use crate::fixed_window::FixedWindowRules;
use crate::gcra::GcraRules;
use crate::sliding_window::SlidingWindowRules;
use crate::sync::{AtomicU64, Ordering};
use crate::token_bucket::TokenBucketRules;
use crate::word::strategies::any_quota;
use crate::word::{MOVED, RELOCATED, RETIRED, STATE_END, WordAlgorithm, relocate_word};
use proptest::prelude::*;

/// Earlier requests (reading, cost) from a fresh word: readings from the whole clock,
/// the last instants included, so that the largest words are reached.
fn any_history() -> impl Strategy<Value = Vec<(u64, u32)>> {
    let reading = prop_oneof![any::<u64>(), Just(u64::MAX), (0..1_000u64)];
    let cost = prop_oneof![0..=20u32, any::<u32>()];
    proptest::collection::vec((reading, cost), 0..8)
}

/// Every word the history leaves is a state below [`STATE_END`]; relocated, it answers
/// every request with `Relocated`, keeps the value frozen, and gives every later caller
/// the same copy.
fn check<W: WordAlgorithm>(rules: &W, history: &[(u64, u32)], now: u64, cost: u32) {
    let mut word = rules.fresh();
    for &(at, cost) in history {
        word = WordAlgorithm::acquire(rules, word, at, cost).0;
        assert!(word < STATE_END, "a state at or above STATE_END: {word:#x}");
        word = WordAlgorithm::refund(rules, word, at, cost / 2);
        assert!(word < STATE_END, "a refund left {word:#x}");
    }
    let stored = AtomicU64::new(word);
    assert_eq!(relocate_word::<W>(&stored), Ok(word));
    // Relaxed: one thread; the test reads what it wrote.
    assert_eq!(stored.load(Ordering::Relaxed), word | RELOCATED);
    // Never a marker of its own: a relocated state is neither retired nor moving.
    assert_ne!(word | RELOCATED, RETIRED);
    if W::RESERVES_MOVED {
        assert_ne!(word | RELOCATED, MOVED);
    }
    assert_eq!(
        Rules::<()>::acquire(rules, &stored, now, cost),
        Err(Blocked::Relocated)
    );
    assert_eq!(
        Rules::<()>::admit(rules, &stored, now, cost),
        Err(Blocked::Relocated)
    );
    assert_eq!(
        Rules::<()>::refund(rules, &stored, now, cost),
        Err(Blocked::Relocated)
    );
    assert_eq!(
        Rules::<()>::available(rules, &stored, now),
        Err(Blocked::Relocated)
    );
    assert_eq!(
        Rules::<()>::retire_if_forgettable(rules, &stored, u64::MAX),
        Retirement::Relocated
    );
    assert!(!Rules::<()>::is_retired(rules, &stored));
    assert_eq!(stored.load(Ordering::Relaxed), word | RELOCATED, "changed");
    // A second relocation, by the same thread or another, finishes the first.
    let copy = Rules::<()>::relocate(rules, &stored).expect("relocated once");
    assert_eq!(copy.load(Ordering::Relaxed), word);
}

proptest! {
    #[test]
    fn a_relocated_word_keeps_its_value_and_takes_no_request(
        quota in any_quota(), history in any_history(), now in any::<u64>(), cost in any::<u32>(),
    ) {
        check(&TokenBucketRules::new(&quota), &history, now, cost);
        check(&FixedWindowRules::new(&quota), &history, now, cost);
        if let Ok(gcra) = GcraRules::new(&quota) {
            check(&gcra, &history, now, cost);
        }
        if let Ok(sliding) = SlidingWindowRules::new(&quota) {
            check(&sliding, &history, now, cost);
        }
    }
}

#[test]
fn a_retired_word_or_a_key_moving_to_a_new_quota_is_not_relocated() {
    for (marker, blocked) in [(RETIRED, Blocked::Retired), (MOVED, Blocked::Moving)] {
        let word = AtomicU64::new(marker);
        assert_eq!(relocate_word::<TokenBucketRules>(&word), Err(blocked));
        assert_eq!(word.load(Ordering::Relaxed), marker, "a marker was changed");
    }
    // For an algorithm that never moves, MOVED is the relocated form of a state.
    let word = AtomicU64::new(MOVED);
    assert_eq!(
        relocate_word::<SlidingWindowRules>(&word),
        Ok(MOVED & !RELOCATED)
    );
}

/// The largest words each algorithm can reach, at the end of the clock, stay below
/// `STATE_END`: the bounds on readings that keep the top bit free.
#[test]
fn the_last_readings_leave_the_top_bit_free() {
    for interval in [1, 2, 3, 7, 1_000, u64::MAX] {
        for capacity in [1, 2, 3, 1_000, u32::MAX] {
            let quota = Quota::new(capacity, std::time::Duration::from_nanos(interval)).unwrap();
            let bucket = TokenBucketRules::new(&quota);
            let (word, _) = WordAlgorithm::acquire(&bucket, bucket.fresh(), u64::MAX, capacity);
            assert!(word < STATE_END, "token bucket {interval} {capacity}");
            let window = FixedWindowRules::new(&quota);
            let (word, _) = WordAlgorithm::acquire(&window, window.fresh(), u64::MAX, capacity);
            assert!(word < STATE_END, "fixed window {interval} {capacity}");
            if let Ok(gcra) = GcraRules::new(&quota) {
                let (word, _) = WordAlgorithm::acquire(&gcra, gcra.fresh(), u64::MAX, capacity);
                assert!(word < STATE_END, "gcra {interval} {capacity}");
            }
            if let Ok(sliding) = SlidingWindowRules::new(&quota) {
                let (word, _) =
                    WordAlgorithm::acquire(&sliding, sliding.fresh(), u64::MAX, capacity);
                assert!(word < RELOCATED, "sliding window {interval} {capacity}");
            }
        }
    }
}
