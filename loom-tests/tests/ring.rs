//! The ring of maps (`src/store/ring/`), model-checked through the public API: an
//! eviction cycle runs while two threads take from one key. Whatever the interleaving, exactly the tokens the key has
//! left are admitted, so a key has one state at a time:
//!
//! - model 18: the key carries information (one of its two tokens taken), so the
//!   cycle keeps it — the drain, or a request that meets it in the old map, relocates
//!   it into the young one. Mutants: a copy taken without freezing the old word (a
//!   take on it after the copy is lost), a drain that removes the state without
//!   copying it (the key comes back full).
//! - model 19: the key is new, created by the takers themselves while the ring
//!   rotates (the cycle's first two stages alone: rotate, close claims). Mutants: a new key that claims no place in the old map (an insertion
//!   begun before the rotation gives the key a second state there), an insertion that
//!   goes on in the generation it looked in after a rotation.
//! - model 20: a peek at a key the cycle relocates sees the key's tokens. Mutant: a
//!   peek that trusts a miss in both maps (the drain can move the key from the old
//!   map to the young one between the two lookups) and answers "full".
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::check;
use std::time::Duration;
use turnstile::loom_hooks::{Mutant, with_mutant};
use turnstile::{ManualClock, Quota, TokenBucket};

const KEY: u64 = 5;

/// The preemption bounds of these models, each rejecting its mutants within it: the
/// whole cycle of model 18 takes about 27 s at 2 on the 2-core VM (3 would take tens
/// of minutes); the rotation of model 19 about 2 s at 2 (at 3 it passes too, in
/// about 22 s alone, kept out of CI for its time).
const CYCLE_PREEMPTIONS: usize = 2;
const ROTATION_PREEMPTIONS: usize = 2;
/// A peek is short: model 20's whole cycle at 4 takes about 2 s.
const PEEK_PREEMPTIONS: usize = 4;

/// A bucket that never refills within the model (the clock stands), with margin 0
/// and eviction by hand, where [`KEY`] has one token left: a bucket of two with one
/// taken before the model's threads start (`existing`), or a bucket of one whose key
/// does not exist yet. Two threads take one token each while this thread runs
/// `cycle`; exactly one may be admitted (a key with two states admits two).
fn a_cycle_racing_two_takes_admits_one(existing: bool, cycle: fn(&TokenBucket<u64, ManualClock>)) {
    let capacity = 1 + u32::from(existing);
    let limiter =
        TokenBucket::<u64>::builder(Quota::new(capacity, Duration::from_secs(1)).unwrap())
            .clock(ManualClock::new())
            .eviction_margin(Duration::ZERO)
            .manual_eviction()
            .build()
            .unwrap();
    if existing {
        assert!(limiter.acquire(&KEY, 1).is_allowed());
    }
    let limiter = Arc::new(limiter);
    let takers = [0, 1].map(|_| {
        let limiter = limiter.clone();
        thread::spawn(move || u32::from(limiter.try_acquire(&KEY)))
    });
    cycle(&limiter);
    let allowed: u32 = takers.map(|t| t.join().unwrap()).iter().sum();
    assert_eq!(
        allowed, 1,
        "ring: {allowed} allowed from a key with 1 token left"
    );
}

fn kept_key() {
    a_cycle_racing_two_takes_admits_one(true, |limiter| {
        limiter.evict_idle();
    });
}

fn new_key() {
    a_cycle_racing_two_takes_admits_one(false, turnstile::loom_hooks::rotate);
}

#[test]
fn model_18_a_kept_key_relocated_admits_exactly_what_is_left() {
    check(
        "18 relocation racing two takes",
        Some(CYCLE_PREEMPTIONS),
        kept_key,
    );
}

#[test]
#[should_panic(expected = "ring:")]
fn mutant_18_copying_without_freezing_is_rejected() {
    check(
        "18 mutant: copy without freezing",
        Some(CYCLE_PREEMPTIONS),
        || with_mutant(Mutant::CopyWithoutFreezing, kept_key),
    );
}

#[test]
#[should_panic(expected = "ring:")]
fn mutant_18_draining_without_copying_is_rejected() {
    check(
        "18 mutant: drain without copy",
        Some(CYCLE_PREEMPTIONS),
        || with_mutant(Mutant::DrainWithoutCopy, kept_key),
    );
}

#[test]
fn model_19_a_new_key_at_a_rotation_has_one_state() {
    check(
        "19 new key racing a rotation",
        Some(ROTATION_PREEMPTIONS),
        new_key,
    );
}

#[test]
#[should_panic(expected = "ring:")]
fn mutant_19_a_new_key_claiming_nothing_is_rejected() {
    check("19 mutant: no claim", Some(ROTATION_PREEMPTIONS), || {
        with_mutant(Mutant::NoClaim, new_key)
    });
}

#[test]
#[should_panic(expected = "ring:")]
fn mutant_19_a_stale_insertion_is_rejected() {
    check(
        "19 mutant: stale insertion",
        Some(ROTATION_PREEMPTIONS),
        || with_mutant(Mutant::StaleInsertion, new_key),
    );
}

/// A key with one of its two tokens left is peeked at while this thread runs a whole
/// eviction cycle, which relocates it: the peek sees the key's one token, wherever the
/// key is at that moment — never a full bucket, as if the key were new.
fn a_peek_during_a_relocation_sees_the_key() {
    let limiter = TokenBucket::<u64>::builder(Quota::new(2, Duration::from_secs(1)).unwrap())
        .clock(ManualClock::new())
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build()
        .unwrap();
    assert!(limiter.acquire(&KEY, 1).is_allowed());
    let limiter = Arc::new(limiter);
    let peeker = {
        let limiter = limiter.clone();
        thread::spawn(move || limiter.peek(&KEY))
    };
    limiter.evict_idle();
    let seen = peeker.join().unwrap();
    assert_eq!(seen, 1, "ring: a peek during a relocation saw {seen} of 1");
}

#[test]
fn model_20_a_peek_during_a_relocation_sees_the_key() {
    check(
        "20 peek racing a relocation",
        Some(PEEK_PREEMPTIONS),
        a_peek_during_a_relocation_sees_the_key,
    );
}

#[test]
#[should_panic(expected = "ring:")]
fn mutant_20_trusting_the_first_miss_is_rejected() {
    check(
        "20 mutant: trust the first miss",
        Some(PEEK_PREEMPTIONS),
        || {
            with_mutant(
                Mutant::TrustFirstMiss,
                a_peek_during_a_relocation_sees_the_key,
            )
        },
    );
}
