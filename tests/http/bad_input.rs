//! Requests without a usable key, and bytes no well-behaved client sends: each gets
//! the documented answer — never a 500, never a panic (the server keeps serving).

use crate::server::{API_KEY, get, per_ip, per_user, raw, request, send, serve, status_of};
use http::{HeaderValue, Method, StatusCode};
use std::net::SocketAddr;
use turnstile::http::RateLimitLayer;
use turnstile::policy::{MissingKey, Policy};
use turnstile::{ManualClock, Quota};

/// Per user (rejecting keyless requests unless told otherwise) and per IP.
async fn server(
    missing: MissingKey<String>,
    layer: impl FnOnce(RateLimitLayerBuilder) -> RateLimitLayerBuilder,
) -> SocketAddr {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .check(per_user("per-user", Quota::per_minute(5).unwrap(), &clock).on_missing_key(missing))
        .check(per_ip("per-ip", Quota::per_minute(100).unwrap(), &clock))
        .build()
        .unwrap();
    serve(layer(RateLimitLayer::builder(policy)).build().unwrap()).await
}

use turnstile::http::RateLimitLayerBuilder;

fn same(b: RateLimitLayerBuilder) -> RateLimitLayerBuilder {
    b
}

/// What a request without a usable key gets under `MissingKey::Reject`.
fn assert_rejected(reply: &crate::server::Reply) {
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.header("retry-after"), None);
    assert_eq!(
        reply.header("ratelimit"),
        None,
        "no key, no limit to report"
    );
    assert!(reply.header("ratelimit-policy").is_some());
    assert_eq!(
        reply.body,
        r#"{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request has no usable key for the rate limit","violated-policies":["per-user"]}"#
    );
}

#[tokio::test]
async fn missing_empty_repeated_or_oversized_keys_are_rejected_with_400() {
    let server = server(MissingKey::Reject, same).await;
    assert_rejected(&get(server, 1, "/", None).await);
    assert_rejected(&get(server, 1, "/", Some("")).await);
    assert_rejected(&get(server, 1, "/", Some(&"k".repeat(257))).await);
    assert_rejected(&get(server, 1, "/", Some(&"k".repeat(64 * 1024))).await);
    let mut twice = request(Method::GET, "/", Some("alice"));
    twice
        .headers_mut()
        .append(API_KEY, HeaderValue::from_static("bob"));
    assert_rejected(&send(server, 1, twice).await);
    // 256 bytes is still a key.
    assert_eq!(
        get(server, 1, "/", Some(&"k".repeat(256))).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn non_ascii_key_bytes_are_no_key_not_an_error() {
    let server = server(MissingKey::Reject, same).await;
    // Bytes 0x80-0xff are legal in an HTTP/1.1 field value (obs-text) but not text.
    let mut latin1 = request(Method::GET, "/", None);
    latin1
        .headers_mut()
        .insert(API_KEY, HeaderValue::from_bytes(b"caf\xe9").unwrap());
    assert_rejected(&send(server, 1, latin1).await);
    let reply = raw(
        server,
        b"GET / HTTP/1.1\r\nhost: t\r\nx-api-key: \xff\xfe\xfd\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&reply), Some(400), "{reply}");
    assert!(
        reply.contains(r#""violated-policies":["per-user"]"#),
        "{reply}"
    );
}

#[tokio::test]
async fn malformed_requests_never_get_a_500_and_the_server_keeps_serving() {
    let server = server(MissingKey::Reject, same).await;
    let cases: [(&[u8], u16); 6] = [
        // A control byte in the key: hyper's parser refuses the head (400).
        (b"GET / HTTP/1.1\r\nhost: t\r\nx-api-key: a\x01b\r\nconnection: close\r\n\r\n", 400),
        // Odd targets: the route matcher sees them; the key still decides.
        (b"OPTIONS * HTTP/1.1\r\nhost: t\r\nx-api-key: alice\r\nconnection: close\r\n\r\n", 200),
        (b"GET /%ff%fe/../x HTTP/1.1\r\nhost: t\r\nx-api-key: alice\r\nconnection: close\r\n\r\n", 200),
        (b"GET http://other.example/balance HTTP/1.1\r\nhost: t\r\nx-api-key: alice\r\nconnection: close\r\n\r\n", 200),
        // A key header with spaces inside is visible ASCII: a key like any other.
        (b"GET / HTTP/1.1\r\nhost: t\r\nx-api-key:    a b   \r\nconnection: close\r\n\r\n", 200),
        // No host, HTTP/1.0.
        (b"GET / HTTP/1.0\r\nx-api-key: alice\r\n\r\n", 200),
    ];
    for (case, status) in cases {
        let reply = raw(server, case).await;
        assert_eq!(
            status_of(&reply),
            Some(status),
            "{:?} got {reply:?}",
            String::from_utf8_lossy(case)
        );
    }
    // A head larger than hyper buffers (about 400 KiB) is refused by hyper itself
    // (431) or the connection is closed; either way not a 500.
    let mut huge = b"GET / HTTP/1.1\r\nhost: t\r\nx-api-key: ".to_vec();
    huge.extend(std::iter::repeat_n(b'k', 1 << 20));
    huge.extend(b"\r\nconnection: close\r\n\r\n");
    let reply = raw(server, &huge).await;
    assert!(matches!(status_of(&reply), None | Some(431)), "{reply}");
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn keyless_requests_can_skip_the_check_or_share_one_key() {
    // Skip: limited by the per-IP check alone, which still reports.
    let skip = server(MissingKey::Skip, same).await;
    let reply = get(skip, 1, "/", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit").unwrap(), r#""per-ip";r=99;t=1"#);

    // Shared: every keyless request, from any address, draws on one key.
    let shared = server(MissingKey::Shared("anonymous".into()), same).await;
    for from in 1..=5 {
        assert_eq!(get(shared, from, "/", None).await.status, StatusCode::OK);
    }
    let reply = get(shared, 6, "/", None).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        get(shared, 6, "/", Some("anonymous2")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_missing_key_status_is_configurable() {
    let server = server(MissingKey::Reject, |b| {
        b.missing_key_status(StatusCode::UNAUTHORIZED)
    })
    .await;
    let reply = get(server, 1, "/", None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(
        reply
            .body
            .contains(r#""title":"Unauthorized","status":401"#),
        "{}",
        reply.body
    );
}
