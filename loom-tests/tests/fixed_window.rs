//! The fixed window's word under the shared CAS loop, model-checked: two behaviours,
//! each also run against a mutant that loom must reject.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::check;
use loom_tests::harness::{
    KEY, Key, Mutant, Real, allowed, check_then_store, frozen_clock_admits_exactly_two, spawn,
};
use std::time::Duration;
use turnstile::loom_hooks::acquire_word;
use turnstile::loom_hooks::fixed_window::{FixedWindowRules, word};
use turnstile::{Decision, FixedWindow, ManualClock, Quota};

/// Refill interval of every model, in nanoseconds of the `ManualClock`; the window is
/// `limit × INTERVAL`.
const INTERVAL: u64 = 10;

fn quota(limit: u32) -> Quota {
    Quota::new(limit, Duration::from_nanos(INTERVAL)).unwrap()
}

fn real(limit: u32, clock: &ManualClock) -> Real<FixedWindow<u64, ManualClock>> {
    let limiter = FixedWindow::with_clock(quota(limit), clock.clone()).unwrap();
    Real::new(limiter, |l| word(l, &KEY).0)
}

fn mutant(
    limit: u32,
    clock: &ManualClock,
    protocol: fn(&AtomicU64, &FixedWindowRules, u64, u32) -> Decision,
) -> Mutant<FixedWindowRules> {
    Mutant::new(FixedWindowRules::new(&quota(limit)), clock, protocol)
}

// ---------------------------------------------------------------------------
// Model 1: take/take with the clock frozen — exactly the limit succeeds.

#[test]
fn model_1_frozen_clock_admits_exactly_the_limit() {
    check("fixed window 1: take/take, frozen clock", Some(4), || {
        frozen_clock_admits_exactly_two(real(2, &ManualClock::new()))
    });
}

#[test]
#[should_panic(expected = "frozen clock:")]
fn mutant_1_check_then_store_is_rejected() {
    check("fixed window 1 mutant: check then store", Some(4), || {
        frozen_clock_admits_exactly_two(mutant(2, &ManualClock::new(), check_then_store))
    });
}

// ---------------------------------------------------------------------------
// Model 2: takes racing with the window boundary — the new window starts from zero
// exactly once.

fn boundary_race_opens_one_window<K: Key>(make: fn(&ManualClock) -> K) {
    let clock = ManualClock::new();
    // Limit 1, spent in window 0; the clock jumps to the start of window 1.
    let key = Arc::new(make(&clock));
    assert!(key.acquire(1).is_allowed());
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || clock.set(Duration::from_nanos(INTERVAL)))
    };
    let takers = [
        spawn(&key, |k| allowed(k.acquire(1))),
        spawn(&key, |k| allowed(k.acquire(1))),
    ];
    ticker.join().unwrap();
    let taken: u32 = takers.map(|h| h.join().unwrap()).iter().sum();
    assert!(taken <= 1, "window boundary: {taken} allowed in window 1");
    assert_eq!(
        taken + key.peek(),
        1,
        "window boundary: taken + left != limit"
    );
    let rules = FixedWindowRules::new(&quota(1));
    let expected = if taken == 1 { (1, 1) } else { (0, 1) };
    assert_eq!(
        rules.unpack(key.word()),
        expected,
        "window boundary: invalid final word"
    );
}

#[test]
fn model_2_takes_racing_with_the_window_boundary() {
    check(
        "fixed window 2: takes racing with the boundary",
        Some(4),
        || boundary_race_opens_one_window(|clock| real(1, clock)),
    );
}

/// Mutant 2: the new window's reset written with a plain store before the take's
/// CAS — it can erase another thread's take in the new window.
fn reset_by_store(word: &AtomicU64, rules: &FixedWindowRules, now: u64, cost: u32) -> Decision {
    // Relaxed: the mutant's flaw is the plain store, not ordering.
    let current = word.load(Ordering::Relaxed);
    let (index, count) = rules.at(current, now);
    if rules.pack(index, count) != current {
        // Relaxed: as above.
        word.store(rules.pack(index, count), Ordering::Relaxed);
    }
    acquire_word(rules, word, now, cost).expect("no sweeper in this model")
}

#[test]
#[should_panic(expected = "window boundary:")]
fn mutant_2_reset_by_plain_store_is_rejected() {
    check(
        "fixed window 2 mutant: reset by plain store",
        Some(4),
        || boundary_race_opens_one_window(|clock| mutant(1, clock, reset_by_store)),
    );
}
