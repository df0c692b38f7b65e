//! The client's address behind reverse proxies: the peer's, unless the peer is a proxy
//! you trust, which then vouches for the address it got the request from.

use super::cidr::{Bits, Cidr};
use super::forwarded::{Hops, ProxyHeader};
use super::key::network;
use crate::policy::KeyExtractor;
use http::request::Parts;
use http::{HeaderMap, HeaderName};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The client's IP address behind reverse proxies you trust — nginx's `real_ip`
/// (`set_real_ip_from` with `real_ip_recursive on`) as a key extractor.
///
/// A request's key is its peer's address, exactly as [`PeerIp`](super::PeerIp) takes
/// it, unless the peer is in a range you [`trust`](RealIp::trust). A trusted peer is a
/// proxy, and vouches for the address it got the request from: the last entry of the
/// [`ProxyHeader`] it appended to. The walk goes on from the right while the entries
/// are trusted, and stops at the first address that is not: that is the client. No
/// range is trusted until you add one, so `RealIp` keys exactly as `PeerIp` until
/// then.
///
/// ```
/// use http::Request;
/// use std::net::SocketAddr;
/// use turnstile::http::{ProxyHeader, RealIp};
///
/// // Your load balancers are in 10.0.0.0/8.
/// let client = RealIp::new(ProxyHeader::XForwardedFor).trust("10.0.0.0/8".parse()?);
///
/// // The client wrote the first entry itself; the load balancers appended the rest.
/// let request = Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2")
///     .extension("10.0.0.1:40000".parse::<SocketAddr>()?)
///     .body(())?;
/// let (parts, ()) = request.into_parts();
/// assert_eq!(client.client_ip_of(&parts), Some("203.0.113.7".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # The guarantee
/// **A client that is not in a trusted range can make its key nothing but its own
/// address, whatever headers it sends**: its peer address when it connects to the
/// server itself, and otherwise the address the first trusted proxy got its request
/// from. The walk stops at the first untrusted entry from the right, and everything a
/// client writes into the header lies left of the entry its proxy appended for it, so
/// the walk never reads it. Entries are read right to left as bytes, so nothing on
/// their left (an unterminated quote, bytes that are not text, a megabyte of commas)
/// changes how they are read. The tests and the fuzz target `real_ip` check this.
///
/// It holds as long as every trusted proxy **appends** the address it got the
/// request from to the header you name (or replaces the header with it). A trusted
/// proxy that passes the header on untouched, or writes the other header, hands the
/// key to the client: trust only what you run, name the header it writes, and keep
/// the server unreachable except through it. Anyone inside a trusted range is trusted
/// as a proxy, and can name any key.
///
/// # What the walk meets, and the key
/// | the walk meets | the key |
/// |---|---|
/// | a peer that is not trusted | the peer |
/// | a trusted entry | (the walk goes on, left) |
/// | the first untrusted address | that address |
/// | no header, or no entry left: every hop trusted | the leftmost hop: the last entry read, or the peer |
/// | `unknown`, an obfuscated identifier (`_hidden`), a `Forwarded` element without one `for`, an entry longer than any address with a port (64 bytes), anything malformed | the nearest trusted hop |
/// | more than [`max_hops`](RealIp::max_hops) entries (16 by default) | the nearest trusted hop |
///
/// The **nearest trusted hop** is the last address the walk could vouch for: the
/// trusted entry it read last, or the peer if it read none — the proxy that wrote the
/// entry it could not use. Walking past such an entry would read what the client
/// wrote, so the walk stops there, and its requests share their proxy's key rather
/// than one the client picks. A client can reach a fallback only through a trusted
/// proxy that failed to write a usable entry for it: `unknown` and obfuscated
/// identifiers (RFC 7239 §6.2, §6.3) are how a proxy says it will not tell, and the
/// proxy is the address left. The hop cap bounds the work a request costs; a request
/// through more trusted proxies than the cap keys on the last one read, so set it at
/// least as high as your chain is long.
///
/// Several lines of the header are one list, in order (RFC 9110 §5.3); empty entries
/// are skipped. An address in an entry may carry a port, which is ignored.
///
/// # Keys
/// As [`PeerIp`](super::PeerIp): an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the
/// IPv4 address — in the trusted ranges as in the key — and an IPv6 client is keyed by
/// its `/64` network by default ([`ipv6_prefix`](RealIp::ipv6_prefix)). A request
/// without the peer address extension has no key, and its check's
/// [`MissingKey`](crate::policy::MissingKey) treatment applies.
///
/// # Cost
/// Allocation-free: a lookup of the header, a scan of its last entries, one address
/// parsed per entry read and each matched against the trusted ranges (linearly: meant
/// for the handful of ranges a deployment has). What three hops cost is in
/// `results/http.md`.
///
/// The guide's page [behind a proxy](crate::guide::behind_a_proxy) shows it in a
/// server, with nginx's settings beside.
pub struct RealIp<T = SocketAddr> {
    peer: fn(&T) -> SocketAddr,
    header: ProxyHeader,
    name: HeaderName,
    trusted: Vec<Cidr>,
    /// The trusted networks' bits and masks by family, matched on every hop.
    trusted_v4: Vec<(u32, u32)>,
    trusted_v6: Vec<(u128, u128)>,
    ipv6_prefix: u8,
    max_hops: usize,
}

