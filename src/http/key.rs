//! Keys found in HTTP requests: the peer's IP address, a header's value.

use crate::policy::KeyExtractor;
use http::HeaderName;
use http::request::Parts;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The client's IP address, taken from the connection's peer address that the server
/// put in the request's extensions.
///
/// [`PeerIp::new`] reads a `SocketAddr` extension; with axum, which stores
/// `ConnectInfo<SocketAddr>` when served through
/// `into_make_service_with_connect_info::<SocketAddr>()`, use
/// `PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0)`.
///
/// A request without that extension has no key, and its check's
/// [`MissingKey`](crate::policy::MissingKey) treatment applies — with the default,
/// every request is refused with 400, which shows a server that does not record peer
/// addresses at once rather than silently sharing one key.
///
/// IPv4 addresses mapped into IPv6 (a dual-stack listener's `::ffff:a.b.c.d`) count as
/// the IPv4 address. IPv6 clients are keyed by their `/64` network by default: a site
/// is given at least a `/64`, so one host can pick any of 2^64 source addresses, and
/// keying on the full address would give it that many allowances. Change it with
/// [`ipv6_prefix`](PeerIp::ipv6_prefix) (`128` keys each address on its own; a
/// shorter prefix such as `56` or `48` groups whole customer allocations).
///
/// Behind a reverse proxy every request has the proxy's address, and every client
/// would share one key: use [`RealIp`](super::RealIp), which takes the client's
/// address from the header your trusted proxies append to, and only from them
/// (anyone can send `X-Forwarded-For`).
pub struct PeerIp<T = SocketAddr> {
    peer: fn(&T) -> SocketAddr,
    ipv6_prefix: u8,
}

/// The IPv6 prefix, not the function that finds the address.
impl<T> std::fmt::Debug for PeerIp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerIp")
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish_non_exhaustive()
    }
}

impl PeerIp<SocketAddr> {
    /// The peer address from a `SocketAddr` request extension.
    pub fn new() -> Self {
        Self::from_extension(|peer: &SocketAddr| *peer)
    }
}

impl Default for PeerIp<SocketAddr> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PeerIp<T> {
    /// The peer address from a request extension of type `T`.
    pub fn from_extension(peer: fn(&T) -> SocketAddr) -> Self {
        Self {
            peer,
            ipv6_prefix: 64,
        }
    }

    /// Counts every IPv6 address in one `/bits` network as one client (default 64;
    /// values above 128 count as 128, which keys each address on its own).
    ///
    /// One IPv6 host commonly holds a whole `/64`, so keying on full addresses would
    /// let it multiply its allowance by choosing new source addresses. IPv4 addresses
    /// are unaffected.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits.min(128);
        self
    }
}

impl<T> Clone for PeerIp<T> {
    fn clone(&self) -> Self {
        Self {
            peer: self.peer,
            ipv6_prefix: self.ipv6_prefix,
        }
    }
}

impl<T: Send + Sync + 'static> KeyExtractor<Parts> for PeerIp<T> {
    type Key = IpAddr;

    fn with_key<U>(&self, request: &Parts, with: impl FnOnce(&IpAddr) -> U) -> Option<U> {
        let peer = (self.peer)(request.extensions.get::<T>()?);
        let ip = match peer.ip().to_canonical() {
            IpAddr::V6(v6) => IpAddr::V6(network(v6, self.ipv6_prefix)),
            v4 => v4,
        };
        Some(with(&ip))
    }
}

/// The first `bits` bits of `addr`, the rest zero.
pub(super) fn network(addr: Ipv6Addr, bits: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
    Ipv6Addr::from(u128::from(addr) & mask)
}

/// A request header's value, such as an API key, as a `str` key (for a limiter keyed
/// by `String`).
///
/// A value is usable when it is present once, not empty, at most
/// [`max_len`](HeaderKey::max_len) bytes (256 by default), and visible ASCII
/// (`HeaderValue::to_str`). Anything else — absent, repeated (which copy would an
/// authenticating layer read?), empty, too long, or with non-ASCII or control bytes —
/// counts as no key, and the check's [`MissingKey`](crate::policy::MissingKey)
/// treatment applies. The length cap bounds what one key costs the limiter's memory.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    max_len: usize,
}

