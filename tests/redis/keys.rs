//! Keys are bytes: spaces, braces, non-UTF-8 and kilobytes work and stay apart; a cost
//! above the capacity is reported as never satisfiable.

use crate::server::RedisServer;
use crate::{exists, fresh_prefix, inspector, manager};
use std::time::Duration;
use turnstile::redis::{FailurePolicy, RedisFixedWindow, RedisTokenBucket};
use turnstile::{Decision, Quota};

/// Long enough that no refill or new window comes during a test: those start at
/// multiples of ten years since 1970.
const LONG: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

fn awkward_keys() -> Vec<Vec<u8>> {
    vec![
        b"with spaces in it".to_vec(),
        b"{braces}".to_vec(),
        b"{".to_vec(),
        b"}{".to_vec(),
        b"{user42}:login".to_vec(),
        b"\xff\xfe\x00\x01 not utf-8 \xc3\x28".to_vec(),
        b"\r\n*3\r\n$3\r\nDEL".to_vec(),
        vec![b'k'; 1024],
        vec![0xa5; 1024],
        Vec::new(),
    ]
}

#[tokio::test]
async fn awkward_keys_work_and_stay_apart() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let prefix = fresh_prefix("keys");
    let limiter = RedisTokenBucket::builder(Quota::new(2, LONG).unwrap(), FailurePolicy::Closed)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let keys = awkward_keys();
    for key in &keys {
        assert_eq!(
            limiter.acquire(key, 1).await.decision(),
            Some(Decision::Allowed { remaining: 1 }),
            "{key:?}"
        );
        // Stored under exactly the prefix and the key's bytes.
        assert!(exists(&mut inspect, &[prefix.as_bytes(), key].concat()).await);
    }
    // Each key kept its own count.
    for key in &keys {
        assert_eq!(limiter.peek(key).await.unwrap(), 1, "{key:?}");
        assert!(limiter.try_acquire(key).await);
        assert!(!limiter.try_acquire(key).await);
    }
    assert_eq!(limiter.failures(), Default::default());
}

#[tokio::test]
async fn awkward_keys_work_for_the_fixed_window_too() {
    let server = RedisServer::start();
    let limiter = RedisFixedWindow::builder(1, LONG, FailurePolicy::Closed)
        .prefix(fresh_prefix("keys-fw"))
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    for key in awkward_keys() {
        assert_eq!(limiter.peek(&key).await.unwrap(), 1, "{key:?}");
    }
    let _ = limiter.try_acquire(b"{").await;
    assert_eq!(limiter.peek(b"{").await.unwrap(), 0);
    assert_eq!(limiter.peek(b"}{").await.unwrap(), 1);
}

#[tokio::test]
async fn binary_prefixes_and_different_prefixes_keep_limiters_apart() {
    let server = RedisServer::start();
    let conn = manager(&server).await;
    let quota = Quota::new(1, LONG).unwrap();
    let build = |prefix: &[u8]| {
        RedisTokenBucket::builder(quota, FailurePolicy::Closed)
            .prefix(prefix)
            .timeout(Duration::from_secs(5))
            .build(conn.clone())
            .unwrap()
    };
    let run = fresh_prefix("prefixes");
    let a = build(&[run.as_bytes(), b"\xffa:"].concat());
    let b = build(&[run.as_bytes(), b"\xffb:"].concat());
    assert!(a.try_acquire("alice").await);
    assert!(!a.try_acquire("alice").await);
    assert!(b.try_acquire("alice").await);
}

#[tokio::test]
async fn a_cost_above_capacity_is_never_satisfiable_and_changes_nothing() {
    let server = RedisServer::start();
    let limiter = RedisTokenBucket::builder(Quota::new(3, LONG).unwrap(), FailurePolicy::Open)
        .prefix(fresh_prefix("too-costly"))
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    for cost in [4, 1000, u32::MAX] {
        let outcome = limiter.acquire("k", cost).await;
        assert_eq!(
            outcome.decision(),
            Some(Decision::ExceedsCapacity {
                remaining: 3,
                capacity: 3
            })
        );
        assert!(!outcome.is_allowed());
        assert_eq!(outcome.retry_after(), None);
    }
    assert!(limiter.try_acquire("k").await);
    assert_eq!(
        limiter.acquire("k", 4).await.decision(),
        Some(Decision::ExceedsCapacity {
            remaining: 2,
            capacity: 3
        })
    );

    let window = RedisFixedWindow::builder(3, LONG, FailurePolicy::Open)
        .prefix(fresh_prefix("too-costly-fw"))
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    assert_eq!(
        window.acquire("k", u32::MAX).await.decision(),
        Some(Decision::ExceedsCapacity {
            remaining: 3,
            capacity: 3
        })
    );
    assert_eq!(window.peek("k").await.unwrap(), 3);
}
