//! The lock-free keyed token bucket.

pub(crate) mod state;

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::WordLimiter;
use crate::{Decision, KeyRef, KeyStats, Quota, RateLimiter};
use state::Layout;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// A keyed token bucket: each key may burst up to the quota's capacity and gains one
/// token per refill interval, on a refill grid shared by all keys.
///
/// Each key's whole state — token count and last refill — is one `AtomicU64` (layout
/// documented in the crate's README), updated by a compare-and-set loop inside a
/// lock-free papaya map. Once a key exists, a request takes one clock reading, one map
/// lookup and usually one CAS: no lock, no allocation. A denial that changes nothing
/// writes nothing, so under attack the key's cache line stays shared between cores.
///
/// Semantics (exact, identical in every turnstile implementation):
/// - Tokens arrive at the limiter's epoch plus whole multiples of the interval, the
///   same grid for every key. A new key starts full; its first refill comes at the
///   next grid point, within one interval (a per-key grid would start a full
///   interval after its first request).
/// - Refill is lazy and counts whole grid points passed, so the unfinished part of
///   an interval is kept; the capacity caps what any silence buys.
/// - `acquire(cost)` is allowed iff the key has at least `cost` tokens, then takes
///   them. A denial changes nothing; its `retry_after` is the exact wait.
/// - A clock reading older than the key's last refill counts as no time elapsed.
///
/// Memory: one 8-byte word per key, plus the key and papaya's entry overhead.
///
/// ```
/// use turnstile::{Quota, RateLimiter, TokenBucket};
///
/// let limiter = TokenBucket::<String>::new(Quota::per_second(2)?);
/// assert!(limiter.try_acquire("alice"));
/// assert!(limiter.try_acquire("alice"));
/// assert!(!limiter.try_acquire("alice")); // burst of 2 spent
/// assert!(limiter.try_acquire("bob"));    // keys are independent
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub struct TokenBucket<K, C = QuantaClock, S = DefaultHasher> {
    inner: WordLimiter<Layout, K, C, S>,
    quota: Quota,
}

impl<K: Hash + Eq> TokenBucket<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder for the clock, the hasher and the expected number of keys.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<K: Hash + Eq, C: Clock> TokenBucket<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<TokenBucket<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> Builder<TokenBucket<K>, C, S> {
    /// Builds the limiter; its epoch (the refill grid's origin) is now.
    pub fn build(self) -> TokenBucket<K, C, S> {
        let layout = Layout::new(&self.quota);
        TokenBucket {
            inner: WordLimiter::new(
                layout,
                self.clock,
                self.hasher,
                self.expected_keys,
                &self.forgetting,
            ),
            quota: self.quota,
        }
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> TokenBucket<K, C, S> {
    /// The quota every key gets.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Number of keys that have state.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Forgets every key whose bucket has been full for at least the eviction margin;
    /// returns how many. Forgetting never changes a decision (see [`crate::evict`]).
    pub fn evict_idle(&self) -> usize {
        self.inner.evict_idle()
    }

    /// How many keys have been forgotten, and how many requests met the `max_keys`
    /// cap with nothing to forget and went to the overflow policy.
    pub fn stats(&self) -> KeyStats {
        let (evicted, overflowed) = self.inner.stats();
        KeyStats {
            keys: self.len(),
            evicted,
            overflowed,
        }
    }

    /// Whether no key has state yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A mutant sweep that removes without retiring, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn sweep_without_retiring(&self) {
        self.inner.sweep_without_retiring()
    }

    /// The raw state word of `key` and its layout, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn word<Q>(&self, key: &Q) -> (Option<u64>, Layout)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        (self.inner.word(key), self.inner.algorithm)
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> RateLimiter<K> for TokenBucket<K, C, S> {
    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.inner.acquire(key, cost)
    }

    #[inline]
    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.inner.peek(key)
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.inner.refund(key, cost)
    }
}
