//! Reading the entries proxies append to `X-Forwarded-For` or `Forwarded`, from the
//! right: the nearest hop first.
//!
//! Everything here reads right to left, and reads nothing left of what it returns.
//! That is the point: the entries on the right were written by the proxies in front
//! of the server, and what a client wrote is on the left. A left-to-right parser would
//! let the client's bytes decide how the proxies' entries are read — an unterminated
//! quote, a stray byte that fails a whole-line check — so a client could turn its own
//! proxy's entry into "malformed" and choose the fallback. Bytes are read as bytes for
//! the same reason: a line is never rejected whole for a byte somewhere in it.

use super::address;
use http::header::ValueIter;
use http::{HeaderName, HeaderValue};
use std::net::IpAddr;

/// Which header the trusted proxies write the client's address to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`: a list of addresses, each proxy
    /// appending the one it got the request from (nginx's
    /// `$proxy_add_x_forwarded_for`, HAProxy's `option forwardfor`, Envoy, AWS's and
    /// Google's load balancers). Bare IPv6 addresses, bracketed ones and addresses with
    /// a port (`192.0.2.1:5678`, `[2001:db8::1]:443`) are all read.
    XForwardedFor,
    /// `Forwarded: for=client, for="[2001:db8::1]:4711";proto=https` (RFC 7239): a list
    /// of elements, one per proxy, whose `for` parameter names the address it got the
    /// request from; IPv6 in brackets and quoted, as the RFC writes it.
    Forwarded,
}

impl ProxyHeader {
    /// The header's name.
    #[must_use]
    pub fn name(self) -> HeaderName {
        match self {
            Self::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            Self::Forwarded => http::header::FORWARDED,
        }
    }
}

/// The entries of every line of one header, the last line's last entry first; each
/// is the address it names, or `None` for one that names no address: `unknown`, an
/// obfuscated identifier (`_hidden`), a `Forwarded` element without `for`, or
/// anything malformed. Empty entries (`a,,b`, an empty line) are skipped, as RFC 9110
/// asks of list recipients.
pub(super) struct Hops<'a> {
    lines: ValueIter<'a, HeaderValue>,
    /// What is left of the line being read, right to left: `None` once its first
    /// entry has been returned.
    rest: Option<&'a [u8]>,
    syntax: ProxyHeader,
}

impl<'a> Hops<'a> {
    pub(super) fn new(lines: ValueIter<'a, HeaderValue>, syntax: ProxyHeader) -> Self {
        Self {
            lines,
            rest: None,
            syntax,
        }
    }
}

impl Iterator for Hops<'_> {
    type Item = Option<IpAddr>;

    fn next(&mut self) -> Option<Option<IpAddr>> {
        loop {
            let line = match self.rest.take() {
                Some(rest) => rest,
                None => self.lines.next_back()?.as_bytes(),
            };
            let hop = match self.syntax {
                ProxyHeader::XForwardedFor => {
                    let (rest, entry) = split_last(line);
                    self.rest = rest;
                    let entry = entry.trim_ascii();
                    if entry.is_empty() {
                        continue;
                    }
                    node(entry, Brackets::Optional)
                }
                ProxyHeader::Forwarded => {
                    let (rest, element) = last_element(line);
                    self.rest = rest;
                    match element {
                        Element::Empty => continue,
                        Element::For(value) => {
                            unquote(value).and_then(|value| node(value, Brackets::ForIpv6))
                        }
                        Element::NoFor | Element::Malformed => None,
                    }
                }
            };
            return Some(hop);
        }
    }
}

/// Splits an `X-Forwarded-For` line at its last comma: the bytes before it (`None`
/// when there is none) and those after it.
fn split_last(line: &[u8]) -> (Option<&[u8]>, &[u8]) {
    match line.iter().rposition(|&byte| byte == b',') {
        Some(at) => (Some(&line[..at]), &line[at + 1..]),
        None => (None, line),
    }
}

/// What a `Forwarded` element (RFC 7239 §4: `pair *( ";" pair )`) says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Element<'a> {
    /// No pair at all: an empty list element, skipped.
    Empty,
    /// Pairs, none of them `for`.
    NoFor,
    /// The value of its one `for` pair (names are case-insensitive).
    For(&'a [u8]),
    /// A pair without `=`, or `for` twice (a parameter occurs once per element).
    Malformed,
}

