//! turnstile's GCRA against governor's, decision by decision and wait by wait: the
//! same quota (governor's `Quota::with_period(p).allow_burst(b)` is turnstile's
//! `Quota::new(b, p)`), the same clock moves, the same costs. What the guide's
//! "Coming from governor" (`src/guide/coming_from_governor.rs`) promises.

mod common;

use common::schedule::small_quota;
use governor::clock::{Clock as _, FakeRelativeClock};
use proptest::prelude::*;
use std::num::NonZeroU32;
use std::time::Duration;
use turnstile::{Decision, DirectGcra, ManualClock, Quota};

/// Clock moves (forward only: governor's fake clock does not go back) and costs
/// (from 1, which governor's `check_n` takes, to one above the burst).
fn steps(quota: Quota) -> impl Strategy<Value = Vec<(u64, u32)>> {
    let interval = quota.refill_every().as_nanos() as u64;
    let by = prop_oneof![
        4 => 0..interval * 3,
        1 => (0u64..4).prop_map(move |k| k * interval),
        1 => Just(interval - 1),
        1 => 0..interval * u64::from(quota.capacity()) * 3,
    ];
    prop::collection::vec((by, 1..=quota.capacity() + 1), 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn turnstile_gcra_decides_and_waits_exactly_as_governor(
        (quota, steps) in small_quota(6).prop_flat_map(|q| (Just(q), steps(q)))
    ) {
        let (ours_clock, theirs_clock) = (ManualClock::new(), FakeRelativeClock::default());
        let ours = DirectGcra::with_clock(quota, ours_clock.clone()).unwrap();
        let theirs = governor::RateLimiter::direct_with_clock(
            governor::Quota::with_period(quota.refill_every())
                .unwrap()
                .allow_burst(NonZeroU32::new(quota.capacity()).unwrap()),
            theirs_clock.clone(),
        );
        for (i, (by, cost)) in steps.into_iter().enumerate() {
            ours_clock.advance(Duration::from_nanos(by));
            theirs_clock.advance(Duration::from_nanos(by));
            let decision = ours.acquire(cost);
            match theirs.check_n(NonZeroU32::new(cost).unwrap()) {
                Ok(Ok(_)) => prop_assert!(decision.is_allowed(), "step {}: {:?}", i, decision),
                Ok(Err(not_until)) => {
                    let wait = not_until.wait_time_from(theirs_clock.now());
                    prop_assert!(
                        matches!(decision, Decision::Denied { retry_after, .. } if retry_after == wait),
                        "step {}: governor waits {:?}, turnstile {:?}", i, wait, decision
                    );
                }
                Err(_) => prop_assert!(decision.exceeds_capacity(), "step {}: {:?}", i, decision),
            }
        }
    }
}
