//! Quotas and durations as people write them: `"100/min"`, `"10/s burst 50"`,
//! `"250ms"`. Pure functions; the schema calls them while it reads a file, so a
//! mistake is reported at its line.

use crate::{Quota, QuotaError};
use std::time::Duration;

/// What a quota's text is expected to look like, for error messages.
pub(crate) const QUOTA_FORMS: &str = "a quota such as \"100/min\", \"10/s burst 50\" or \"5/10s\" \
(units: ms, s, min, h, d), or a table { capacity = 50, refill_every = \"100ms\" }";

/// Parses `"N/PERIOD"` or `"N/PERIOD burst B"`.
///
/// `N/PERIOD` is `Quota::per_minute(N)` and its kind: capacity N, one token every
/// PERIOD / N (rounded up to the nanosecond, so the rate never exceeds N per
/// PERIOD). `burst B` sets the capacity to B and keeps the rate: one token every
/// PERIOD / N still.
pub(crate) fn parse_quota(text: &str) -> Result<Quota, String> {
    let text = text.trim();
    let (rate, burst) = match text.split_once("burst") {
        Some((rate, burst)) => (rate.trim(), Some(burst.trim())),
        None => (text, None),
    };
    let Some((count, period)) = rate.split_once('/') else {
        return Err(format!("{text:?} is not {QUOTA_FORMS}"));
    };
    let count: u32 = parse_count(count.trim(), "the count before '/'")?;
    let period =
        parse_period(period.trim()).map_err(|_| format!("{text:?} is not {QUOTA_FORMS}"))?;
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

/// A whole number, named `what` in the error.
fn parse_count(text: &str, what: &str) -> Result<u32, String> {
    text.parse().map_err(|_| {
        format!(
            "{what} must be a whole number from 0 to {}, found {text:?}",
            u32::MAX
        )
    })
}

/// The period of a rate: a unit with an optional count (`min`, `10s`).
fn parse_period(text: &str) -> Result<Duration, String> {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration(text)
    } else {
        parse_duration(&format!("1{text}"))
    }
}

/// What a duration's text is expected to look like, for error messages.
pub(crate) const DURATION_FORMS: &str =
    "a duration such as \"250ms\", \"2s\", \"1min\", \"1h\" or \"1d\" (also ns, us)";

/// Parses a whole number and a unit: `"250ms"`, `"2s"`, `"5min"`, `"1h"`, `"1d"`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let unit_nanos: u64 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        _ => return Err(format!("{text:?} is not {DURATION_FORMS}")),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not {DURATION_FORMS}"))?;
    number
        .checked_mul(unit_nanos)
        .map(Duration::from_nanos)
        .ok_or_else(|| format!("{text:?} is longer than the clocks can measure"))
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
    }
}
