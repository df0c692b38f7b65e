//! Moving keys to a new quota, model-checked against a store exactly as weak as its
//! contract (closures outside any lock and run again, `retain` asking twice):
//! - model 8: two threads take while the limiter is reconfigured; every token is
//!   either taken or left — a move that replaces the entry without freezing its
//!   state first, so a concurrent take is lost, is rejected;
//! - model 9: a reading that lags the key's own history, met by a move, invents no
//!   allowance — a move at the mover's raw reading is rejected — and a move to the same
//!   quota changes nothing — a move that rebuilds unchanged rules is rejected;
//! - model 10: a sweep that retires a key and meets it again after a
//!   reconfiguration leaves nothing stuck, on the ring (a drain) and on the word store
//!   (a sweep in place) — on the word store, a move that shares forgetting's retired
//!   marker (so "retired and outdated" reads as "being moved") livelocks and is
//!   rejected;
//! - model 13: a peek racing with a move sees the key's own allowance — the word
//!   store's lock-free lookup may miss a key while a move replaces its entry, and a
//!   peek that trusts that miss (answering "a new key: full") is rejected. (The ring
//!   replaces an entry in one step, so its lookups have no such miss.)
//! - model 14: the same miss at the `max_keys` cap, on the word store: a request for a
//!   stored key is answered by the key's state — one that trusts the miss and refuses
//!   the key as a new one (`Overflow`) is rejected.
//! - model 22: requests of two configurations (a reloaded file's checks, each
//!   carrying its own quota) race on one key: the later configuration's moves it to
//!   the rules it already has (its state kept), the earlier one's to new rules; the
//!   key ends at the later configuration and exactly the one token it had is taken —
//!   a mover that does not check that the entry it froze is behind its configuration,
//!   so it takes the key back to the earlier one, is rejected.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::check;
use std::time::Duration;
use turnstile::loom_hooks::{Mutant, configuration, pin_quota, with_mutant};
use turnstile::{ManualClock, Overflow, Quota, RateLimiter, TokenBucket};

const KEY: u64 = 5;

/// `capacity` tokens, one every 10 ns.
fn quota(capacity: u32) -> Quota {
    Quota::new(capacity, Duration::from_nanos(10)).unwrap()
}

fn reconfiguring_loses_no_take() {
    let limiter = TokenBucket::<u64>::builder(quota(3))
        .clock(ManualClock::new())
        .build_reconfigurable();
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
    check(
        "8 reconfiguration racing with takes",
        Some(4),
        reconfiguring_loses_no_take,
    );
}

#[test]
#[should_panic(expected = "carry-over:")]
fn mutant_8_moving_without_freezing_is_rejected() {
    check("8 mutant: move without freezing", Some(4), || {
        with_mutant(Mutant::MoveWithoutFreezing, reconfiguring_loses_no_take)
    });
}

/// A key that took its only token at 50 ns is reconfigured to `new` while a core
/// whose clock lags asks at 5 ns, then at 51 ns: both are denied, as without the
/// reconfiguration (the key is full again at 60 ns, so no reading before then has a
/// token).
fn lagging_readings_invent_nothing(new: Quota) {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(1))
        .clock(clock.clone())
        .build_reconfigurable();
    clock.set(Duration::from_nanos(50));
    assert!(limiter.acquire(&KEY, 1).is_allowed());
    let limiter = Arc::new(limiter);
    let lagging = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            clock.set(Duration::from_nanos(5));
            let early = limiter.try_acquire(&KEY);
            clock.set(Duration::from_nanos(51));
            u32::from(early) + u32::from(limiter.try_acquire(&KEY))
        })
    };
    limiter.set_quota(new);
    let admitted = lagging.join().unwrap();
    assert_eq!(
        admitted, 0,
        "lagging move: {admitted} admitted before 60 ns"
    );
}

#[test]
fn model_9_a_move_at_a_lagging_reading_invents_no_allowance() {
    check("9 lagging move, same quota", Some(3), || {
        lagging_readings_invent_nothing(quota(1))
    });
    check("9 lagging move, larger quota", Some(3), || {
        lagging_readings_invent_nothing(quota(2))
    });
}

