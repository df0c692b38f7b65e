//! Per-route policies, and per-IP limits kept apart from per-key ones.

use crate::server::{get, per_ip, per_user, request, send, serve};
use http::{Method, StatusCode};
use turnstile::http::RateLimitLayer;
use turnstile::policy::Policy;
use turnstile::{ManualClock, Quota};

fn one(name: &str, per_minute: u32, clock: &ManualClock) -> Policy<http::request::Parts> {
    Policy::builder()
        .check(per_user(
            name,
            Quota::per_minute(per_minute).unwrap(),
            clock,
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn each_route_has_its_own_limit() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder(one("other", 3, &clock))
        .prefix("/transfer", one("transfer", 2, &clock))
        .prefix("/balance", one("balance", 5, &clock))
        .route(|r| r.method == Method::DELETE, one("delete", 1, &clock))
        .build()
        .unwrap();
    let server = serve(layer).await;

    for _ in 0..2 {
        let reply = send(server, 1, request(Method::POST, "/transfer", Some("alice"))).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let reply = send(
        server,
        1,
        request(Method::POST, "/transfer/eur", Some("alice")),
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "below /transfer"
    );
    assert!(reply.body.contains(r#"["transfer"]"#), "{}", reply.body);

    // Transfers spent nothing of alice's balance reads or of the fallback.
    let reply = get(server, 1, "/balance", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit").unwrap(), r#""balance";r=4;t=12"#);
    let reply = get(server, 1, "/transfers", Some("alice")).await;
    assert_eq!(
        reply.header("ratelimit").unwrap(),
        r#""other";r=2;t=20"#,
        "not below /transfer"
    );

    // A predicate route, tried in order: DELETE /balance matches /balance first.
    let reply = send(
        server,
        1,
        request(Method::DELETE, "/balance", Some("alice")),
    )
    .await;
    assert_eq!(reply.header("ratelimit").unwrap(), r#""balance";r=3;t=12"#);
    let reply = send(server, 1, request(Method::DELETE, "/x", Some("alice"))).await;
    assert_eq!(reply.header("ratelimit").unwrap(), r#""delete";r=0;t=60"#);
    let reply = send(server, 1, request(Method::DELETE, "/y", Some("alice"))).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn per_ip_and_per_key_limits_are_separate_and_all_or_nothing() {
    // 3 per user, 4 per IP address. Clients at 127.0.0.2 and 127.0.0.3.
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .check(per_user("per-user", Quota::per_minute(3).unwrap(), &clock))
        .check(per_ip("per-ip", Quota::per_minute(4).unwrap(), &clock))
        .build()
        .unwrap();
    let server = serve(RateLimitLayer::builder(policy).build().unwrap()).await;

    for _ in 0..3 {
        assert_eq!(
            get(server, 2, "/", Some("alice")).await.status,
            StatusCode::OK
        );
    }
    // The per-user limit follows the key to another address.
    let reply = get(server, 3, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        reply.body.contains(r#""violated-policies":["per-user"]"#),
        "{}",
        reply.body
    );
    // 127.0.0.2 has one request left, whoever sends it.
    let reply = get(server, 2, "/", Some("bob")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit").unwrap(), r#""per-ip";r=0;t=15"#);
    // The per-IP limit follows the address across keys.
    let reply = get(server, 2, "/", Some("carol")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        reply.body.contains(r#""violated-policies":["per-ip"]"#),
        "{}",
        reply.body
    );
    // All or nothing: the refused requests took nothing. Carol's per-user token and
    // 127.0.0.3's per-IP token (alice's refused request) were given back.
    let reply = get(server, 3, "/", Some("carol")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit").unwrap(), r#""per-user";r=2;t=20"#);
    for _ in 0..2 {
        assert_eq!(
            get(server, 3, "/", Some("dave")).await.status,
            StatusCode::OK
        );
    }
    let reply = get(server, 3, "/", Some("erin")).await;
    assert_eq!(reply.header("ratelimit").unwrap(), r#""per-ip";r=0;t=15"#);
}
