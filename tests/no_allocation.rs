//! The hot path allocates nothing once a key exists. `allocation-counter` installs a
//! counting `#[global_allocator]` in this test binary; every allocation and
//! reallocation made on this thread inside `measure` is counted. (The sliding log, the
//! one algorithm whose state grows with its limit, allocates while a key's ring grows.)

use std::time::Duration;
use turnstile::{Decision, ManualClock, Quota, TokenBucket};

#[test]
fn existing_keys_allocate_nothing_on_allowed_denied_or_peek_paths() {
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_millis(1)).unwrap();
    let by_id = TokenBucket::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let by_name = TokenBucket::<String, _>::with_clock(quota, clock.clone()).unwrap();
    let names: Vec<String> = (0..1000).map(|i| format!("client-{i}")).collect();
    for (id, name) in names.iter().enumerate() {
        assert!(by_id.try_acquire(&(id as u64)));
        assert!(by_name.try_acquire(name.as_str()));
    }

    let (mut allowed, mut denied) = (0u32, 0u32);
    let info = allocation_counter::measure(|| {
        for _ in 0..20 {
            // 300 µs per round against a 1 ms refill: keys drain, then get denied.
            clock.advance(Duration::from_micros(300));
            for (id, name) in names.iter().enumerate() {
                for decision in [
                    by_id.acquire(&(id as u64), 1),
                    by_name.acquire(name.as_str(), 1),
                    by_name.acquire(name.as_str(), 11), // over capacity
                ] {
                    if decision.is_allowed() {
                        allowed += 1;
                    } else {
                        denied += 1;
                    }
                }
                std::hint::black_box(by_id.peek(&(id as u64)));
            }
        }
    });
    assert_eq!(info.count_total, 0, "allocations on the hot path: {info:?}");
    // Both paths were exercised: the measurement covers allowed and denied requests.
    assert!(
        allowed > 10_000 && denied > 20_000,
        "allowed {allowed}, denied {denied}"
    );
}

/// Every lock-free algorithm's check on an existing key: allowed, denied, over the
/// limit and peek, across window boundaries — no allocation.
#[test]
fn the_other_lock_free_algorithms_allocate_nothing_for_existing_keys() {
    use turnstile::{FixedWindow, Gcra, SlidingWindowCounter};
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_micros(100)).unwrap(); // 10 per ms
    let fixed = FixedWindow::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let sliding = SlidingWindowCounter::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let gcra = Gcra::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let limiters: [&dyn Fn(u64, u32) -> Decision; 3] = [
        &|key, cost| fixed.acquire(&key, cost),
        &|key, cost| sliding.acquire(&key, cost),
        &|key, cost| gcra.acquire(&key, cost),
    ];
    for key in 0..1000 {
        for limiter in &limiters {
            assert!(limiter(key, 1).is_allowed());
        }
    }
    let (mut allowed, mut denied) = (0u32, 0u32);
    let info = allocation_counter::measure(|| {
        for _ in 0..20 {
            clock.advance(Duration::from_micros(300));
            for key in 0..1000 {
                for limiter in &limiters {
                    for cost in [1, 1, 1, 11] {
                        if limiter(key, cost).is_allowed() {
                            allowed += 1;
                        } else {
                            denied += 1;
                        }
                    }
                }
                std::hint::black_box((fixed.peek(&key), sliding.peek(&key), gcra.peek(&key)));
            }
        }
    });
    assert_eq!(info.count_total, 0, "allocations on the hot path: {info:?}");
    assert!(
        allowed > 50_000 && denied > 60_000,
        "allowed {allowed}, denied {denied}"
    );
}

/// Settling on existing keys — giving back, charging into debt, forgiving past the
/// debt cap — allocates nothing, for every lock-free word algorithm.
#[test]
fn settling_on_existing_keys_allocates_nothing() {
    use turnstile::{FixedWindow, Gcra, Settlement, SlidingWindowCounter};
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_micros(100)).unwrap();
    let bucket = TokenBucket::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let fixed = FixedWindow::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let sliding = SlidingWindowCounter::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let gcra = Gcra::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let limiters: [&dyn Fn(u64, u32, u32) -> Settlement; 4] = [
        &|key, estimate, actual| bucket.settle(&key, estimate, actual),
        &|key, estimate, actual| fixed.settle(&key, estimate, actual),
        &|key, estimate, actual| sliding.settle(&key, estimate, actual),
        &|key, estimate, actual| gcra.settle(&key, estimate, actual),
    ];
    for key in 0..1000 {
        for limiter in &limiters {
            limiter(key, 0, 1);
        }
    }
    let (mut charged, mut forgiven, mut refunded) = (0u32, 0u32, 0u32);
    let info = allocation_counter::measure(|| {
        for _ in 0..10 {
            clock.advance(Duration::from_micros(300));
            for key in 0..1000 {
                for limiter in &limiters {
                    for (estimate, actual) in [(1, 9), (2, 1), (0, 30), (5, 0)] {
                        let settled = limiter(key, estimate, actual);
                        charged += settled.charged;
                        forgiven += settled.forgiven;
                        refunded += settled.refunded;
                    }
                }
            }
        }
    });
    assert_eq!(info.count_total, 0, "allocations settling: {info:?}");
    assert!(
        charged > 0 && forgiven > 0 && refunded > 0,
        "charged {charged}, forgiven {forgiven}, refunded {refunded}"
    );
}

/// A sliding log allocates only while a key's ring grows, and never holds more than
/// `limit` timestamps: once grown, a key's checks allocate nothing.
#[test]
fn a_sliding_log_key_grows_to_at_most_limit_timestamps_then_allocates_nothing() {
    use turnstile::SlidingLog;
    const LIMIT: u64 = 100;
    let clock = ManualClock::new();
    let quota = Quota::new(LIMIT as u32, Duration::from_micros(10)).unwrap(); // per ms
    let log = SlidingLog::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    assert!(log.acquire(&1, 0).is_allowed()); // the key's entry, with an empty ring
    let hammer = |rounds: u32| {
        let mut allowed = 0;
        for _ in 0..rounds {
            clock.advance(Duration::from_micros(7));
            for cost in [1, 3, 1] {
                allowed += u32::from(log.acquire(&1, cost).is_allowed());
            }
        }
        allowed
    };
    let growing = allocation_counter::measure(|| assert!(hammer(1000) > 0));
    assert!(
        growing.bytes_current <= (LIMIT * 8) as i64,
        "the ring holds at most {LIMIT} timestamps: {growing:?}"
    );
    assert!(
        growing.count_total <= 6,
        "doubling from 4 to 100: {growing:?}"
    );
    let grown = allocation_counter::measure(|| assert!(hammer(1000) > 0));
    assert_eq!(grown.count_total, 0, "{grown:?}");
}