#[test]
#[should_panic(expected = "lagging move:")]
fn mutant_9_moving_at_the_raw_reading_is_rejected() {
    check("9 mutant: move at the raw reading", Some(3), || {
        with_mutant(Mutant::MoveAtRawReading, || {
            lagging_readings_invent_nothing(quota(2))
        })
    });
}

/// A key drained at 50 ns (2 tokens, one per 10 ns) is peeked at 70 ns while the
/// limiter is set to the same quota, then asked at a lagging 55 ns: denied, as without
/// the reconfiguration (full again at 70 ns, so at 55 ns it holds nothing yet). A key
/// rebuilt at 70 ns would be full there, so a new one — full at every reading.
fn an_unchanged_quota_changes_nothing() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(2))
        .clock(clock.clone())
        .word_store()
        .build_reconfigurable();
    clock.set(Duration::from_nanos(50));
    assert!(limiter.acquire(&KEY, 2).is_allowed());
    let limiter = Arc::new(limiter);
    let asker = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            clock.set(Duration::from_nanos(70));
            limiter.peek(&KEY);
            clock.set(Duration::from_nanos(55));
            limiter.try_acquire(&KEY)
        })
    };
    limiter.set_quota(quota(2));
    let admitted = asker.join().unwrap();
    assert!(!admitted, "unchanged quota: a lagging request was admitted");
}

#[test]
fn model_9_an_unchanged_quota_changes_nothing() {
    check(
        "9 unchanged quota",
        Some(3),
        an_unchanged_quota_changes_nothing,
    );
}

#[test]
#[should_panic(expected = "unchanged quota:")]
fn mutant_9_rebuilding_unchanged_rules_is_rejected() {
    check("9 mutant: rebuild unchanged rules", Some(3), || {
        with_mutant(
            Mutant::MoveUnchangedRules,
            an_unchanged_quota_changes_nothing,
        )
    });
}

/// A full key is swept (margin 0) while the limiter is reconfigured to a larger
/// quota and the key asked for a token: the request returns, allowed, and the key
/// then holds the new quota's capacity less that token.
fn a_sweep_meeting_a_move_leaves_nothing_stuck(word_store: bool) {
    let builder = TokenBucket::<u64>::builder(quota(1))
        .clock(ManualClock::new())
        .eviction_margin(Duration::ZERO)
        .manual_eviction();
    let limiter = if word_store {
        builder.word_store().build_reconfigurable()
    } else {
        builder.build_reconfigurable()
    };
    assert!(limiter.acquire(&KEY, 0).is_allowed()); // exists, full: forgettable
    let limiter = Arc::new(limiter);
    let sweeper = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            limiter.evict_idle();
        })
    };
    limiter.set_quota(quota(2));
    let allowed = limiter.try_acquire(&KEY);
    sweeper.join().unwrap();
    let left = limiter.peek(&KEY);
    assert!(
        allowed && left == 1,
        "sweep and move: {allowed}, {left} left"
    );
}

#[test]
fn model_10_a_sweep_meeting_a_move_leaves_nothing_stuck() {
    check("10 sweep meeting a move", Some(3), || {
        a_sweep_meeting_a_move_leaves_nothing_stuck(false)
    });
    check("10w sweep meeting a move, word store", Some(3), || {
        a_sweep_meeting_a_move_leaves_nothing_stuck(true)
    });
}

#[test]
#[should_panic(expected = "Model exceeded maximum number of branches")]
fn mutant_10_one_marker_for_forgetting_and_moving_is_rejected() {
    check("10 mutant: one marker", Some(3), || {
        with_mutant(Mutant::SharedMarker, || {
            a_sweep_meeting_a_move_leaves_nothing_stuck(true)
        })
    });
}

/// A key drained at 50 ns (2 tokens, one per 10 ns) is moved to a larger capacity at
/// the same rate by a request, the clock standing still, while another thread peeks
/// at it: the key has nothing before, during and after the move, so the request is
/// denied and the peek answers 0.
fn a_peek_during_a_move_sees_the_key() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(2))
        .clock(clock.clone())
        .word_store()
        .build_reconfigurable();
    clock.set(Duration::from_nanos(50));
    assert!(limiter.acquire(&KEY, 2).is_allowed());
    // Published now; the key moves on its next request (or peek).
    limiter.set_quota(quota(3));
    let limiter = Arc::new(limiter);
    let peeker = {
        let limiter = limiter.clone();
        thread::spawn(move || limiter.peek(&KEY))
    };
    let admitted = limiter.try_acquire(&KEY);
    let seen = peeker.join().unwrap();
    assert!(
        !admitted,
        "a request to a drained key was admitted by its move"
    );
    assert_eq!(seen, 0, "peek during a move: {seen} seen on a drained key");
}

