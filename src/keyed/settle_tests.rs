//! Unit properties of every word algorithm's settle (`WordAlgorithm::charge` and
//! `give_back`, in `settle.rs`'s shape): here, above the algorithms, as the other
//! tests that take every algorithm at once.

use crate::fixed_window::FixedWindowRules;
use crate::gcra::GcraRules;
use crate::sliding_window::SlidingWindowRules;
use crate::token_bucket::TokenBucketRules;
use crate::word::strategies::any_quota;
use crate::word::{STATE_END, WordAlgorithm};
use crate::{Decision, Quota};
use proptest::prelude::*;
use std::time::Duration;

/// One step of a history: an admission or a settle, each a little later.
#[derive(Clone, Debug)]
enum Step {
    Acquire(u32),
    Settle(u32, u32),
}

fn history() -> impl Strategy<Value = Vec<(u64, Step)>> {
    let step = prop_oneof![
        (0..=20u32).prop_map(Step::Acquire),
        (0..=20u32, prop_oneof![0..=40u32, Just(u32::MAX)])
            .prop_map(|(estimate, actual)| Step::Settle(estimate, actual)),
    ];
    proptest::collection::vec((0..5_000u64, step), 0..12)
}

/// What every word algorithm's settle must hold, from any word a history of
/// admissions and settles leaves, at a reading no earlier than the history's:
/// the word stays below the markers; a charge is charged or forgiven, never both
/// lost; the debt is at most one capacity; a key in debt holds nothing, and its
/// denial's wait is exact — at it the request passes, a nanosecond earlier it
/// does not (for a cost of 0 too: denied while the key owes); a refund gives back
/// at most what was asked — nothing at all where the algorithm gives nothing back on
/// settle (`refunds` false: the windows) — and settling at the estimate changes
/// nothing.
fn holds<W: WordAlgorithm>(
    rules: &W,
    capacity: u32,
    refunds: bool,
    start: u64,
    history: &[(u64, Step)],
    extra: u32,
) -> Result<(), TestCaseError> {
    let mut now = start;
    let mut word = rules.fresh();
    for (by, step) in history {
        now = now.saturating_add(*by);
        word = match *step {
            Step::Acquire(cost) => rules.acquire(word, now, cost).0,
            Step::Settle(estimate, actual) => {
                let (new, settled) = rules.settle(word, now, estimate, actual);
                prop_assert!(settled.refunded == 0 || settled.charged == 0);
                prop_assert!(settled.refunded <= estimate.saturating_sub(actual));
                if !refunds && actual <= estimate {
                    prop_assert_eq!((new, settled), (word, crate::Settlement::default()));
                }
                prop_assert_eq!(
                    settled.charged + settled.forgiven,
                    actual.saturating_sub(estimate)
                );
                new
            }
        };
        prop_assert!(word < STATE_END, "{}", word);
        prop_assert!(rules.debt(word, now) <= capacity);
    }
    prop_assert_eq!(
        rules.settle(word, now, 3, 3),
        (word, crate::Settlement::default())
    );
    let (charged_word, charged) = rules.charge(word, now, extra);
    prop_assert!(charged <= extra);
    prop_assert!(charged_word < STATE_END);
    prop_assert!(rules.debt(charged_word, now) <= capacity);
    if charged == 0 {
        prop_assert_eq!(charged_word, word);
    }
    if rules.debt(charged_word, now) > 0 {
        prop_assert_eq!(rules.available(charged_word, now), 0);
        for cost in [0, 1, capacity] {
            let (same, decision) = rules.acquire(charged_word, now, cost);
            prop_assert_eq!(same, charged_word);
            let wait = decision.retry_after().expect("a key in debt is denied");
            let Ok(wait) = u64::try_from(wait.as_nanos()) else {
                continue; // never, or past the clock's range
            };
            let Some(at) = now.checked_add(wait) else {
                continue;
            };
            prop_assert!(rules.acquire(charged_word, at, cost).1.is_allowed());
            prop_assert!(!rules.acquire(charged_word, at - 1, cost).1.is_allowed());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_word_algorithm_settles_within_its_range_and_waits_exactly(
        quota in any_quota(),
        start in prop_oneof![Just(0u64), any::<u64>()],
        history in history(),
        extra in prop_oneof![0..=50u32, any::<u32>()],
    ) {
        let capacity = quota.capacity();
        holds(&TokenBucketRules::new(&quota), capacity, true, start, &history, extra)?;
        holds(&FixedWindowRules::new(&quota), capacity, false, start, &history, extra)?;
        if let Ok(gcra) = GcraRules::new(&quota) {
            holds(&gcra, capacity, true, start, &history, extra)?;
        }
        if let Ok(sliding) = SlidingWindowRules::new(&quota) {
            holds(&sliding, capacity, false, start, &history, extra)?;
        }
    }

    /// A key whose reading owes (a debt, or a reading behind the last refill) is
    /// denied a cost of 0, and a key that does not owe is allowed it; the token
    /// bucket's and GCRA's denial of a cost of 0 waits exactly one interval (one
    /// token) less than a cost of 1 does.
    #[test]
    fn a_cost_of_zero_is_denied_exactly_while_the_key_owes(
        quota in any_quota(),
        start in prop_oneof![Just(0u64), any::<u64>()],
        history in history(),
        back in prop_oneof![Just(0u64), 0..5_000u64, any::<u64>()],
    ) {
        let interval = quota.interval_nanos().get();
        zero_holds(&TokenBucketRules::new(&quota), Some(interval), start, &history, back)?;
        zero_holds(&FixedWindowRules::new(&quota), None, start, &history, back)?;
        if let Ok(gcra) = GcraRules::new(&quota) {
            zero_holds(&gcra, Some(interval), start, &history, back)?;
        }
        if let Ok(sliding) = SlidingWindowRules::new(&quota) {
            zero_holds(&sliding, None, start, &history, back)?;
        }
    }
}

/// After `history`, at a reading `back` ns before its last (possibly behind the
/// key's own time): a cost of 0 is allowed iff the key does not owe (`debt` is 0),
/// `admit` agrees with `acquire`, a denial changes nothing and has nothing left, and,
/// with `interval` given, its denial's wait plus one interval is a cost of 1's.
fn zero_holds<W: WordAlgorithm>(
    rules: &W,
    interval: Option<u64>,
    start: u64,
    history: &[(u64, Step)],
    back: u64,
) -> Result<(), TestCaseError> {
    let mut now = start;
    let mut word = rules.fresh();
    for (by, step) in history {
        now = now.saturating_add(*by);
        word = match *step {
            Step::Acquire(cost) => rules.acquire(word, now, cost).0,
            Step::Settle(estimate, actual) => rules.settle(word, now, estimate, actual).0,
        };
    }
    let at = now.saturating_sub(back);
    let (new, zero) = rules.acquire(word, at, 0);
    prop_assert_eq!(rules.admit(word, at, 0), zero.is_allowed().then_some(new));
    if back == 0 {
        // At a reading no earlier than the key's own, owing is having a debt.
        prop_assert_eq!(zero.is_allowed(), rules.debt(word, at) == 0);
    }
    let Decision::Denied {
        remaining,
        retry_after,
    } = zero
    else {
        return Ok(());
    };
    prop_assert_eq!(new, word);
    prop_assert_eq!(remaining, 0);
    prop_assert!(retry_after > Duration::ZERO);
    let one = rules.acquire(word, at, 1).1.retry_after();
    if let (Some(interval), Some(one)) = (interval, one)
        && one != Duration::MAX
        && retry_after != Duration::MAX
    {
        prop_assert_eq!(retry_after + Duration::from_nanos(interval), one);
    }
    Ok(())
}

/// Each algorithm owes at most one capacity: from a drained key, a charge of
/// three capacities is charged one, and the rest forgiven.
#[test]
fn the_debt_cap_is_one_capacity_for_every_word_algorithm() {
    let quota = Quota::per_second(10).unwrap();
    fn drained_then_charged<W: WordAlgorithm>(rules: &W) -> (u32, u32) {
        let (word, decision) = rules.acquire(rules.fresh(), 0, 10);
        assert!(decision.is_allowed());
        let (word, charged) = rules.charge(word, 0, 30);
        (charged, rules.debt(word, 0))
    }
    assert_eq!(
        drained_then_charged(&TokenBucketRules::new(&quota)),
        (10, 10)
    );
    assert_eq!(
        drained_then_charged(&GcraRules::new(&quota).unwrap()),
        (10, 10)
    );
    assert_eq!(
        drained_then_charged(&FixedWindowRules::new(&quota)),
        (10, 10)
    );
    assert_eq!(
        drained_then_charged(&SlidingWindowRules::new(&quota).unwrap()),
        (10, 10)
    );
}

/// Near the largest quota a sliding window counter accepts, its counts are as
/// wide as the limit: its debt cap is what the field holds past the limit.
#[test]
fn a_sliding_window_counter_at_its_widest_owes_what_its_field_holds() {
    // per_second(16_383): bits(limit) = 14, no room for 15-bit counts.
    let quota = Quota::per_second(16_383).unwrap();
    let rules = SlidingWindowRules::new(&quota).unwrap();
    let (word, _) = rules.acquire(rules.fresh(), 0, 16_383);
    // The field holds up to 2^14 − 1 = 16_383: nothing to owe.
    assert_eq!(rules.charge(word, 0, 5), (word, 0));
    // per_second(10_000): a 14-bit field holds 16_382 short of all-ones.
    let rules = SlidingWindowRules::new(&Quota::per_second(10_000).unwrap()).unwrap();
    let (word, _) = rules.acquire(rules.fresh(), 0, 10_000);
    let (word, charged) = rules.charge(word, 0, u32::MAX);
    assert_eq!((charged, rules.debt(word, 0)), (6_382, 6_382));
}
