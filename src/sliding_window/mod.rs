//! The lock-free keyed sliding window counter.

pub(crate) mod state;

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::KeyedLimiter;
use crate::{Quota, QuotaError};
pub use state::SlidingWindowRules;
use std::hash::{BuildHasher, Hash};

/// A keyed sliding window counter: about `limit` requests in any window, estimated
/// from two fixed windows' counts in one word.
///
/// From a [`Quota`]: `limit = capacity` and `window = capacity × refill_every`, so
/// `Quota::per_minute(100)` means about 100 in any minute. Fixed windows are aligned
/// to the limiter's epoch, as in [`FixedWindow`](crate::FixedWindow).
///
/// Semantics (exact integers, no floats):
/// - The key counts `previous × (limit − q) / limit + current`, where `current` and
///   `previous` are the requests admitted in this fixed window and the one before,
///   and `q` is the whole refill intervals elapsed in this window: the previous
///   window weighs by how much of it the sliding window still overlaps, measured in
///   whole intervals and **rounded up** (so the estimate moves on the same grid as
///   [`TokenBucket`](crate::TokenBucket)'s refills). A request is admitted iff that
///   count plus its cost is at most `limit` — an exact rational comparison; the
///   `remaining` reported is that count rounded up to a whole request, subtracted
///   from `limit`.
/// - A denial changes nothing; its `retry_after` is the exact wait until the count
///   has fallen far enough, always a grid point.
/// - A clock reading older than the key's window counts as no time elapsed: it sees
///   the start of the key's window, where the previous window weighs fully.
///
/// **Against the exact sliding log** (a request counts for exactly one window after
/// it), with a non-decreasing clock:
/// - *Over-admission*: in any span of `d <= window` nanoseconds it admits at most
///   `limit + ⌊(d − 1) / refill_every⌋` — `limit` within one interval, and never the
///   fixed window's `2 × limit` in a moment (with 100 per minute: at most 103 in any
///   two seconds). Over a whole window that is up to `2 × limit − 1` when the
///   previous window's requests all came at its very end. The log: `limit`, always.
/// - *Under-admission*: it assumes the previous window's requests were spread
///   evenly, so from the same history it may count up to
///   `⌈previous × (limit − q) / limit⌉` more than are really in the sliding window
///   (at worst `limit`, right after a boundary, when the previous window's requests
///   all came at its start), and deny what the log would admit.
///
/// Memory: one 8-byte word per key (window index and two counts, layout in
/// [the guide](crate::guide::algorithms#sliding-window-counter)), beside the key in the limiter's table. Lock-free and
/// allocation-free per check, sharing `TokenBucket`'s compare-and-set loop.
///
/// Two counts beside the window index do not fit every quota: the constructors
/// refuse, with [`QuotaError::Unsupported`], a capacity above about the square root
/// of the window in nanoseconds — `Quota::per_second(n)` up to n = 16,383,
/// `per_minute` up to 131,071, `per_hour` up to 1,048,575.
///
/// ```
/// use turnstile::{ManualClock, Quota, SlidingWindowCounter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter =
///     SlidingWindowCounter::<u64, _>::with_clock(Quota::per_minute(100)?, clock.clone())?;
/// clock.set(Duration::from_secs(59));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // the last second of window 0
/// clock.set(Duration::from_secs(60));
/// assert!(!limiter.acquire(&1, 1).is_allowed()); // the previous minute still counts
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type SlidingWindowCounter<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<SlidingWindowRules, K, C, S>;

impl<K: Hash + Eq + Clone + Send + Sync + 'static> SlidingWindowCounter<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    ///
    /// # Errors
    /// [`QuotaError::Unsupported`] when the quota's counts do not fit the state word
    /// (see the type's documentation).
    pub fn new(quota: Quota) -> Result<Self, QuotaError> {
        Self::builder(quota).build()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock + 'static> SlidingWindowCounter<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    ///
    /// # Errors
    /// As [`SlidingWindowCounter::new`].
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        Builder::<SlidingWindowCounter<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K, C, S> Builder<SlidingWindowCounter<K>, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch is now.
    ///
    /// # Errors
    /// As [`SlidingWindowCounter::new`], for the limiter's quota and for an
    /// [`Overflow::Shared`](crate::Overflow::Shared) quota.
    pub fn build(self) -> Result<SlidingWindowCounter<K, C, S>, QuotaError> {
        let rules = SlidingWindowRules::new(&self.quota)?;
        self.assemble(rules, SlidingWindowRules::new)
    }
}
