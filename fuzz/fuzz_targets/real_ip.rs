//! `RealIp`'s guarantee on arbitrary input: a client that is not a trusted proxy can
//! make its key nothing but its own address, whatever headers it sends.
//!
//! Each input picks the trusted ranges (up to four, either family, any prefix), the
//! header (`X-Forwarded-For` or `Forwarded`), a client outside the ranges, the lines
//! of both headers the client sends (arbitrary bytes), and a chain of up to six
//! trusted proxies, each writing the address it got the request from in one of the
//! syntax's forms (port, brackets, quotes, other parameters) — appended to the last
//! line or on a line of its own, or, for the first proxy, replacing the header. Then:
//! - the key `RealIp` gives (with a hop cap no shorter than the chain) is the
//!   client's address as the documentation states it — IPv4-mapped IPv6 as IPv4,
//!   IPv6 by its `/64`, computed here independently — and `client_ip` is the client's
//!   canonical address;
//! - through a layer with one request an hour per key, the request passes, and the
//!   same client through the same chain with other lines of its own is refused: the
//!   same key, whatever it sent;
//! - any lines at all, from a trusted peer and an untrusted one, never panic, and an
//!   untrusted peer is its own key.
#![no_main]

use arbitrary::Arbitrary;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use turnstile::http::{Cidr, ProxyHeader, RateLimitLayer, RealIp};
use turnstile::policy::{Check, KeyExtractor, Policy};
use turnstile::{ManualClock, Quota, TokenBucket};
use turnstile_fuzz::{assert_well_formed, send};

#[derive(Arbitrary, Debug)]
struct Range {
    v4: bool,
    bits: [u8; 16],
    prefix_len: u8,
}

#[derive(Arbitrary, Debug)]
enum Client {
    V4([u8; 4]),
    V6([u8; 16]),
    Mapped([u8; 4]),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Place {
    SameLine,
    NewLine,
    Replace,
}

#[derive(Arbitrary, Debug)]
struct Proxy {
    /// Which trusted range it is in, and its host bits.
    range: u8,
    host: [u8; 16],
    /// An IPv4 proxy as an IPv4-mapped IPv6 peer (a dual-stack listener).
    mapped: bool,
    /// How it writes the address it got the request from.
    place: Place,
    port: Option<u16>,
    brackets: bool,
    quoted: bool,
    params_before: bool,
    params_after: bool,
    upper_case_for: bool,
    spaces: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    forwarded: bool,
    ranges: Vec<Range>,
    client: Client,
    /// Lines of the configured header, then of the other one, the client sends.
    sent: Vec<Vec<u8>>,
    sent_other: Vec<Vec<u8>>,
    /// The lines it sends the second time.
    sent_again: Vec<Vec<u8>>,
    proxies: Vec<Proxy>,
    extra_hops: u8,
    /// Any lines at all, from a trusted and an untrusted peer.
    raw: Vec<Vec<u8>>,
    /// One `X-Forwarded-For` entry, read against std's address parsers.
    entry: Vec<u8>,
}

/// `prefix_len` leading one bits of 32.
fn mask32(prefix_len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix_len)).unwrap_or(0)
}

/// `prefix_len` leading one bits of 128.
fn mask128(prefix_len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix_len)).unwrap_or(0)
}

/// The range as given to `Cidr::new` (its network, host bits clear, and its prefix
/// length), and as the documentation says it is read: an IPv4-mapped IPv6 network
/// (`::ffff:0:0/96` and within) is the IPv4 network it maps.
fn range(range: &Range) -> ((IpAddr, u8), (IpAddr, u8)) {
    if range.v4 {
        let prefix_len = range.prefix_len % 33;
        let bits = u32::from_be_bytes(range.bits[..4].try_into().unwrap());
        let network = (IpAddr::V4((bits & mask32(prefix_len)).into()), prefix_len);
        (network, network)
    } else {
        let prefix_len = range.prefix_len % 129;
        let bits = u128::from_be_bytes(range.bits) & mask128(prefix_len);
        let given = (IpAddr::V6(bits.into()), prefix_len);
        let read = if prefix_len >= 96 && bits >> 32 == 0xffff {
            (IpAddr::V4((bits as u32).into()), prefix_len - 96)
        } else {
            given
        };
        (given, read)
    }
}

/// `ip` with an IPv4-mapped IPv6 address as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.segments() {
            [0, 0, 0, 0, 0, 0xffff, high, low] => {
                IpAddr::V4(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low)))
            }
            _ => ip,
        },
        v4 => v4,
    }
}

/// Whether `ip` is in `(network, prefix_len)`, computed here.
fn within(ip: IpAddr, (network, prefix_len): (IpAddr, u8)) -> bool {
    match (canonical(ip), network) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            u32::from(ip) & mask32(prefix_len) == u32::from(net)
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            u128::from(ip) & mask128(prefix_len) == u128::from(net)
        }
        _ => false,
    }
}

