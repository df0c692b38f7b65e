//! How much a key may do: a capacity and a refill interval, validated once.

use crate::clock::duration_to_nanos;
use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

/// A rate limit: at most `capacity` at once (the burst), one more every `refill_every`.
///
/// Every capacity from 1 to `u32::MAX` and every interval from 1 ns to `u64::MAX` ns
/// (584 years) is a quota, and `TokenBucket`, `FixedWindow` and `SlidingLog` hold
/// every one exactly: a million a second, or `u32::MAX` at once with one more every
/// nanosecond (a bandwidth limit in bytes). `SlidingWindowCounter` and `Gcra` need
/// narrower bounds, which their constructors check, refusing with
/// [`QuotaError::Unsupported`]; so do the Redis limiters, with their own error.
///
/// The window algorithms read a quota as `limit = capacity` per window of
/// `capacity × refill_every`; GCRA as burst `capacity`, one emission per
/// `refill_every`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    capacity: u32,
    refill_every: NonZeroU64,
}

impl Quota {
    /// `capacity` tokens at most, one token added every `refill_every`.
    ///
    /// # Errors
    /// A zero capacity, or an interval under one nanosecond or over `u64::MAX`
    /// nanoseconds.
    pub fn new(capacity: u32, refill_every: Duration) -> Result<Self, QuotaError> {
        if capacity == 0 {
            return Err(QuotaError::ZeroCapacity);
        }
        let nanos = u64::try_from(refill_every.as_nanos())
            .map_err(|_| QuotaError::IntervalTooLong { refill_every })?;
        let Some(refill_every) = NonZeroU64::new(nanos) else {
            return Err(QuotaError::ZeroInterval);
        };
        Ok(Self {
            capacity,
            refill_every,
        })
    }

    /// `n` per second: capacity `n`, one token every `1s / n`.
    ///
    /// When a second does not divide evenly by `n`, the interval rounds *up* to the
    /// next nanosecond, so the long-run rate never exceeds `n` per second (above a
    /// billion, the interval is 1 ns and the rate a billion a second).
    ///
    /// # Errors
    /// [`QuotaError::ZeroCapacity`] when `n == 0`.
    pub fn per_second(n: u32) -> Result<Self, QuotaError> {
        Self::per_period(n, Duration::from_secs(1))
    }

    /// `n` per minute: capacity `n`, one token every `60s / n` (rounded up to the
    /// nanosecond, as in [`Quota::per_second`]).
    ///
    /// # Errors
    /// [`QuotaError::ZeroCapacity`] when `n == 0`.
    pub fn per_minute(n: u32) -> Result<Self, QuotaError> {
        Self::per_period(n, Duration::from_secs(60))
    }

    /// `n` per hour: capacity `n`, one token every `3600s / n` (rounded up to the
    /// nanosecond, as in [`Quota::per_second`]).
    ///
    /// # Errors
    /// [`QuotaError::ZeroCapacity`] when `n == 0`.
    pub fn per_hour(n: u32) -> Result<Self, QuotaError> {
        Self::per_period(n, Duration::from_secs(3600))
    }

    fn per_period(n: u32, period: Duration) -> Result<Self, QuotaError> {
        if n == 0 {
            return Err(QuotaError::ZeroCapacity);
        }
        let interval = duration_to_nanos(period).div_ceil(u64::from(n));
        Self::new(n, Duration::from_nanos(interval))
    }

    /// The most tokens a key can hold: its largest burst.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// How often one token is added.
    #[inline]
    pub fn refill_every(&self) -> Duration {
        Duration::from_nanos(self.refill_every.get())
    }

    /// The refill interval in nanoseconds (at least 1: a division by it needs no check).
    #[inline]
    pub(crate) fn interval_nanos(&self) -> NonZeroU64 {
        self.refill_every
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("capacity", &self.capacity)
            .field("refill_every", &self.refill_every())
            .finish()
    }
}

