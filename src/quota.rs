//! How much a key may do: a capacity and a refill interval, validated once.

use crate::clock::duration_to_nanos;
use std::fmt;
use std::time::Duration;

/// A rate limit: at most `capacity` at once (the burst), one more every `refill_every`.
///
/// Every limit a `Quota` accepts is one its limiters can hold exactly, so limiters
/// built from it never panic or truncate later. See [`Quota::max_capacity`] for the
/// one bound beyond "not zero", which is the token bucket's; `FixedWindow` and
/// `SlidingLog` hold every accepted quota too. `SlidingWindowCounter` and `Gcra`
/// need narrower bounds, which their constructors check, refusing with
/// [`QuotaError::Unsupported`].
///
/// The window algorithms read a quota as `limit = capacity` per window of
/// `capacity × refill_every`; GCRA as burst `capacity`, one emission per
/// `refill_every`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    capacity: u32,
    refill_every: u64,
}

impl Quota {
    /// `capacity` tokens at most, one token added every `refill_every`.
    ///
    /// # Errors
    /// A zero capacity, an interval under one nanosecond or over `u64::MAX`
    /// nanoseconds, or a capacity above [`Quota::max_capacity`] for this interval.
    pub fn new(capacity: u32, refill_every: Duration) -> Result<Self, QuotaError> {
        if capacity == 0 {
            return Err(QuotaError::ZeroCapacity);
        }
        let nanos = u64::try_from(refill_every.as_nanos())
            .map_err(|_| QuotaError::IntervalTooLong { refill_every })?;
        if nanos == 0 {
            return Err(QuotaError::ZeroInterval);
        }
        let max = max_capacity(nanos);
        if u64::from(capacity) > max {
            return Err(QuotaError::CapacityTooLarge {
                capacity,
                refill_every,
                max_capacity: max,
            });
        }
        Ok(Self {
            capacity,
            refill_every: nanos,
        })
    }

    /// `n` per second: capacity `n`, one token every `1s / n`.
    ///
    /// When a second does not divide evenly by `n`, the interval rounds *up* to the
    /// next nanosecond, so the long-run rate never exceeds `n` per second.
    ///
    /// # Errors
    /// As [`Quota::new`]; in practice `n == 0` or `n` above about 30,000.
    pub fn per_second(n: u32) -> Result<Self, QuotaError> {
        Self::per_period(n, Duration::from_secs(1))
    }

    /// `n` per minute: capacity `n`, one token every `60s / n` (rounded up to the
    /// nanosecond, as in [`Quota::per_second`]).
    ///
    /// # Errors
    /// As [`Quota::new`]; in practice `n == 0` or `n` above about 228,000.
    pub fn per_minute(n: u32) -> Result<Self, QuotaError> {
        Self::per_period(n, Duration::from_secs(60))
    }

    /// `n` per hour: capacity `n`, one token every `3600s / n` (rounded up to the
    /// nanosecond, as in [`Quota::per_second`]).
    ///
    /// # Errors
    /// As [`Quota::new`]; in practice `n == 0` or `n` above about 1.7 million.
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

    /// The largest capacity a state word can hold beside a refill interval of
    /// `refill_every`: about one token per nanosecond of interval (509 at 1 µs,
    /// 524,285 at 1 ms, 536,870,909 at 1 s), capped at `u32::MAX`.
    ///
    /// This is the token bucket's bound, which `Quota` enforces; `FixedWindow` and
    /// `SlidingLog` hold every quota within it too. `SlidingWindowCounter` and `Gcra`
    /// need narrower bounds, checked by their constructors.
    ///
    /// Why: a token bucket keeps its token count and its last refill time in one
    /// 64-bit word, exactly, for every instant a `u64` nanosecond clock can name
    /// (584 years). The refill time is a count of whole intervals, which needs
    /// `64 - log2(interval in ns)` bits; the token count gets the rest.
    pub fn max_capacity(refill_every: Duration) -> u32 {
        match u64::try_from(refill_every.as_nanos()) {
            Ok(0) => 0,
            Ok(nanos) => u32::try_from(max_capacity(nanos)).unwrap_or(u32::MAX),
            Err(_) => u32::MAX,
        }
    }

