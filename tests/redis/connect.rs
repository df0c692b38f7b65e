//! The connection turnstile recommends (`connect`): made without waiting for Redis,
//! so an application starts while Redis is down; decided again once Redis is up;
//! refused with a clear error where it cannot work.

use crate::fresh_prefix;
use crate::server::RedisServer;
use std::time::{Duration, Instant};
use turnstile::Quota;
use turnstile::redis::{FailurePolicy, RedisConfigError, RedisFixedWindow, RedisTokenBucket};

/// A loopback port nothing listens on (a server started there and stopped).
fn dead_port() -> u16 {
    let server = RedisServer::start();
    server.port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_connected_while_redis_is_down_decides_once_it_is_up() {
    let port = dead_port();
    let url = format!("redis://127.0.0.1:{port}/");
    // Made at once, though nothing listens: no start-up failure.
    let limiter = RedisTokenBucket::builder(Quota::per_minute(10).unwrap(), FailurePolicy::Open)
        .prefix(fresh_prefix("connect"))
        .timeout(Duration::from_millis(100))
        .connect(url.as_str())
        .expect("connect does not wait for Redis");
    let window = RedisFixedWindow::builder(10, Duration::from_secs(60), FailurePolicy::Closed)
        .prefix(fresh_prefix("connect-window"))
        .connect(url.as_str())
        .unwrap();
    let outcome = limiter.acquire("k", 1).await;
    assert!(outcome.is_fallback() && outcome.is_allowed(), "{outcome:?}");
    assert!(window.acquire("k", 1).await.is_fallback());

    let _server = RedisServer::start_on(port).expect("the port is free again");
    let deadline = Instant::now() + Duration::from_secs(15);
    while limiter.acquire("k", 1).await.decision().is_none() {
        assert!(
            Instant::now() < deadline,
            "never decided after Redis came up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while window.acquire("k", 1).await.decision().is_none() {
        assert!(
            Instant::now() < deadline,
            "never decided after Redis came up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn connect_outside_a_runtime_is_refused_not_a_panic() {
    let built = RedisTokenBucket::builder(Quota::per_minute(10).unwrap(), FailurePolicy::Open)
        .connect("redis://127.0.0.1:1/");
    assert!(
        matches!(built, Err(RedisConfigError::NoRuntime)),
        "{built:?}"
    );
}

#[tokio::test]
async fn a_bad_url_is_refused_at_construction() {
    let built = RedisTokenBucket::builder(Quota::per_minute(10).unwrap(), FailurePolicy::Open)
        .connect("not a url");
    assert!(
        matches!(built, Err(RedisConfigError::Connection(_))),
        "{built:?}"
    );
    let built = RedisTokenBucket::builder(Quota::per_minute(10).unwrap(), FailurePolicy::Open)
        .timeout(Duration::ZERO)
        .connect("redis://127.0.0.1/");
    assert!(
        matches!(built, Err(RedisConfigError::ZeroTimeout)),
        "{built:?}"
    );
}
