//! What settling a reservation did: a request took an estimate of its cost when it
//! was admitted, and later settles at what it actually cost
//! ([`RateLimiter::settle`](crate::RateLimiter::settle)).

/// What [`RateLimiter::settle`](crate::RateLimiter::settle) did with a request that
/// took `estimate` and actually cost `actual`.
///
/// At most one of [`refunded`](Self::refunded) and [`charged`](Self::charged) is
/// non-zero: a request that cost less than its estimate gets the difference back, one
/// that cost more is charged the difference, even beyond what the key had left — the
/// key then owes it, and is refused until its refill has repaid the debt (the
/// denial's `retry_after` counts the debt). What the debt cap kept from being charged
/// is [`forgiven`](Self::forgiven), never dropped silently: `charged + forgiven` is
/// `actual − estimate` whenever the request cost more.
///
/// # What debt means, algorithm by algorithm
/// A settle above the estimate charges the difference even beyond what the key has
/// left: the key then *owes*. A key in debt holds nothing (`peek` and `available`
/// say 0), every request it makes is denied, and the denial's `retry_after` is the
/// exact wait until its refill has repaid the debt *and* brought the request's cost.
/// What a debt is, in each algorithm's own state:
///
/// - **Token bucket**: `full_at` lies more than `capacity` grid points past the
///   reading; the bucket holds `capacity − (full_at − g)` tokens, below zero. Each
///   interval repays one token.
/// - **GCRA**: the theoretical arrival time lies more than `capacity × interval` past
///   the reading; each interval repays one token (continuously).
/// - **Fixed window**: the window's count passes the limit. What is past the limit
///   when the window ends is carried into the next window as its starting count (the
///   limit refills once a window); a debt of at most one limit is repaid by then.
/// - **Sliding window counter**: the current window's count passes the limit; the
///   weighted estimate then repays it as the window slides on (up to two windows).
/// - **Sliding log**: extra entries recorded at the settle's reading, which count
///   against the key for one window from then, as the admissions they stand for.
///
/// # The debt cap
/// A key owes at most its **debt cap: one capacity** (one window's limit). What a
/// charge would add beyond it is *forgiven*, reported in
/// [`Settlement::forgiven`], never dropped silently. The cap keeps every state in
/// the range its representation holds: a token bucket's `full_at` at most
/// `2 × capacity` grid points past the reading, a GCRA's arrival time at most
/// `2 × capacity × interval`, a window count at most `2 × limit` (each layout
/// reserves that room), a sliding log at most `2 × limit` entries. Two corners hold
/// less, and say so: a sliding window counter whose word has no room for counts
/// twice as wide (quotas near the largest it accepts) owes at most what its count
/// field holds beyond the limit (possibly nothing), and a GCRA whose full refill
/// exceeds 2^61 ns owes at most what keeps its arrival time within 2^62 ns of the
/// reading.
///
/// # Giving back, and keys with no state
/// A settle below the estimate is a refund, capped as a refund is: a key never holds
/// more than its capacity, and [`Settlement::refunded`] is what it actually got
/// back (a debt is repaid first). A keyed limiter's key with no state (never seen,
/// or forgotten: full) has nothing to give back; a charge on it creates its state
/// and charges it from full. A key in debt is never forgotten (it carries
/// information), and a key moved to a new quota carries its debt, in units, into
/// the new quota (capped at the new quota's debt cap; see [`crate::per_key`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Settlement {
    /// Given back: `estimate - actual` when the request cost less, less what the
    /// capacity capped (a key that refilled to full holds no more).
    pub refunded: u32,
    /// Taken beyond the estimate: `actual - estimate` when the request cost more, less
    /// what the debt cap forgave.
    pub charged: u32,
    /// Of `actual - estimate`, what was not charged because the key's debt would have
    /// passed the debt cap.
    pub forgiven: u32,
}

impl Settlement {
    /// A settle that gave `refunded` back.
    #[inline]
    pub(crate) const fn of_refund(refunded: u32) -> Self {
        Self {
            refunded,
            charged: 0,
            forgiven: 0,
        }
    }

    /// A settle that asked to charge `extra` and charged `charged` of it.
    #[inline]
    pub(crate) const fn of_charge(extra: u32, charged: u32) -> Self {
        Self {
            refunded: 0,
            charged,
            forgiven: extra - charged,
        }
    }
}

/// Settles `estimate` at `actual` by one of two steps: `give_back(estimate −
/// actual)`, which returns the new state and what it gave back, or `charge(actual −
/// estimate)`, which returns the new state and what it charged; `unchanged` when the
/// two are equal. The one shape every algorithm's settle takes.
#[inline]
pub(crate) fn settle_by<S>(
    estimate: u32,
    actual: u32,
    unchanged: S,
    give_back: impl FnOnce(u32) -> (S, u32),
    charge: impl FnOnce(u32) -> (S, u32),
) -> (S, Settlement) {
    match actual.cmp(&estimate) {
        std::cmp::Ordering::Less => {
            let (state, refunded) = give_back(estimate - actual);
            (state, Settlement::of_refund(refunded))
        }
        std::cmp::Ordering::Equal => (unchanged, Settlement::default()),
        std::cmp::Ordering::Greater => {
            let extra = actual - estimate;
            let (state, charged) = charge(extra);
            (state, Settlement::of_charge(extra, charged))
        }
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use crate::Quota;
    use crate::fixed_window::FixedWindowRules;
    use crate::gcra::GcraRules;
    use crate::sliding_window::SlidingWindowRules;
    use crate::token_bucket::TokenBucketRules;
    use crate::word::strategies::any_quota;
    use crate::word::{STATE_END, WordAlgorithm};
    use proptest::prelude::*;

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
    /// does not; a refund gives back at most what was asked, and settling at the
    /// estimate changes nothing.
    fn holds<W: WordAlgorithm>(
        rules: &W,
        capacity: u32,
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
            (word, super::Settlement::default())
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
            for cost in [1, capacity] {
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
            holds(&TokenBucketRules::new(&quota), capacity, start, &history, extra)?;
            holds(&FixedWindowRules::new(&quota), capacity, start, &history, extra)?;
            if let Ok(gcra) = GcraRules::new(&quota) {
                holds(&gcra, capacity, start, &history, extra)?;
            }
            if let Ok(sliding) = SlidingWindowRules::new(&quota) {
                holds(&sliding, capacity, start, &history, extra)?;
            }
        }
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
}
