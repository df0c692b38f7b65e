//! The sliding window counter's word under the shared CAS loop, model-checked: two
//! behaviours, each also run against a mutant that loom must reject.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::check;
use loom_tests::harness::{
    KEY, Key, Mutant, Real, allowed, frozen_clock_admits_exactly_two, spawn, stale_retry,
};
use std::time::Duration;
use turnstile::loom_hooks::acquire_word;
use turnstile::loom_hooks::sliding_window::{SlidingWindowRules, word};
use turnstile::{Decision, ManualClock, Quota, SlidingWindowCounter};

/// Refill interval of every model, in nanoseconds of the `ManualClock`; the window is
/// `limit × INTERVAL`. A microsecond: the word holds the window index beside two
/// counts in 63 bits, so a window must be long enough for its index to leave room
/// (a 20 ns window's index alone takes 60 bits).
const INTERVAL: u64 = 1_000;

fn quota(limit: u32) -> Quota {
    Quota::new(limit, Duration::from_nanos(INTERVAL)).unwrap()
}

fn rules(limit: u32) -> SlidingWindowRules {
    SlidingWindowRules::new(&quota(limit)).unwrap()
}

fn real(limit: u32, clock: &ManualClock) -> Real<SlidingWindowCounter<u64, ManualClock>> {
    let limiter = SlidingWindowCounter::with_clock(quota(limit), clock.clone()).unwrap();
    Real::new(limiter, |l| word(l, &KEY).0)
}

fn mutant(
    limit: u32,
    clock: &ManualClock,
    protocol: fn(&AtomicU64, &SlidingWindowRules, u64, u32) -> Decision,
) -> Mutant<SlidingWindowRules> {
    Mutant::new(rules(limit), clock, protocol)
}

// ---------------------------------------------------------------------------
// Model 1: take/take with the clock frozen — exactly the limit succeeds.

#[test]
fn model_1_frozen_clock_admits_exactly_the_limit() {
    check("sliding window 1: take/take, frozen clock", Some(4), || {
        frozen_clock_admits_exactly_two(real(2, &ManualClock::new()))
    });
}

#[test]
#[should_panic(expected = "frozen clock:")]
fn mutant_1_stale_retry_is_rejected() {
    check("sliding window 1 mutant: stale retry", Some(4), || {
        frozen_clock_admits_exactly_two(mutant(2, &ManualClock::new(), stale_retry))
    });
}

// ---------------------------------------------------------------------------
// Model 2: takes racing with the roll into the next window — the current count
// becomes the previous one exactly once, and the weighted room is taken once.

fn roll_race_keeps_the_previous_count<K: Key>(make: fn(&ManualClock) -> K) {
    let clock = ManualClock::new();
    // Limit 2 per 20 ns, spent at 0. At 30 ns (window 1, one interval in) the 2 of
    // window 0 weigh ⌈2 × 1/2⌉ = 1: room for one.
    let key = Arc::new(make(&clock));
    assert!(key.acquire(2).is_allowed());
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || clock.set(Duration::from_nanos(3 * INTERVAL)))
    };
    let takers = [
        spawn(&key, |k| allowed(k.acquire(1))),
        spawn(&key, |k| allowed(k.acquire(1))),
    ];
    ticker.join().unwrap();
    let taken: u32 = takers.map(|h| h.join().unwrap()).iter().sum();
    assert!(taken <= 1, "window roll: {taken} allowed with room for 1");
    assert_eq!(taken + key.peek(), 1, "window roll: taken + left != room");
    let expected = if taken == 1 { (1, 2, 1) } else { (0, 0, 2) };
    assert_eq!(
        rules(2).unpack(key.word()),
        expected,
        "window roll: invalid final word"
    );
}

#[test]
fn model_2_takes_racing_with_the_window_roll() {
    check(
        "sliding window 2: takes racing with the roll",
        Some(4),
        || roll_race_keeps_the_previous_count(|clock| real(2, clock)),
    );
}

/// Mutant 2: the roll into the new window written with a plain store before the
/// take's CAS — it can erase another thread's take in the new window.
fn roll_by_store(word: &AtomicU64, rules: &SlidingWindowRules, now: u64, cost: u32) -> Decision {
    // Relaxed: the mutant's flaw is the plain store, not ordering.
    let current = word.load(Ordering::Relaxed);
    let at = rules.at(current, now);
    let rolled = rules.pack(at.index, at.previous, at.current);
    if rolled != current {
        // Relaxed: as above.
        word.store(rolled, Ordering::Relaxed);
    }
    acquire_word(rules, word, now, cost).expect("no sweeper in this model")
}

#[test]
#[should_panic(expected = "window roll:")]
fn mutant_2_roll_by_plain_store_is_rejected() {
    check(
        "sliding window 2 mutant: roll by plain store",
        Some(4),
        || roll_race_keeps_the_previous_count(|clock| mutant(2, clock, roll_by_store)),
    );
}
