//! The HTTP layer end to end on arbitrary requests, through real policies.
//!
//! Each input is sent twice through a fresh layer: the second request keeps the
//! first's method, path and trusted key source (the `x-api-key` header under
//! `/user`, the peer address elsewhere) and changes everything the configuration
//! does not trust — `X-Forwarded-For`, `Forwarded`, `X-Real-IP`, other headers — and,
//! under `/user`, the peer. Every limit allows one request per hour, so the second
//! request is refused exactly when it has the first one's key, which shows what the
//! key was derived from. Checked against a plain reading of the documented rules:
//! - never a panic, never a 500; 200, 400 (no usable key) or 429 only;
//! - `/user` is keyed by `x-api-key` when it is present once, not empty, at most 256
//!   bytes and visible ASCII (else 400); every other path by the peer's address, an
//!   IPv4-mapped IPv6 address as its IPv4 address, IPv6 by its `/64` (no peer: 400);
//! - every response well formed ([`turnstile_fuzz::assert_well_formed`]: a 429
//!   carries `Retry-After`, refusals and only they a problem-details body, the
//!   RateLimit fields' parameters integers and consistent);
//! - on the clock this target never moves, a key's first request announces
//!   `"<check>";q=1;w=3600` and `"<check>";r=0;t=3600`, and a refused one the same
//!   and `Retry-After: 3600`: the next token, an hour after the epoch, exactly.
#![no_main]

use arbitrary::Arbitrary;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use turnstile::http::{HeaderKey, PeerIp, RateLimitLayer};
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{ManualClock, Quota, TokenBucket};
use turnstile_fuzz::{Reply, assert_well_formed, field, retry_after_secs, send, under_prefix};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

#[derive(Arbitrary, Debug)]
enum Name {
    ApiKey,
    ForwardedFor,
    Forwarded,
    RealIp,
    Host,
    Other(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Header {
    name: Name,
    value: Vec<u8>,
    /// How many times `value` is repeated: huge values from small inputs.
    repeat: u16,
}

#[derive(Arbitrary, Debug)]
enum Peer {
    None,
    V4([u8; 4], u16),
    V6([u8; 16], u16),
    /// `::ffff:a.b.c.d`, a dual-stack listener's IPv4 client.
    Mapped([u8; 4], u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    method: Vec<u8>,
    path: Vec<u8>,
    headers: Vec<Header>,
    peer: Peer,
    /// The second request's untrusted headers.
    other_headers: Vec<Header>,
    /// The second request's peer.
    other_peer: Peer,
}

fn header_name(name: &Name) -> Option<HeaderName> {
    Some(match name {
        Name::ApiKey => API_KEY,
        Name::ForwardedFor => HeaderName::from_static("x-forwarded-for"),
        Name::Forwarded => http::header::FORWARDED,
        Name::RealIp => HeaderName::from_static("x-real-ip"),
        Name::Host => http::header::HOST,
        Name::Other(bytes) => HeaderName::from_bytes(bytes).ok()?,
    })
}

fn header_value(header: &Header) -> Option<HeaderValue> {
    let repeat = usize::from(header.repeat % 512).max(1);
    let bytes = header.value.repeat(repeat);
    // Past 64 KiB a server would refuse the head before any layer sees it.
    (bytes.len() <= 64 * 1024)
        .then(|| HeaderValue::from_bytes(&bytes).ok())
        .flatten()
}

fn socket(peer: &Peer) -> Option<SocketAddr> {
    Some(match *peer {
        Peer::None => return None,
        Peer::V4(ip, port) => SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port),
        Peer::V6(ip, port) => SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port),
        Peer::Mapped(ip, port) => {
            SocketAddr::new(IpAddr::V6(Ipv4Addr::from(ip).to_ipv6_mapped()), port)
        }
    })
}

/// The peer's key as the documentation states it, computed independently.
fn peer_key(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if s[..5] == [0; 5] && s[5] == 0xffff {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                IpAddr::V4(Ipv4Addr::new(a, b, c, d))
            } else {
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        }
    }
}

/// The API key as documented: present once, not empty, at most 256 bytes, visible
/// ASCII.
fn api_key(headers: &[(HeaderName, HeaderValue)]) -> Option<&[u8]> {
    let mut values = headers.iter().filter(|(name, _)| *name == API_KEY);
    let (_, value) = values.next()?;
    let usable = values.next().is_none()
        && !value.is_empty()
        && value.len() <= 256
        && value
            .as_bytes()
            .iter()
            .all(|&b| (0x20..0x7f).contains(&b) || b == b'\t');
    usable.then_some(value.as_bytes())
}

