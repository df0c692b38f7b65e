//! Per-key quotas and reconfiguration: each key's quota comes from a resolver asked
//! once, and a new quota reaches existing keys at their next request, carrying over
//! what they have left.

mod common;

use common::ms;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;
use turnstile::{
    Decision, FixedWindow, ManualClock, PerKeyTokenBucket, Quota, Settlement, SlidingLog,
    TokenBucket,
};

fn quota(capacity: u32, every: Duration) -> Quota {
    Quota::new(capacity, every).unwrap()
}

#[test]
fn each_key_gets_its_own_quota_from_a_resolver_asked_once() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let limiter = TokenBucket::<String>::builder(quota(2, ms(100)))
        .clock(ManualClock::new())
        .build_per_key(move |user: &String| {
            counter.fetch_add(1, Ordering::Relaxed);
            if user.starts_with("premium") {
                quota(5, ms(100))
            } else {
                quota(2, ms(100))
            }
        });
    let admitted = |user: &str| (0..10).filter(|_| limiter.try_acquire(user)).count();
    assert_eq!(admitted("premium-ann"), 5);
    assert_eq!(admitted("free-bob"), 2);
    assert_eq!(limiter.peek("premium-ann"), 0);
    // Asked once per key, however many requests it makes.
    assert_eq!(asked.load(Ordering::Relaxed), 2);
}

#[test]
fn a_peek_of_an_unknown_key_reports_its_own_quota() {
    let limiter = TokenBucket::<u64>::builder(quota(2, ms(100)))
        .clock(ManualClock::new())
        .build_per_key(|&id| quota(if id == 7 { 9 } else { 2 }, ms(100)));
    assert_eq!((limiter.peek(&7), limiter.peek(&8)), (9, 2));
    assert!(limiter.is_empty());
}

#[test]
fn a_smaller_quota_caps_what_a_key_has_left() {
    let clock = ManualClock::new();
    let limiter: PerKeyTokenBucket<u64, ManualClock> = TokenBucket::builder(quota(10, ms(100)))
        .clock(clock.clone())
        .build_reconfigurable();
    assert!(limiter.acquire(&1, 2).is_allowed()); // 8 left
    limiter.set_quota(quota(5, ms(100)));
    assert_eq!(limiter.peek(&1), 5, "capped at the new capacity");
    assert_eq!(
        limiter.acquire(&1, 6),
        Decision::ExceedsCapacity {
            remaining: 5,
            capacity: 5
        }
    );
    assert!(limiter.acquire(&1, 5).is_allowed());
    // Refills follow the new quota and stop at its capacity.
    clock.advance(ms(10_000));
    assert_eq!(limiter.peek(&1), 5);
}

#[test]
fn a_larger_quota_keeps_what_a_key_has_left_and_refills_to_the_new_capacity() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(4, ms(100)))
        .clock(clock.clone())
        .build_reconfigurable();
    assert!(limiter.acquire(&1, 3).is_allowed()); // 1 left
    assert_eq!(limiter.peek(&2), 4); // an unknown key
    limiter.set_quota(quota(10, ms(50)));
    assert_eq!(limiter.peek(&1), 1, "no jump to the new capacity");
    assert_eq!(limiter.peek(&2), 10, "a new key gets the new quota");
    clock.set(ms(50));
    assert_eq!(limiter.peek(&1), 2, "one token per 50 ms now");
    clock.set(ms(10_000));
    assert_eq!(limiter.peek(&1), 10);
}

#[test]
fn a_full_key_starts_afresh_under_a_new_quota_as_a_forgotten_key_would() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(4, ms(100)))
        .clock(clock.clone())
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build_reconfigurable();
    assert!(limiter.acquire(&1, 0).is_allowed()); // known, full
    assert!(limiter.acquire(&2, 0).is_allowed()); // known, full
    limiter.set_quota(quota(10, ms(100)));
    assert_eq!(limiter.peek(&1), 10, "a full key moves as a new key starts");
    clock.set(ms(1));
    assert_eq!(limiter.evict_idle(), 2, "both carry no information");
    assert_eq!(limiter.peek(&2), 10, "as a forgotten key restarts");
}

