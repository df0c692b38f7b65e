//! SlidingWindowCounter agrees, decision by decision, with a plain reference model;
//! its stated bounds against the exact sliding log hold over random schedules; and
//! its edges hold by name.

mod common;

use common::keyed::{Counter, Keyed};
use common::ms;
use common::schedule::{
    self, Step, TEN_YEARS, agrees, case, interval_ns, schedule, small_quota, window_ns,
};
use proptest::prelude::*;
use std::time::Duration;
use turnstile::{Decision, ManualClock, Quota, QuotaError, SlidingWindowCounter};

/// What the counter did on one key over a schedule with a non-decreasing clock.
struct Run {
    /// `(reading, cost)` of each admitted request with a cost.
    admitted: Vec<(u64, u64)>,
    /// `(reading, cost, decision)` of each request.
    decisions: Vec<(u64, u32, Decision)>,
}

fn run(quota: Quota, steps: &[Step]) -> Run {
    let clock = ManualClock::new();
    let limiter = SlidingWindowCounter::<u32, _>::with_clock(quota, clock.clone()).unwrap();
    let mut now = 0u64;
    let mut run = Run {
        admitted: vec![],
        decisions: vec![],
    };
    for step in steps {
        let (by, cost) = match *step {
            Step::Forward { by, cost, .. } => (by, Some(cost)),
            // Refunds are checked against the reference model; here, only the clock moves.
            Step::Peek { by, .. } | Step::Refund { by, .. } | Step::Settle { by, .. } => (by, None),
            Step::Back { .. } => unreachable!("a non-decreasing clock"),
        };
        now = now.saturating_add(by);
        clock.set(Duration::from_nanos(now));
        if let Some(cost) = cost {
            let d = limiter.acquire(&0, cost);
            if d.is_allowed() && cost > 0 {
                run.admitted.push((now, u64::from(cost)));
            }
            run.decisions.push((now, cost, d));
        }
    }
    run
}

