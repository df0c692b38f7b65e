//! `RealIp`'s guarantee as properties: a client that is not a trusted proxy gets its
//! own address as its key, whatever headers it sends, behind any chain of trusted
//! proxies that append to the header; and on well-formed chains of any entries, the
//! key is the one the documented walk gives (a plain reference below).

use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use turnstile::http::{ProxyHeader, RealIp};
use turnstile::policy::KeyExtractor;

/// The ranges trusted: 10.0.0.0/8, 2001:db8:ffff::/48 and the one host 192.168.7.7.
fn real_ip(header: ProxyHeader) -> RealIp {
    RealIp::new(header)
        .trust("10.0.0.0/8".parse().unwrap())
        .trust("2001:db8:ffff::/48".parse().unwrap())
        .trust("192.168.7.7".parse().unwrap())
}

/// Whether `ip` is in a trusted range, by the ranges' definitions (independently of
/// the library), an IPv4-mapped address as IPv4.
fn is_trusted(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.octets()[0] == 10 || v4 == Ipv4Addr::new(192, 168, 7, 7),
        IpAddr::V6(v6) => v6.segments()[..3] == [0x2001, 0xdb8, 0xffff],
    }
}

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

/// What `extractor` keys a request from `peer` with `headers` on.
fn key(extractor: &RealIp, peer: IpAddr, headers: HeaderMap) -> Option<IpAddr> {
    let (mut parts, ()): (Parts, ()) = Request::new(()).into_parts();
    parts.headers = headers;
    parts.extensions.insert(SocketAddr::new(peer, 4711));
    extractor.with_key(&parts, |ip| *ip)
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| IpAddr::V4(o.into())),
        any::<[u8; 16]>().prop_map(|o| IpAddr::V6(o.into())),
        any::<[u8; 4]>().prop_map(|o| IpAddr::V6(Ipv4Addr::from(o).to_ipv6_mapped())),
        // Near the trusted ranges, to find an edge.
        any::<[u8; 3]>().prop_map(|[b, c, d]| IpAddr::V4([11, b, c, d].into())),
        any::<u128>()
            .prop_map(|low| { IpAddr::V6(((0x2001_0db8_fffe_u128 << 80) | (low >> 48)).into()) }),
    ]
}

fn trusted_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 3]>().prop_map(|[b, c, d]| IpAddr::V4([10, b, c, d].into())),
        any::<[u8; 3]>()
            .prop_map(|[b, c, d]| IpAddr::V6(Ipv4Addr::new(10, b, c, d).to_ipv6_mapped())),
        any::<u128>()
            .prop_map(|low| { IpAddr::V6(((0x2001_0db8_ffff_u128 << 80) | (low >> 48)).into()) }),
        Just(IpAddr::V4(Ipv4Addr::new(192, 168, 7, 7))),
    ]
}

fn untrusted_ip() -> impl Strategy<Value = IpAddr> {
    any_ip().prop_filter("an untrusted address", |ip| !is_trusted(*ip))
}

/// Bytes a client may send in a header line: pieces of both syntaxes, addresses
/// trusted and not, and any byte a header value can hold.
fn junk() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            &b"for="[..],
            b"For=",
            b"\"",
            b",",
            b", ",
            b";",
            b"\\",
            b"[",
            b"]",
            b":",
            b" ",
            b"unknown",
            b"_hidden",
            b"\xff",
            b"proto=https",
            b":80",
        ])
        .prop_map(<[u8]>::to_vec),
        any_ip().prop_map(|ip| ip.to_string().into_bytes()),
        trusted_ip().prop_map(|ip| ip.to_string().into_bytes()),
        prop::collection::vec(prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff], 0..8),
    ];
    prop::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

