//! Data another program wrote at a limiter's key — another type, a hash whose fields
//! are not the limiter's integers — is replaced by a fresh state (a full bucket, an
//! empty window), counted, and given an expiry: never a fallback forever, never an
//! unlimited client under `FailurePolicy::Open`, never a key that outlives its use.

use crate::server::RedisServer;
use crate::{fresh_prefix, inspector, manager, pttl};
use redis::AsyncCommands;
use std::time::Duration;
use turnstile::redis::{FailurePolicy, RedisFixedWindow, RedisTokenBucket};
use turnstile::{Decision, Quota};

/// Writes foreign value `which` at `key`, for a limiter whose own hash fields are
/// `own`: another type, or the limiter's fields incomplete or not integers in range.
async fn write_foreign(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    own: [&str; 2],
    which: usize,
) {
    let _: () = conn.del(key).await.unwrap();
    let [first, second] = own;
    match which {
        0 => conn.set::<_, _, ()>(key, "hello").await.unwrap(),
        1 => conn.rpush::<_, _, ()>(key, &["a", "b"]).await.unwrap(),
        2 => conn.sadd::<_, _, ()>(key, "member").await.unwrap(),
        3 => conn.zadd::<_, _, _, ()>(key, "member", 1).await.unwrap(),
        4 => conn.hset::<_, _, _, ()>(key, first, "lots").await.unwrap(),
        5 => conn
            .hset_multiple::<_, _, _, ()>(key, &[(first, "-3"), (second, "0")])
            .await
            .unwrap(),
        6 => conn
            .hset_multiple::<_, _, _, ()>(key, &[(first, "1.5"), (second, "nan")])
            .await
            .unwrap(),
        _ => conn
            .hset_multiple::<_, _, _, ()>(key, &[(first, "0"), (second, "1e300")])
            .await
            .unwrap(),
    }
}

const FOREIGN: usize = 8;

#[tokio::test]
async fn a_token_bucket_replaces_foreign_data_by_a_full_bucket() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let prefix = fresh_prefix("foreign-bucket");
    let limiter = RedisTokenBucket::builder(Quota::per_minute(3).unwrap(), FailurePolicy::Open)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let key = format!("{prefix}k");
    for which in 0..FOREIGN {
        write_foreign(&mut inspect, &key, ["t", "r"], which).await;
        // A peek only reads: it sees a full bucket and leaves the data.
        assert_eq!(limiter.peek("k").await.unwrap(), 3, "foreign value {which}");
        let outcome = limiter.acquire("k", 1).await;
        assert_eq!(
            outcome.decision(),
            Some(Decision::Allowed { remaining: 2 }),
            "foreign value {which}"
        );
        assert_eq!(limiter.failures().replaced, which as u64 + 1);
        // The limiter's own state now, with an expiry: checks go on from it.
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut inspect)
            .await
            .unwrap();
        assert_eq!(kind, "hash");
        assert!(pttl(&mut inspect, key.as_bytes()).await > 0, "no expiry");
        assert_eq!(
            limiter.acquire("k", 1).await.decision(),
            Some(Decision::Allowed { remaining: 1 })
        );
        assert_eq!(
            limiter.failures().replaced,
            which as u64 + 1,
            "own state kept"
        );
    }
    let counts = limiter.failures();
    assert_eq!((counts.timeouts, counts.errors, counts.allowed), (0, 0, 0));
}

#[tokio::test]
async fn a_fixed_window_replaces_foreign_data_by_an_empty_window() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let prefix = fresh_prefix("foreign-window");
    let limiter = RedisFixedWindow::builder(3, Duration::from_secs(60), FailurePolicy::Closed)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let key = format!("{prefix}k");
    for which in 0..FOREIGN {
        write_foreign(&mut inspect, &key, ["w", "n"], which).await;
        assert_eq!(limiter.peek("k").await.unwrap(), 3, "foreign value {which}");
        let decision = limiter.acquire("k", 1).await.decision();
        assert_eq!(
            decision,
            Some(Decision::Allowed { remaining: 2 }),
            "foreign value {which}"
        );
        assert_eq!(limiter.failures().replaced, which as u64 + 1);
        assert!(pttl(&mut inspect, key.as_bytes()).await > 0, "no expiry");
    }
    assert_eq!(limiter.failures().denied, 0, "never a fallback");
}

/// A hash with none of a limiter's fields is nobody's state to distrust: read as a
/// missing key, its own fields are added beside the others, nothing is counted as
/// replaced — so two limiters of different algorithms under one prefix do not erase
/// each other's state.
#[tokio::test]
async fn a_hash_without_the_limiters_fields_is_added_to_not_replaced() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let prefix = fresh_prefix("foreign-merge");
    let bucket = RedisTokenBucket::builder(Quota::per_minute(3).unwrap(), FailurePolicy::Open)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let window = RedisFixedWindow::builder(3, Duration::from_secs(60), FailurePolicy::Open)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let key = format!("{prefix}k");
    let _: () = inspect.hset(&key, "other", "field").await.unwrap();
    // Alternating, each admits exactly its own 3: neither erases the other.
    let mut admitted = (0, 0);
    for _ in 0..5 {
        admitted.0 += u32::from(
            bucket
                .acquire("k", 1)
                .await
                .decision()
                .unwrap()
                .is_allowed(),
        );
        admitted.1 += u32::from(
            window
                .acquire("k", 1)
                .await
                .decision()
                .unwrap()
                .is_allowed(),
        );
    }
    assert_eq!(admitted, (3, 3));
    assert_eq!(
        (bucket.failures().replaced, window.failures().replaced),
        (0, 0)
    );
    let other: String = inspect.hget(&key, "other").await.unwrap();
    assert_eq!(other, "field");
}
