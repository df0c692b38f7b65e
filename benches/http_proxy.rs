//! What finding a request's key costs: `PeerIp` (the peer address), and `RealIp`
//! behind three trusted hops — the peer and two more trusted entries, then the client
//! — in `X-Forwarded-For` and in `Forwarded`, IPv4 and IPv6. Only the extractor is
//! measured (`KeyExtractor::with_key` on a request's `Parts`), not a limiter.
//!
//! Run: `cargo bench --features tower --bench http_proxy` (criterion), or count
//! instructions per call under callgrind, repeatably:
//! `valgrind --tool=callgrind --toggle-collect='*measured*' BENCH_BINARY --instructions NAME N`
//! (`results/http-proxy.sh` does both).

use criterion::{Criterion, criterion_group};
use http::Request;
use http::request::Parts;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use turnstile::http::{PeerIp, ProxyHeader, RealIp};
use turnstile::policy::KeyExtractor;

/// One contender: a name, an extractor and the request it keys.
struct Case {
    name: &'static str,
    extractor: Extractor,
    request: Parts,
}

enum Extractor {
    Peer(PeerIp),
    Real(RealIp),
}

impl Extractor {
    fn key(&self, request: &Parts) -> Option<IpAddr> {
        match self {
            Self::Peer(peer) => peer.with_key(request, |ip| *ip),
            Self::Real(real) => real.with_key(request, |ip| *ip),
        }
    }
}

fn request(peer: &str, header: Option<(ProxyHeader, &str)>) -> Parts {
    let mut builder = Request::builder()
        .header("host", "api.example.com")
        .header("user-agent", "wrk")
        .header("x-api-key", "alice")
        .extension(peer.parse::<SocketAddr>().expect("a socket address"));
    if let Some((header, value)) = header {
        builder = builder.header(header.name(), value);
    }
    builder.body(()).expect("a request").into_parts().0
}

/// Trusts 10.0.0.0/8 and 2001:db8:ffff::/48, where the load balancers are.
fn real_ip(header: ProxyHeader) -> RealIp {
    RealIp::new(header)
        .trust("10.0.0.0/8".parse().expect("a network"))
        .trust("2001:db8:ffff::/48".parse().expect("a network"))
}

/// The contenders, with the key each must find.
fn cases() -> Vec<(Case, IpAddr)> {
    let xff = ProxyHeader::XForwardedFor;
    let fwd = ProxyHeader::Forwarded;
    let ip = |text: &str| text.parse::<IpAddr>().expect("an address");
    vec![
        (
            Case {
                name: "peer-ip",
                extractor: Extractor::Peer(PeerIp::new()),
                request: request("203.0.113.7:40000", Some((xff, "6.6.6.6"))),
            },
            ip("203.0.113.7"),
        ),
        (
            Case {
                name: "real-ip-untrusted-peer",
                extractor: Extractor::Real(real_ip(xff)),
                request: request("203.0.113.7:40000", Some((xff, "6.6.6.6"))),
            },
            ip("203.0.113.7"),
        ),
        (
            Case {
                name: "real-ip-xff-3-hops",
                extractor: Extractor::Real(real_ip(xff)),
                request: request(
                    "10.0.0.1:40000",
                    Some((xff, "6.6.6.6, 203.0.113.7, 10.0.0.3, 10.0.0.2")),
                ),
            },
            ip("203.0.113.7"),
        ),
        (
            Case {
                name: "real-ip-xff-3-hops-ipv6",
                extractor: Extractor::Real(real_ip(xff)),
                request: request(
                    "[2001:db8:ffff::1]:40000",
                    Some((xff, "2001:db8:1:2::7, 2001:db8:ffff::3, 2001:db8:ffff::2")),
                ),
            },
            ip("2001:db8:1:2::"),
        ),
        (
            Case {
                name: "real-ip-forwarded-3-hops",
                extractor: Extractor::Real(real_ip(fwd)),
                request: request(
                    "10.0.0.1:40000",
                    Some((
                        fwd,
                        "for=6.6.6.6, for=\"203.0.113.7:4711\";proto=https, for=10.0.0.3, for=10.0.0.2;proto=https",
                    )),
                ),
            },
            ip("203.0.113.7"),
        ),
    ]
}

/// The counted part: `calls` keys found. Not inlined, so callgrind can switch
/// counting on at its entry and off at its exit.
#[inline(never)]
fn measured(case: &Case, calls: u64) -> u64 {
    let mut found = 0;
    for _ in 0..calls {
        found += u64::from(case.extractor.key(black_box(&case.request)).is_some());
    }
    found
}

fn extractors(c: &mut Criterion) {
    let mut group = c.benchmark_group("key");
    for (case, expected) in cases() {
        assert_eq!(
            case.extractor.key(&case.request),
            Some(expected),
            "{}",
            case.name
        );
        group.bench_function(case.name, |b| {
            b.iter(|| case.extractor.key(black_box(&case.request)))
        });
    }
    group.finish();
}

criterion_group!(benches, extractors);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--instructions") {
        let name = args.get(at + 1).expect("--instructions NAME CALLS");
        let calls: u64 = args
            .get(at + 2)
            .and_then(|calls| calls.parse().ok())
            .expect("--instructions NAME CALLS");
        let (case, expected) = cases()
            .into_iter()
            .find(|(case, _)| case.name == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        assert_eq!(case.extractor.key(&case.request), Some(expected));
        assert_eq!(measured(&case, calls), calls);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
