//! A new key's first request is stepped without a compare-and-set
//! ([`Rules::acquire_unshared`]): checked here, above every single-word algorithm,
//! against the compare-and-set loop the keyed limiter takes on a stored key.

use crate::algorithm::{Blocked, Rules};
use crate::fixed_window::FixedWindowRules;
use crate::gcra::GcraRules;
use crate::sliding_window::SlidingWindowRules;
use crate::sync::{AtomicU64, Ordering};
use crate::token_bucket::TokenBucketRules;
use crate::word::strategies::any_quota;
use crate::word::{MOVED, RETIRED, WordAlgorithm};
use crate::{Decision, Quota};
use proptest::prelude::*;

/// The step on an unshared word and on a shared one: their answers, and the words
/// they leave.
fn both<W: WordAlgorithm>(
    rules: &W,
    word: u64,
    now: u64,
    cost: u32,
) -> [(Result<Decision, Blocked>, u64); 2] {
    let mut unshared = AtomicU64::new(word);
    let answer = Rules::<()>::acquire_unshared(rules, &mut unshared, now, cost);
    let shared = AtomicU64::new(word);
    let shared_answer = Rules::<()>::acquire(rules, &shared, now, cost);
    [
        (answer, unshared.load(Ordering::Relaxed)),
        (shared_answer, shared.load(Ordering::Relaxed)),
    ]
}

/// What came before the request: a few earlier requests (reading, cost) from a
/// fresh word, then, one time in four, a marker in place of the word left.
fn any_history() -> impl Strategy<Value = (Vec<(u64, u32)>, Option<u64>)> {
    let marker =
        prop_oneof![3 => Just(None), 1 => prop_oneof![Just(Some(RETIRED)), Just(Some(MOVED))]];
    (
        proptest::collection::vec((any::<u64>(), 0..=20u32), 0..4),
        marker,
    )
}

proptest! {
    /// A new key's first request, stepped without a compare-and-set, answers and
    /// leaves the word exactly as the compare-and-set loop does, for every
    /// single-word algorithm, from any word requests can leave (and from the
    /// markers, which both refuse).
    #[test]
    fn an_unshared_step_is_the_shared_step(
        quota in any_quota(), history in any_history(), now in any::<u64>(), cost in any::<u32>(),
    ) {
        fn check<W: WordAlgorithm>(
            rules: &W,
            (earlier, marker): &(Vec<(u64, u32)>, Option<u64>),
            now: u64,
            cost: u32,
        ) {
            let left = earlier.iter().fold(rules.fresh(), |word, &(at, cost)| {
                rules.acquire(word, at, cost).0
            });
            // MOVED is an ordinary word of the algorithms that do not reserve it.
            let word = match marker {
                Some(MOVED) if !W::RESERVES_MOVED => left,
                Some(marker) => *marker,
                None => left,
            };
            let [unshared, shared] = both(rules, word, now, cost);
            assert_eq!(unshared, shared, "word {word:#x} at {now} for {cost}");
        }
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

/// A fresh bucket of 10 asked for 3, both ways: allowed, and 7 left either way.
#[test]
fn a_fresh_token_bucket_stepped_unshared_takes_its_cost() {
    let quota = Quota::per_second(10).unwrap();
    let rules = TokenBucketRules::new(&quota);
    let [unshared, shared] = both(&rules, rules.fresh(), 0, 3);
    assert_eq!(unshared, shared);
    assert!(matches!(unshared.0, Ok(decision) if decision.is_allowed()));
    assert_eq!(WordAlgorithm::available(&rules, unshared.1, 0), 7);
}
