//! IP addresses read from bytes, exactly as `Ipv4Addr`'s and `Ipv6Addr`'s `FromStr`
//! read text, without the detour through `str`.
//!
//! Why not std's parsers: they take `&str`, so each entry of a header would be checked
//! as UTF-8 first, and they are written for every caller; together they were most of
//! what reading a chain of proxies cost (`results/http.md`, "Behind a proxy"). These follow the grammar of
//! `core::net::parser` step by step (the comments name the steps), and the tests
//! compare them with std's on every kind of input.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An IPv4 address in dotted decimal: four octets of one to three decimal digits, no
/// leading zero, at most 255 (`Ipv4Addr::from_str`).
pub(super) fn ipv4(text: &[u8]) -> Option<Ipv4Addr> {
    match ipv4_prefix(text)? {
        (ip, []) => Some(ip),
        _ => None,
    }
}

/// An IPv6 address (`Ipv6Addr::from_str`): eight groups of one to four hex digits,
/// `::` once for one or more groups of zeros, and an IPv4 address in place of the
/// last two groups.
pub(super) fn ipv6(text: &[u8]) -> Option<Ipv6Addr> {
    let mut head = [0_u16; 8];
    let (head_size, head_ipv4, rest) = groups(text, &mut head);
    if head_size == 8 {
        return rest.is_empty().then(|| head.into());
    }
    // An IPv4 address only ends an address: not before `::`.
    if head_ipv4 {
        return None;
    }
    let rest = rest.strip_prefix(b"::")?;
    // `::` stands for at least one group, so seven at most are left.
    let mut tail = [0_u16; 7];
    let limit = 7 - head_size;
    let (tail_size, _, rest) = groups(rest, &mut tail[..limit]);
    if !rest.is_empty() {
        return None;
    }
    head[8 - tail_size..].copy_from_slice(&tail[..tail_size]);
    Some(head.into())
}

/// An IPv4 address at the start of `text`, and what follows it. Each octet is every
/// decimal digit up to the next byte that is none: one to three of them, no leading
/// zero before another digit, at most 255 (`core::net::parser`'s `read_number` in
/// base 10, for a `u8`).
fn ipv4_prefix(text: &[u8]) -> Option<(Ipv4Addr, &[u8])> {
    let mut octets = [0_u8; 4];
    let mut at = 0;
    for (index, octet) in octets.iter_mut().enumerate() {
        if index > 0 {
            if text.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        let start = at;
        let mut value: u32 = 0;
        while let Some(&byte) = text.get(at) {
            if !byte.is_ascii_digit() {
                break;
            }
            // A fourth digit, or a digit after a leading zero.
            if at - start == 3 || (at - start == 1 && value == 0) {
                return None;
            }
            value = value * 10 + u32::from(byte - b'0');
            at += 1;
        }
        if at == start {
            return None;
        }
        *octet = u8::try_from(value).ok()?;
    }
    Some((Ipv4Addr::from(octets), &text[at..]))
}

/// Colon-separated groups at the start of `text`, into `groups` (at most its length),
/// the last two of which may be an IPv4 address: how many were read, whether an IPv4
/// address ended them, and what follows. A separator is read only with the group after
/// it (`core::net::parser`'s `read_groups`).
fn groups<'a>(text: &'a [u8], groups: &mut [u16]) -> (usize, bool, &'a [u8]) {
    let limit = groups.len();
    let mut rest = text;
    for at in 0..limit {
        let after = if at == 0 {
            rest
        } else {
            match rest.strip_prefix(b":") {
                Some(after) => after,
                None => return (at, false, rest),
            }
        };
        let Some((value, after_group)) = group(after) else {
            return (at, false, rest);
        };
        // An IPv4 address fills two groups, so it is tried where two are left. std
        // tries it first; it can only succeed where the digits read as a group are
        // followed by a dot (and a group that cannot be read cannot start one).
        if at + 1 < limit
            && after_group.first() == Some(&b'.')
            && let Some((ip, after)) = ipv4_prefix(after)
        {
            let [a, b, c, d] = ip.octets();
            groups[at] = u16::from_be_bytes([a, b]);
            groups[at + 1] = u16::from_be_bytes([c, d]);
            return (at + 2, true, after);
        }
        groups[at] = value;
        rest = after_group;
    }
    (limit, false, rest)
}

