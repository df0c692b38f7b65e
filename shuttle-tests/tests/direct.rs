//! The direct (unkeyed) limiter's `try_acquire` loop: three threads ask a bucket of
//! two on a frozen clock, and exactly two are admitted — a loop that retries a lost
//! compare-and-set with the value it computed from the word it lost to (mutant
//! `TryWithStaleValue`) admits a third.
#![cfg(turnstile_shuttle)]

use shuttle::thread;
use shuttle_tests::check;
use shuttle_tests::keyed::quota;
use std::sync::Arc;
use turnstile::shuttle_hooks::Mutant;
use turnstile::{DirectTokenBucket, ManualClock};

/// Schedules per model.
const ITERATIONS: usize = 5000;
/// See `keyed.rs`.
const MAX_STEPS: usize = 20_000;

fn direct_capacity_is_admitted_exactly() {
    let limiter = Arc::new(DirectTokenBucket::with_clock(quota(2), ManualClock::new()).unwrap());
    let others = [0, 1].map(|_| {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || u32::from(limiter.try_acquire()))
    });
    let mine = u32::from(limiter.try_acquire());
    let allowed = mine + others.map(|t| t.join().unwrap()).iter().sum::<u32>();
    assert_eq!(allowed, 2, "direct: {allowed} of 3 admitted from 2 tokens");
}

#[test]
fn a_direct_bucket_admits_exactly_capacity() {
    check(
        "direct: capacity",
        ITERATIONS,
        MAX_STEPS,
        direct_capacity_is_admitted_exactly,
    );
}

#[test]
fn mutant_retrying_with_a_stale_value_is_caught() {
    let caught = shuttle_tests::caught(Mutant::TryWithStaleValue, || {
        check(
            "mutant: retry with a stale value",
            ITERATIONS,
            MAX_STEPS,
            direct_capacity_is_admitted_exactly,
        )
    });
    let message = caught.expect("the mutant survived");
    assert!(
        message.contains("direct:"),
        "caught for another reason: {message}"
    );
}
