//! A route whose policy has a Redis check: the layer awaits it, refuses with 429 and
//! the exact `Retry-After` as for in-process checks, and a refusal by the check's
//! failure policy (Redis down) is 503 with no `Retry-After` and no `RateLimit` field:
//! nothing is known of the key, so nothing is invented.

#[path = "../redis/server.rs"]
mod redis_server;

use crate::server::{API_KEY, get, per_ip, serve};
use http::StatusCode;
use http::request::Parts;
use redis_server::RedisServer;
use std::sync::Arc;
use std::time::Duration;
use turnstile::http::{HeaderKey, RateLimitLayer};
use turnstile::policy::{Check, Limit, Policy, PolicyCheck};
use turnstile::redis::{CircuitBreaker, FailurePolicy, RedisTokenBucket};
use turnstile::{ManualClock, Quota};

/// A per-user check in Redis (at `url`) under `quota`, answering `policy` when
/// Redis does not.
fn per_user(
    url: &str,
    quota: Quota,
    policy: FailurePolicy,
    clock: &ManualClock,
) -> PolicyCheck<Parts> {
    let users = RedisTokenBucket::builder(quota, policy)
        .prefix(format!("http-shared:{:?}:", std::thread::current().id()))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .timeout(Duration::from_millis(200))
        .circuit_breaker(CircuitBreaker::off())
        .connect(url)
        .unwrap();
    let key = HeaderKey::new(API_KEY);
    Check::shared("per-user", Arc::new(users), Limit::steady(quota), key).into()
}

/// A layer whose one policy is the per-user check in Redis, then a per-IP check in
/// process.
fn layer(url: &str, quota: Quota, policy: FailurePolicy, clock: &ManualClock) -> RateLimitLayer {
    let policy = Policy::builder()
        .check(per_user(url, quota, policy, clock))
        .check(per_ip("per-ip", Quota::per_minute(300).unwrap(), clock))
        .build()
        .unwrap();
    RateLimitLayer::builder(policy).build().unwrap()
}

#[tokio::test]
async fn a_redis_check_behind_the_layer_answers_as_an_in_process_one() {
    let redis = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::new(2, Duration::from_secs(10)).unwrap();
    let server = serve(layer(&redis.url(), quota, FailurePolicy::Closed, &clock)).await;
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), Some(r#""per-user";r=1;t=10"#));
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    clock.set(Duration::from_secs(3));
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    // The next token arrives at 10 s: 7 s from now.
    assert_eq!(reply.header("retry-after"), Some("7"));
    assert_eq!(reply.header("ratelimit"), Some(r#""per-user";r=0;t=7"#));
    assert!(
        reply.body.contains(r#""violated-policies":["per-user"]"#),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn a_failure_policy_refusal_is_503_without_retry_after_or_ratelimit_field() {
    let mut redis = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::new(2, Duration::from_secs(10)).unwrap();
    let closed = serve(layer(&redis.url(), quota, FailurePolicy::Closed, &clock)).await;
    let open = serve(layer(&redis.url(), quota, FailurePolicy::Open, &clock)).await;
    redis.kill();

    let reply = get(closed, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), None);
    assert_eq!(reply.header("ratelimit"), None);
    // The quotas themselves are known: the policy field stays.
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some(r#""per-user";q=2;w=20, "per-ip";q=300;w=60"#)
    );
    assert!(
        reply.body.contains("temporary-reduced-capacity"),
        "{}",
        reply.body
    );
    assert!(
        reply.body.contains(r#""violated-policies":["per-user"]"#),
        "{}",
        reply.body
    );

    // Failing open: served, and still no RateLimit field — the per-IP check's 299
    // would hide that the per-user key's state is unknown.
    let reply = get(open, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), None);
    assert!(reply.header("ratelimit-policy").is_some());
}

#[tokio::test]
async fn the_status_of_a_failure_policy_refusal_is_configurable() {
    let mut redis = RedisServer::start();
    let quota = Quota::new(2, Duration::from_secs(10)).unwrap();
    let check = per_user(
        &redis.url(),
        quota,
        FailurePolicy::Closed,
        &ManualClock::new(),
    );
    let policy = Policy::builder().check(check).build().unwrap();
    let layer = RateLimitLayer::builder(policy)
        .unavailable_status(StatusCode::TOO_MANY_REQUESTS)
        .build()
        .unwrap();
    let server = serve(layer).await;
    redis.kill();
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), None);
}