    /// The most tokens a key can hold: its largest burst.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// How often one token is added.
    #[inline]
    pub fn refill_every(&self) -> Duration {
        Duration::from_nanos(self.refill_every)
    }

    /// The refill interval in nanoseconds (at least 1).
    #[inline]
    pub(crate) fn interval_nanos(&self) -> u64 {
        self.refill_every
    }
}

/// The largest capacity that fits one state word beside the refill grid index for
/// `interval` nanoseconds (0 when not even one token fits): the grid index needs
/// `bits(u64::MAX / interval)` bits, and the token count the rest, with its two highest
/// values left free to mark retired and moving words.
pub(crate) const fn max_capacity(interval: u64) -> u64 {
    let index_bits = u64::BITS - (u64::MAX / interval).leading_zeros();
    let token_bits = u64::BITS - index_bits;
    (1u64 << token_bits).saturating_sub(3)
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("capacity", &self.capacity)
            .field("refill_every", &self.refill_every())
            .finish()
    }
}

/// Why a [`Quota`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// The capacity cannot be held beside this refill interval in one state word.
    CapacityTooLarge {
        /// The capacity asked for.
        capacity: u32,
        /// The interval asked for.
        refill_every: Duration,
        /// The largest capacity this interval allows ([`Quota::max_capacity`]).
        max_capacity: u64,
    },
    /// The quota is valid, but this algorithm's state cannot hold it exactly. Only
    /// [`SlidingWindowCounter`](crate::SlidingWindowCounter) and [`Gcra`](crate::Gcra)
    /// have bounds beyond [`Quota::max_capacity`]; each algorithm's documentation
    /// states its own.
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
            QuotaError::CapacityTooLarge {
                capacity,
                refill_every,
                max_capacity,
            } => write!(
                f,
                "quota capacity {capacity} is above the limit of {max_capacity} for a refill \
                 interval of {refill_every:?}: the 64-bit state word holds the token count \
                 beside a refill time counted in whole intervals, which allows about one token \
                 per nanosecond of interval; use a smaller capacity or a longer interval"
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
    fn capacity_is_bounded_by_what_the_state_word_holds_and_the_error_names_the_bound() {
        let interval = Duration::from_micros(1);
        let max = Quota::max_capacity(interval);
        assert_eq!(max, 509);
        assert!(Quota::new(max, interval).is_ok());
        let err = Quota::new(max + 1, interval).unwrap_err();
        assert_eq!(
            err,
            QuotaError::CapacityTooLarge {
                capacity: max + 1,
                refill_every: interval,
                max_capacity: 509
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("510") && message.contains("509"),
            "{message}"
        );
    }

    #[test]
    fn documented_per_period_limits_hold() {
        // The rustdoc of per_second/per_minute/per_hour quotes these bounds.
        let largest = |f: fn(u32) -> Result<Quota, QuotaError>| {
            let (mut ok, mut bad) = (1u32, u32::MAX);
            while bad - ok > 1 {
                let mid = ok + (bad - ok) / 2;
                if f(mid).is_ok() { ok = mid } else { bad = mid }
            }
            ok
        };
        assert_eq!(largest(Quota::per_second), 30_518);
        assert_eq!(largest(Quota::per_minute), 228_882);
        assert_eq!(largest(Quota::per_hour), 1_716_614);
    }

    #[test]
    fn one_nanosecond_intervals_leave_no_room_for_tokens() {
        assert_eq!(Quota::max_capacity(Duration::from_nanos(1)), 0);
        assert!(matches!(
            Quota::new(1, Duration::from_nanos(1)),
            Err(QuotaError::CapacityTooLarge {
                max_capacity: 0,
                ..
            })
        ));
    }
}