/// The key documented for a client at `ip`: IPv4 as itself, IPv6 by its /64.
fn key_of(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// An address of `(network, prefix_len)` with the host bits `host`.
fn in_range((network, prefix_len): (IpAddr, u8), host: &[u8; 16], mapped: bool) -> IpAddr {
    match network {
        IpAddr::V4(net) => {
            let host = u32::from_be_bytes(host[..4].try_into().unwrap());
            let ip = Ipv4Addr::from(u32::from(net) | (host & !mask32(prefix_len)));
            if mapped { IpAddr::V6(ip.to_ipv6_mapped()) } else { IpAddr::V4(ip) }
        }
        IpAddr::V6(net) => {
            let host = u128::from_be_bytes(*host);
            IpAddr::V6((u128::from(net) | (host & !mask128(prefix_len))).into())
        }
    }
}

/// `ip` as one entry of the header, written as `proxy` writes it.
fn entry(forwarded: bool, ip: IpAddr, proxy: &Proxy) -> String {
    let address = match (ip, proxy.port) {
        (IpAddr::V4(v4), Some(port)) => format!("{v4}:{port}"),
        (IpAddr::V4(v4), None) => v4.to_string(),
        (IpAddr::V6(v6), Some(port)) => format!("[{v6}]:{port}"),
        (IpAddr::V6(v6), None) if proxy.brackets || forwarded => format!("[{v6}]"),
        (IpAddr::V6(v6), None) => v6.to_string(),
    };
    if !forwarded {
        return address;
    }
    // RFC 7239: a value with `:` or `[` must be quoted; others may be.
    let value = if proxy.quoted || address.contains(':') || address.contains('[') {
        format!("\"{address}\"")
    } else {
        address
    };
    let name = if proxy.upper_case_for { "For" } else { "for" };
    let mut element = String::new();
    if proxy.params_before {
        element.push_str("by=\"_lb,1\";proto=https;");
    }
    element.push_str(&format!("{name}={value}"));
    if proxy.params_after {
        element.push_str(";host=\"a;b,c\\\"d\"");
    }
    element
}

/// What one `X-Forwarded-For` entry names, as the documentation states it, read with
/// std's parsers: an address (IPv6 bare or in brackets, IPv4 bare), either in
/// brackets or IPv4 with a port (decimal up to 65535, or obfuscated: `_` and letters,
/// digits, `.`, `_`, `-`); `None` for anything else, and for more than 64 bytes (no
/// address with a port is that long).
fn xff_entry(entry: &[u8]) -> Option<IpAddr> {
    let entry = std::str::from_utf8(entry.trim_ascii()).ok()?;
    if entry.len() > 64 {
        return None;
    }
    let port = |port: &str| match port.strip_prefix('_') {
        Some(obfuscated) => {
            !obfuscated.is_empty()
                && obfuscated
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }
        None => {
            (1..=5).contains(&port.len())
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok()
        }
    };
    if let Some(bracketed) = entry.strip_prefix('[') {
        let (v6, after) = bracketed.split_once(']')?;
        let v6: Ipv6Addr = v6.parse().ok()?;
        return (after.is_empty() || after.strip_prefix(':').is_some_and(port))
            .then_some(IpAddr::V6(v6));
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    let (v4, after) = entry.split_once(':')?;
    let v4: Ipv4Addr = v4.parse().ok()?;
    port(after).then_some(IpAddr::V4(v4))
}

fn values(lines: &[Vec<u8>]) -> Vec<HeaderValue> {
    lines
        .iter()
        .filter(|line| line.len() <= 8 * 1024)
        .filter_map(|line| HeaderValue::from_bytes(line).ok())
        .take(16)
        .collect()
}

fn request(peer: IpAddr, lines: &[(HeaderName, HeaderValue)]) -> Request<()> {
    let mut request = Request::new(());
    for (name, value) in lines {
        request.headers_mut().append(name.clone(), value.clone());
    }
    request.extensions_mut().insert(SocketAddr::new(peer, 4711));
    request
}

fn key(extractor: &RealIp, request: Request<()>) -> Option<IpAddr> {
    let (parts, ()) = request.into_parts();
    extractor.with_key(&parts, |ip| *ip)
}

fuzz_target!(|input: Input| {
    let header = if input.forwarded {
        ProxyHeader::Forwarded
    } else {
        ProxyHeader::XForwardedFor
    };
    let other = if input.forwarded {
        ProxyHeader::XForwardedFor
    } else {
        ProxyHeader::Forwarded
    };
    let (given, ranges): (Vec<_>, Vec<_>) = input.ranges.iter().take(4).map(range).unzip();
    let client = match input.client {
        Client::V4(o) => IpAddr::V4(o.into()),
        Client::V6(o) => IpAddr::V6(o.into()),
        Client::Mapped(o) => IpAddr::V6(Ipv4Addr::from(o).to_ipv6_mapped()),
    };
    let trusted = |ip: IpAddr| ranges.iter().any(|&r| within(ip, r));
    let mut extractor = RealIp::new(header);
    for &(network, prefix_len) in &given {
        let cidr = Cidr::new(network, prefix_len).expect("a network with its host bits clear");
        extractor = extractor.trust(cidr);
    }
    // Each proxy with its address. An IPv4-mapped address drawn from an IPv6 range
    // is IPv4, outside it: such a proxy is not trusted, and is left out.
    let proxies: Vec<(&Proxy, IpAddr)> = if ranges.is_empty() {
        Vec::new()
    } else {
        input
            .proxies
            .iter()
            .take(6)
            .map(|proxy| {
                let range = ranges[usize::from(proxy.range) % ranges.len()];
                (proxy, in_range(range, &proxy.host, proxy.mapped))
            })
            .filter(|&(_, ip)| trusted(ip))
            .collect()
    };
    let extractor = extractor.max_hops(proxies.len() + usize::from(input.extra_hops % 4));

    // One entry, behind a peer trusting every address: the entry's address as std
    // reads it, or the peer where it names none.
    if !input.entry.contains(&b',')
        && let Ok(value) = HeaderValue::from_bytes(&input.entry)
    {
        let everyone = RealIp::new(ProxyHeader::XForwardedFor)
            .trust("0.0.0.0/0".parse().expect("a network"))
            .trust("::/0".parse().expect("a network"));
        let peer = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let mut headers = http::HeaderMap::new();
        headers.append("x-forwarded-for", value);
        let expected = xff_entry(&input.entry).map_or(peer, canonical);
        assert_eq!(
            everyone.client_ip(peer, &headers),
            expected,
            "{:?}",
            String::from_utf8_lossy(&input.entry)
        );
    }

    // Any lines at all, from a trusted and an untrusted peer: no panic; the untrusted
    // peer is its own key.
    let raw: Vec<_> = values(&input.raw)
        .into_iter()
        .map(|value| (header.name(), value))
        .collect();
    if let Some(&range) = ranges.first() {
        let proxy = in_range(range, &[0; 16], false);
        let _ = key(&extractor, request(proxy, &raw));
    }
    if !trusted(client) {
        assert_eq!(key(&extractor, request(client, &raw)), Some(key_of(client)));
    }

    if trusted(client) {
        return;
    }
    // The client's lines, then each proxy's entry, as it writes it.
    let chain = |sent: &[Vec<u8>]| {
        let mut lines: Vec<Vec<u8>> = values(sent).iter().map(|v| v.as_bytes().to_vec()).collect();
        let mut from = client;
        for (at, &(proxy, address)) in proxies.iter().enumerate() {
            let entry = entry(input.forwarded, from, proxy);
            match proxy.place {
                Place::Replace if at == 0 => lines = vec![entry.into_bytes()],
                Place::SameLine if !lines.is_empty() => {
                    let last = lines.last_mut().unwrap();
                    last.extend_from_slice(if proxy.spaces { b" , " } else { b"," });
                    last.extend_from_slice(entry.as_bytes());
                }
                _ => lines.push(entry.into_bytes()),
            }
            from = address;
        }
        let mut headers: Vec<(HeaderName, HeaderValue)> = values(&input.sent_other)
            .into_iter()
            .map(|value| (other.name(), value))
            .collect();
        for line in lines {
            // A proxy's entry is valid header text; the client's lines were checked.
            let value = HeaderValue::from_bytes(&line).expect("a valid header value");
            headers.push((header.name(), value));
        }
        (from, headers)
    };
    let (peer, first) = chain(&input.sent);
    let (_, second) = chain(&input.sent_again);
    let described = |lines: &[(HeaderName, HeaderValue)]| {
        lines
            .iter()
            .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes())))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        key(&extractor, request(peer, &first)),
        Some(key_of(client)),
        "client {client} via {peer}: {:?}",
        described(&first)
    );
    let (parts, ()) = request(peer, &first).into_parts();
    assert_eq!(extractor.client_ip_of(&parts), Some(canonical(client)));

    // Through the layer: the client's second request, other lines of its own in front
    // of the same chain, has the first one's key.
    let hourly = Quota::per_hour(1).expect("1 per hour is a quota");
    let limiter = TokenBucket::<IpAddr, _>::with_clock(hourly, ManualClock::new()).unwrap();
    let policy = Policy::builder()
        .check(Check::from_limiter("per-client", Arc::new(limiter), extractor))
        .build()
        .expect("a valid policy");
    let layer = RateLimitLayer::builder(policy).build().expect("a valid layer");
    let first = send(&layer, request(peer, &first));
    let second_reply = send(&layer, request(peer, &second));
    assert_well_formed(&first);
    assert_well_formed(&second_reply);
    assert_eq!(first.response.status(), StatusCode::OK);
    assert_eq!(
        second_reply.response.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "client {client} via {peer}: {:?}",
        described(&second)
    );
});
