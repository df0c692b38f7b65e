//! Settings shared by every keyed limiter: clock, hasher, expected number of keys.

use crate::clock::QuantaClock;
use crate::quota::Quota;
use std::marker::PhantomData;

/// The default hasher for keys: foldhash's fast, randomly seeded hasher — about twice
/// as fast as std's SipHash on small keys, and seeded per limiter against collision
/// attacks.
pub type DefaultHasher = foldhash::fast::RandomState;

/// A builder for a limiter of type `L`, made by that limiter's `builder` function.
///
/// ```
/// use turnstile::{ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let limiter: TokenBucket<u64, ManualClock> = TokenBucket::builder(Quota::per_second(5)?)
///     .clock(clock.clone())
///     .expected_keys(10_000)
///     .build();
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder<L, C = QuantaClock, S = DefaultHasher> {
    pub(crate) quota: Quota,
    pub(crate) clock: C,
    pub(crate) hasher: S,
    pub(crate) expected_keys: usize,
    limiter: PhantomData<fn() -> L>,
}

impl<L> Builder<L> {
    pub(crate) fn new(quota: Quota) -> Self {
        Builder::with_clock(quota, QuantaClock::new())
    }
}

impl<L, C> Builder<L, C> {
    pub(crate) fn with_clock(quota: Quota, clock: C) -> Self {
        Self {
            quota,
            clock,
            hasher: DefaultHasher::default(),
            expected_keys: 0,
            limiter: PhantomData,
        }
    }
}

impl<L, C, S> Builder<L, C, S> {
    /// Uses `clock` instead of the default [`QuantaClock`].
    pub fn clock<C2>(self, clock: C2) -> Builder<L, C2, S> {
        Builder {
            quota: self.quota,
            clock,
            hasher: self.hasher,
            expected_keys: self.expected_keys,
            limiter: PhantomData,
        }
    }

    /// Hashes keys with `hasher` instead of [`DefaultHasher`].
    pub fn hasher<S2>(self, hasher: S2) -> Builder<L, C, S2> {
        Builder {
            quota: self.quota,
            clock: self.clock,
            hasher,
            expected_keys: self.expected_keys,
            limiter: PhantomData,
        }
    }

    /// Sizes the key map for about `n` keys up front, so it does not grow while they
    /// first arrive.
    pub fn expected_keys(mut self, n: usize) -> Self {
        self.expected_keys = n;
        self
    }
}
