//! Redis forgets a key exactly when its state stops mattering: a bucket full again, a
//! window over. Checked through the expiry the script set (to the millisecond), and
//! once by waiting for a short-lived key to go.

use crate::server::RedisServer;
use crate::{exists, fresh_prefix, inspector, manager, pttl, server_time};
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::{CheckError, FailurePolicy, RedisFixedWindow, RedisTokenBucket};
use turnstile::{ManualClock, Quota};

/// Runs `check` and returns the range of TTLs, in milliseconds, that the script can
/// have set: the key's absolute expiry (`PEXPIRETIME`, Redis 7) less the server's
/// millisecond clock read before and after the check. One value when both readings
/// fall in the same millisecond.
async fn ttl_set_by<F: std::future::Future<Output = SharedDecision<CheckError>>>(
    check: F,
    inspect: &mut ::redis::aio::MultiplexedConnection,
    key: &[u8],
) -> std::ops::RangeInclusive<i64> {
    let before = (server_time(inspect).await / 1000) as i64;
    assert!(check.await.is_allowed());
    let after = (server_time(inspect).await / 1000) as i64;
    let expires_at = pexpiretime(inspect, key).await;
    assert!(expires_at > 0, "the key has an expiry: {expires_at}");
    expires_at - after..=expires_at - before
}

/// Attempts at a check whose server-time bracket falls within one millisecond.
const ATTEMPTS: usize = 50;

async fn pexpiretime(inspect: &mut ::redis::aio::MultiplexedConnection, key: &[u8]) -> i64 {
    ::redis::cmd("PEXPIRETIME")
        .arg(key)
        .query_async(inspect)
        .await
        .expect("PEXPIRETIME")
}

#[tokio::test]
async fn a_bucket_expires_when_it_would_be_full_again_rounded_up_to_the_millisecond() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let clock = ManualClock::new();
    let prefix = fresh_prefix("expiry-tb");
    let limiter = RedisTokenBucket::builder(
        Quota::new(4, Duration::from_millis(100)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(&prefix)
    .timeout(Duration::from_secs(5))
    .client_clock(clock.clone())
    .build(manager(&server).await)
    .unwrap();
    // At 10.000750 s, 3 of 4 tokens taken: full again at 10.3 s, 299.25 ms away;
    // rounded up (not to the nearest, not down), 300. Fresh keys until the server's
    // clock pins the TTL down to one value.
    clock.set(Duration::from_micros(10_000_750));
    let mut exact = None;
    for attempt in 0..ATTEMPTS {
        let name = format!("k{attempt}");
        let key = [prefix.as_bytes(), name.as_bytes()].concat();
        let set = ttl_set_by(limiter.acquire(&name, 3), &mut inspect, &key).await;
        assert!(set.contains(&300), "TTL set within {set:?}");
        if set.start() == set.end() {
            exact = Some((name, key));
            break;
        }
    }
    let (name, key) = exact.expect("one attempt within a millisecond");

    // At 10.15 s: one token back (at 10.1 s), both taken: full at 10.5 s, 350 ms away.
    clock.set(Duration::from_millis(10_150));
    let set = ttl_set_by(limiter.acquire(&name, 2), &mut inspect, &key).await;
    assert!(set.contains(&350), "TTL set within {set:?}");

    // At 10.5 s by this clock (not yet by Redis's), a check finds the bucket full and
    // removes the key itself.
    clock.set(Duration::from_millis(10_500));
    assert!(exists(&mut inspect, &key).await);
    assert_eq!(
        limiter
            .acquire(&name, 0)
            .await
            .decision()
            .unwrap()
            .remaining(),
        4
    );
    assert!(!exists(&mut inspect, &key).await);
}

#[tokio::test]
async fn with_expiry_a_full_bucket_is_not_stored() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let prefix = fresh_prefix("expiry-full");
    let limiter = RedisTokenBucket::builder(Quota::per_second(5).unwrap(), FailurePolicy::Closed)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let key = [prefix.as_bytes(), b"k"].concat();
    assert!(limiter.acquire("k", 0).await.is_allowed());
    assert!(
        limiter
            .acquire("k", 6)
            .await
            .decision()
            .unwrap()
            .exceeds_capacity()
    );
    assert_eq!(limiter.peek("k").await.unwrap(), 5);
    assert!(!exists(&mut inspect, &key).await);
}

#[tokio::test]
async fn an_idle_key_disappears_after_its_refill_to_full_time() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let prefix = fresh_prefix("expiry-idle");
    // Server time: 2 tokens, one per 50 ms; empty, it is full within 100 ms.
    let limiter = RedisTokenBucket::builder(
        Quota::new(2, Duration::from_millis(50)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(&prefix)
    .timeout(Duration::from_secs(5))
    .build(manager(&server).await)
    .unwrap();
    let key = [prefix.as_bytes(), b"idle"].concat();
    assert!(limiter.acquire("idle", 2).await.is_allowed());
    let ttl = pttl(&mut inspect, &key).await;
    assert!((1..=100).contains(&ttl), "PTTL {ttl}");
    tokio::time::sleep(Duration::from_millis(ttl as u64 + 1)).await;
    assert!(!exists(&mut inspect, &key).await);
    // Forgotten is full.
    assert_eq!(limiter.peek("idle").await.unwrap(), 2);
}

#[tokio::test]
async fn a_window_expires_at_its_end() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let clock = ManualClock::new();
    let prefix = fresh_prefix("expiry-fw");
    let limiter = RedisFixedWindow::builder(5, Duration::from_secs(10), FailurePolicy::Closed)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .build(manager(&server).await)
        .unwrap();
    // The window [0, 10 s) ends 8,999.25 ms after 1.00075 s: 9,000 ms, rounded up.
    clock.set(Duration::from_micros(1_000_750));
    let mut exact = None;
    for attempt in 0..ATTEMPTS {
        let name = format!("w{attempt}");
        let key = [prefix.as_bytes(), name.as_bytes()].concat();
        let set = ttl_set_by(limiter.acquire(&name, 1), &mut inspect, &key).await;
        assert!(set.contains(&9_000), "TTL set within {set:?}");
        if set.start() == set.end() {
            exact = Some((name, key));
            break;
        }
    }
    let (name, key) = exact.expect("one attempt within a millisecond");
    let first_expiry = pexpiretime(&mut inspect, &key).await;
    // A later admission in the window leaves the end where it is (set again, it would
    // be 1 ms away).
    clock.set(Duration::from_millis(9_999));
    assert!(limiter.acquire(&name, 1).await.is_allowed());
    assert_eq!(pexpiretime(&mut inspect, &key).await, first_expiry);
}