impl<'a> Element<'a> {
    /// The element with one more of its pairs read.
    fn with_pair(self, pair: &'a [u8]) -> Self {
        let pair = pair.trim_ascii();
        if pair.is_empty() || self == Element::Malformed {
            return self;
        }
        let Some(equals) = pair.iter().position(|&b| b == b'=') else {
            return Element::Malformed;
        };
        if !pair[..equals].eq_ignore_ascii_case(b"for") {
            return if self == Element::Empty {
                Element::NoFor
            } else {
                self
            };
        }
        match self {
            Element::For(_) => Element::Malformed,
            _ => Element::For(&pair[equals + 1..]),
        }
    }
}

/// The last element of a `Forwarded` line, read from its end in one pass: the bytes
/// before its comma (`None` when it is the first) and what it says. Commas and
/// semicolons inside quoted strings (`host="a,b"`) separate nothing.
fn last_element(line: &[u8]) -> (Option<&[u8]>, Element<'_>) {
    let mut element = Element::Empty;
    let mut in_quotes = false;
    let mut pair_end = line.len();
    let mut at = line.len();
    while at > 0 {
        at -= 1;
        let byte = line[at];
        // Most bytes are none of the three: one test for them.
        if !matches!(byte, b'"' | b';' | b',') {
            continue;
        }
        if byte == b'"' {
            if !escaped(&line[..at]) {
                in_quotes = !in_quotes;
            }
        } else if !in_quotes {
            element = element.with_pair(&line[at + 1..pair_end]);
            if byte == b',' {
                return (Some(&line[..at]), element);
            }
            pair_end = at;
        }
    }
    (None, element.with_pair(&line[..pair_end]))
}

/// Whether a quote after `before` is escaped: preceded by an odd run of backslashes
/// (within a quoted string `\` escapes the next byte, `\\` is one backslash).
fn escaped(before: &[u8]) -> bool {
    before.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// A parameter's value, without its quotes if quoted; `None` for a quoted string
/// left open or holding an escape (no address needs one).
fn unquote(value: &[u8]) -> Option<&[u8]> {
    match value {
        [b'"', inner @ .., b'"'] if !inner.iter().any(|&b| b == b'\\' || b == b'"') => Some(inner),
        [b'"', ..] | [.., b'"'] => None,
        token => Some(token),
    }
}

/// Where an IPv6 address needs brackets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Brackets {
    /// `X-Forwarded-For`: `2001:db8::1` bare, as most proxies write it, or
    /// `[2001:db8::1]` with or without a port, as some do.
    Optional,
    /// `Forwarded` (RFC 7239 §6): `"[2001:db8::1]:4711"`, always bracketed, so a bare
    /// value's colon can only come before a port.
    ForIpv6,
}

/// The longest node that can name an address: an IPv6 address written with an IPv4
/// tail in brackets, a colon and a five-digit port is 53 bytes.
const MAX_NODE: usize = 64;

/// The address a node names (RFC 7239 §6: an address, with an optional port);
/// `None` for `unknown`, an obfuscated identifier (`_hidden`), and anything else.
fn node(node: &[u8], brackets: Brackets) -> Option<IpAddr> {
    if node.len() > MAX_NODE {
        return None;
    }
    if let Some(bracketed) = node.strip_prefix(b"[") {
        let close = bracketed.iter().position(|&b| b == b']')?;
        let v6 = address::ipv6(&bracketed[..close])?;
        let after = &bracketed[close + 1..];
        return (after.is_empty() || after.strip_prefix(b":").is_some_and(port))
            .then_some(IpAddr::V6(v6));
    }
    if brackets == Brackets::Optional {
        if let Some(v4) = address::ipv4(node) {
            return Some(IpAddr::V4(v4));
        }
        if let Some(v6) = address::ipv6(node) {
            return Some(IpAddr::V6(v6));
        }
    }
    match node.iter().position(|&b| b == b':') {
        Some(colon) => {
            let v4 = address::ipv4(&node[..colon])?;
            port(&node[colon + 1..]).then_some(IpAddr::V4(v4))
        }
        None => address::ipv4(node).map(IpAddr::V4),
    }
}

