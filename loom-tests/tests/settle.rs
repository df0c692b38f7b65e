//! Reserve, then settle, model-checked: a settle that charges a key into debt races a
//! request on the same key and a whole eviction cycle (`evict_idle`, margin 0, the
//! clock frozen at the instant the key is full and forgettable). Whatever the
//! interleaving, the debt is neither lost nor forgotten: every token admitted and
//! every token charged is counted once, and the key afterwards owes exactly what
//! they passed its capacity by (model 21). Two mutants are rejected: a sweep whose
//! forgettability check ignores debt (it forgets the key in debt), and a sweep that
//! removes a full key without retiring its word first (a settle that found the word
//! before the removal charges a word no longer stored: the debt is lost).
//!
//! Preemption bound 1: every race here is one preemption deep (a settle between a
//! sweep's check and its retire, a settle between its lookup and its
//! compare-and-set), and bound 2 took 550,000 executions and up to two minutes, more
//! than CI's loom step can spare.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::check;
use std::time::Duration;
use turnstile::{ManualClock, Quota, TokenBucket};

const KEY: u64 = 5;

/// Capacity 2, one token every 10 ns: a settle of an estimate of 0 at 3 takes the
/// two tokens and owes one more (within the debt cap of 2), or, after the request
/// took one, owes two.
fn a_key_in_debt_is_never_forgotten() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(Quota::new(2, Duration::from_nanos(10)).unwrap())
        .clock(clock)
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build()
        .unwrap();
    // The key exists and is full: forgettable, until the settle lands.
    assert!(limiter.acquire(&KEY, 0).is_allowed());
    let limiter = Arc::new(limiter);
    let settler = {
        let limiter = limiter.clone();
        thread::spawn(move || limiter.settle(&KEY, 0, 3))
    };
    let taker = {
        let limiter = limiter.clone();
        thread::spawn(move || u64::from(limiter.try_acquire(&KEY)))
    };
    limiter.evict_idle();
    let settled = settler.join().unwrap();
    let admitted = taker.join().unwrap();
    // Always room for the whole charge: at most 2 held plus 2 owed.
    assert_eq!(
        (settled.charged, settled.forgiven),
        (3, 0),
        "settle: {settled:?}"
    );
    let taken = admitted + u64::from(settled.charged);
    // Nothing held, and one more token waits for the debt (`taken − 2`) and itself:
    // `taken − 1` intervals from the frozen clock's 0.
    assert_eq!(
        limiter.peek(&KEY),
        0,
        "debt forgotten: the key is full again"
    );
    let wait = limiter.acquire(&KEY, 1).retry_after();
    assert_eq!(
        wait,
        Some(Duration::from_nanos(10 * (taken - 1))),
        "debt lost: {admitted} admitted, {settled:?}"
    );
}

#[test]
fn model_21_a_settle_racing_a_request_and_a_sweep_keeps_its_debt() {
    check(
        "21 settle racing a take and a sweep",
        Some(1),
        a_key_in_debt_is_never_forgotten,
    );
}

/// The mutant's sweep retires a key that owes, as if it had nothing to remember.
#[test]
#[should_panic(expected = "debt forgotten")]
fn mutant_21_a_sweep_that_ignores_debt_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("21 mutant: retire ignoring debt", Some(1), || {
        with_mutant(Mutant::RetireIgnoringDebt, a_key_in_debt_is_never_forgotten)
    });
}

/// The mutant's sweep removes the full key without retiring its word: a settle that
/// found the word first charges it after it is gone.
#[test]
#[should_panic(expected = "debt")]
fn mutant_21r_a_sweep_that_removes_without_retiring_loses_the_debt() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("21 mutant: remove without retiring", Some(1), || {
        with_mutant(
            Mutant::RemoveWithoutRetiring,
            a_key_in_debt_is_never_forgotten,
        )
    });
}
