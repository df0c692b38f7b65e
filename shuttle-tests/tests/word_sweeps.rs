//! The word store's sweeps in parts, whole: new keys' insertions open a pass and take
//! shares of it (bounded parts of its segments, `try_lock` only) while the sweeper
//! thread walks the rest, and a request whose clock reading lags meets the key a
//! share forgets. A share judges words as of its pass's instant, to which the
//! watermark was raised with the insertions begun before waited out; one that judges
//! as of its own request's later reading (mutant `ShareAtItsOwnReading`) forgets a key
//! the watermark does not cover yet, and a request whose reading lags then finds a
//! fresh bucket where the key had none left.
#![cfg(turnstile_shuttle)]

use shuttle::thread;
use shuttle_tests::check;
use shuttle_tests::keyed::HOT;
use std::sync::Arc;
use std::time::Duration;
use turnstile::shuttle_hooks::Mutant;
use turnstile::{ManualClock, Quota, TokenBucket};

/// Schedules per model.
const ITERATIONS: usize = 5000;
/// See `keyed.rs`.
const MAX_STEPS: usize = 20_000;

/// One token, back every 10 ns (at the grid's points), forgetting with a margin of
/// 15 ns on the limiter's own sweeper thread and new keys' shares (under the cfg a
/// store of two keys is due a sweep, and every insertion looks at the schedule).
///
/// The key is emptied at 1 ns (full again at 10 ns). At 20 ns two threads insert new
/// keys, full ones, at once: their insertions open passes, each forgetting as of 5 ns
/// (the margin before), and take shares of them while the sweeper thread walks them.
/// Then a request comes from a core whose clock lags, at 5 ns, and a last one at
/// 20 ns. As of 5 ns the key is not forgettable, so it stays, the lagging request
/// finds it empty, and at most two of the three requests are allowed. A share that
/// judged as of its own reading (20 ns) would forget it while the watermark is 5 ns:
/// the lagging request would then find it absent and take from a fresh bucket at
/// 5 ns, and the last request from that bucket, refilled.
fn a_share_forgets_only_as_of_its_pass() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(Quota::new(1, Duration::from_nanos(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(Duration::from_nanos(15))
        .word_store()
        .build()
        .unwrap();
    clock.set(Duration::from_nanos(1));
    let first = u32::from(limiter.try_acquire(&HOT));
    assert_eq!(first, 1);
    clock.set(Duration::from_nanos(20));
    let limiter = Arc::new(limiter);
    // Full (cost 0): forgettable as of 5 ns.
    let inserter = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            for key in 10..16 {
                assert!(limiter.acquire(&key, 0).is_allowed());
            }
        })
    };
    for key in 20..26 {
        assert!(limiter.acquire(&key, 0).is_allowed());
    }
    inserter.join().unwrap();
    clock.set(Duration::from_nanos(5));
    let lagging = u32::from(limiter.try_acquire(&HOT));
    clock.set(Duration::from_nanos(20));
    let last = u32::from(limiter.try_acquire(&HOT));
    let allowed = first + lagging + last;
    assert!(
        allowed <= 2,
        "share: {allowed} of 3 allowed from a bucket of 1 refilled once"
    );
}

#[test]
fn a_share_forgets_a_key_only_as_of_its_pass() {
    check(
        "word store: shares as of their pass",
        ITERATIONS,
        MAX_STEPS,
        a_share_forgets_only_as_of_its_pass,
    );
}

#[test]
fn mutant_a_share_at_its_own_reading_is_caught() {
    let caught = shuttle_tests::caught(Mutant::ShareAtItsOwnReading, || {
        check(
            "mutant: share at its own reading",
            ITERATIONS,
            MAX_STEPS,
            a_share_forgets_only_as_of_its_pass,
        )
    });
    let message = caught.expect("the mutant survived");
    assert!(
        message.contains("share:"),
        "caught for another reason: {message}"
    );
}
