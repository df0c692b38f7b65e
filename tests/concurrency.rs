//! Many threads, exact counts: admissions are counted, never estimated.

mod common;

use common::ms;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{
    FixedWindow, Gcra, ManualClock, Quota, RateLimiter, SlidingLog, SlidingWindowCounter,
    TokenBucket,
};

/// Runs `attempts` requests on each of `threads` threads, all released at once;
/// returns how many were allowed.
fn hammer<L>(limiter: &L, threads: usize, attempts: usize, key: u64) -> u32
where
    L: RateLimiter<u64> + Sync,
{
    let barrier = Barrier::new(threads);
    let allowed = AtomicU32::new(0);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..attempts {
                    if limiter.try_acquire(&key) {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    allowed.into_inner()
}

fn frozen_clock_admits_exactly_min_of_capacity_and_attempts<L, F>(make: F)
where
    L: RateLimiter<u64> + Sync,
    F: Fn(Quota, ManualClock) -> L,
{
    for (capacity, threads, attempts) in [(1000, 8, 200), (5000, 8, 200), (1, 8, 50), (64, 2, 32)] {
        let limiter = make(Quota::new(capacity, ms(10)).unwrap(), ManualClock::new());
        let expected = capacity.min((threads * attempts) as u32);
        assert_eq!(
            hammer(&limiter, threads, attempts, 9),
            expected,
            "capacity {capacity}"
        );
    }
}

#[test]
fn frozen_clock_token_bucket() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(|q, c| {
        TokenBucket::<u64, _>::with_clock(q, c).unwrap()
    });
}

#[test]
fn frozen_clock_mutex_per_key() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(MutexPerKey::<u64, _>::with_clock);
}

#[test]
fn frozen_clock_global_lock() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(GlobalLock::<u64, _>::with_clock);
}

#[test]
fn frozen_clock_fixed_window() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(|q, c| {
        FixedWindow::<u64, _>::with_clock(q, c).unwrap()
    });
}

#[test]
fn frozen_clock_sliding_window_counter() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(|quota, clock| {
        SlidingWindowCounter::<u64, _>::with_clock(quota, clock).unwrap()
    });
}

#[test]
fn frozen_clock_gcra() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(|quota, clock| {
        Gcra::<u64, _>::with_clock(quota, clock).unwrap()
    });
}

#[test]
fn frozen_clock_sliding_log() {
    frozen_clock_admits_exactly_min_of_capacity_and_attempts(|q, c| {
        SlidingLog::<u64, _>::with_clock(q, c).unwrap()
    });
}

fn first_request_race_creates_one_bucket<L, F>(make: F)
where
    L: RateLimiter<u64> + Sync,
    F: Fn(Quota, ManualClock) -> L,
{
    let limiter = make(Quota::new(1, ms(10)).unwrap(), ManualClock::new());
    for round in 0..300 {
        // Every thread sends the first-ever request for key `round` at once.
        assert_eq!(hammer(&limiter, 8, 1, round), 1, "round {round}");
    }
}

#[test]
fn first_request_race_token_bucket() {
    first_request_race_creates_one_bucket(|q, c| TokenBucket::<u64, _>::with_clock(q, c).unwrap());
}

#[test]
fn first_request_race_mutex_per_key() {
    first_request_race_creates_one_bucket(MutexPerKey::<u64, _>::with_clock);
}

#[test]
fn first_request_race_global_lock() {
    first_request_race_creates_one_bucket(GlobalLock::<u64, _>::with_clock);
}

#[test]
fn first_request_race_fixed_window() {
    first_request_race_creates_one_bucket(|q, c| FixedWindow::<u64, _>::with_clock(q, c).unwrap());
}

#[test]
fn first_request_race_sliding_window_counter() {
    first_request_race_creates_one_bucket(|quota, clock| {
        SlidingWindowCounter::<u64, _>::with_clock(quota, clock).unwrap()
    });
}

#[test]
fn first_request_race_gcra() {
    first_request_race_creates_one_bucket(|quota, clock| {
        Gcra::<u64, _>::with_clock(quota, clock).unwrap()
    });
}

#[test]
fn first_request_race_sliding_log() {
    first_request_race_creates_one_bucket(|q, c| SlidingLog::<u64, _>::with_clock(q, c).unwrap());
}

