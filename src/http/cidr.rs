//! IP networks in CIDR notation: the ranges of proxies a [`RealIp`](super::RealIp)
//! trusts.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP network in CIDR notation — `10.0.0.0/8`, `2001:db8::/32` — or one address
/// (`192.0.2.7`, `::1`), which is the network of that address alone (`/32`, `/128`).
///
/// Parsing is strict, so that a typo cannot widen what is trusted: the address is one
/// [`IpAddr`] parses, the prefix a decimal number of at most 32 bits for IPv4 and 128
/// for IPv6, and no bit is set past the prefix (`10.1.2.3/8` is refused — was
/// `10.0.0.0/8` meant, or the one host `10.1.2.3`?).
///
/// Addresses are compared in their canonical form: an IPv4-mapped IPv6 address
/// (`::ffff:10.1.2.3`, a dual-stack listener's IPv4 peer) is the IPv4 address, and an
/// IPv4-mapped network (`::ffff:10.0.0.0/104`) is the IPv4 network it maps
/// (`10.0.0.0/8`). So an IPv6 network never contains an IPv4 address: `::/0` is every
/// IPv6 address, and `0.0.0.0/0` every IPv4 one.
///
/// ```
/// use turnstile::http::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.200.0.1".parse()?));
/// assert!(private.contains("::ffff:10.200.0.1".parse()?));
/// assert!(!private.contains("11.0.0.1".parse()?));
/// assert!("10.1.2.3/8".parse::<Cidr>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Cidr {
    /// The network's first address, in canonical form (IPv4 never mapped).
    network: IpAddr,
    /// How many leading bits name the network: at most 32 for IPv4, 128 for IPv6.
    prefix_len: u8,
}

impl Cidr {
    /// The network of `prefix_len` leading bits of `network`; an error when the prefix
    /// is longer than the address or `network` has a bit set past it.
    pub fn new(network: IpAddr, prefix_len: u8) -> Result<Self, CidrError> {
        let error = |reason| CidrError {
            input: format!("{network}/{prefix_len}"),
            reason,
        };
        let (network, prefix_len) = match network {
            // An IPv4-mapped network is the IPv4 network it maps, so that it contains
            // what it says once addresses are canonical.
            IpAddr::V6(v6) if (96..=128).contains(&prefix_len) => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix_len - 96),
                None => (network, prefix_len),
            },
            _ => (network, prefix_len),
        };
        let bits = match network {
            IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
            IpAddr::V6(v6) => u128::from(v6),
        };
        if prefix_len > max_prefix_len(network) {
            return Err(error(Reason::Prefix(max_prefix_len(network))));
        }
        if bits & !mask(prefix_len) != 0 {
            let network = masked(network, prefix_len);
            return Err(error(Reason::HostBits(Self {
                network,
                prefix_len,
            })));
        }
        Ok(Self {
            network,
            prefix_len,
        })
    }

    /// Whether `ip` (canonical or not: `::ffff:a.b.c.d` counts as `a.b.c.d`) is in
    /// this network.
    #[inline]
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = (mask(self.prefix_len) >> 96) as u32;
                u32::from(ip) & mask == u32::from(network)
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                u128::from(ip) & mask(self.prefix_len) == u128::from(network)
            }
            _ => false,
        }
    }

    /// The network's first address (IPv4 for an IPv4-mapped network).
    #[must_use]
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// How many leading bits name the network.
    #[must_use]
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The network's bits and its mask, for matching many addresses against many
    /// networks: an address `a` of the same family is in it when `a & mask == bits`.
    pub(super) fn bits(&self) -> Bits {
        match self.network {
            IpAddr::V4(network) => {
                Bits::V4(u32::from(network), (mask(self.prefix_len) >> 96) as u32)
            }
            IpAddr::V6(network) => Bits::V6(u128::from(network), mask(self.prefix_len)),
        }
    }
}

/// A network's bits and mask ([`Cidr::bits`]).
pub(super) enum Bits {
    V4(u32, u32),
    V6(u128, u128),
}

