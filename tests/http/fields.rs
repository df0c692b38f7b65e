//! Statuses and header values: 429 with `Retry-After` rounded up, the RateLimit
//! fields on every response, 503 on overflow, no `Retry-After` when waiting cannot
//! help.

use crate::server::{get, per_ip, per_user, serve};
use http::StatusCode;
use std::time::Duration;
use turnstile::http::RateLimitLayer;
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{ManualClock, Overflow, Quota, TokenBucket};

fn quota(capacity: u32, refill_every: Duration) -> Quota {
    Quota::new(capacity, refill_every).unwrap()
}

/// A layer limiting every request by one per-user check under `quota`.
fn one_check(quota: Quota, clock: &ManualClock) -> RateLimitLayer {
    let policy = Policy::builder()
        .check(per_user("per-user", quota, clock))
        .build()
        .unwrap();
    RateLimitLayer::builder(policy).build().unwrap()
}

#[tokio::test]
async fn allowed_responses_carry_the_policy_and_the_tightest_limit() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .check(per_user("per-user", Quota::per_minute(5).unwrap(), &clock))
        .check(per_ip("per-ip", Quota::per_minute(300).unwrap(), &clock))
        .build()
        .unwrap();
    let server = serve(RateLimitLayer::builder(policy).build().unwrap()).await;
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "ok");
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some(r#""per-user";q=5;w=60, "per-ip";q=300;w=60"#)
    );
    // 4 left of 5 is tighter than 299 of 300; a token comes back within 12 s.
    assert_eq!(reply.header("ratelimit"), Some(r#""per-user";r=4;t=12"#));
    assert_eq!(reply.header("retry-after"), None);
}

#[tokio::test]
async fn a_denial_is_429_with_retry_after_rounded_up_to_the_next_second() {
    // One token per 1.000000001 s: a drained key waits 1.000000001 s, which is 2 in
    // whole seconds — 1 would send the client back 1 ns early.
    let clock = ManualClock::new();
    let q = quota(1, Duration::new(1, 1));
    let server = serve(one_check(q, &clock)).await;
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("2"));
    assert_eq!(reply.header("ratelimit"), Some(r#""per-user";r=0;t=2"#));
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some(r#""per-user";q=1;w=2"#)
    );
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        reply.body,
        r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"violated-policies":["per-user"]}"#
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn exactly_one_second_is_retry_after_1_and_never_0() {
    let clock = ManualClock::new();
    let server = serve(one_check(quota(1, Duration::from_secs(1)), &clock)).await;
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.header("retry-after"), Some("1"));
    // 1 ns before the token: still denied, and still told to wait a (whole) second.
    clock.advance(Duration::from_nanos(999_999_999));
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("1"));
    clock.advance(Duration::from_nanos(1));
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_client_that_waits_exactly_retry_after_gets_through() {
    // Quotas whose waits fall on and off whole seconds; a drained client that sleeps
    // exactly `Retry-After` seconds must pass, whatever the phase of the refill grid.
    let cases = [
        (1, Duration::from_millis(1500), 0),
        (2, Duration::from_millis(700), 300),
        (3, Duration::new(2, 1), 1999),
        (1, Duration::from_secs(3), 2999),
        (5, Duration::from_millis(250), 100),
    ];
    for (capacity, interval, start_ms) in cases {
        let clock = ManualClock::new();
        let server = serve(one_check(quota(capacity, interval), &clock)).await;
        clock.set(Duration::from_millis(start_ms));
        for _ in 0..capacity {
            assert_eq!(get(server, 1, "/", Some("k")).await.status, StatusCode::OK);
        }
        let reply = get(server, 1, "/", Some("k")).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        let wait: u64 = reply.header("retry-after").unwrap().parse().unwrap();
        assert!(wait >= 1);
        clock.advance(Duration::from_secs(wait));
        let reply = get(server, 1, "/", Some("k")).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "capacity {capacity}, interval {interval:?}, start {start_ms} ms, waited {wait} s"
        );
    }
}

#[tokio::test]
async fn a_full_key_table_is_503_with_a_retry_after() {
    let clock = ManualClock::new();
    let q = Quota::per_minute(5).unwrap();
    let users = TokenBucket::<String>::builder(q)
        .clock(clock.clone())
        .max_keys(1, Overflow::Deny)
        .manual_eviction()
        .build()
        .unwrap();
    let check = Check::new(
        "per-user",
        std::sync::Arc::new(users),
        Limit::steady(q),
        turnstile::http::HeaderKey::new(crate::server::API_KEY),
    );
    let policy = Policy::builder().check(check).build().unwrap();
    let server = serve(RateLimitLayer::builder(policy).build().unwrap()).await;
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    let reply = get(server, 1, "/", Some("bob")).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let wait: u64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert!(wait >= 1);
    assert!(
        reply.body.contains("temporary-reduced-capacity"),
        "{}",
        reply.body
    );
    assert!(
        reply
            .header("ratelimit")
            .unwrap()
            .starts_with(r#""per-user";r=0;t="#)
    );
}

#[tokio::test]
async fn a_cost_the_quota_can_never_allow_is_refused_without_retry_after() {
    // The check advertises 10 but its limiter holds 2 (as a smaller per-key quota
    // would): no wait helps, so there is no Retry-After to trust.
    let clock = ManualClock::new();
    let users = crate::server::bucket::<String, _>(Quota::per_minute(2).unwrap(), &clock);
    let advertised = Limit::steady(Quota::per_minute(10).unwrap());
    let check = Check::new(
        "per-user",
        users,
        advertised,
        turnstile::http::HeaderKey::new(crate::server::API_KEY),
    )
    .cost(3);
    let policy = Policy::builder().check(check).build().unwrap();
    let server = serve(RateLimitLayer::builder(policy).build().unwrap()).await;
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), None);
    assert!(
        reply.body.contains("waiting does not help"),
        "{}",
        reply.body
    );

    let clock = ManualClock::new();
    let users = crate::server::bucket::<String, _>(Quota::per_minute(2).unwrap(), &clock);
    let check = Check::new(
        "per-user",
        users,
        advertised,
        turnstile::http::HeaderKey::new(crate::server::API_KEY),
    )
    .cost(3);
    let policy = Policy::builder().check(check).build().unwrap();
    let layer = RateLimitLayer::builder(policy)
        .exceeds_capacity_status(StatusCode::FORBIDDEN)
        .build()
        .unwrap();
    let reply = get(serve(layer).await, 1, "/", Some("alice")).await;
    assert_eq!(
        reply.status,
        StatusCode::FORBIDDEN,
        "the status is configurable"
    );
}

#[tokio::test]
async fn a_route_without_checks_adds_no_fields() {
    let server = serve(
        RateLimitLayer::builder(Policy::unlimited())
            .build()
            .unwrap(),
    )
    .await;
    let reply = get(server, 1, "/", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit-policy"), None);
    assert_eq!(reply.header("ratelimit"), None);
}
