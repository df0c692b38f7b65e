//! FixedWindow agrees, decision by decision, with a plain reference model of the fixed
//! window; and its edges — the 2× boundary burst above all — hold by name.

mod common;

use common::keyed::{Keyed, Window};
use common::ms;
use common::schedule::{self, TEN_YEARS, agrees, any_quota, case, small_quota};
use proptest::prelude::*;
use std::time::Duration;
use turnstile::{Decision, FixedWindow, ManualClock, Quota};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Forgetting keys after every step (margin 0, clock never going back) changes no
    /// decision: the limiter still answers exactly as the model, which never forgets.
    #[test]
    fn sweeping_after_every_request_changes_no_decision(
        (quota, start, steps) in case(small_quota(6), false)
    ) {
        let clock = ManualClock::new();
        let limiter = FixedWindow::<u32>::builder(quota)
            .clock(clock.clone())
            .eviction_margin(Duration::ZERO)
            .build().unwrap();
        let mut model = Keyed::<Window>::plain(quota);
        schedule::agrees_sweeping(&clock, &limiter, &mut model, start, &steps, || limiter.evict_idle())?;
    }

    #[test]
    fn matches_the_reference_model((quota, start, steps) in case(any_quota(), true)) {
        let clock = ManualClock::new();
        let limiter = FixedWindow::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Window>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_lagging_reading_admits_no_more_than_the_latest_one(
        (quota, start, steps) in case(small_quota(6), true)
    ) {
        schedule::lagging_readings_admit_no_more(&mut Keyed::<Window>::plain(quota), start, &steps)?;
    }
}

/// 100 per minute, on a manual clock.
fn per_minute_100() -> (FixedWindow<u64, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = FixedWindow::with_clock(Quota::per_minute(100).unwrap(), clock.clone()).unwrap();
    (limiter, clock)
}

#[test]
fn the_boundary_lets_twice_the_limit_through_in_two_seconds() {
    // The documented flaw: 100 in the last second of one window and 100 in the first
    // second of the next are all admitted — 200 within two seconds.
    let (limiter, clock) = per_minute_100();
    for i in 0..100 {
        clock.set(Duration::from_secs(59) + ms(10 * i));
        assert!(
            limiter.try_acquire(&1),
            "request {i} at the end of window 0"
        );
    }
    assert!(!limiter.try_acquire(&1), "window 0 holds 100");
    for i in 0..100 {
        clock.set(Duration::from_secs(60) + ms(10 * i));
        assert!(
            limiter.try_acquire(&1),
            "request {i} at the start of window 1"
        );
    }
    assert!(!limiter.try_acquire(&1), "window 1 holds 100");
}

#[test]
fn retry_after_is_the_exact_wait_for_the_next_window() {
    let (limiter, clock) = per_minute_100();
    clock.set(Duration::from_millis(59_250));
    assert!(limiter.acquire(&1, 100).is_allowed());
    let d = limiter.acquire(&1, 1);
    assert_eq!(
        d,
        Decision::Denied {
            remaining: 0,
            retry_after: ms(750)
        }
    );
    clock.set(Duration::from_secs(60) - Duration::from_nanos(1));
    assert!(!limiter.try_acquire(&1), "1 ns early must still be denied");
    clock.set(Duration::from_secs(60));
    assert_eq!(limiter.acquire(&1, 1), Decision::Allowed { remaining: 99 });
}

#[test]
fn a_retrying_client_is_not_locked_out() {
    // 1 per 100 ms window: retries just under the boundary are denied and not
    // counted, so the first request of the next window gets through.
    let clock = ManualClock::new();
    let limiter =
        FixedWindow::<u64, _>::with_clock(Quota::new(1, ms(100)).unwrap(), clock.clone()).unwrap();
    assert!(limiter.try_acquire(&1));
    for tick in 1..100 {
        clock.set(Duration::from_micros(tick * 999));
        assert!(!limiter.try_acquire(&1));
    }
    clock.set(ms(100));
    assert!(limiter.try_acquire(&1));
}

#[test]
fn a_cost_above_the_limit_is_never_satisfiable_and_takes_nothing() {
    let (limiter, _) = per_minute_100();
    assert!(limiter.acquire(&1, 30).is_allowed());
    assert_eq!(
        limiter.acquire(&1, 101),
        Decision::ExceedsCapacity {
            remaining: 70,
            capacity: 100
        }
    );
    assert_eq!(limiter.peek(&1), 70);
}

#[test]
fn weighted_requests_are_all_or_nothing_and_zero_costs_take_nothing() {
    let (limiter, _) = per_minute_100();
    assert!(limiter.acquire(&1, 60).is_allowed());
    assert!(!limiter.acquire(&1, 41).is_allowed());
    assert_eq!(limiter.acquire(&1, 0), Decision::Allowed { remaining: 40 });
    assert_eq!(limiter.acquire(&1, 40), Decision::Allowed { remaining: 0 });
}

#[test]
fn long_idle_keys_start_a_fresh_window_even_at_the_end_of_the_clock() {
    let (limiter, clock) = per_minute_100();
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_nanos(TEN_YEARS));
    assert_eq!(limiter.peek(&1), 100);
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_nanos(u64::MAX));
    assert_eq!(limiter.acquire(&1, 100), Decision::Allowed { remaining: 0 });
    // The next window starts after the clock's last instant: still exact.
    let to_next = 60_000_000_000 - u64::MAX % 60_000_000_000;
    assert_eq!(
        limiter.acquire(&1, 1).retry_after(),
        Some(Duration::from_nanos(to_next))
    );
}

#[test]
fn a_reading_older_than_the_keys_window_counts_as_no_time_elapsed() {
    let (limiter, clock) = per_minute_100();
    clock.set(Duration::from_secs(61));
    assert!(limiter.acquire(&1, 100).is_allowed()); // window 1
    clock.set(Duration::from_secs(59)); // another core, behind: window 0
    let d = limiter.acquire(&1, 1);
    assert!(!d.is_allowed(), "window 0 must not reopen");
    assert_eq!(d.retry_after(), Some(Duration::from_secs(61)));
}

#[test]
fn a_window_longer_than_the_clock_range_is_one_window_forever() {
    // 4 per 2 × u64::MAX ns: no reading ever leaves window 0, and nothing overflows.
    let interval = u64::MAX / 2;
    let clock = ManualClock::new();
    let limiter = FixedWindow::<u64, _>::with_clock(
        Quota::new(4, Duration::from_nanos(interval)).unwrap(),
        clock.clone(),
    )
    .unwrap();
    assert!(limiter.acquire(&1, 4).is_allowed());
    clock.set(Duration::from_nanos(u64::MAX));
    let d = limiter.acquire(&1, 1);
    let window_end = 4 * u128::from(interval);
    let expected = window_end - u128::from(u64::MAX);
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(expected as u64)));
}

#[test]
fn builder_and_accessors() {
    let limiter: FixedWindow<String, ManualClock> =
        FixedWindow::builder(Quota::per_second(3).unwrap())
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