/// Small quotas the counter's word holds (the tiniest intervals it refuses).
fn quota(max_capacity: u32) -> impl Strategy<Value = Quota> {
    small_quota(max_capacity).prop_filter("refused by the counter", |&q| {
        SlidingWindowCounter::<u32, _>::with_clock(q, ManualClock::new()).is_ok()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Forgetting keys after every step (margin 0, clock never going back) changes no
    /// decision: the limiter still answers exactly as the model, which never forgets.
    #[test]
    fn sweeping_after_every_request_changes_no_decision(
        (quota, start, steps) in case(quota(6), false)
    ) {
        let clock = ManualClock::new();
        let limiter = SlidingWindowCounter::<u32>::builder(quota)
            .clock(clock.clone())
            .eviction_margin(Duration::ZERO)
            .build().unwrap();
        let mut model = Keyed::<Counter>::plain(quota);
        schedule::agrees_sweeping(&clock, &limiter, &mut model, start, &steps, || limiter.evict_idle())?;
    }

    #[test]
    fn matches_the_reference_model((quota, start, steps) in case(quota(6), true)) {
        let clock = ManualClock::new();
        let limiter = SlidingWindowCounter::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Counter>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_lagging_reading_admits_no_more_than_the_latest_one(
        (quota, start, steps) in case(quota(6), true)
    ) {
        schedule::lagging_readings_admit_no_more(&mut Keyed::<Counter>::plain(quota), start, &steps)?;
    }

    /// The stated over-admission bound: in any span of d <= window nanoseconds, at
    /// most limit + ⌊(d − 1) / interval⌋ — never the fixed window's 2 × limit at once.
    /// (The exact log's bound is `limit`, always.)
    #[test]
    fn any_span_admits_at_most_limit_plus_the_intervals_it_spans(
        (quota, steps) in quota(8).prop_flat_map(|q| (Just(q), schedule(q, false)))
    ) {
        let (limit, interval, window) =
            (u64::from(quota.capacity()), interval_ns(quota), window_ns(quota));
        let admitted = run(quota, &steps).admitted;
        for (i, &(first, _)) in admitted.iter().enumerate() {
            let mut total = 0;
            for &(at, cost) in &admitted[i..] {
                if at - first >= window {
                    break;
                }
                total += cost;
                // The span (first − 1, at] is d = at − first + 1 ns long.
                let bound = limit + (at - first) / interval;
                prop_assert!(total <= bound, "{} admitted in [{}, {}], bound {}", total, first, at, bound);
            }
        }
    }

    /// The stated error against the exact sliding log *of the same history*: with p
    /// the previous fixed window's admissions and q the intervals elapsed in this one,
    /// the counter's room is at most ⌊p × q / limit⌋ above the log's (over-admission)
    /// and at most ⌈p × (limit − q) / limit⌉ below it (under-admission).
    #[test]
    fn its_room_stays_within_the_stated_error_of_the_exact_logs(
        (quota, steps) in quota(8).prop_flat_map(|q| (Just(q), schedule(q, false)))
    ) {
        let (limit, interval, window) =
            (u64::from(quota.capacity()), interval_ns(quota), window_ns(quota));
        let decisions = run(quota, &steps).decisions;
        let mut history: Vec<(u64, u64)> = vec![];
        for (now, cost, decision) in decisions {
            let in_window = |w: u64| -> u64 {
                history.iter().filter(|(at, _)| at / window == w).map(|(_, c)| c).sum()
            };
            let this = now / window;
            let p = if this == 0 { 0 } else { in_window(this - 1) };
            let q = (now - this * window) / interval;
            let in_log: u64 = history.iter().filter(|(at, _)| now - at < window).map(|(_, c)| c).sum();
            let log_room = limit as i64 - in_log as i64;
            let room = i64::from(decision.remaining())
                + if decision.is_allowed() { i64::from(cost) } else { 0 };
            let over = (p * q / limit) as i64;
            let under = (p * (limit - q)).div_ceil(limit) as i64;
            prop_assert!(room <= (log_room + over).max(0), "at {}: room {} vs log {} + {}", now, room, log_room, over);
            prop_assert!(room >= log_room - under, "at {}: room {} vs log {} - {}", now, room, log_room, under);
            if decision.is_allowed() && cost > 0 {
                history.push((now, u64::from(cost)));
            }
        }
    }
}

/// 100 per minute (one interval = 600 ms), on a manual clock.
fn per_minute_100() -> (SlidingWindowCounter<u64, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(100).unwrap();
    let limiter = SlidingWindowCounter::with_clock(quota, clock.clone()).unwrap();
    (limiter, clock)
}

#[test]
fn the_fixed_windows_boundary_burst_is_cut_to_the_spans_share() {
    // The fixed window admits 100 + 100 here. The counter: the 100 of window 0 weigh
    // fully until one interval (600 ms) into window 1, then 99/100: one more request.
    let (limiter, clock) = per_minute_100();
    for i in 0..100 {
        clock.set(Duration::from_secs(59) + ms(10 * i));
        assert!(
            limiter.try_acquire(&1),
            "request {i} at the end of window 0"
        );
    }
    let admitted: Vec<u64> = (0..100)
        .filter(|i| {
            clock.set(Duration::from_secs(60) + ms(10 * i));
            limiter.try_acquire(&1)
        })
        .collect();
    assert_eq!(admitted, [60], "only the request at 60.6 s");
}

#[test]
fn over_a_whole_window_it_can_admit_twice_the_limit_less_one() {
    // The bound's worst case: 4 per 400 ms; 4 at the last instant of window 0 weigh
    // 1/4 three intervals into window 1, so 3 more pass: 7 within 302 ms.
    let clock = ManualClock::new();
    let quota = Quota::new(4, ms(100)).unwrap();
    let limiter = SlidingWindowCounter::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    clock.set(ms(400) - Duration::from_nanos(1));
    assert!(limiter.acquire(&1, 4).is_allowed());
    clock.set(ms(700));
    assert_eq!(limiter.acquire(&1, 3), Decision::Allowed { remaining: 0 });
}

#[test]
fn requests_from_the_start_of_the_previous_window_still_weigh_after_the_boundary() {
    // The under-admission: 100 at 0 s have all left the sliding window at 60 s (the
    // exact log admits 100 there), but the counter assumes them spread evenly.
    let (limiter, clock) = per_minute_100();
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_secs(60));
    assert_eq!(
        limiter.acquire(&1, 1),
        Decision::Denied {
            remaining: 0,
            retry_after: ms(600)
        }
    );
    clock.set(Duration::from_secs(90)); // 50 intervals in: the previous 100 weigh 50
    assert_eq!(limiter.peek(&1), 50);
}

#[test]
fn retry_after_is_exact_on_the_grid() {
    let (limiter, clock) = per_minute_100();
    clock.set(Duration::from_secs(30));
    assert!(limiter.acquire(&1, 100).is_allowed());
    // At 61 s (q = 1, weight 99/100), 3 fit once 100 × (100 − q)/100 <= 97: q = 3.
    clock.set(Duration::from_secs(61));
    let wait = limiter.acquire(&1, 3).retry_after().unwrap();
    assert_eq!(wait, ms(800));
    clock.set(Duration::from_secs(61) + wait - Duration::from_nanos(1));
    assert!(!limiter.acquire(&1, 3).is_allowed(), "1 ns early");
    clock.set(Duration::from_secs(61) + wait);
    assert_eq!(limiter.acquire(&1, 3), Decision::Allowed { remaining: 0 });
}

#[test]
fn a_retrying_client_is_not_locked_out() {
    let clock = ManualClock::new();
    let quota = Quota::new(1, ms(100)).unwrap();
    let limiter = SlidingWindowCounter::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(limiter.try_acquire(&1));
    // Window 1 weighs window 0's request fully until its end: retries are denied and
    // not counted, so the first request of window 2 gets through.
    for tick in 1..200 {
        clock.set(Duration::from_micros(tick * 999));
        assert!(!limiter.try_acquire(&1), "retry {tick}");
    }
    clock.set(ms(200));
    assert!(limiter.try_acquire(&1));
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
    assert!(limiter.acquire(&1, 1).retry_after().is_some());
}

#[test]
fn a_reading_older_than_the_keys_window_counts_as_its_start() {
    let (limiter, clock) = per_minute_100();
    clock.set(Duration::from_secs(90));
    assert!(limiter.acquire(&1, 50).is_allowed()); // window 1
    clock.set(Duration::from_secs(30)); // another core, behind: window 0
    assert_eq!(limiter.peek(&1), 50, "window 1's count, not window 0's");
    assert!(limiter.acquire(&1, 50).is_allowed());
    assert!(!limiter.try_acquire(&1));
}

#[test]
fn quotas_the_word_cannot_hold_are_refused_at_construction() {
    assert!(SlidingWindowCounter::<u64>::new(Quota::per_second(16_383).unwrap()).is_ok());
    let err = SlidingWindowCounter::<u64>::new(Quota::per_second(16_384).unwrap()).err();
    assert!(matches!(
        err,
        Some(QuotaError::Unsupported {
            algorithm: "SlidingWindowCounter",
            capacity: 16_384,
            ..
        })
    ));
    let message = err.unwrap().to_string();
    assert!(message.contains("16,383"), "{message}");
}

#[test]
fn builder_and_accessors() {
    let limiter: SlidingWindowCounter<String, ManualClock> =
        SlidingWindowCounter::builder(Quota::per_second(3).unwrap())
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
