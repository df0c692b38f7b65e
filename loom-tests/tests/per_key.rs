//! Carrying keys over to a new quota, model-checked: two threads take while the
//! limiter is reconfigured, and whichever of them meets the old entry first carries
//! it over. Every token is either taken or left — and a carry-over that replaces the
//! entry without freezing its state first, so a concurrent take is lost, is rejected.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::check;
use std::time::Duration;
use turnstile::loom_hooks::carry_over_without_freezing;
use turnstile::{ManualClock, PerKeyTokenBucket, Quota, RateLimiter, TokenBucket};

const KEY: u64 = 5;

fn quota(capacity: u32) -> Quota {
    Quota::new(capacity, Duration::from_nanos(10)).unwrap()
}

fn reconfiguring_loses_no_take(mutate: fn(&mut PerKeyTokenBucket<u64, ManualClock>)) {
    let mut limiter = TokenBucket::<u64>::builder(quota(3))
        .clock(ManualClock::new())
        .build_reconfigurable();
    mutate(&mut limiter);
    assert!(limiter.acquire(&KEY, 1).is_allowed()); // the key exists, with 2 left
    let limiter = Arc::new(limiter);
    let takers = [0, 1].map(|_| {
        let limiter = limiter.clone();
        thread::spawn(move || u32::from(limiter.try_acquire(&KEY)))
    });
    // A larger capacity at the same rate: what the key has left carries over whole.
    limiter.set_quota(quota(5));
    let taken: u32 = takers.map(|t| t.join().unwrap()).iter().sum();
    let left = limiter.peek(&KEY);
    assert_eq!(
        taken + left,
        2,
        "carry-over: {taken} taken + {left} left != 2 before it"
    );
}

#[test]
fn model_8_reconfiguration_racing_with_takes() {
    check("8 reconfiguration racing with takes", Some(4), || {
        reconfiguring_loses_no_take(|_| {})
    });
}

#[test]
#[should_panic(expected = "carry-over:")]
fn mutant_8_carrying_over_without_freezing_is_rejected() {
    check("8 mutant: carry over without freezing", Some(4), || {
        reconfiguring_loses_no_take(carry_over_without_freezing)
    });
}