fn layer() -> RateLimitLayer {
    let clock = ManualClock::new();
    let hourly = Quota::per_hour(1).expect("1 per hour is a quota");
    let per_user = Policy::builder()
        .check(Check::new(
            "per-user",
            Arc::new(TokenBucket::<String, _>::with_clock(hourly, clock.clone()).unwrap()),
            Limit::steady(hourly),
            HeaderKey::new(API_KEY),
        ))
        .build()
        .expect("a valid policy");
    let per_ip = Policy::builder()
        .check(Check::new(
            "per-ip",
            Arc::new(TokenBucket::<IpAddr, _>::with_clock(hourly, clock.clone()).unwrap()),
            Limit::steady(hourly),
            PeerIp::new(),
        ))
        .build()
        .expect("a valid policy");
    RateLimitLayer::builder(per_ip)
        .prefix("/user", per_user)
        .build()
        .expect("a valid layer")
}

fn request(
    method: &Method,
    uri: &Uri,
    headers: &[(HeaderName, HeaderValue)],
    peer: Option<SocketAddr>,
) -> Request<()> {
    let mut request = Request::new(());
    *request.method_mut() = method.clone();
    *request.uri_mut() = uri.clone();
    for (name, value) in headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    if let Some(peer) = peer {
        request.extensions_mut().insert(peer);
    }
    request
}

fn headers(list: &[Header], keep_api_key: bool) -> Vec<(HeaderName, HeaderValue)> {
    list.iter()
        .filter_map(|h| Some((header_name(&h.name)?, header_value(h)?)))
        .filter(|(name, _)| keep_api_key || *name != API_KEY)
        .take(200)
        .collect()
}

/// The fields of a key's first request (allowed) and a later one (refused) on the
/// clock this target never moves, exactly: the one check's quota is 1 and its window
/// an hour (`q=1;w=3600`); the bucket was full, so after the first nothing is left
/// and the next token comes on the grid point an hour after the epoch, the instant
/// both requests read (`r=0;t=3600`, `Retry-After: 3600`; `t` is the smaller of the
/// wait and the refill interval, both an hour).
fn check_hourly(first: &Reply, refused: &Reply, user_route: bool) {
    let name = if user_route { "per-user" } else { "per-ip" };
    let exact = |key: &str, value: i64| (key.to_owned(), value);
    for reply in [first, refused] {
        let response = &reply.response;
        assert_eq!(
            field(response, "ratelimit-policy"),
            Some(vec![(
                name.to_owned(),
                [exact("q", 1), exact("w", 3600)].into()
            )]),
            "{response:?}"
        );
        assert_eq!(
            field(response, "ratelimit"),
            Some(vec![(
                name.to_owned(),
                [exact("r", 0), exact("t", 3600)].into()
            )]),
            "{response:?}"
        );
    }
    assert_eq!(first.response.headers().get("retry-after"), None);
    assert_eq!(retry_after_secs(&refused.response), Some(3600));
}

fuzz_target!(|input: Input| {
    let method = Method::from_bytes(&input.method).unwrap_or(Method::GET);
    let Ok(uri) = Uri::try_from(input.path.as_slice()) else {
        return;
    };
    let first_headers = headers(&input.headers, true);
    // The second request: the first's API key headers, in order, and other untrusted
    // headers.
    let mut second_headers: Vec<_> = first_headers
        .iter()
        .filter(|(name, _)| *name == API_KEY)
        .cloned()
        .collect();
    second_headers.extend(headers(&input.other_headers, false));
    let user_route = under_prefix(uri.path(), "/user");
    let first_peer = socket(&input.peer);
    // Off `/user` the peer is the key: the second request keeps it.
    let second_peer = if user_route {
        socket(&input.other_peer)
    } else {
        first_peer
    };

    let layer = layer();
    let first = send(&layer, request(&method, &uri, &first_headers, first_peer));
    let second = send(&layer, request(&method, &uri, &second_headers, second_peer));
    for reply in [&first, &second] {
        assert_well_formed(reply);
    }
    let (first_reply, second_reply) = (first, second);
    let (first, second) = (
        first_reply.response.status(),
        second_reply.response.status(),
    );

    let has_key = if user_route {
        api_key(&first_headers).is_some()
    } else {
        first_peer.is_some()
    };
    if has_key {
        assert_eq!(first, StatusCode::OK, "a fresh key's first request passes");
        // The same key, whatever else changed: refused for the hour.
        assert_eq!(second, StatusCode::TOO_MANY_REQUESTS);
        check_hourly(&first_reply, &second_reply, user_route);
    } else {
        assert_eq!(first, StatusCode::BAD_REQUEST);
        assert_eq!(second, StatusCode::BAD_REQUEST);
    }
    // Keyed by the peer off `/user`: a different network is a different key.
    if !user_route && let Some(peer) = first_peer {
        let third_peer = socket(&input.other_peer);
        let third = send(&layer, request(&method, &uri, &second_headers, third_peer));
        assert_well_formed(&third);
        if third.response.status() == StatusCode::TOO_MANY_REQUESTS {
            check_hourly(&first_reply, &third, false);
        }
        let expected = match third_peer {
            None => StatusCode::BAD_REQUEST,
            Some(other) if peer_key(other) == peer_key(peer) => StatusCode::TOO_MANY_REQUESTS,
            Some(_) => StatusCode::OK,
        };
        assert_eq!(
            third.response.status(),
            expected,
            "{peer} then {third_peer:?}"
        );
    }
});
