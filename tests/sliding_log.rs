//! SlidingLog agrees, decision by decision, with a plain reference model that keeps
//! every admitted request forever; no window ever holds more than the limit; and its
//! edges hold by name.

mod common;

use common::keyed::{Keyed, Log};
use common::ms;
use common::schedule::{self, Step, TEN_YEARS, agrees, case, schedule, small_quota, window_ns};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use turnstile::{Decision, ManualClock, Quota, SlidingLog};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Forgetting keys after every step (margin 0, clock never going back) changes no
    /// decision: the limiter still answers exactly as the model, which never forgets.
    #[test]
    fn sweeping_after_every_request_changes_no_decision(
        (quota, start, steps) in case(small_quota(6), false)
    ) {
        let clock = ManualClock::new();
        let limiter = SlidingLog::<u32>::builder(quota)
            .clock(clock.clone())
            .eviction_margin(Duration::ZERO)
            .build().unwrap();
        let mut model = Keyed::<Log>::plain(quota);
        schedule::agrees_sweeping(&clock, &limiter, &mut model, start, &steps, || limiter.evict_idle())?;
    }

    #[test]
    fn matches_the_reference_model((quota, start, steps) in case(small_quota(6), true)) {
        let clock = ManualClock::new();
        let limiter = SlidingLog::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Log>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_lagging_reading_admits_no_more_than_the_latest_one(
        (quota, start, steps) in case(small_quota(6), true)
    ) {
        schedule::lagging_readings_admit_no_more(&mut Keyed::<Log>::plain(quota), start, &steps)?;
    }

    /// The log's promise, checked on what the limiter admitted: no window of length
    /// `window`, wherever it starts, holds more than `limit`, for any key.
    #[test]
    fn no_window_ever_holds_more_than_the_limit(
        (quota, steps) in small_quota(8).prop_flat_map(|q| (Just(q), schedule(q, false)))
    ) {
        let (limit, window) = (u64::from(quota.capacity()), window_ns(quota));
        let clock = ManualClock::new();
        let limiter = SlidingLog::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        let mut admitted: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut now = 0u64;
        for step in &steps {
            match *step {
                Step::Forward { by, key, cost } => {
                    now = now.saturating_add(by);
                    clock.set(Duration::from_nanos(now));
                    if limiter.acquire(&key, cost).is_allowed() {
                        admitted.entry(key).or_default().push((now, u64::from(cost)));
                    }
                }
                Step::Peek { by, .. } => now = now.saturating_add(by),
                Step::Back { .. } => unreachable!("a non-decreasing clock"),
                // Refunds are checked against the reference model; here, only the clock moves.
                Step::Refund { by, .. } | Step::Settle { by, .. } => now = now.saturating_add(by),
            }
        }
        for (key, times) in &admitted {
            // The busiest windows end at an admission: check the window ending at each.
            for &(end, _) in times {
                let in_window: u64 = times
                    .iter()
                    .filter(|&&(s, _)| s <= end && end - s < window)
                    .map(|(_, cost)| cost)
                    .sum();
                prop_assert!(in_window <= limit, "key {}: {} in the window ending {}", key, in_window, end);
            }
        }
    }
}

/// 100 per minute, on a manual clock.
fn per_minute_100() -> (SlidingLog<u64, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = SlidingLog::with_clock(Quota::per_minute(100).unwrap(), clock.clone()).unwrap();
    (limiter, clock)
}

#[test]
fn the_boundary_burst_of_the_fixed_window_is_refused() {
    let (limiter, clock) = per_minute_100();
    for i in 0..100 {
        clock.set(Duration::from_secs(59) + ms(10 * i));
        assert!(limiter.try_acquire(&1), "request {i}");
    }
    for i in 0..100 {
        clock.set(Duration::from_secs(60) + ms(10 * i));
        assert!(!limiter.try_acquire(&1), "request {i} after the boundary");
    }
    // Each of the first 100 leaves exactly one minute after it came.
    clock.set(Duration::from_secs(119));
    assert_eq!(limiter.acquire(&1, 1), Decision::Allowed { remaining: 0 });
    assert!(!limiter.try_acquire(&1));
    clock.set(Duration::from_secs(119) + ms(10));
    assert!(limiter.try_acquire(&1));
}

