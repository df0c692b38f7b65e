//! `RealIp` behind trusted proxies, through the layer on a real server on loopback:
//! 127.0.0.1 is the trusted proxy, other 127/8 addresses are clients that reach the
//! server directly. Every limit allows one request per minute on a clock that never
//! moves, so a second request is refused exactly when it has the first one's key.

use crate::server::{Reply, request, send, serve};
use axum::extract::ConnectInfo;
use http::{HeaderValue, Method, StatusCode};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use turnstile::http::{ProxyHeader, RateLimitLayer, RealIp};
use turnstile::policy::{Check, Policy};
use turnstile::{ManualClock, Quota, TokenBucket};

const PROXY: u8 = 1;

/// A server keyed by `RealIp` reading `header`, trusting 127.0.0.1 and 10.0.0.0/8.
async fn server(header: ProxyHeader) -> SocketAddr {
    let client = RealIp::from_extension(header, |info: &ConnectInfo<SocketAddr>| info.0)
        .trust("127.0.0.1".parse().unwrap())
        .trust("10.0.0.0/8".parse().unwrap());
    let limiter =
        TokenBucket::<IpAddr, _>::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new())
            .unwrap();
    let policy = Policy::builder()
        .check(Check::from_limiter("per-client", Arc::new(limiter), client))
        .build()
        .unwrap();
    serve(RateLimitLayer::builder(policy).build().unwrap()).await
}

/// A GET from 127.0.0.`from` with one line of `header` per value.
async fn get(server: SocketAddr, from: u8, header: ProxyHeader, lines: &[&[u8]]) -> Reply {
    let mut request = request(Method::GET, "/", None);
    for line in lines {
        request
            .headers_mut()
            .append(header.name(), HeaderValue::from_bytes(line).unwrap());
    }
    send(server, from, request).await
}

#[tokio::test]
async fn a_client_that_reaches_the_server_directly_is_its_peer_address_whatever_it_sends() {
    let server = server(ProxyHeader::XForwardedFor).await;
    let xff = ProxyHeader::XForwardedFor;
    assert_eq!(
        get(server, 2, xff, &[b"203.0.113.1"]).await.status,
        StatusCode::OK
    );
    // Another address, a trusted one, none at all, many: the same key, refused.
    for spoof in [
        &b"203.0.113.2"[..],
        b"10.0.0.1",
        b"127.0.0.1",
        b"",
        b"1.1.1.1, 2.2.2.2",
    ] {
        let reply = get(server, 2, xff, &[spoof]).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{spoof:?}");
    }
    // A different peer with the same header is a different client.
    assert_eq!(
        get(server, 3, xff, &[b"203.0.113.2"]).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn behind_the_trusted_proxy_the_client_is_the_address_the_proxy_appended() {
    let server = server(ProxyHeader::XForwardedFor).await;
    let xff = ProxyHeader::XForwardedFor;
    // 203.0.113.5 behind 10.0.0.2, which the proxy at 127.0.0.1 appended.
    let first = get(server, PROXY, xff, &[b"203.0.113.5, 10.0.0.2"]).await;
    assert_eq!(first.status, StatusCode::OK);
    // Whatever the client put in front, in the same line or lines of its own.
    for lines in [
        &[&b"6.6.6.6, 203.0.113.5, 10.0.0.2"[..]][..],
        &[b"10.0.0.9, 127.0.0.1", b"203.0.113.5,10.0.0.2"],
        &[b"\"unterminated, 203.0.113.5", b"10.0.0.2"],
    ] {
        let reply = get(server, PROXY, xff, lines).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{lines:?}");
    }
    let other = get(server, PROXY, xff, &[b"203.0.113.6, 10.0.0.2"]).await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "another client behind the proxies"
    );
}

#[tokio::test]
async fn forwarded_is_read_as_rfc_7239_writes_it() {
    let server = server(ProxyHeader::Forwarded).await;
    let fwd = ProxyHeader::Forwarded;
    let client = b"for=\"[2001:db8:cafe:1::17]:4711\";proto=https, for=10.0.0.2";
    assert_eq!(
        get(server, PROXY, fwd, &[client]).await.status,
        StatusCode::OK
    );
    // The same /64, a spoofed element in front, the proxy's element on its own line.
    let same = get(
        server,
        PROXY,
        fwd,
        &[
            b"for=6.6.6.6, For=\"[2001:db8:cafe:1::99]\"",
            b"for=10.0.0.2;by=_lb",
        ],
    )
    .await;
    assert_eq!(same.status, StatusCode::TOO_MANY_REQUESTS);
    // X-Forwarded-For is not the header this server reads: the key is the proxy.
    let mut xff = request(Method::GET, "/", None);
    xff.headers_mut()
        .insert("x-forwarded-for", HeaderValue::from_static("203.0.113.77"));
    assert_eq!(send(server, PROXY, xff).await.status, StatusCode::OK);
    let bare = get(server, PROXY, fwd, &[]).await;
    assert_eq!(
        bare.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the proxy's key again"
    );
}

#[tokio::test]
async fn entries_that_name_no_address_key_on_the_nearest_trusted_hop() {
    let server = server(ProxyHeader::Forwarded).await;
    let fwd = ProxyHeader::Forwarded;
    // The proxy at 127.0.0.1 says its client is 10.0.0.3, which says `unknown`: the
    // key is 10.0.0.3, and what lies left of `unknown` is never read.
    let first = get(
        server,
        PROXY,
        fwd,
        &[b"for=203.0.113.1, for=unknown, for=10.0.0.3"],
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    for lines in [
        &[&b"for=203.0.113.2, for=\"_hidden\", for=10.0.0.3"[..]][..],
        &[b"for=203.0.113.3, for=\"[::1\", for=10.0.0.3"],
        &[b"for=203.0.113.4, proto=https", b"for=10.0.0.3"],
    ] {
        let reply = get(server, PROXY, fwd, lines).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{lines:?}");
    }
    // A malformed nearest entry: the proxy itself.
    let proxy = get(server, PROXY, fwd, &[b"for=203.0.113.1, for=10.0.0.300"]).await;
    assert_eq!(proxy.status, StatusCode::OK);
    let again = get(server, PROXY, fwd, &[b"garbage"]).await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_huge_header_in_front_of_the_proxys_entry_changes_nothing() {
    let server = server(ProxyHeader::XForwardedFor).await;
    let xff = ProxyHeader::XForwardedFor;
    let spoofed = |filler: &[u8]| {
        // What the client sent, then what the proxy appended.
        let mut line = filler.repeat(4_000);
        line.extend_from_slice(b", 203.0.113.9");
        line
    };
    let first = spoofed(b"1.2.3.4, ");
    assert_eq!(
        get(server, PROXY, xff, &[&first]).await.status,
        StatusCode::OK
    );
    let second = spoofed(b"\xff,,\"[");
    let reply = get(server, PROXY, xff, &[&second]).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
}