#[test]
fn model_13_a_peek_during_a_move_sees_the_key() {
    check(
        "13 peek during a move",
        Some(3),
        a_peek_during_a_move_sees_the_key,
    );
}

#[test]
#[should_panic(expected = "peek during a move:")]
fn mutant_13_trusting_the_first_miss_is_rejected() {
    check("13 mutant: trust the first miss", Some(3), || {
        with_mutant(Mutant::TrustFirstMiss, a_peek_during_a_move_sees_the_key)
    });
}

/// A limiter capped at one key holds a key with tokens left, and moves it to a larger
/// capacity (a request does, the clock standing still) while a second request asks
/// for the same key: that key is stored, so neither request is refused as a new key
/// would be at the cap.
fn a_request_at_the_cap_during_a_move_finds_the_key() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(4))
        .clock(clock.clone())
        .max_keys(1, Overflow::Deny)
        .word_store()
        .build_reconfigurable();
    clock.set(Duration::from_nanos(50));
    assert!(limiter.acquire(&KEY, 1).is_allowed()); // stored, 3 left; the map is full
    limiter.set_quota(quota(5));
    let limiter = Arc::new(limiter);
    let other = {
        let limiter = limiter.clone();
        thread::spawn(move || limiter.acquire(&KEY, 1))
    };
    let mover = limiter.acquire(&KEY, 1);
    let other = other.join().unwrap();
    assert!(
        mover.is_allowed() && other.is_allowed(),
        "request at the cap during a move: {mover:?}, {other:?}"
    );
}

#[test]
fn model_14_a_request_at_the_cap_during_a_move_finds_the_key() {
    check(
        "14 request at the cap during a move",
        Some(3),
        a_request_at_the_cap_during_a_move_finds_the_key,
    );
}

#[test]
#[should_panic(expected = "request at the cap during a move:")]
fn mutant_14_trusting_the_miss_at_the_cap_is_rejected() {
    check("14 mutant: trust the miss at the cap", Some(3), || {
        with_mutant(
            Mutant::TrustFirstMiss,
            a_request_at_the_cap_during_a_move_finds_the_key,
        )
    });
}

/// A key at configuration 0 (capacity 2, 1 left) meets a request of configuration 1
/// (capacity 5: a move to new rules) and one of configuration 2 (capacity 2 again: a
/// move to the same rules, its state kept) at once. Whichever lands first, the key
/// ends at configuration 2 (configurations only grow), and its one token is taken
/// exactly once.
fn two_configurations_move_a_key_forward_only() {
    let limiter = std::sync::Arc::new(
        TokenBucket::<u64>::builder(quota(2))
            .clock(ManualClock::new())
            .build_reconfigurable(),
    );
    assert!(limiter.acquire(&KEY, 1).is_allowed()); // configuration 0, 1 left
    let earlier = pin_quota(&limiter, quota(5));
    let later = Arc::new(pin_quota(&limiter, quota(2)));
    let mover = {
        let later = later.clone();
        thread::spawn(move || u32::from(later.acquire(&KEY, 1).is_allowed()))
    };
    let taken = u32::from(earlier.acquire(&KEY, 1).is_allowed()) + mover.join().unwrap();
    assert_eq!(
        configuration(&limiter, &KEY),
        Some(2),
        "forward only: the key went back to an earlier configuration"
    );
    assert_eq!((taken, later.peek(&KEY)), (1, 0), "one token, taken once");
}

#[test]
fn model_22_two_configurations_move_a_key_forward_only() {
    check(
        "22 two configurations move a key forward only",
        Some(3),
        two_configurations_move_a_key_forward_only,
    );
}

#[test]
#[should_panic(expected = "forward only:")]
fn mutant_22_moving_a_key_backward_is_rejected() {
    check("22 mutant: move backward", Some(3), || {
        with_mutant(
            Mutant::MoveBackward,
            two_configurations_move_a_key_forward_only,
        )
    });
}