#[test]
fn a_reconfiguration_reaches_a_throttled_key_at_its_next_request() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::<u64>::builder(quota(3, ms(100)))
        .clock(clock.clone())
        .build_reconfigurable();
    assert!(limiter.acquire(&9, 3).is_allowed());
    assert!(!limiter.try_acquire(&9));
    // Raising the limit leaves the key what it had (nothing), counted as used now.
    limiter.reconfigure(|_| quota(6, ms(100)));
    assert_eq!(limiter.peek(&9), 0);
    clock.set(ms(600)); // the new window (6 × 100 ms) has passed
    assert_eq!(limiter.peek(&9), 6);
}

#[test]
fn the_sliding_log_carries_over_too() {
    let clock = ManualClock::new();
    let limiter = SlidingLog::<u64>::builder(quota(4, ms(10)))
        .clock(clock.clone())
        .build_reconfigurable();
    assert!(limiter.acquire(&1, 3).is_allowed());
    limiter.set_quota(quota(2, ms(10)));
    assert_eq!(limiter.peek(&1), 1, "min(1 left, new limit 2)");
    clock.set(ms(19));
    assert_eq!(
        limiter.peek(&1),
        1,
        "the carried-over use counts until one window later"
    );
    clock.set(ms(20));
    assert_eq!(limiter.peek(&1), 2);
}

/// A move never gives a key in debt an allowance: the units it owes are owed under
/// the new quota (capped at the new debt cap), repaid at the new rate.
#[test]
fn a_key_in_debt_owes_the_same_units_under_a_new_quota() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::<u64>::builder(quota(10, ms(100)))
        .clock(clock.clone())
        .build_reconfigurable();
    let window = FixedWindow::<u64>::builder(quota(10, ms(100)))
        .clock(clock.clone())
        .build_reconfigurable();
    let log = SlidingLog::<u64>::builder(quota(10, ms(100)))
        .clock(clock.clone())
        .build_reconfigurable();
    let settles: [&dyn Fn(u32, u32) -> Settlement; 3] = [
        &|estimate, actual| bucket.settle(&1, estimate, actual),
        &|estimate, actual| window.settle(&1, estimate, actual),
        &|estimate, actual| log.settle(&1, estimate, actual),
    ];
    for settle in settles {
        // 10 taken, 6 owed.
        assert_eq!(settle(0, 16).charged, 16);
    }
    // Faster, and larger: 20 every 50 ms each. Still 6 owed, at the move's instant.
    bucket.set_quota(quota(20, ms(50)));
    window.set_quota(quota(20, ms(50)));
    log.set_quota(quota(20, ms(50)));
    assert_eq!((bucket.peek(&1), window.peek(&1), log.peek(&1)), (0, 0, 0));
    // The bucket repays 6 and brings 1 in 7 intervals of 50 ms.
    assert_eq!(bucket.acquire(&1, 1).retry_after(), Some(ms(350)));
    // The window (20 per 1 s) starts its next window with the 6 owed.
    assert_eq!(window.acquire(&1, 15).retry_after(), Some(ms(2_000)));
    assert_eq!(window.acquire(&1, 14).retry_after(), Some(ms(1_000)));
    // The log owes 6 entries at the move's instant, for one new window (1 s).
    assert_eq!(log.acquire(&1, 15).retry_after(), Some(ms(1_000)));
    // Smaller: a debt beyond the new capacity is capped at it, never wiped out.
    bucket.set_quota(quota(2, ms(50)));
    assert_eq!(bucket.peek(&1), 0);
    assert_eq!(bucket.acquire(&1, 1).retry_after(), Some(ms(150)));
}