/// Takers hammer one drained key while another thread moves the clock forward one
/// interval at a time. Every token that arrives is either taken or still there at
/// the end: `allowed + remaining == intervals elapsed`, exactly.
fn refill_race_loses_no_token<L, F>(make: F)
where
    L: RateLimiter<u64> + Sync,
    F: Fn(Quota, ManualClock) -> L,
{
    const INTERVALS: u32 = 2000;
    let interval = Duration::from_micros(10);
    // Capacity above the intervals elapsed, so the cap never discards a refill.
    let clock = ManualClock::new();
    let limiter = make(Quota::new(INTERVALS + 1, interval).unwrap(), clock.clone());
    assert!(limiter.acquire(&1, INTERVALS + 1).is_allowed());

    let done = AtomicBool::new(false);
    let allowed = AtomicU32::new(0);
    let barrier = Barrier::new(4);
    thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            for _ in 0..INTERVALS {
                clock.advance(interval);
                thread::yield_now();
            }
            done.store(true, Ordering::Release);
        });
        for _ in 0..3 {
            s.spawn(|| {
                barrier.wait();
                while !done.load(Ordering::Acquire) {
                    if limiter.try_acquire(&1) {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let allowed = allowed.into_inner();
    assert!(
        allowed <= INTERVALS,
        "{allowed} allowed with {INTERVALS} intervals elapsed"
    );
    assert_eq!(allowed + limiter.peek(&1), INTERVALS);
}

#[test]
fn refill_race_token_bucket() {
    refill_race_loses_no_token(|q, c| TokenBucket::<u64, _>::with_clock(q, c).unwrap());
}

#[test]
fn refill_race_mutex_per_key() {
    refill_race_loses_no_token(MutexPerKey::<u64, _>::with_clock);
}

#[test]
fn refill_race_global_lock() {
    refill_race_loses_no_token(GlobalLock::<u64, _>::with_clock);
}

#[test]
fn refill_race_gcra() {
    // GCRA's continuous refill adds whole tokens exactly at multiples of the interval
    // after the drain at 0, so the same exact accounting holds.
    refill_race_loses_no_token(|quota, clock| Gcra::<u64, _>::with_clock(quota, clock).unwrap());
}

/// Takers hammer one key drained in window 0 while the clock jumps into window 1:
/// however many see the new window at once, it starts from zero exactly once.
fn window_reset_race_admits_exactly_one_window<L, F>(make: F)
where
    L: RateLimiter<u64> + Sync,
    F: Fn(Quota, ManualClock) -> L,
{
    const LIMIT: u32 = 1000;
    let window = ms(10) * LIMIT;
    for round in 0..20 {
        let clock = ManualClock::new();
        let limiter = make(Quota::new(LIMIT, ms(10)).unwrap(), clock.clone());
        assert!(limiter.acquire(&1, LIMIT).is_allowed());
        let allowed = AtomicU32::new(0);
        let barrier = Barrier::new(4);
        thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                clock.set(window);
            });
            for _ in 0..3 {
                s.spawn(|| {
                    barrier.wait();
                    loop {
                        // Whether the jump happened, read before asking: a denial
                        // after it means window 1 is spent.
                        let jumped = clock_is_past(&clock, window);
                        if limiter.try_acquire(&1) {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        } else if jumped {
                            break;
                        }
                    }
                });
            }
        });
        assert_eq!(allowed.into_inner(), LIMIT, "round {round}");
        assert_eq!(limiter.peek(&1), 0, "round {round}");
    }
}

fn clock_is_past(clock: &ManualClock, at: Duration) -> bool {
    use turnstile::Clock;
    clock.now() >= at.as_nanos() as u64
}

#[test]
fn window_reset_race_fixed_window() {
    window_reset_race_admits_exactly_one_window(|q, c| {
        FixedWindow::<u64, _>::with_clock(q, c).unwrap()
    });
}

/// Takers hammer one key drained at the start of window 0 while the clock moves
/// through window 1 one interval at a time; the previous window's weight falls by
/// one request per interval. At the end, q intervals into window 1:
/// `allowed + remaining == q` exactly — nothing lost, nothing invented.
#[test]
fn weight_race_sliding_window_counter() {
    const LIMIT: u32 = 2000;
    let interval = Duration::from_micros(10);
    let clock = ManualClock::new();
    let quota = Quota::new(LIMIT, interval).unwrap();
    let limiter = SlidingWindowCounter::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(limiter.acquire(&1, LIMIT).is_allowed());
    clock.set(interval * LIMIT); // window 1, q = 0: nothing left
    let done = AtomicBool::new(false);
    let allowed = AtomicU32::new(0);
    let barrier = Barrier::new(4);
    thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            for _ in 1..LIMIT {
                clock.advance(interval);
                thread::yield_now();
            }
            done.store(true, Ordering::Release);
        });
        for _ in 0..3 {
            s.spawn(|| {
                barrier.wait();
                while !done.load(Ordering::Acquire) {
                    if limiter.try_acquire(&1) {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(allowed.into_inner() + limiter.peek(&1), LIMIT - 1);
}

#[test]
fn weighted_requests_racing_never_take_part_of_a_cost() {
    // Capacity 100; threads ask for 7 or 1. Whatever interleaving, the tokens taken
    // are exactly the sum of the allowed costs, and at most the capacity.
    let limiter =
        TokenBucket::<u64, _>::with_clock(Quota::new(100, ms(10)).unwrap(), ManualClock::new())
            .unwrap();
    let taken = AtomicU32::new(0);
    thread::scope(|s| {
        for cost in [7, 1, 7, 1] {
            let (limiter, taken) = (&limiter, &taken);
            s.spawn(move || {
                for _ in 0..50 {
                    if limiter.acquire(&3, cost).is_allowed() {
                        taken.fetch_add(cost, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let taken = taken.into_inner();
    assert!(taken <= 100);
    assert_eq!(taken + limiter.peek(&3), 100);
}

/// Takers take 3 and give 3 back when a (simulated) later check refuses, racing with
/// plain takes. Refunds restore exactly what was taken and never push the key above
/// its capacity: at the end, tokens left + tokens kept by allowed requests = capacity.
#[test]
fn refunds_racing_with_takes_never_exceed_capacity() {
    for _ in 0..20 {
        let limiter =
            TokenBucket::<u64, _>::with_clock(Quota::new(50, ms(10)).unwrap(), ManualClock::new())
                .unwrap();
        let kept = AtomicU32::new(0);
        thread::scope(|s| {
            for t in 0..4u32 {
                let (limiter, kept) = (&limiter, &kept);
                s.spawn(move || {
                    for i in 0..200u32 {
                        if limiter.acquire(&5, 3).is_allowed() {
                            if (i + t) % 2 == 0 {
                                limiter.refund(&5, 3);
                            } else {
                                kept.fetch_add(3, Ordering::Relaxed);
                            }
                        }
                        assert!(limiter.peek(&5) <= 50);
                    }
                });
            }
        });
        assert_eq!(kept.into_inner() + limiter.peek(&5), 50);
    }
}
