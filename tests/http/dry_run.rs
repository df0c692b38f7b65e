//! The layer in dry run, and a policy whose new limit is tried in dry run beside an
//! enforced one.

use crate::server::{get, per_ip, per_user, serve, serve_app};
use http::StatusCode;
use turnstile::http::RateLimitLayer;
use turnstile::policy::Policy;
use turnstile::{ManualClock, Quota};

#[tokio::test]
async fn a_layer_in_dry_run_serves_every_request_and_still_reports_the_limit() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(2).unwrap();
    let policy = Policy::builder()
        .check(per_user("per-user", quota, &clock))
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(policy).dry_run().build().unwrap();
    let server = serve(layer).await;
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let reply = get(server, 1, "/", Some("alice")).await;
        assert_eq!(reply.status, StatusCode::OK, "a dry run refuses nothing");
        assert_eq!(reply.header("retry-after"), None);
        assert_eq!(
            reply.header("ratelimit-policy").unwrap(),
            r#""per-user";q=2;w=60"#
        );
        remaining.push(reply.header("ratelimit").unwrap().to_owned());
    }
    // The third and fourth would have been refused: the field says so (r=0, and the
    // next token within its 30 s interval), and nothing was taken by them.
    assert_eq!(
        remaining,
        [
            r#""per-user";r=1;t=30"#,
            r#""per-user";r=0;t=30"#,
            r#""per-user";r=0;t=30"#,
            r#""per-user";r=0;t=30"#,
        ]
    );
}

#[tokio::test]
async fn a_limit_tried_in_dry_run_never_refuses_while_the_enforced_one_does() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .check(per_user("per-user", Quota::per_minute(3).unwrap(), &clock))
        .check(per_ip("per-ip", Quota::per_minute(1).unwrap(), &clock).dry_run())
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(policy).build().unwrap();
    let server = serve(layer).await;
    let replies = [
        get(server, 1, "/", Some("alice")).await,
        get(server, 1, "/", Some("bob")).await,
        get(server, 1, "/", Some("alice")).await,
        get(server, 1, "/", Some("alice")).await,
        get(server, 1, "/", Some("alice")).await,
    ];
    let statuses: Vec<_> = replies.iter().map(|reply| reply.status).collect();
    // The per-IP limit of 1 would have refused every request after the first; only
    // alice's fourth is refused, by her own limit of 3.
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // The refusal names the enforced check only, and the check on trial stays out of
    // the fields: clients see only what is enforced.
    assert!(
        replies[4].body.contains(r#"["per-user"]"#),
        "{}",
        replies[4].body
    );
    for reply in &replies {
        assert_eq!(
            reply.header("ratelimit-policy").unwrap(),
            r#""per-user";q=3;w=60"#
        );
    }
    assert_eq!(
        replies[1].header("ratelimit").unwrap(),
        r#""per-user";r=2;t=20"#
    );
}

#[tokio::test]
async fn the_inner_service_sees_what_the_dry_run_would_have_refused() {
    use axum::{Extension, Router};
    use turnstile::policy::Verdict;

    let clock = ManualClock::new();
    let policy = Policy::builder()
        .check(per_user("per-user", Quota::per_minute(3).unwrap(), &clock))
        .check(per_ip("per-ip", Quota::per_minute(1).unwrap(), &clock).dry_run())
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(policy).build().unwrap();
    let app = Router::new()
        .fallback(|Extension(verdict): Extension<Verdict>| async move {
            format!("{:?}", verdict.refused_in_dry_run().collect::<Vec<_>>())
        })
        .layer(layer);
    let server = serve_app(app).await;
    let first = get(server, 1, "/", Some("alice")).await;
    let second = get(server, 1, "/", Some("bob")).await;
    assert_eq!((first.status, first.body.as_str()), (StatusCode::OK, "[]"));
    // The per-IP trial would have refused bob's request: check 1.
    assert_eq!(
        (second.status, second.body.as_str()),
        (StatusCode::OK, "[1]")
    );
}
