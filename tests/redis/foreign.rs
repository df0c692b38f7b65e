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

/// The foreign values: (what was written, how).
async fn write_foreign(conn: &mut redis::aio::MultiplexedConnection, key: &str, which: usize) {
    let _: () = conn.del(key).await.unwrap();
    match which {
        0 => conn.set::<_, _, ()>(key, "hello").await.unwrap(),
        1 => conn.rpush::<_, _, ()>(key, &["a", "b"]).await.unwrap(),
        2 => conn.sadd::<_, _, ()>(key, "member").await.unwrap(),
        3 => conn.zadd::<_, _, _, ()>(key, "member", 1).await.unwrap(),
        4 => conn.hset::<_, _, _, ()>(key, "t", "lots").await.unwrap(),
        5 => conn
            .hset_multiple::<_, _, _, ()>(key, &[("t", "-3"), ("r", "0")])
            .await
            .unwrap(),
        6 => conn
            .hset_multiple::<_, _, _, ()>(key, &[("t", "1.5"), ("r", "nan")])
            .await
            .unwrap(),
        7 => conn
            .hset_multiple::<_, _, _, ()>(key, &[("w", "0"), ("n", "1e300")])
            .await
            .unwrap(),
        _ => conn
            .hset::<_, _, _, ()>(key, "other", "field")
            .await
            .unwrap(),
    }
}

const FOREIGN: usize = 9;

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
        write_foreign(&mut inspect, &key, which).await;
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
        write_foreign(&mut inspect, &key, which).await;
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