/// How a trusted proxy writes the address it got the request from.
#[derive(Clone, Debug)]
struct Write {
    /// Appended to the last line (or the first, if none), or a line of its own; the
    /// first proxy may replace the header instead.
    place: Place,
    /// The syntax's forms: with a port, in brackets, quoted, with other parameters.
    port: Option<u16>,
    brackets: bool,
    params_before: bool,
    params_after: bool,
    for_name: &'static str,
    separator: &'static str,
}

#[derive(Clone, Copy, Debug)]
enum Place {
    SameLine,
    NewLine,
    Replace,
}

fn write() -> impl Strategy<Value = Write> {
    (
        prop_oneof![
            Just(Place::SameLine),
            Just(Place::NewLine),
            Just(Place::Replace)
        ],
        any::<Option<u16>>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec!["for", "For", "FOR"]),
        prop::sample::select(vec![",", ", ", " ,\t"]),
    )
        .prop_map(
            |(place, port, brackets, params_before, params_after, for_name, separator)| Write {
                place,
                port,
                brackets,
                params_before,
                params_after,
                for_name,
                separator,
            },
        )
}

/// `ip` as one entry of `header`, written as `how` says.
fn entry(header: ProxyHeader, ip: IpAddr, how: &Write) -> String {
    let address = match (ip, how.port) {
        (IpAddr::V4(v4), Some(port)) => format!("{v4}:{port}"),
        (IpAddr::V4(v4), None) => v4.to_string(),
        (IpAddr::V6(v6), Some(port)) => format!("[{v6}]:{port}"),
        (IpAddr::V6(v6), None) if how.brackets || header == ProxyHeader::Forwarded => {
            format!("[{v6}]")
        }
        (IpAddr::V6(v6), None) => v6.to_string(),
    };
    match header {
        ProxyHeader::XForwardedFor => address,
        _ => {
            let mut element = String::new();
            if how.params_before {
                element.push_str("proto=https;by=\"_lb,1\";");
            }
            element.push_str(&format!("{}=\"{address}\"", how.for_name));
            if how.params_after {
                element.push_str(";host=\"a;b,c\\\"d\"");
            }
            element
        }
    }
}

/// The header's lines after a proxy wrote `entry` as `how` says.
fn append(lines: &mut Vec<Vec<u8>>, entry: &str, how: &Write, first_proxy: bool) {
    match how.place {
        Place::Replace if first_proxy => *lines = vec![entry.as_bytes().to_vec()],
        Place::SameLine if !lines.is_empty() => {
            let last = lines.last_mut().unwrap();
            last.extend_from_slice(how.separator.as_bytes());
            last.extend_from_slice(entry.as_bytes());
        }
        _ => lines.push(entry.as_bytes().to_vec()),
    }
}

fn headers(header: ProxyHeader, lines: &[Vec<u8>], noise: &[Vec<u8>]) -> HeaderMap {
    let mut map = HeaderMap::new();
    let other = match header {
        ProxyHeader::XForwardedFor => ProxyHeader::Forwarded,
        _ => ProxyHeader::XForwardedFor,
    };
    for line in noise {
        map.append(other.name(), HeaderValue::from_bytes(line).unwrap());
    }
    for line in lines {
        map.append(header.name(), HeaderValue::from_bytes(line).unwrap());
    }
    map.append(
        HeaderName::from_static("x-real-ip"),
        HeaderValue::from_static("6.6.6.6"),
    );
    map
}

fn header() -> impl Strategy<Value = ProxyHeader> {
    prop_oneof![
        Just(ProxyHeader::XForwardedFor),
        Just(ProxyHeader::Forwarded)
    ]
}

/// One entry of a well-formed chain, for the reference walk.
#[derive(Clone, Debug)]
enum Entry {
    Address(IpAddr),
    Unknown,
    Obfuscated,
    /// Malformed in both syntaxes.
    Malformed(&'static str),
    /// `Forwarded`: an element without `for` (`X-Forwarded-For`: malformed).
    NoFor,
}

fn chain_entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        4 => trusted_ip().prop_map(Entry::Address),
        2 => any_ip().prop_map(Entry::Address),
        1 => Just(Entry::Unknown),
        1 => Just(Entry::Obfuscated),
        1 => prop::sample::select(vec!["1.2.3", "10.0.0.300", "[::1", "1.2.3.4:99999", "[::1]:x", "abc"])
            .prop_map(Entry::Malformed),
        1 => Just(Entry::NoFor),
    ]
}