impl HeaderKey {
    /// The value of header `name`.
    pub fn new(name: HeaderName) -> Self {
        Self { name, max_len: 256 }
    }

    /// Values longer than `bytes` count as no key (default 256).
    pub fn max_len(mut self, bytes: usize) -> Self {
        self.max_len = bytes;
        self
    }
}

impl KeyExtractor<Parts> for HeaderKey {
    type Key = str;

    #[inline]
    fn with_key<U>(&self, request: &Parts, with: impl FnOnce(&str) -> U) -> Option<U> {
        let mut values = request.headers.get_all(&self.name).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        let key = value.to_str().ok()?;
        if key.is_empty() || key.len() > self.max_len {
            return None;
        }
        Some(with(key))
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use http::{HeaderValue, Request};

    fn parts(build: impl FnOnce(&mut Parts)) -> Parts {
        let (mut parts, ()) = Request::new(()).into_parts();
        build(&mut parts);
        parts
    }

    fn header_key(parts: &Parts) -> Option<String> {
        HeaderKey::new(HeaderName::from_static("x-api-key"))
            .max_len(8)
            .with_key(parts, str::to_owned)
    }

    #[test]
    fn a_header_key_is_one_visible_ascii_value_of_bounded_length() {
        let with = |values: &[&[u8]]| {
            header_key(&parts(|p| {
                for v in values {
                    let v = HeaderValue::from_bytes(v).unwrap();
                    p.headers.append("x-api-key", v);
                }
            }))
        };
        assert_eq!(with(&[b"alice"]).as_deref(), Some("alice"));
        assert_eq!(with(&[b"12345678"]).as_deref(), Some("12345678"));
        assert_eq!(with(&[]), None);
        assert_eq!(with(&[b""]), None);
        assert_eq!(with(&[b"123456789"]), None, "longer than max_len");
        assert_eq!(with(&[b"al\xffce"]), None, "not ASCII");
        assert_eq!(with(&[b"alice", b"bob"]), None, "repeated");
    }

    #[test]
    fn peer_ips_are_canonical_and_ipv6_can_be_grouped_by_network() {
        let ip = |peer: &str, prefix: u8| {
            let peer: SocketAddr = peer.parse().unwrap();
            PeerIp::new().ipv6_prefix(prefix).with_key(
                &parts(|p| {
                    p.extensions.insert(peer);
                }),
                |ip| *ip,
            )
        };
        assert_eq!(ip("10.1.2.3:80", 64), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(
            ip("[::ffff:10.1.2.3]:80", 128),
            Some("10.1.2.3".parse().unwrap())
        );
        assert_eq!(
            ip("[2001:db8:1:2:3:4:5:6]:80", 64),
            Some("2001:db8:1:2::".parse().unwrap())
        );
        assert_eq!(
            ip("[2001:db8:1:2:3:4:5:6]:80", 128),
            Some("2001:db8:1:2:3:4:5:6".parse().unwrap())
        );
        assert_eq!(ip("[2001:db8::1]:80", 0), Some("::".parse().unwrap()));
        let by_default = |peer: &str| {
            let peer: SocketAddr = peer.parse().unwrap();
            PeerIp::new().with_key(
                &parts(|p| {
                    p.extensions.insert(peer);
                }),
                |ip| *ip,
            )
        };
        assert_eq!(
            by_default("[2001:db8:1:2:3:4:5:6]:80"),
            by_default("[2001:db8:1:2:ffff::9]:443"),
            "one /64 is one client by default"
        );
        assert_ne!(
            by_default("[2001:db8:1:2::1]:80"),
            by_default("[2001:db8:1:3::1]:80"),
            "another /64 is another client"
        );
        let none = PeerIp::new().with_key(&parts(|_| {}), |ip| *ip);
        assert_eq!(none, None, "no peer address extension");
    }
}
