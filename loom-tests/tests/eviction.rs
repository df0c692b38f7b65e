//! Forgetting idle keys, model-checked: a sweeper forgets a full key while two
//! threads take from it. Exactly its capacity is admitted — and a sweeper that removes
//! the key without retiring its word first is rejected.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::check;
use std::time::Duration;
use turnstile::loom_hooks::sweep_without_retiring;
use turnstile::{ManualClock, Quota, RateLimiter, TokenBucket};

const KEY: u64 = 3;

fn sweeping_never_grants_extra(sweep: fn(&TokenBucket<u64, ManualClock>)) {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(Quota::new(1, Duration::from_nanos(10)).unwrap())
        .clock(clock)
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build();
    // The key exists and is full (forgettable) with one token.
    assert!(limiter.acquire(&KEY, 0).is_allowed());
    let limiter = Arc::new(limiter);
    let takers = [0, 1].map(|_| {
        let limiter = limiter.clone();
        thread::spawn(move || u32::from(limiter.try_acquire(&KEY)))
    });
    sweep(&limiter);
    let allowed: u32 = takers.map(|t| t.join().unwrap()).iter().sum();
    assert_eq!(
        allowed, 1,
        "eviction: {allowed} allowed from a bucket holding 1 token"
    );
}

#[test]
fn model_6_sweeping_a_key_in_use_admits_exactly_capacity() {
    check("6 sweep racing two takes", Some(4), || {
        sweeping_never_grants_extra(|limiter| {
            limiter.evict_idle();
        })
    });
}

#[test]
#[should_panic(expected = "eviction:")]
fn mutant_6_removing_without_retiring_is_rejected() {
    check("6 mutant: remove without retiring", Some(4), || {
        sweeping_never_grants_extra(sweep_without_retiring)
    });
}