#[test]
fn retry_after_is_the_exact_wait_until_enough_requests_leave() {
    let (limiter, clock) = per_minute_100();
    clock.set(Duration::from_secs(1));
    assert!(limiter.acquire(&1, 60).is_allowed());
    clock.set(Duration::from_secs(2));
    assert!(limiter.acquire(&1, 40).is_allowed());
    clock.set(Duration::from_secs(30));
    // 70 need the 60 from 1 s and 10 of the 40 from 2 s to leave: at 62 s.
    let wait = limiter.acquire(&1, 70).retry_after().unwrap();
    assert_eq!(wait, Duration::from_secs(32));
    clock.set(Duration::from_secs(62) - Duration::from_nanos(1));
    assert!(!limiter.acquire(&1, 70).is_allowed(), "1 ns early");
    clock.set(Duration::from_secs(62));
    assert_eq!(limiter.acquire(&1, 70), Decision::Allowed { remaining: 30 });
}

#[test]
fn a_retrying_client_is_not_locked_out() {
    // Only admitted requests are recorded: a client retrying every millisecond while
    // denied gets through exactly one window after its last admitted request.
    let clock = ManualClock::new();
    let limiter =
        SlidingLog::<u64, _>::with_clock(Quota::new(2, ms(50)).unwrap(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 2).is_allowed());
    for tick in 1..100 {
        clock.set(ms(tick));
        assert!(!limiter.try_acquire(&1), "retry at {tick} ms");
    }
    clock.set(ms(100));
    assert_eq!(limiter.acquire(&1, 2), Decision::Allowed { remaining: 0 });
}

#[test]
fn a_cost_above_the_limit_is_never_satisfiable_and_zero_costs_take_nothing() {
    let (limiter, _) = per_minute_100();
    assert!(limiter.acquire(&1, 30).is_allowed());
    assert_eq!(
        limiter.acquire(&1, 101),
        Decision::ExceedsCapacity {
            remaining: 70,
            capacity: 100
        }
    );
    assert_eq!(limiter.acquire(&1, 0), Decision::Allowed { remaining: 70 });
    assert!(!limiter.acquire(&1, 71).is_allowed());
    assert_eq!(limiter.peek(&1), 70);
}

#[test]
fn long_idle_keys_are_empty_even_at_the_end_of_the_clock() {
    let (limiter, clock) = per_minute_100();
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_nanos(TEN_YEARS));
    assert_eq!(limiter.peek(&1), 100);
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_nanos(u64::MAX));
    assert_eq!(limiter.acquire(&1, 100), Decision::Allowed { remaining: 0 });
    // They leave one window after the clock's last instant: still exact.
    assert_eq!(
        limiter.acquire(&1, 1).retry_after(),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn a_reading_older_than_the_newest_request_counts_as_no_time_elapsed() {
    let (limiter, clock) = per_minute_100();
    clock.set(Duration::from_secs(100));
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_secs(10)); // another core, behind
    let d = limiter.acquire(&1, 1);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_secs(150)));
}

#[test]
fn a_window_longer_than_the_clock_range_never_lets_a_request_leave() {
    let clock = ManualClock::new();
    let quota = Quota::new(3, Duration::from_nanos(u64::MAX / 2)).unwrap();
    let limiter = SlidingLog::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 3).is_allowed());
    clock.set(Duration::from_nanos(u64::MAX));
    assert_eq!(limiter.peek(&1), 0);
    assert!(!limiter.try_acquire(&1));
}

#[test]
fn builder_and_accessors() {
    let limiter: SlidingLog<String, ManualClock> =
        SlidingLog::builder(Quota::per_second(3).unwrap())
            .clock(ManualClock::new())
            .expected_keys(100)
            .build()
            .unwrap();
    assert!(limiter.is_empty());
    assert!(limiter.try_acquire("alice"));
    assert_eq!(limiter.peek("alice"), 2);
    assert_eq!(limiter.peek("bob"), 3);
    assert_eq!((limiter.len(), limiter.quota().capacity()), (1, 3));
}
