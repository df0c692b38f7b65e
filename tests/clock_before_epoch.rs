//! A clock that reads before the moment a limiter was made (set back, or another
//! core's clock behind the one that made it): such a reading counts as the limiter's
//! epoch, and a denial's `retry_after` is still the exact wait on that clock.
//!
//! Found by the `quota` fuzz target: a token bucket made at a late reading, asked at
//! one far earlier, told a wait measured from its epoch, so waiting it was not
//! enough.

use std::time::Duration;
use turnstile::{
    Decision, DirectFixedWindow, DirectGcra, DirectSlidingWindowCounter, DirectTokenBucket,
    FixedWindow, Gcra, ManualClock, Quota, RateLimiter, SlidingLog, SlidingWindowCounter,
    TokenBucket,
};

const SECOND: Duration = Duration::from_secs(1);

/// One key's requests, whichever limiter answers them.
type Ask = Box<dyn Fn() -> Decision>;

/// Key 1 of a keyed limiter.
fn keyed(limiter: impl RateLimiter<u8> + 'static) -> Ask {
    Box::new(move || limiter.acquire(&1, 1))
}

/// Every algorithm, keyed and direct, made at `clock`'s reading now, asking for one.
fn every_limiter(quota: Quota, clock: &ManualClock) -> Vec<(&'static str, Ask)> {
    let c = || clock.clone();
    let token_bucket = DirectTokenBucket::with_clock(quota, c()).unwrap();
    let gcra = DirectGcra::with_clock(quota, c()).unwrap();
    let fixed_window = DirectFixedWindow::with_clock(quota, c()).unwrap();
    let sliding_window = DirectSlidingWindowCounter::with_clock(quota, c()).unwrap();
    vec![
        (
            "token bucket",
            keyed(TokenBucket::with_clock(quota, c()).unwrap()),
        ),
        ("gcra", keyed(Gcra::with_clock(quota, c()).unwrap())),
        (
            "fixed window",
            keyed(FixedWindow::with_clock(quota, c()).unwrap()),
        ),
        (
            "sliding window",
            keyed(SlidingWindowCounter::with_clock(quota, c()).unwrap()),
        ),
        (
            "sliding log",
            keyed(SlidingLog::with_clock(quota, c()).unwrap()),
        ),
        (
            "direct token bucket",
            Box::new(move || token_bucket.acquire(1)),
        ),
        ("direct gcra", Box::new(move || gcra.acquire(1))),
        (
            "direct fixed window",
            Box::new(move || fixed_window.acquire(1)),
        ),
        (
            "direct sliding window",
            Box::new(move || sliding_window.acquire(1)),
        ),
    ]
}

/// The wait each limiter tells after one request at its epoch, asked at the epoch.
fn waits_at_the_epoch(quota: Quota) -> Vec<Duration> {
    let clock = ManualClock::new();
    clock.set(5000 * SECOND);
    every_limiter(quota, &clock)
        .iter()
        .map(|(name, ask)| {
            assert!(ask().is_allowed(), "{name}: a new key is full");
            while ask().is_allowed() {}
            match ask() {
                Decision::Denied { retry_after, .. } => retry_after,
                other => panic!("{name}: {other:?} with every token taken"),
            }
        })
        .collect()
}

#[test]
fn a_denial_before_the_epoch_waits_out_the_gap_too() {
    for quota in [Quota::per_second(1).unwrap(), Quota::per_second(3).unwrap()] {
        let at_epoch = waits_at_the_epoch(quota);
        for lag in [Duration::from_nanos(1), SECOND, 3600 * SECOND] {
            let clock = ManualClock::new();
            clock.set(5000 * SECOND);
            for ((name, ask), at_epoch) in every_limiter(quota, &clock).iter().zip(&at_epoch) {
                clock.set(5000 * SECOND - lag);
                while ask().is_allowed() {}
                let wait = ask().retry_after().expect("denied");
                // Decided at the epoch: the wait from there, and the gap to it.
                assert_eq!(wait, lag + *at_epoch, "{name}, {lag:?} before the epoch");
                clock.advance(wait - Duration::from_nanos(1));
                assert!(!ask().is_allowed(), "{name}: allowed before its wait");
                clock.advance(Duration::from_nanos(1));
                assert!(ask().is_allowed(), "{name}: refused after its wait");
                clock.set(5000 * SECOND);
            }
        }
    }
}

#[test]
fn a_reading_from_the_epoch_on_is_told_the_wait_from_itself() {
    let quota = Quota::per_second(1).unwrap();
    let at_epoch = waits_at_the_epoch(quota);
    let clock = ManualClock::new();
    clock.set(5000 * SECOND);
    for ((name, ask), at_epoch) in every_limiter(quota, &clock).iter().zip(&at_epoch) {
        assert!(ask().is_allowed(), "{name}");
        clock.advance(SECOND / 4);
        assert_eq!(
            ask().retry_after(),
            Some(*at_epoch - SECOND / 4),
            "{name}: a quarter second after the epoch"
        );
        clock.set(5000 * SECOND);
    }
}
