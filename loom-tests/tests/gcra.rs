//! GCRA's word under the shared CAS loop, model-checked: three behaviours, each also
//! run against a mutant that loom must reject.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::check;
use loom_tests::harness::{
    KEY, Key, Mutant, Real, allowed, frozen_clock_admits_exactly_two, spawn, stale_retry,
};
use std::time::Duration;
use turnstile::loom_hooks::WordAlgorithm;
use turnstile::loom_hooks::gcra::{GcraRules, word};
use turnstile::{Decision, Gcra, ManualClock, Quota};

/// Emission interval of every model, in nanoseconds of the `ManualClock`.
const INTERVAL: u64 = 10;

fn quota(capacity: u32) -> Quota {
    Quota::new(capacity, Duration::from_nanos(INTERVAL)).unwrap()
}

fn real(capacity: u32, clock: &ManualClock) -> Real<Gcra<u64, ManualClock>> {
    let limiter = Gcra::with_clock(quota(capacity), clock.clone()).unwrap();
    Real::new(limiter, |l| word(l, &KEY).0)
}

fn mutant(
    capacity: u32,
    clock: &ManualClock,
    protocol: fn(&AtomicU64, &GcraRules, u64, u32) -> Decision,
) -> Mutant<GcraRules> {
    Mutant::new(GcraRules::new(&quota(capacity)).unwrap(), clock, protocol)
}

// ---------------------------------------------------------------------------
// Model 1: take/take with the clock frozen — exactly the burst succeeds.

#[test]
fn model_1_frozen_clock_admits_exactly_the_burst() {
    check("gcra 1: take/take, frozen clock", Some(4), || {
        frozen_clock_admits_exactly_two(real(2, &ManualClock::new()))
    });
}

/// Mutant 1: every access atomic, but the check and the update are two of them — a
/// load to decide, then `fetch_add` of the cost: all three pass the check.
fn check_then_add(word: &AtomicU64, rules: &GcraRules, now: u64, cost: u32) -> Decision {
    // Relaxed: the mutant's flaw is the split read-modify-write, not ordering.
    let current = word.load(Ordering::Relaxed);
    let (new, decision) = WordAlgorithm::acquire(rules, current, now, cost);
    if new != current {
        // Relaxed: as above.
        word.fetch_add(new - current, Ordering::Relaxed);
    }
    decision
}

#[test]
#[should_panic(expected = "frozen clock:")]
fn mutant_1_check_then_add_is_rejected() {
    check("gcra 1 mutant: check, then fetch_add", Some(4), || {
        frozen_clock_admits_exactly_two(mutant(2, &ManualClock::new(), check_then_add))
    });
}

// ---------------------------------------------------------------------------
// Model 2: takes racing with refill — at most the tokens accrued, none lost.

fn refill_race_loses_and_invents_nothing<K: Key>(make: fn(&ManualClock) -> K) {
    let clock = ManualClock::new();
    // Capacity 3, drained at 0 (TAT 30): two intervals accrue 2 tokens, uncapped.
    let key = Arc::new(make(&clock));
    assert!(key.acquire(3).is_allowed());
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || {
            clock.advance(Duration::from_nanos(INTERVAL));
            clock.advance(Duration::from_nanos(INTERVAL));
        })
    };
    let takers = [
        spawn(&key, |k| allowed(k.acquire(1))),
        spawn(&key, |k| allowed(k.acquire(1))),
    ];
    ticker.join().unwrap();
    let taken: u32 = takers.map(|h| h.join().unwrap()).iter().sum();
    assert!(
        taken <= 2,
        "refill race: {taken} allowed, 2 intervals elapsed"
    );
    assert_eq!(
        taken + key.peek(),
        2,
        "refill race: tokens taken + left != tokens accrued"
    );
    assert_eq!(
        key.word(),
        3 * INTERVAL + u64::from(taken) * INTERVAL,
        "refill race: invalid final TAT"
    );
}

#[test]
fn model_2_takes_racing_with_refill() {
    check("gcra 2: takes racing with refill", Some(4), || {
        refill_race_loses_and_invents_nothing(|clock| real(3, clock))
    });
}

#[test]
#[should_panic(expected = "refill race:")]
fn mutant_2_stale_retry_is_rejected() {
    check("gcra 2 mutant: stale retry", Some(4), || {
        refill_race_loses_and_invents_nothing(|clock| mutant(3, clock, stale_retry))
    });
}

// ---------------------------------------------------------------------------
// Model 3: an oversized request racing with one that fits — the denial changes
// nothing, so the one that fits is admitted.

fn a_denial_never_blocks_a_request_that_fits<K: Key>(make: fn(&ManualClock) -> K) {
    // Capacity 2 with one token left, clock frozen: a cost of 2 can never pass; a
    // cost of 1 always can, whatever the interleaving.
    let key = Arc::new(make(&ManualClock::new()));
    assert!(key.acquire(1).is_allowed());
    let heavy = spawn(&key, |k| k.acquire(2));
    let light = key.acquire(1);
    let heavy = heavy.join().unwrap();
    assert!(
        !heavy.is_allowed(),
        "denial: a cost of 2 passed with 1 token"
    );
    assert!(
        light.is_allowed(),
        "denial: the request that fits was denied ({light:?})"
    );
    assert_eq!(key.peek(), 0, "denial: tokens left after both");
}

#[test]
fn model_3_a_denial_changes_nothing() {
    check("gcra 3: oversized vs fitting request", None, || {
        a_denial_never_blocks_a_request_that_fits(|clock| real(2, clock))
    });
}

/// Mutant 3: the lock-free shortcut that adds first and undoes on denial — the
/// oversized request's reservation is visible until it is undone, so a request that
/// fits can be denied meanwhile.
fn add_then_undo(word: &AtomicU64, rules: &GcraRules, now: u64, cost: u32) -> Decision {
    let reserve = u64::from(cost) * rules.interval();
    // Relaxed: the mutant's flaw is the visible reservation, not ordering.
    let before = word.fetch_add(reserve, Ordering::Relaxed);
    let (_, decision) = WordAlgorithm::acquire(rules, before, now, cost);
    if !decision.is_allowed() {
        // Relaxed: as above.
        word.fetch_sub(reserve, Ordering::Relaxed);
    }
    decision
}

#[test]
#[should_panic(expected = "denial:")]
fn mutant_3_add_then_undo_is_rejected() {
    check("gcra 3 mutant: add, then undo", None, || {
        a_denial_never_blocks_a_request_that_fits(|clock| mutant(2, clock, add_then_undo))
    });
}
