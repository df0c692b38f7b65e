//! The lock-free keyed GCRA.

pub(crate) mod state;

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::KeyedLimiter;
use crate::{Quota, QuotaError};
pub use state::GcraRules;
use std::hash::{BuildHasher, Hash};

/// A keyed GCRA (generic cell rate algorithm, a leaky bucket as a meter — what
/// nginx's `limit_req`, governor and redis-cell implement): one theoretical arrival
/// time per key.
///
/// From a [`Quota`]: burst = `capacity`, emission interval = `refill_every`.
///
/// Semantics (exact): GCRA makes the same decisions as a token bucket with the same
/// capacity refilled **continuously**, one token per `refill_every`, fractions
/// included: a key holds `capacity − (TAT − now) / refill_every` tokens, a request is
/// admitted iff it holds at least its cost, and a new key starts full. A denial
/// changes nothing; its `retry_after` is the exact wait until the key holds the cost.
///
/// **Against [`TokenBucket`](crate::TokenBucket)**, which adds whole tokens on a grid
/// shared by all keys (epoch + multiples of the interval), for one key and the same
/// quota, with a non-decreasing clock:
/// - *From the same history*, the token bucket holds GCRA's whole tokens, or one
///   more: between a grid point and the instant the continuous refill completes the
///   same token. So every request GCRA admits, `TokenBucket` admits too, and
///   `TokenBucket` admits at most one token more.
/// - *In any span* `[a, b]`, GCRA admits at most `capacity + ⌊(b − a) /
///   refill_every⌋`; `TokenBucket` at most the grid points in `(a, b]` more than
///   `capacity`, up to one more: `capacity + 1` at two readings one nanosecond
///   apart across a grid point, where GCRA spaces the next token a whole interval
///   after the last.
/// - *Over a long schedule* their admissions are not within a constant of each
///   other: both keep the long-run rate, but once a decision differs the histories
///   differ. A client that retries every `refill_every − 1` ns against capacity 1 has
///   every retry that lands in a new interval admitted by `TokenBucket`, and every
///   second one by GCRA.
///
/// **Clock readings.** GCRA keeps no time of the key's last request, only TAT, so a
/// reading older than it cannot be recognised: its debt counts from the reading, as
/// if the refill ran backwards. It therefore admits less than the later reading
/// would, never more, and its `retry_after` is longer by exactly the skew, as in
/// `TokenBucket` — where the window algorithms count such a reading as no time
/// elapsed.
///
/// **Range.** TAT lies up to one full refill (`capacity × refill_every`) past the
/// reading, so the limiter's time ends that long (and 1 ns) before the clock's
/// `u64::MAX` ns (584 years): later readings count as that instant, where time
/// stands still — no key gains anything more, and a `retry_after` is measured from
/// that instant. The constructors refuse, with
/// [`QuotaError::Unsupported`], a full refill longer than 2^63 ns (292 years), so
/// every accepted limiter is exact for at least 292 years.
///
/// Memory: one 8-byte word per key, beside the key in the limiter's table. Lock-free
/// and allocation-free per check, sharing `TokenBucket`'s compare-and-set loop.
///
/// ```
/// use turnstile::{Gcra, ManualClock, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = Gcra::<u64, _>::with_clock(Quota::per_second(10)?, clock.clone())?;
/// assert!(limiter.acquire(&1, 10).is_allowed()); // the burst
/// clock.set(Duration::from_millis(150));
/// assert_eq!(limiter.peek(&1), 1); // one token per 100 ms, from the drain on
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type Gcra<K, C = QuantaClock, S = DefaultHasher> = KeyedLimiter<GcraRules, K, C, S>;

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Gcra<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    ///
    /// # Errors
    /// [`QuotaError::Unsupported`] when `capacity × refill_every` exceeds 2^63 ns.
    pub fn new(quota: Quota) -> Result<Self, QuotaError> {
        Self::builder(quota).build()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock + 'static> Gcra<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    ///
    /// # Errors
    /// As [`Gcra::new`].
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        Builder::<Gcra<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K, C, S> Builder<Gcra<K>, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch is now.
    ///
    /// # Errors
    /// As [`Gcra::new`], for the limiter's quota and for an
    /// [`Overflow::Shared`](crate::Overflow::Shared) quota.
    pub fn build(self) -> Result<Gcra<K, C, S>, QuotaError> {
        let rules = GcraRules::new(&self.quota)?;
        self.assemble(rules, GcraRules::new)
    }
}
