//! Quotas and durations as people write them: `"100/min"`, `"10/s burst 50"`,
//! `"250ms"`. Pure functions; the schema calls them while it reads a file, so a
//! mistake is reported at its line.

use crate::{Quota, QuotaError};
use std::time::Duration;

/// What a quota's text is expected to look like, for error messages.
pub(crate) const QUOTA_FORMS: &str = "a quota such as \"100/min\", \"10/s burst 50\" or \"5/10s\" \
(units: ns, us, ms, s, m or min, h, d), or a table { capacity = 50, refill_every = \"100ms\" }";

/// Parses `"N/PERIOD"` or `"N/PERIOD burst B"`: the rate is one word (no spaces
/// inside it), `burst` a word of its own, and every count plain decimal digits (no
/// sign), so `"10/sburst50"`, `"10/s burst50"` and `"+5/s"` are refused.
///
/// `N/PERIOD` is `Quota::per_minute(N)` and its kind: capacity N, one token every
/// PERIOD / N (rounded up to the nanosecond, so the rate never exceeds N per
/// PERIOD). `burst B` sets the capacity to B and keeps the rate: one token every
/// PERIOD / N still.
pub(crate) fn parse_quota(text: &str) -> Result<Quota, String> {
    let text = text.trim();
    let not_a_quota = || format!("{text:?} is not {QUOTA_FORMS}");
    let words: Vec<&str> = text.split_whitespace().collect();
    let (rate, burst) = match words.as_slice() {
        [rate] => (*rate, None),
        [rate, "burst", burst] => (*rate, Some(*burst)),
        _ => return Err(not_a_quota()),
    };
    let Some((count, period)) = rate.split_once('/') else {
        return Err(not_a_quota());
    };
    let count: u32 = parse_count(count, "the count before '/'")?;
    let period_text = period;
    let period = parse_period(period).map_err(|error| match error {
        DurationError::Form => not_a_quota(),
        DurationError::TooLong => {
            format!("the period of {text:?} is longer than the clocks can measure")
        }
    })?;
    // Said of the period the user wrote: the interval it makes (period / count) is
    // the quota's business, and its error would speak of a refill interval.
    if period.is_zero() {
        return Err(format!(
            "the period {period_text:?} of {text:?} is zero: a rate needs a period of at least 1ns"
        ));
    }
    let capacity = match burst {
        Some(burst) => parse_count(burst, "the burst")?,
        None => count,
    };
    if count == 0 {
        return Err(QuotaError::ZeroCapacity.to_string());
    }
    let period_nanos = u64::try_from(period.as_nanos())
        .map_err(|_| format!("the period of {text:?} is longer than the clocks can measure"))?;
    let interval = period_nanos.div_ceil(u64::from(count));
    Quota::new(capacity, Duration::from_nanos(interval)).map_err(|error| error.to_string())
}

/// A whole number of plain decimal digits, named `what` in the error.
fn parse_count(text: &str, what: &str) -> Result<u32, String> {
    let digits = !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    match text.parse() {
        Ok(count) if digits => Ok(count),
        _ => Err(format!(
            "{what} must be a whole number from 0 to {}, found {text:?}",
            u32::MAX
        )),
    }
}

/// The period of a rate: a unit with an optional count (`min`, `10s`).
fn parse_period(text: &str) -> Result<Duration, DurationError> {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        read_duration(text)
    } else {
        read_duration(&format!("1{text}"))
    }
}

/// What a duration's text is expected to look like, for error messages.
pub(crate) const DURATION_FORMS: &str = "a duration such as \"250ms\", \"2s\", \"1min\", \"1h\" or \"1d\" (units: ns, us, ms, s, m or min, h, d)";

/// Why a duration's text was refused.
#[derive(Debug, PartialEq, Eq)]
enum DurationError {
    /// Not a number and a unit.
    Form,
    /// A number and a unit, too long for a `u64` of nanoseconds.
    TooLong,
}

/// Parses a whole number and a unit: `"250ms"`, `"2s"`, `"5min"`, `"1h"`, `"1d"`.
/// The units, exactly (lower case; the guide's page lists the same): `ns`; `us`, `µs`,
/// `μs`; `ms`; `s`, `sec`, `second`, `seconds`; `m`, `min`, `minute`, `minutes`; `h`,
/// `hour`, `hours`; `d`, `day`, `days`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    read_duration(text).map_err(|error| match error {
        DurationError::Form => format!("{:?} is not {DURATION_FORMS}", text.trim()),
        DurationError::TooLong => {
            format!("{:?} is longer than the clocks can measure", text.trim())
        }
    })
}

