//! The keyed limiter on each store, whole: two or three threads take, peek and refund
//! on one key while each inserts a full key of its own, so that the limiter's own
//! sweeper thread is asked for sweeps and forgets keys while the requests run. On a
//! frozen clock nothing refills, so every schedule must balance the same ledger:
//! - exactly the capacity is admitted of more requests than that;
//! - what the key has left at the end is its capacity, less what allowed requests
//!   took, plus what was refunded;
//! - the sweeper thread, once asked, runs and never forgets the drained key; a request
//!   that wakes the thread before it sets what it wants (mutant `WakeFirst`) loses
//!   the sweep, and the wait for it deadlocks.
#![cfg(turnstile_shuttle)]

use shuttle::thread;
use shuttle_tests::check;
use shuttle_tests::keyed::{HOT, Ledger, Store, SweepWatch, limiter, limiter_on};
use std::sync::Arc;
use turnstile::shuttle_hooks::Mutant;

/// Schedules per model and store.
const ITERATIONS: usize = 5000;
/// Far more steps than any schedule of these models takes; only a thread spinning on
/// what nobody will change reaches it.
const MAX_STEPS: usize = 20_000;

/// Three requests of one token for a key of two, from three threads that each also
/// insert a full key of their own: exactly two are admitted.
fn capacity_is_admitted_exactly(store: Store) {
    let limiter = Arc::new(limiter(store, 2));
    let requester = |filler: u64| {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            assert!(limiter.acquire(&filler, 0).is_allowed());
            u32::from(limiter.try_acquire(&HOT))
        })
    };
    let others = [requester(10), requester(11)];
    assert!(limiter.acquire(&12, 0).is_allowed());
    let mine = u32::from(limiter.try_acquire(&HOT));
    let allowed = mine + others.map(|t| t.join().unwrap()).iter().sum::<u32>();
    assert_eq!(
        allowed, 2,
        "capacity: {allowed} of 3 admitted from 2 tokens"
    );
    let left = limiter.peek(&HOT);
    assert_eq!(left, 0, "capacity: {left} left after 2 taken of 2");
}

#[test]
fn papaya_admits_exactly_capacity() {
    check("papaya: capacity", ITERATIONS, MAX_STEPS, || {
        capacity_is_admitted_exactly(Store::Papaya)
    });
}

#[test]
fn words_admits_exactly_capacity() {
    check("word store: capacity", ITERATIONS, MAX_STEPS, || {
        capacity_is_admitted_exactly(Store::Words)
    });
}

/// A key of three: one thread takes two and, if allowed, gives one back; another
/// takes one, twice; the third peeks; each inserts a full key of its own. At the end
/// the key has exactly 3 − taken + refunded, and no peek ever saw more than 3.
fn takes_and_refunds_balance(store: Store) {
    let limiter = Arc::new(limiter(store, 3));
    let refunder = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            assert!(limiter.acquire(&10, 0).is_allowed());
            let mut ledger = Ledger::default();
            if limiter.acquire(&HOT, 2).is_allowed() {
                ledger.taken += 2;
                limiter.refund(&HOT, 1);
                ledger.refunded += 1;
            }
            ledger
        })
    };
    let taker = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            assert!(limiter.acquire(&11, 0).is_allowed());
            let mut ledger = Ledger::default();
            for _ in 0..2 {
                ledger.taken += u32::from(limiter.try_acquire(&HOT));
            }
            ledger
        })
    };
    assert!(limiter.acquire(&12, 0).is_allowed());
    let seen = limiter.peek(&HOT);
    assert!(seen <= 3, "ledger: a peek saw {seen} of 3");
    let ledger = refunder.join().unwrap() + taker.join().unwrap();
    let left = limiter.peek(&HOT);
    assert_eq!(
        left,
        3 + ledger.refunded - ledger.taken,
        "ledger: {left} left of 3 after {ledger:?}"
    );
}

#[test]
fn papaya_takes_and_refunds_balance() {
    check("papaya: takes and refunds", ITERATIONS, MAX_STEPS, || {
        takes_and_refunds_balance(Store::Papaya)
    });
}

#[test]
fn words_takes_and_refunds_balance() {
    check(
        "word store: takes and refunds",
        ITERATIONS,
        MAX_STEPS,
        || takes_and_refunds_balance(Store::Words),
    );
}

/// Two full keys inserted on one thread while another drains a key of one: the
/// second insertion asks the sweeper thread for a sweep. The main thread then blocks
/// until the sweeper thread reads the clock (`SweepWatch`): a thread that was asked
/// does, one that missed the request parks for good, and shuttle reports the
/// deadlock. The sweep never forgets the drained key: it still has nothing. (That it
/// does forget the full ones is not asserted here: which keys a sweep finds depends on
/// whether it runs before the insertion that asked for it is published; the soak's
/// margin-0 limiters and tests/eviction.rs check forgetting.)
fn the_sweeper_thread_forgets_full_keys(store: Store) {
    let watch = SweepWatch::default();
    let limiter = Arc::new(limiter_on(store, 1, watch.clone()));
    let inserter = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            assert!(limiter.acquire(&10, 0).is_allowed());
            assert!(limiter.acquire(&11, 0).is_allowed());
        })
    };
    assert!(limiter.try_acquire(&HOT));
    inserter.join().unwrap();
    watch.wait_for_a_sweep();
    assert!(
        !limiter.try_acquire(&HOT),
        "sweeper: the drained key was forgotten"
    );
}

#[test]
fn papaya_the_sweeper_thread_forgets_full_keys() {
    check("papaya: sweeper thread", ITERATIONS, MAX_STEPS, || {
        the_sweeper_thread_forgets_full_keys(Store::Papaya)
    });
}

#[test]
fn words_the_sweeper_thread_forgets_full_keys() {
    check("word store: sweeper thread", ITERATIONS, MAX_STEPS, || {
        the_sweeper_thread_forgets_full_keys(Store::Words)
    });
}

/// On the ring. The handshake is the same code for both stores (`evict/sweeper.rs`;
/// loom's model 12 checks it alone), but on the word store every insertion here also
/// asks the thread to prepare the store's next tables, and a thread woken for that
/// notices a sweep asked for meanwhile: the lost request is made good, and the mutant
/// survives these schedules there.
#[test]
fn mutant_waking_before_asking_loses_the_sweep() {
    let caught = shuttle_tests::caught(Mutant::WakeFirst, || {
        check("mutant: wake first", ITERATIONS, MAX_STEPS, || {
            the_sweeper_thread_forgets_full_keys(Store::Papaya)
        })
    });
    let message = caught.unwrap_or_else(|| panic!("the mutant survived"));
    assert!(
        message.contains("deadlock"),
        "caught for another reason: {message}"
    );
}