/// One address: the network of that address alone (`/32` or `/128`; an IPv4-mapped
/// address is its IPv4 address).
impl From<IpAddr> for Cidr {
    fn from(ip: IpAddr) -> Self {
        let network = ip.to_canonical();
        Self {
            network,
            prefix_len: max_prefix_len(network),
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        let error = |reason| CidrError {
            input: text.to_owned(),
            reason,
        };
        let (address, prefix_len) = match text.split_once('/') {
            Some((address, prefix_len)) => (address, Some(prefix_len)),
            None => (text, None),
        };
        let address: IpAddr = address.parse().map_err(|_| error(Reason::Address))?;
        let Some(prefix_len) = prefix_len else {
            return Ok(Self::from(address));
        };
        // Digits only: `u8::from_str` would also take a sign (`/+8`).
        let max = max_prefix_len(address);
        let prefix_len = (!prefix_len.is_empty()
            && prefix_len.len() <= 3
            && prefix_len.bytes().all(|b| b.is_ascii_digit()))
        .then(|| prefix_len.parse::<u8>().ok())
        .flatten()
        .filter(|&bits| bits <= max)
        .ok_or_else(|| error(Reason::Prefix(max)))?;
        Self::new(address, prefix_len).map_err(|e| error(e.reason))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// Why a text or an address and prefix is not a [`Cidr`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrError {
    input: String,
    reason: Reason,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Reason {
    /// The part before any `/` is not an IP address.
    Address,
    /// The prefix is not a decimal number up to this.
    Prefix(u8),
    /// Bits set past the prefix; this is the network they belong to.
    HostBits(Cidr),
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = &self.input;
        match &self.reason {
            Reason::Address => write!(
                f,
                "`{input}` is not a network: expected an IP address, then optionally `/` and a prefix length"
            ),
            Reason::Prefix(max) => write!(
                f,
                "`{input}` is not a network: the prefix length must be a number from 0 to {max}"
            ),
            Reason::HostBits(network) => write!(
                f,
                "`{input}` is not a network: it has bits set past the prefix (the network is {network}; one host is written without a prefix)"
            ),
        }
    }
}

impl std::error::Error for CidrError {}

fn max_prefix_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// `prefix_len` leading one bits of 128 (IPv4 in the top 32).
fn mask(prefix_len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix_len.min(128)))
        .unwrap_or(0)
}

/// `ip` with every bit past `prefix_len` cleared.
fn masked(ip: IpAddr, prefix_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = (mask(prefix_len) >> 96) as u32;
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & mask(prefix_len)).into()),
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_contain_exactly_their_addresses() {
        let net = cidr("192.168.0.0/16");
        assert!(net.contains(ip("192.168.0.0")));
        assert!(net.contains(ip("192.168.255.255")));
        assert!(!net.contains(ip("192.169.0.0")));
        assert!(!net.contains(ip("192.167.255.255")));
        let net = cidr("2001:db8::/32");
        assert!(net.contains(ip("2001:db8:ffff::1")));
        assert!(!net.contains(ip("2001:db9::")));
        assert!(cidr("0.0.0.0/0").contains(ip("255.1.2.3")));
        assert!(
            !cidr("0.0.0.0/0").contains(ip("::1")),
            "IPv4 ranges hold IPv4 only"
        );
        assert!(cidr("::/0").contains(ip("::1")));
        assert!(
            !cidr("::/0").contains(ip("1.2.3.4")),
            "IPv6 ranges hold IPv6 only"
        );
        assert!(cidr("203.0.113.9").contains(ip("203.0.113.9")));
        assert!(!cidr("203.0.113.9").contains(ip("203.0.113.8")));
        assert_eq!(cidr("::1").prefix_len(), 128);
    }

    #[test]
    fn ipv4_mapped_addresses_and_networks_are_ipv4() {
        assert!(cidr("10.0.0.0/8").contains(ip("::ffff:10.9.8.7")));
        assert_eq!(cidr("::ffff:10.0.0.0/104"), cidr("10.0.0.0/8"));
        assert_eq!(cidr("::ffff:10.1.2.3"), cidr("10.1.2.3/32"));
        assert!(cidr("::ffff:10.0.0.0/104").contains(ip("10.1.1.1")));
        assert_eq!(Cidr::from(ip("::ffff:1.2.3.4")), cidr("1.2.3.4"));
    }

    #[test]
    fn malformed_networks_are_refused_with_the_reason() {
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0.0/0008",
            "10.0.0/8",
            "010.0.0.0/8",
            "10.0.0.0/8/8",
            "10.0.0.0 /8",
            "fe80::1%eth0",
            "[::1]/128",
            "10.0.0.0/8x",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
        let error = "10.1.2.3/8".parse::<Cidr>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "`10.1.2.3/8` is not a network: it has bits set past the prefix (the network is 10.0.0.0/8; one host is written without a prefix)"
        );
        assert!(Cidr::new(ip("10.0.0.0"), 33).is_err());
        assert!(Cidr::new(ip("2001:db8::1"), 64).is_err());
        assert_eq!(
            Cidr::new(ip("2001:db8::"), 64).unwrap(),
            cidr("2001:db8::/64")
        );
    }

    #[test]
    fn networks_print_as_they_parse() {
        for text in [
            "10.0.0.0/8",
            "0.0.0.0/0",
            "2001:db8::/32",
            "::1/128",
            "::/0",
        ] {
            assert_eq!(cidr(text).to_string(), text);
        }
    }

    #[test]
    fn the_error_is_a_sendable_static_error() {
        fn is_error<E: std::error::Error + Send + Sync + 'static>() {}
        is_error::<CidrError>();
    }
}
