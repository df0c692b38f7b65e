//! Every quota a user can name builds a working limiter of every algorithm, or is
//! refused at construction with the algorithm's documented error: a million a second,
//! and the largest burst refilled every nanosecond (a bandwidth limit in bytes).

use std::time::Duration;
use turnstile::{
    Decision, DirectTokenBucket, FixedWindow, Gcra, ManualClock, Quota, QuotaError, SlidingLog,
    SlidingWindowCounter, TokenBucket,
};

fn million_a_second() -> Quota {
    Quota::per_second(1_000_000).unwrap()
}

fn largest_burst_every_nanosecond() -> Quota {
    Quota::new(u32::MAX, Duration::from_nanos(1)).unwrap()
}

#[test]
fn a_million_a_second_refills_one_token_every_microsecond() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<&str, _>::with_clock(million_a_second(), clock.clone()).unwrap();
    assert_eq!(
        limiter.acquire(&"api", 1_000_000),
        Decision::Allowed { remaining: 0 }
    );
    let denied = limiter.acquire(&"api", 1);
    assert_eq!(denied.retry_after(), Some(Duration::from_micros(1)));
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.peek(&"api"), 1_000);
    assert!(limiter.acquire(&"api", 1_001).retry_after() == Some(Duration::from_micros(1)));
}

#[test]
fn the_largest_burst_refilled_every_nanosecond_is_a_bandwidth_limit() {
    // 4 GiB at once, then a byte per nanosecond: cost = bytes.
    let clock = ManualClock::new();
    let link =
        DirectTokenBucket::with_clock(largest_burst_every_nanosecond(), clock.clone()).unwrap();
    assert!(link.acquire(3 << 30).is_allowed()); // 3 GiB
    assert_eq!(link.peek(), u32::MAX - (3 << 30));
    assert!(link.acquire(1 << 30).retry_after() == Some(Duration::from_nanos(1)));
    clock.advance(Duration::from_secs(1)); // a billion bytes later
    assert_eq!(link.peek(), u32::MAX - (3 << 30) + 1_000_000_000);
    clock.advance(Duration::from_secs(10));
    assert_eq!(link.peek(), u32::MAX);
    assert!(link.acquire(u32::MAX).is_allowed());
}

#[test]
fn every_other_algorithm_holds_both_quotas_or_refuses_with_its_documented_error() {
    for quota in [million_a_second(), largest_burst_every_nanosecond()] {
        let clock = ManualClock::new();
        let window = FixedWindow::<u8, _>::with_clock(quota, clock.clone()).unwrap();
        assert!(
            window.acquire(&1, quota.capacity()).is_allowed(),
            "{quota:?}"
        );
        assert!(!window.acquire(&1, 1).is_allowed(), "{quota:?}");

        let gcra = Gcra::<u8, _>::with_clock(quota, clock.clone()).expect("GCRA holds it");
        assert!(gcra.acquire(&1, quota.capacity()).is_allowed(), "{quota:?}");
        assert!(!gcra.acquire(&1, 1).is_allowed(), "{quota:?}");

        // A sliding log keeps a timestamp per request in its window; a thousand here.
        let log = SlidingLog::<u8, _>::with_clock(quota, clock.clone()).unwrap();
        assert!(log.acquire(&1, 1_000).is_allowed(), "{quota:?}");
        assert_eq!(log.peek(&1), quota.capacity() - 1_000);

        // Two exact counts beside the window index do not fit one word.
        match SlidingWindowCounter::<u8, _>::with_clock(quota, clock) {
            Err(QuotaError::Unsupported { algorithm, .. }) => {
                assert_eq!(algorithm, "SlidingWindowCounter")
            }
            Err(other) => panic!("{quota:?}: {other:?}"),
            Ok(_) => panic!("{quota:?}: the counter's word cannot hold it"),
        }
    }
}
