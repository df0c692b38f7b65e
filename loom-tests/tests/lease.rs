//! The leased Redis limiter's per-key word (`src/redis/lease/hold.rs`), model-checked: the
//! tokens a fetch adds are each served once, or reported expired, or still held —
//! never served twice, never revived after their expiry — while requests take, the
//! one fetch in flight adds and a refused policy's refund gives back. Each model also runs against a mutant loom must reject.
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::check;
use turnstile::loom_hooks::lease::{add, drop_expired, give_back, held, load, pack, take};

/// The tick the models' first lease expires at, and the later one a fetch gives.
const EXPIRY: u64 = 10;
const LATER: u64 = 20;

/// How requests take from a word: turnstile's loop, or a mutant.
type Take = fn(&AtomicU64, u32, u64) -> Result<u32, u32>;
/// How a fetch adds to a word: turnstile's loop, or a mutant.
type Add = fn(&AtomicU64, u32, u64, u64) -> (u32, u32);

fn real_take(word: &AtomicU64, cost: u32, now: u64) -> Result<u32, u32> {
    take(word, cost, now)
}

fn real_add(word: &AtomicU64, granted: u32, until: u64, now: u64) -> (u32, u32) {
    let added = add(word, granted, until, now);
    (added.held, added.expired)
}

/// Mutant: check the tokens, then store what is left — two requests can both take
/// the last token.
fn take_check_then_store(word: &AtomicU64, cost: u32, now: u64) -> Result<u32, u32> {
    // Relaxed: the mutant's flaw is the missing read-modify-write, not ordering.
    let have = held(word.load(Ordering::Relaxed), now);
    if have < cost {
        return Err(have);
    }
    // Relaxed: as above.
    word.store(pack(have - cost, EXPIRY), Ordering::Relaxed);
    Ok(have - cost)
}

/// Mutant: a fetch that reads the word, then stores the sum — a take in between is
/// undone, and its token served again.
fn add_by_plain_store(word: &AtomicU64, granted: u32, until: u64, now: u64) -> (u32, u32) {
    // Relaxed: as in `take_check_then_store`.
    let current = word.load(Ordering::Relaxed);
    let have = held(current, now);
    // Relaxed: as above.
    word.store(pack(have + granted, until), Ordering::Relaxed);
    (have + granted, 0)
}

/// Model 1: a lease of one token, two requests taking one each, and a fetch adding
/// one: exactly two are served between the requests and what is left held.
fn each_token_served_once(take: Take, add: Add) {
    let word = Arc::new(AtomicU64::new(pack(1, EXPIRY)));
    let requests: Vec<_> = (0..2)
        .map(|_| {
            let word = word.clone();
            thread::spawn(move || u32::from(take(&word, 1, 0).is_ok()))
        })
        .collect();
    let (_, expired) = add(&word, 1, LATER, 0);
    let served: u32 = requests.into_iter().map(|r| r.join().unwrap()).sum();
    let left = load(&word, 0);
    assert_eq!(expired, 0);
    assert_eq!(
        served + left,
        2,
        "served once: {served} served and {left} held of 2 tokens"
    );
}

/// Model 2: a lease that has expired, a request taking, a fetch adding one, and the
/// sweep dropping expired tokens: the two expired tokens are reported exactly once
/// and never served; only the new one can be.
fn expired_tokens_are_never_served(take: Take) {
    let word = Arc::new(AtomicU64::new(pack(2, EXPIRY)));
    let now = EXPIRY;
    let request = {
        let word = word.clone();
        thread::spawn(move || u32::from(take(&word, 1, now).is_ok()))
    };
    let sweep = {
        let word = word.clone();
        thread::spawn(move || drop_expired(&word, now))
    };
    let (_, expired_by_add) = real_add(&word, 1, LATER, now);
    let served = request.join().unwrap();
    let expired = expired_by_add + sweep.join().unwrap();
    let left = load(&word, now);
    assert_eq!(expired, 2, "expired: reported {expired} of 2");
    assert_eq!(
        served + left,
        1,
        "expired: {served} served, {left} held of 1"
    );
}

#[test]
fn model_1_takes_and_a_fetch_serve_each_token_once() {
    check("lease 1 take/take/add", Some(3), || {
        each_token_served_once(real_take, real_add)
    });
}

#[test]
#[should_panic(expected = "served once:")]
fn mutant_1a_take_by_check_then_store_is_rejected() {
    check("lease 1 mutant: take by check then store", Some(3), || {
        each_token_served_once(take_check_then_store, real_add)
    });
}

#[test]
#[should_panic(expected = "served once:")]
fn mutant_1b_add_by_plain_store_is_rejected() {
    check("lease 1 mutant: add by plain store", Some(3), || {
        each_token_served_once(real_take, add_by_plain_store)
    });
}

#[test]
fn model_2_expired_tokens_are_reported_once_and_never_served() {
    check("lease 2 expired take/sweep/add", Some(3), || {
        expired_tokens_are_never_served(real_take)
    });
}

/// Mutant: a take that ignores the expiry (reads the token bits as held).
fn take_ignoring_expiry(word: &AtomicU64, cost: u32, _now: u64) -> Result<u32, u32> {
    take(word, cost, 0)
}

#[test]
#[should_panic(expected = "expired:")]
fn mutant_2_take_ignoring_the_expiry_is_rejected() {
    check("lease 2 mutant: take ignoring expiry", Some(3), || {
        expired_tokens_are_never_served(take_ignoring_expiry)
    });
}

/// How a refund gives back to a word: turnstile's loop, or a mutant.
type GiveBack = fn(&AtomicU64, u32, u32, u64) -> u32;

/// Mutant: a refund that reads the word, then stores the sum — a take in between is
/// undone, and its token served again.
fn give_back_by_plain_store(word: &AtomicU64, cost: u32, cap: u32, now: u64) -> u32 {
    // Relaxed: as in `take_check_then_store`.
    let current = word.load(Ordering::Relaxed);
    let have = held(current, now);
    let back = cost.min(cap.saturating_sub(have));
    // Relaxed: as above.
    word.store(pack(have + back, EXPIRY), Ordering::Relaxed);
    back
}

/// Model 3: a lease of one token, a request taking it, and a refund of a token an
/// earlier request took and did not use (cap 2), racing: every token is served once or
/// held, never both, and the word never holds more than the cap.
fn a_refund_racing_a_take_serves_each_token_once(give_back: GiveBack) {
    let word = Arc::new(AtomicU64::new(pack(1, EXPIRY)));
    let request = {
        let word = word.clone();
        thread::spawn(move || u32::from(take(&word, 1, 0).is_ok()))
    };
    let back = give_back(&word, 1, 2, 0);
    let served = request.join().unwrap();
    let left = load(&word, 0);
    assert!(left <= 2, "refund: {left} held, above the cap of 2");
    assert_eq!(
        served + left,
        1 + back,
        "refund: {served} served and {left} held of {} tokens",
        1 + back
    );
}

#[test]
fn model_3_a_refund_racing_a_take_serves_each_token_once() {
    check("lease 3 take/refund", None, || {
        a_refund_racing_a_take_serves_each_token_once(give_back)
    });
}

#[test]
#[should_panic(expected = "refund:")]
fn mutant_3_refund_by_plain_store_is_rejected() {
    check("lease 3 mutant: refund by plain store", None, || {
        a_refund_racing_a_take_serves_each_token_once(give_back_by_plain_store)
    });
}