impl RealIp<SocketAddr> {
    /// The peer address from a `SocketAddr` request extension; the client's, behind
    /// trusted proxies, from `header`. Nothing is trusted yet.
    #[must_use]
    pub fn new(header: ProxyHeader) -> Self {
        Self::from_extension(header, |peer: &SocketAddr| *peer)
    }
}

impl<T> RealIp<T> {
    /// The peer address from a request extension of type `T` (axum:
    /// `|info: &ConnectInfo<SocketAddr>| info.0`); the client's, behind trusted
    /// proxies, from `header`. Nothing is trusted yet.
    #[must_use]
    pub fn from_extension(header: ProxyHeader, peer: fn(&T) -> SocketAddr) -> Self {
        Self {
            peer,
            header,
            name: header.name(),
            trusted: Vec::new(),
            trusted_v4: Vec::new(),
            trusted_v6: Vec::new(),
            ipv6_prefix: 64,
            max_hops: 16,
        }
    }

    /// Trusts the proxies in `proxies` (nginx: `set_real_ip_from`); call once per
    /// range. A single address is a [`Cidr`] too (`"10.0.0.1".parse()`, or
    /// `Cidr::from(ip)`).
    #[must_use]
    pub fn trust(mut self, proxies: Cidr) -> Self {
        self.trusted.push(proxies);
        match proxies.bits() {
            Bits::V4(bits, mask) => self.trusted_v4.push((bits, mask)),
            Bits::V6(bits, mask) => self.trusted_v6.push((bits, mask)),
        }
        self
    }

    /// Reads at most `hops` entries of the header (default 16); a request through more
    /// trusted proxies keys on the last one read. `0` reads none: the peer is the key.
    #[must_use]
    pub fn max_hops(mut self, hops: usize) -> Self {
        self.max_hops = hops;
        self
    }

    /// Counts every IPv6 address in one `/bits` network as one client (default 64;
    /// values above 128 count as 128), as [`PeerIp::ipv6_prefix`](super::PeerIp::ipv6_prefix)
    /// does.
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits.min(128);
        self
    }

    /// The ranges trusted, in the order given.
    #[must_use]
    pub fn trusted(&self) -> &[Cidr] {
        &self.trusted
    }

    /// Whether `ip` is in a trusted range.
    #[inline]
    #[must_use]
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusts_canonical(ip.to_canonical())
    }

    /// Whether `ip`, in canonical form, is in a trusted range.
    #[inline]
    fn trusts_canonical(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => {
                let ip = u32::from(v4);
                self.trusted_v4
                    .iter()
                    .any(|&(bits, mask)| ip & mask == bits)
            }
            IpAddr::V6(v6) => {
                let ip = u128::from(v6);
                self.trusted_v6
                    .iter()
                    .any(|&(bits, mask)| ip & mask == bits)
            }
        }
    }

    /// The client's address for a request from `peer` with `headers`, found as the
    /// type's documentation says, in canonical form (an IPv4-mapped address as IPv4),
    /// before IPv6 addresses are grouped into networks for the key: for logs, say.
    #[must_use]
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        // The address the walk can vouch for so far: the peer, then each trusted
        // entry. Returned where the walk cannot go on.
        let mut nearest = peer.to_canonical();
        if !self.trusts_canonical(nearest) {
            return nearest;
        }
        let mut hops = Hops::new(headers.get_all(&self.name).iter(), self.header);
        for _ in 0..self.max_hops {
            // No entry left, or one that names no address: the walk cannot go on.
            let Some(Some(ip)) = hops.next() else {
                return nearest;
            };
            let ip = ip.to_canonical();
            if !self.trusts_canonical(ip) {
                return ip;
            }
            nearest = ip;
        }
        nearest
    }

    /// The client's address for `request`, as [`client_ip`](RealIp::client_ip) finds
    /// it; `None` without the peer address extension.
    #[must_use]
    pub fn client_ip_of(&self, request: &Parts) -> Option<IpAddr>
    where
        T: Send + Sync + 'static,
    {
        let peer = (self.peer)(request.extensions.get::<T>()?);
        Some(self.client_ip(peer.ip(), &request.headers))
    }
}

impl<T> Clone for RealIp<T> {
    fn clone(&self) -> Self {
        Self {
            peer: self.peer,
            header: self.header,
            name: self.name.clone(),
            trusted: self.trusted.clone(),
            trusted_v4: self.trusted_v4.clone(),
            trusted_v6: self.trusted_v6.clone(),
            ipv6_prefix: self.ipv6_prefix,
            max_hops: self.max_hops,
        }
    }
}