/// Every hex digit at the start of `text`, as a group, and what follows; none when
/// there is no digit or more than four (`read_number` in base 16, zeros in front
/// allowed).
fn group(text: &[u8]) -> Option<(u16, &[u8])> {
    let mut value: u16 = 0;
    let mut count = 0;
    while let Some(&byte) = text.get(count) {
        let digit = HEX_DIGITS[usize::from(byte)];
        if digit > 15 {
            break;
        }
        if count == 4 {
            return None;
        }
        value = (value << 4) | u16::from(digit);
        count += 1;
    }
    (count > 0).then_some((value, &text[count..]))
}

/// Each byte's value as a hex digit (either case), or 16 for a byte that is none.
const HEX_DIGITS: [u8; 256] = {
    let mut table = [16; 256];
    let mut byte = 0;
    while byte < 10 {
        table[b'0' as usize + byte] = byte as u8;
        byte += 1;
    }
    let mut letter = 0;
    while letter < 6 {
        table[b'a' as usize + letter] = 10 + letter as u8;
        table[b'A' as usize + letter] = 10 + letter as u8;
        letter += 1;
    }
    table
};

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::IpAddr;

    /// Both parsers agree on `text`.
    fn agree(text: &[u8]) -> Result<(), TestCaseError> {
        let std = std::str::from_utf8(text).ok();
        let std_v4 = std.and_then(|t| t.parse::<Ipv4Addr>().ok());
        let std_v6 = std.and_then(|t| t.parse::<Ipv6Addr>().ok());
        prop_assert_eq!(ipv4(text), std_v4, "{:?}", String::from_utf8_lossy(text));
        prop_assert_eq!(ipv6(text), std_v6, "{:?}", String::from_utf8_lossy(text));
        Ok(())
    }

    #[test]
    fn they_read_what_std_reads() {
        for text in [
            "0.0.0.0",
            "255.255.255.255",
            "1.2.3.4",
            "01.2.3.4",
            "1.2.3.04",
            "1.2.3.256",
            "1.2.3",
            "1.2.3.4.5",
            "1..2.3",
            "1.2.3.4 ",
            " 1.2.3.4",
            "1.2.3.0004",
            "+1.2.3.4",
            "::",
            "::1",
            "1::",
            "1::2",
            "::ffff:1.2.3.4",
            "64:ff9b::192.0.2.33",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:1.2.3.4",
            "1:2:3:4:5:6:7:1.2.3.4",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4:5:6:7:8::",
            "1::2::3",
            ":::",
            "1:::2",
            "::1.2.3.4:5",
            "1.2.3.4::",
            "1.2.3.4::1",
            "::00000",
            "::0000",
            "::FFFF",
            "::fFfF:1",
            "::g",
            "2001:db8::1%eth0",
            "[::1]",
            "::1.2.3",
            "::1.2.3.4.5",
            "::01.2.3.4",
            "fe80::1:2:3:4:5:6",
            "1:2:3:4:5:6:7:",
            ":1::",
            "1:2:3:4::5:1.2.3.4",
            "1:2:3:4:5::1.2.3.4",
            "1:2:3:4:5:6::1.2.3.4",
            "",
            ":",
            "1",
            "12345::",
            "::12.34.56.78",
            "::1234.5.6.7",
            "１.2.3.4",
        ] {
            agree(text.as_bytes()).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Text made of the pieces addresses are made of.
        #[test]
        fn they_read_what_std_reads_on_address_like_text(
            pieces in prop::collection::vec(prop_oneof![
                prop::sample::select(vec![
                    "0", "1", "00", "01", "255", "256", "999", "ffff", "FFFF", "0000", "00000",
                    "a", "g", ".", ":", "::", " ", "[", "]", "%", "1.2.3.4",
                ]),
            ], 0..14),
        ) {
            agree(pieces.concat().as_bytes())?;
        }

        /// Every address std prints, in every form it prints it.
        #[test]
        fn they_read_every_address_std_prints(v6 in any::<[u8; 16]>(), v4 in any::<[u8; 4]>()) {
            let v6 = Ipv6Addr::from(v6);
            let v4 = Ipv4Addr::from(v4);
            for text in [
                v6.to_string(),
                format!("{v6:?}"),
                v4.to_string(),
                v4.to_ipv6_mapped().to_string(),
                IpAddr::V6(v6).to_string(),
            ] {
                agree(text.as_bytes())?;
                prop_assert!(ipv4(text.as_bytes()).is_some() || ipv6(text.as_bytes()).is_some());
            }
        }

        #[test]
        fn they_read_what_std_reads_on_any_bytes(text in prop::collection::vec(any::<u8>(), 0..48)) {
            agree(&text)?;
        }
    }
}