/// A port: decimal up to 65535, or obfuscated (RFC 7239 §6.3: `_` and letters,
/// digits, `.`, `_`, `-`).
fn port(text: &[u8]) -> bool {
    match text {
        [b'_', rest @ ..] => {
            !rest.is_empty()
                && rest
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        digits => {
            (1..=5).contains(&digits.len())
                && digits.iter().all(u8::is_ascii_digit)
                && digits
                    .iter()
                    .fold(0_u32, |port, &d| port * 10 + u32::from(d - b'0'))
                    <= 65_535
        }
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use http::HeaderMap;

    /// The entries of `lines` as header `syntax`, nearest first, `None` for those that
    /// name no address.
    fn hops(syntax: ProxyHeader, lines: &[&[u8]]) -> Vec<Option<String>> {
        let name = match syntax {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
        };
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(name, HeaderValue::from_bytes(line).unwrap());
        }
        Hops::new(headers.get_all(name).iter(), syntax)
            .map(|hop| hop.map(|ip| ip.to_string()))
            .collect()
    }

    fn some(ips: &[&str]) -> Vec<Option<String>> {
        ips.iter().map(|ip| Some((*ip).to_owned())).collect()
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_across_lines() {
        let xff = |lines: &[&[u8]]| hops(ProxyHeader::XForwardedFor, lines);
        assert_eq!(
            xff(&[b"203.0.113.7, 10.0.0.2", b"10.0.0.1"]),
            some(&["10.0.0.1", "10.0.0.2", "203.0.113.7"])
        );
        assert_eq!(
            xff(&[b"2001:db8::1,[2001:db8::2],[2001:db8::3]:443,192.0.2.1:8080"]),
            some(&["192.0.2.1", "2001:db8::3", "2001:db8::2", "2001:db8::1"])
        );
        assert_eq!(xff(&[b" , 192.0.2.1 ,,\t", b""]), some(&["192.0.2.1"]));
        assert_eq!(
            xff(&[b"unknown, _hidden, 1.2.3, ::ffff:1.2.3.4, 192.0.2.1:99999"]),
            vec![None, Some("::ffff:1.2.3.4".into()), None, None, None]
        );
    }

    #[test]
    fn forwarded_reads_rfc_7239_elements() {
        let fwd = |lines: &[&[u8]]| hops(ProxyHeader::Forwarded, lines);
        // RFC 7239 §4 and §7.1's examples.
        assert_eq!(fwd(&[b"for=\"_gazonk\""]), vec![None]);
        assert_eq!(
            fwd(&[b"For=\"[2001:db8:cafe::17]:4711\""]),
            some(&["2001:db8:cafe::17"])
        );
        assert_eq!(
            fwd(&[b"for=192.0.2.60;proto=http;by=203.0.113.43"]),
            some(&["192.0.2.60"])
        );
        assert_eq!(
            fwd(&[b"for=192.0.2.43, for=198.51.100.17"]),
            some(&["198.51.100.17", "192.0.2.43"])
        );
        assert_eq!(
            fwd(&[b"for=unknown", b"for=\"unknown:_p\""]),
            vec![None, None]
        );
        assert_eq!(
            fwd(&[b"for=\"192.0.2.1:8080\";by=\"[::1]:80\";host=\"a,b;c\""]),
            some(&["192.0.2.1"]),
            "separators inside quotes"
        );
        assert_eq!(
            fwd(&[b"proto=https;host=\"x\\\"y,z\"; for=192.0.2.9"]),
            some(&["192.0.2.9"]),
            "an escaped quote inside a quoted string"
        );
    }

    #[test]
    fn forwarded_elements_that_name_no_address_are_none() {
        let fwd = |line: &[u8]| hops(ProxyHeader::Forwarded, &[line]);
        for bad in [
            &b"proto=https"[..],
            b"for=192.0.2.1;for=192.0.2.2",
            b"for=192.0.2.1;proto",
            b"for=2001:db8::1",
            b"for=\"2001:db8::1\"",
            b"for=\"[2001:db8::1]x\"",
            b"for=\"192.0.2.1",
            b"for=\"192.0.2.1\\\"\"",
            b"for = 192.0.2.1",
            b"for=[2001:db8::1]:http",
            b"for=\xff192.0.2.1",
        ] {
            assert_eq!(fwd(bad), vec![None], "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn what_lies_left_of_an_entry_does_not_change_how_it_is_read() {
        // An unterminated quote and bytes that are not text, left of the nearest
        // entry: a left-to-right parser would give up on the whole line.
        assert_eq!(
            hops(
                ProxyHeader::Forwarded,
                &[b"for=\"\xff\t\xfe, for=192.0.2.1"]
            )[0],
            Some("192.0.2.1".into())
        );
        assert_eq!(
            hops(ProxyHeader::XForwardedFor, &[b"\"\xfe[, 192.0.2.1"])[0],
            Some("192.0.2.1".into())
        );
    }

    #[test]
    fn ports_are_decimal_up_to_65535_or_obfuscated() {
        for good in ["0", "80", "65535", "_p", "_a.b-c_d"] {
            assert!(port(good.as_bytes()), "{good}");
        }
        for bad in [
            "", "65536", "+80", "-1", "123456", "_", "_a b", "0x50", "８０",
        ] {
            assert!(!port(bad.as_bytes()), "{bad}");
        }
    }
}
