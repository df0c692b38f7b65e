//! The lock-free keyed fixed window.

pub(crate) mod state;

use crate::Quota;
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::KeyedLimiter;
use crate::per_key::PerKey;
pub use state::FixedWindowRules;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hash};

/// A keyed fixed window: at most `limit` requests per calendar window, windows
/// aligned to the limiter's epoch.
///
/// From a [`Quota`]: `limit = capacity` and `window = capacity × refill_every`, so
/// `Quota::per_minute(100)` allows 100 requests in each minute `[0, 60 s)`,
/// `[60 s, 120 s)`, ... counted from the limiter's creation.
///
/// Semantics (exact):
/// - A request is admitted iff the requests admitted in the current window plus its
///   cost are at most `limit`; a new window starts at zero. A denial changes nothing;
///   its `retry_after` is the exact wait until the next window starts.
/// - A clock reading older than the key's window counts as no time elapsed: it sees
///   the key's window.
///
/// **The edge — up to 2 × `limit` in a moment.** The count resets at each boundary,
/// whatever happened just before it: with 100 per minute, 100 requests in the last
/// second of one window and 100 in the first second of the next are all admitted,
/// 200 within two seconds. Where that matters, use
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) (at most `limit` plus a
/// share that grows with the span), [`SlidingLog`](crate::SlidingLog) (exact) or
/// [`TokenBucket`](crate::TokenBucket).
///
/// Memory: one 8-byte word per key (window index and count, layout in
/// [the guide](crate::guide::algorithms#fixed-window)), beside the key in the limiter's table. Every [`Quota`] fits; it is
/// lock-free and allocation-free per check like `TokenBucket`, sharing its
/// compare-and-set loop.
///
/// ```
/// use turnstile::{FixedWindow, ManualClock, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::<u64, _>::with_clock(Quota::per_minute(100)?, clock.clone());
/// clock.set(Duration::from_secs(59));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // the last second of window 0
/// clock.set(Duration::from_secs(60));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // the first second of window 1
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type FixedWindow<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<FixedWindowRules, K, C, S>;

/// A [`FixedWindow`] in which each key has its own quota, from a resolver asked once when
/// the key's state is created, and whose quotas can be changed while it runs: built by
/// [`Builder::build_per_key`] or [`Builder::build_reconfigurable`]; see
/// [`crate::per_key`].
pub type PerKeyFixedWindow<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<PerKey<FixedWindowRules, K>, K, C, S>;

impl<K: Hash + Eq + Clone + Send + Sync + 'static> FixedWindow<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock + 'static> FixedWindow<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<FixedWindow<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K, C, S> Builder<FixedWindow<K>, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch is now.
    pub fn build(self) -> FixedWindow<K, C, S> {
        let rules = FixedWindowRules::new(&self.quota);
        match self.assemble(rules, |quota| {
            Ok::<_, Infallible>(FixedWindowRules::new(quota))
        }) {
            Ok(limiter) => limiter,
            Err(never) => match never {},
        }
    }
}