#[test]
fn forgetting_works_under_per_key_quotas() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(2, ms(10)))
        .clock(clock.clone())
        .eviction_margin(Duration::ZERO)
        .build_per_key(|&id| quota(if id == 1 { 5 } else { 2 }, ms(10)));
    assert!(limiter.acquire(&1, 5).is_allowed());
    assert!(limiter.acquire(&2, 2).is_allowed());
    clock.set(ms(20)); // key 2 full again; key 1 has 2 of 5
    assert_eq!(limiter.evict_idle(), 1);
    assert_eq!((limiter.peek(&1), limiter.peek(&2)), (2, 2));
    clock.set(ms(50));
    assert_eq!(limiter.evict_idle(), 1);
    assert!(limiter.is_empty());
}

/// Threads take from one key while another reconfigures it, again and again, to a
/// larger capacity at the same rate; the clock is frozen. A carry-over keeps exactly
/// what the key had left, so every token is either taken or still there at the end —
/// and never one more.
#[test]
fn reconfiguring_under_load_loses_and_invents_no_token() {
    for round in 0..100 {
        let limiter = TokenBucket::<u64>::builder(quota(300, ms(10)))
            .clock(ManualClock::new())
            .build_reconfigurable();
        // The key exists before the first reconfiguration, with 299: not full, so it
        // keeps what it has (a full key would start afresh under each new quota, as
        // a new key does).
        assert!(limiter.acquire(&1, 1).is_allowed());
        let taken = AtomicU32::new(0);
        let barrier = Barrier::new(4);
        thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                for capacity in 301..400 {
                    limiter.set_quota(quota(capacity, ms(10)));
                    thread::yield_now();
                }
            });
            for _ in 0..3 {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..200 {
                        if limiter.try_acquire(&1) {
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = taken.into_inner();
        assert_eq!(
            taken + limiter.peek(&1),
            299,
            "round {round}: {taken} taken"
        );
    }
}

/// Shrinking while threads take: never more than the first capacity in all, and the
/// key ends within the final quota.
#[test]
fn shrinking_under_load_never_admits_more_than_was_there() {
    for round in 0..10 {
        let limiter = TokenBucket::<u64>::builder(quota(500, ms(10)))
            .clock(ManualClock::new())
            .build_reconfigurable();
        assert!(limiter.acquire(&1, 0).is_allowed());
        let taken = AtomicU32::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                for capacity in (100..500).rev().step_by(7) {
                    limiter.set_quota(quota(capacity, ms(10)));
                }
            });
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..300 {
                        if limiter.try_acquire(&1) {
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = taken.into_inner();
        assert!(taken <= 500, "round {round}: {taken} taken");
        assert!(
            limiter.peek(&1) <= 100,
            "round {round}: the final capacity is 100"
        );
    }
}

mod same_decisions {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Without reconfiguration, a per-key limiter decides each key exactly as a
        /// shared-quota limiter with that key's quota does.
        #[test]
        fn per_key_quotas_decide_as_one_limiter_per_quota(
            steps in prop::collection::vec((0u64..3_000_000, 0u64..4, 0u32..=6), 1..200)
        ) {
            let small = quota(2, ms(1));
            let large = quota(5, Duration::from_micros(700));
            let of = move |key: &u64| if key.is_multiple_of(2) { small } else { large };
            let clock = ManualClock::new();
            let per_key = TokenBucket::<u64>::builder(small).clock(clock.clone()).build_per_key(of);
            let shared = [
                TokenBucket::<u64, _>::with_clock(small, clock.clone()).unwrap(),
                TokenBucket::<u64, _>::with_clock(large, clock.clone()).unwrap(),
            ];
            let mut now = 0;
            for (by, key, cost) in steps {
                now += by;
                clock.set(Duration::from_nanos(now));
                let expected = shared[(key % 2) as usize].acquire(&key, cost);
                prop_assert_eq!(per_key.acquire(&key, cost), expected);
            }
        }
    }
}