fn written(header: ProxyHeader, entry: &Entry) -> String {
    let plain = Write {
        place: Place::NewLine,
        port: None,
        brackets: false,
        params_before: false,
        params_after: false,
        for_name: "for",
        separator: ",",
    };
    let node = |node: &str| match header {
        ProxyHeader::XForwardedFor => node.to_owned(),
        _ => format!("for=\"{node}\""),
    };
    match entry {
        Entry::Address(ip) => self::entry(header, *ip, &plain),
        Entry::Unknown => node("unknown"),
        Entry::Obfuscated => node("_hidden"),
        Entry::Malformed(text) => node(text),
        Entry::NoFor => match header {
            ProxyHeader::XForwardedFor => "proto=https".to_owned(),
            _ => "proto=https;by=_lb".to_owned(),
        },
    }
}

/// The walk as the documentation states it, on the list of entries: from the peer,
/// right to left, at most `max_hops` entries; the first untrusted address is the
/// client; an entry that names no address, or the end of the list or of the hops,
/// leaves the nearest trusted hop.
fn reference(peer: IpAddr, entries: &[Entry], max_hops: usize) -> IpAddr {
    let mut nearest = canonical(peer);
    if !is_trusted(nearest) {
        return nearest;
    }
    for entry in entries.iter().rev().take(max_hops) {
        let Entry::Address(ip) = entry else {
            return nearest;
        };
        if !is_trusted(*ip) {
            return canonical(*ip);
        }
        nearest = canonical(*ip);
    }
    nearest
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The guarantee: behind any chain of trusted proxies that append (the first may
    /// replace) — or none — a client that is not trusted is keyed by its own address,
    /// whatever lines of either header it sent.
    #[test]
    fn an_untrusted_client_is_keyed_by_its_own_address_whatever_it_sends(
        header in header(),
        client in untrusted_ip(),
        sent in prop::collection::vec(junk(), 0..4),
        noise in prop::collection::vec(junk(), 0..2),
        proxies in prop::collection::vec((trusted_ip(), write()), 0..6),
    ) {
        let mut lines = sent;
        let mut from = client;
        for (at, (proxy, how)) in proxies.iter().enumerate() {
            append(&mut lines, &entry(header, from, how), how, at == 0);
            from = *proxy;
        }
        let got = key(&real_ip(header), from, headers(header, &lines, &noise));
        prop_assert_eq!(got, Some(key_of(client)), "lines {:?}", lines
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect::<Vec<_>>());
    }

    /// Well-formed chains of every kind of entry, split into lines anywhere, keyed as
    /// the documented walk (the reference above) says, under any hop cap.
    #[test]
    fn well_formed_chains_are_walked_as_documented(
        header in header(),
        peer in prop_oneof![trusted_ip(), any_ip()],
        entries in prop::collection::vec(chain_entry(), 0..8),
        breaks in prop::collection::vec(any::<bool>(), 8),
        max_hops in 0usize..10,
    ) {
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for (at, entry) in entries.iter().enumerate() {
            let text = written(header, entry);
            match lines.last_mut() {
                Some(line) if !breaks[at] => {
                    line.extend_from_slice(b", ");
                    line.extend_from_slice(text.as_bytes());
                }
                _ => lines.push(text.into_bytes()),
            }
        }
        let extractor = real_ip(header).max_hops(max_hops);
        let got = key(&extractor, peer, headers(header, &lines, &[]));
        prop_assert_eq!(got, Some(key_of(reference(peer, &entries, max_hops))));
    }
}