/// Why a [`Quota`] was refused (by [`Quota::new`], or by a limiter whose state cannot
/// hold it). Non-exhaustive: a new algorithm may bring a new reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The capacity (or `n` of a `per_*` constructor) is zero: nothing could ever pass.
    ZeroCapacity,
    /// The refill interval is shorter than one nanosecond.
    ZeroInterval,
    /// The refill interval is longer than the clocks can measure.
    IntervalTooLong {
        /// The interval asked for.
        refill_every: Duration,
    },
    /// The quota is valid, but this algorithm's state cannot hold it exactly. Only
    /// [`SlidingWindowCounter`](crate::SlidingWindowCounter) and [`Gcra`](crate::Gcra)
    /// have bounds; each one's documentation states its own.
    Unsupported {
        /// The algorithm that refused the quota.
        algorithm: &'static str,
        /// The capacity asked for.
        capacity: u32,
        /// The interval asked for.
        refill_every: Duration,
        /// What the algorithm needs of a quota, in words.
        requirement: &'static str,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::ZeroCapacity => write!(f, "quota capacity must be at least 1"),
            QuotaError::ZeroInterval => {
                write!(f, "quota refill interval must be at least 1 nanosecond")
            }
            QuotaError::IntervalTooLong { refill_every } => write!(
                f,
                "quota refill interval {refill_every:?} exceeds the clock's range of \
                 u64::MAX nanoseconds (about 584 years)"
            ),
            QuotaError::Unsupported {
                algorithm,
                capacity,
                refill_every,
                requirement,
            } => write!(
                f,
                "{algorithm} cannot hold a quota of capacity {capacity} with a refill interval \
                 of {refill_every:?} exactly: {requirement}"
            ),
        }
    }
}

impl std::error::Error for QuotaError {}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn per_period_constructors_spread_n_tokens_over_the_period() {
        let q = Quota::per_second(10).unwrap();
        assert_eq!(
            (q.capacity(), q.refill_every()),
            (10, Duration::from_millis(100))
        );
        let q = Quota::per_minute(100).unwrap();
        assert_eq!(q.refill_every(), Duration::from_millis(600));
        let q = Quota::per_hour(60).unwrap();
        assert_eq!(q.refill_every(), Duration::from_secs(60));
    }

    #[test]
    fn uneven_periods_round_the_interval_up_never_down() {
        // 1 s / 3 = 333,333,333.3 ns: rounding down would admit slightly more than 3/s.
        let q = Quota::per_second(3).unwrap();
        assert_eq!(q.refill_every(), Duration::from_nanos(333_333_334));
    }

    #[test]
    fn zero_capacity_and_zero_interval_are_refused() {
        assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCapacity));
        assert_eq!(
            Quota::new(0, Duration::from_secs(1)),
            Err(QuotaError::ZeroCapacity)
        );
        assert_eq!(Quota::new(5, Duration::ZERO), Err(QuotaError::ZeroInterval));
        assert_eq!(
            Quota::new(5, Duration::from_nanos(1) / 2),
            Err(QuotaError::ZeroInterval)
        );
    }

    #[test]
    fn an_interval_beyond_the_clock_range_is_refused() {
        let refill_every = Duration::from_nanos(u64::MAX) + Duration::from_nanos(1);
        assert_eq!(
            Quota::new(1, refill_every),
            Err(QuotaError::IntervalTooLong { refill_every })
        );
        assert!(Quota::new(1, Duration::from_nanos(u64::MAX)).is_ok());
    }

    #[test]
    fn every_capacity_and_every_interval_is_a_quota() {
        for capacity in [1, 1_000_000, u32::MAX] {
            for nanos in [1, 1_000, u64::MAX] {
                let quota = Quota::new(capacity, Duration::from_nanos(nanos)).unwrap();
                assert_eq!(quota.capacity(), capacity);
                assert_eq!(quota.refill_every(), Duration::from_nanos(nanos));
            }
        }
        let q = Quota::per_second(1_000_000).unwrap();
        assert_eq!(q.refill_every(), Duration::from_micros(1));
        // Above a billion a second the interval cannot shrink below 1 ns.
        let q = Quota::per_second(u32::MAX).unwrap();
        assert_eq!(
            (q.capacity(), q.refill_every()),
            (u32::MAX, Duration::from_nanos(1))
        );
    }
}
