//! The hot path allocates nothing once a key exists. `allocation-counter` installs a
//! counting `#[global_allocator]` in this test binary; every allocation and
//! reallocation made on this thread inside `measure` is counted.

use std::time::Duration;
use turnstile::{ManualClock, Quota, RateLimiter, TokenBucket};

#[test]
fn existing_keys_allocate_nothing_on_allowed_denied_or_peek_paths() {
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_millis(1)).unwrap();
    let by_id = TokenBucket::<u64, _>::with_clock(quota, clock.clone());
    let by_name = TokenBucket::<String, _>::with_clock(quota, clock.clone());
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