impl<T> fmt::Debug for RealIp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RealIp")
            .field("header", &self.header)
            .field("trusted", &self.trusted)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("max_hops", &self.max_hops)
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> KeyExtractor<Parts> for RealIp<T> {
    type Key = IpAddr;

    fn with_key<U>(&self, request: &Parts, with: impl FnOnce(&IpAddr) -> U) -> Option<U> {
        let client = match self.client_ip_of(request)? {
            IpAddr::V6(v6) => IpAddr::V6(network(v6, self.ipv6_prefix)),
            v4 => v4,
        };
        Some(with(&client))
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(name: &str, lines: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                line.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_walk_stops_at_the_first_untrusted_address_from_the_right() {
        let real = RealIp::new(ProxyHeader::XForwardedFor)
            .trust("10.0.0.0/8".parse().unwrap())
            .trust("2001:db8:ffff::/48".parse().unwrap());
        let xff = |lines: &[&str]| headers("x-forwarded-for", lines);
        let from = |peer: &str, h: &HeaderMap| real.client_ip(ip(peer), h);
        let chain = xff(&["1.1.1.1, 192.0.2.9, 10.0.0.3", "2001:db8:ffff::1, 10.0.0.2"]);
        assert_eq!(from("10.0.0.1", &chain), ip("192.0.2.9"));
        assert_eq!(
            from("192.0.2.200", &chain),
            ip("192.0.2.200"),
            "untrusted peer"
        );
        assert_eq!(
            from("::ffff:10.0.0.1", &chain),
            ip("192.0.2.9"),
            "mapped peer"
        );
        assert_eq!(from("10.0.0.1", &xff(&[])), ip("10.0.0.1"), "no header");
        assert_eq!(
            from("10.0.0.1", &xff(&["10.0.0.7"])),
            ip("10.0.0.7"),
            "all trusted"
        );
        assert_eq!(
            from("10.0.0.1", &xff(&["1.1.1.1, unknown, 10.0.0.7"])),
            ip("10.0.0.7"),
            "unknown: the nearest trusted hop"
        );
        assert_eq!(
            from("10.0.0.1", &xff(&["1.1.1.1, garbage"])),
            ip("10.0.0.1"),
            "malformed: the nearest trusted hop"
        );
        assert_eq!(
            from("10.0.0.1", &xff(&["::ffff:192.0.2.1"])),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn at_most_max_hops_entries_are_read() {
        let real = |hops| {
            RealIp::new(ProxyHeader::XForwardedFor)
                .trust("10.0.0.0/8".parse().unwrap())
                .max_hops(hops)
        };
        let chain = headers("x-forwarded-for", &["192.0.2.9, 10.0.0.3, 10.0.0.2"]);
        let from = |hops| real(hops).client_ip(ip("10.0.0.1"), &chain);
        assert_eq!(from(0), ip("10.0.0.1"));
        assert_eq!(from(1), ip("10.0.0.2"));
        assert_eq!(from(2), ip("10.0.0.3"));
        assert_eq!(from(3), ip("192.0.2.9"));
        assert_eq!(from(16), ip("192.0.2.9"));
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let mut both = headers("x-forwarded-for", &["192.0.2.1"]);
        both.append("forwarded", "for=192.0.2.2".parse().unwrap());
        let trusted: Cidr = "10.0.0.1".parse().unwrap();
        let xff = RealIp::new(ProxyHeader::XForwardedFor).trust(trusted);
        let fwd = RealIp::new(ProxyHeader::Forwarded).trust(trusted);
        assert_eq!(xff.client_ip(ip("10.0.0.1"), &both), ip("192.0.2.1"));
        assert_eq!(fwd.client_ip(ip("10.0.0.1"), &both), ip("192.0.2.2"));
    }

    #[test]
    fn nothing_is_trusted_until_told() {
        let real = RealIp::new(ProxyHeader::XForwardedFor);
        let spoof = headers("x-forwarded-for", &["192.0.2.1"]);
        for peer in ["10.0.0.1", "127.0.0.1", "::1", "192.168.1.1"] {
            assert_eq!(real.client_ip(ip(peer), &spoof), ip(peer));
        }
    }

    #[test]
    fn keys_group_ipv6_clients_by_network() {
        let key = |prefix: u8, line: &str| {
            let real = RealIp::new(ProxyHeader::Forwarded)
                .trust("10.0.0.1".parse().unwrap())
                .ipv6_prefix(prefix);
            let mut parts = http::Request::new(()).into_parts().0;
            parts.headers = headers("forwarded", &[line]);
            parts
                .extensions
                .insert("10.0.0.1:1234".parse::<SocketAddr>().unwrap());
            real.with_key(&parts, |ip| *ip)
        };
        let client = "for=\"[2001:db8:1:2:3:4:5:6]:4711\"";
        assert_eq!(key(64, client), Some(ip("2001:db8:1:2::")));
        assert_eq!(key(128, client), Some(ip("2001:db8:1:2:3:4:5:6")));
        assert_eq!(key(64, "for=192.0.2.1"), Some(ip("192.0.2.1")));
        let none = RealIp::new(ProxyHeader::Forwarded)
            .with_key(&http::Request::new(()).into_parts().0, |ip| *ip);
        assert_eq!(none, None, "no peer address extension");
    }
}
