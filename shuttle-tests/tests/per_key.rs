//! Reconfiguration, whole (papaya: per-key states are not single words): while one
//! thread takes two tokens and gives one back and another takes one twice, the limiter
//! moves to a larger quota at the same rate, and the sweeper thread forgets the full
//! keys the threads insert. What the key had left carries over whole, so at the end
//! it has exactly what it had, less what was taken, plus what was refunded — and a
//! move that replaces the entry without freezing its state first (mutant
//! `MoveWithoutFreezing`) loses a take.
#![cfg(turnstile_shuttle)]

use shuttle::thread;
use shuttle_tests::check;
use shuttle_tests::keyed::{HOT, Ledger, quota};
use std::sync::Arc;
use std::time::Duration;
use turnstile::shuttle_hooks::Mutant;
use turnstile::{ManualClock, TokenBucket};

/// Schedules per model.
const ITERATIONS: usize = 5000;
/// See `keyed.rs`.
const MAX_STEPS: usize = 20_000;

fn a_move_loses_no_take_nor_refund() {
    let limiter = TokenBucket::<u64>::builder(quota(3))
        .clock(ManualClock::new())
        .eviction_margin(Duration::ZERO)
        .build_reconfigurable();
    assert!(limiter.acquire(&HOT, 1).is_allowed()); // the key exists, with 2 left
    let limiter = Arc::new(limiter);
    let refunder = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            let mut ledger = Ledger::default();
            if limiter.acquire(&HOT, 2).is_allowed() {
                ledger.taken += 2;
                limiter.refund(&HOT, 1);
                ledger.refunded += 1;
            }
            assert!(limiter.acquire(&10, 0).is_allowed());
            ledger
        })
    };
    let taker = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            let mut ledger = Ledger::default();
            for _ in 0..2 {
                ledger.taken += u32::from(limiter.try_acquire(&HOT));
            }
            assert!(limiter.acquire(&11, 0).is_allowed());
            ledger
        })
    };
    // A larger capacity at the same rate: what the key has left carries over whole.
    // At once, so that it comes while the others take; then a full key of main's own.
    limiter.set_quota(quota(5));
    assert!(limiter.acquire(&12, 0).is_allowed());
    let ledger = refunder.join().unwrap() + taker.join().unwrap();
    let left = limiter.peek(&HOT);
    assert_eq!(
        left,
        2 + ledger.refunded - ledger.taken,
        "carry-over: {left} left of 2 after {ledger:?}"
    );
}

#[test]
fn a_move_racing_with_takes_refunds_and_sweeps_loses_nothing() {
    check(
        "per key: move racing with takes",
        ITERATIONS,
        MAX_STEPS,
        a_move_loses_no_take_nor_refund,
    );
}

#[test]
fn mutant_moving_without_freezing_is_caught() {
    let caught = shuttle_tests::caught(Mutant::MoveWithoutFreezing, || {
        check(
            "mutant: move without freezing",
            ITERATIONS,
            MAX_STEPS,
            a_move_loses_no_take_nor_refund,
        )
    });
    let message = caught.expect("the mutant survived");
    assert!(
        message.contains("carry-over:"),
        "caught for another reason: {message}"
    );
}