fn read_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let unit_nanos: u64 = match unit.trim() {
        "ns" => 1,
        // The micro sign (U+00B5) and the Greek mu (U+03BC) look alike: both read.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        _ => return Err(DurationError::Form),
    };
    if number.is_empty() {
        return Err(DurationError::Form);
    }
    // Only digits: a number that does not parse is too large.
    let number: u64 = number.parse().map_err(|_| DurationError::TooLong)?;
    number
        .checked_mul(unit_nanos)
        .map(Duration::from_nanos)
        .ok_or(DurationError::TooLong)
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_the_per_period_constructors_build_them() {
        assert_eq!(parse_quota("100/min"), Ok(Quota::per_minute(100).unwrap()));
        assert_eq!(parse_quota(" 3/s "), Ok(Quota::per_second(3).unwrap()));
        assert_eq!(parse_quota("7/h"), Ok(Quota::per_hour(7).unwrap()));
        assert_eq!(
            parse_quota("5/10s"),
            Ok(Quota::new(5, Duration::from_secs(2)).unwrap())
        );
    }

    #[test]
    fn a_burst_sets_the_capacity_and_keeps_the_rate() {
        assert_eq!(
            parse_quota("10/s burst 50"),
            Ok(Quota::new(50, Duration::from_millis(100)).unwrap())
        );
    }

    #[test]
    fn mistakes_are_refused_with_what_was_expected() {
        for bad in [
            "100",
            "100 per min",
            "x/min",
            "10/fortnight",
            "10/s burst many",
            "-1/s",
            "+5/s",
            "10/sburst50",
            "10/s burst50",
            "10/s burst +5",
            "10/s burst 5 more",
            "10 / s",
        ] {
            let error = parse_quota(bad).unwrap_err();
            assert!(
                error.contains("is not a quota") || error.contains("must be a whole number"),
                "{bad}: {error}"
            );
        }
        assert_eq!(
            parse_quota("0/s"),
            Err(QuotaError::ZeroCapacity.to_string())
        );
        assert_eq!(
            parse_quota("10/s burst 0"),
            Err(QuotaError::ZeroCapacity.to_string())
        );
    }

    #[test]
    fn durations_take_a_number_and_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1min"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999d").is_err());
        assert_eq!(parse_duration("5\u{b5}s"), Ok(Duration::from_micros(5)));
        assert_eq!(parse_duration("5\u{3bc}s"), Ok(Duration::from_micros(5)));
    }

    #[test]
    fn a_zero_period_is_said_of_the_period_written() {
        for (zero, period) in [("1/0s", "0s"), ("5/0min burst 9", "0min"), ("1/0ns", "0ns")] {
            assert_eq!(
                parse_quota(zero),
                Err(format!(
                    "the period {period:?} of {zero:?} is zero: a rate needs a period of at least 1ns"
                ))
            );
        }
    }

    #[test]
    fn every_unit_listed_in_the_guide_reads() {
        let nanos = |text: &str| parse_duration(text).map(|d| d.as_nanos());
        for (units, one) in [
            (&["ns"][..], 1),
            (&["us", "\u{b5}s", "\u{3bc}s"], 1_000),
            (&["ms"], 1_000_000),
            (&["s", "sec", "second", "seconds"], 1_000_000_000),
            (&["m", "min", "minute", "minutes"], 60_000_000_000),
            (&["h", "hour", "hours"], 3_600_000_000_000),
            (&["d", "day", "days"], 86_400_000_000_000),
        ] {
            for unit in units {
                assert_eq!(nanos(&format!("2{unit}")), Ok(2 * one), "{unit}");
            }
        }
        for other in ["2mins", "2hrs", "2w", "2S", "2Min"] {
            assert!(parse_duration(other).is_err(), "{other}");
        }
    }

    #[test]
    fn a_period_too_long_says_so() {
        for long in ["1/99999999999999999999d", "1/99999999999d"] {
            let error = parse_quota(long).unwrap_err();
            assert!(
                error.contains("longer than the clocks can measure"),
                "{error}"
            );
        }
    }
}
