//! The lock-free keyed token bucket.

pub(crate) mod state;

use crate::Quota;
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::KeyedLimiter;
use crate::per_key::PerKey;
pub use state::TokenBucketRules;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hash};

/// A keyed token bucket: each key may burst up to the quota's capacity and gains one
/// token per refill interval, on a refill grid shared by all keys.
///
/// Each key's whole state — the grid index at which its bucket is full again — is one
/// `AtomicU64` (see [the guide](crate::guide::state_word#the-state-word)), updated by a compare-and-set loop, found through
/// a lock-free map lookup. Once a key exists, a request takes one clock reading, one map
/// lookup and usually one CAS: no lock, no allocation. A denial that changes nothing
/// writes nothing, so under attack the key's cache line stays shared between cores.
///
/// Semantics (exact, identical in every turnstile implementation): tokens arrive on a
/// grid shared by all keys, a new key starts full, refill is lazy and capped at the
/// capacity, a denial changes nothing and its `retry_after` is the exact wait, and a
/// lagging clock reading admits less, never more. Every capacity from 1 to
/// `u32::MAX` fits beside every interval from 1 ns. Stated in full, with the reasons,
/// in [`guide::state_word`](crate::guide::state_word).
///
/// Memory: one 8-byte word per key, beside the key in the limiter's table. A key is
/// forgotten once its bucket has been full for the eviction margin (a full bucket
/// carries no information on the shared grid), so memory follows the active keys.
///
/// ```
/// use turnstile::{Quota, TokenBucket};
///
/// let limiter = TokenBucket::<String>::new(Quota::per_second(2)?);
/// assert!(limiter.try_acquire("alice"));
/// assert!(limiter.try_acquire("alice"));
/// assert!(!limiter.try_acquire("alice")); // burst of 2 spent
/// assert!(limiter.try_acquire("bob"));    // keys are independent
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub type TokenBucket<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<TokenBucketRules, K, C, S>;

/// A [`TokenBucket`] in which each key has its own quota, from a resolver asked once when
/// the key's state is created, and whose quotas can be changed while it runs: built by
/// [`Builder::build_per_key`] or [`Builder::build_reconfigurable`]; see
/// [`crate::per_key`].
pub type PerKeyTokenBucket<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<PerKey<TokenBucketRules, K>, K, C, S>;

impl<K: Hash + Eq + Clone + Send + Sync + 'static> TokenBucket<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock + 'static> TokenBucket<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<TokenBucket<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K, C, S> Builder<TokenBucket<K>, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch (the refill grid's origin) is now.
    pub fn build(self) -> TokenBucket<K, C, S> {
        let rules = TokenBucketRules::new(&self.quota);
        match self.assemble(rules, |quota| {
            Ok::<_, Infallible>(TokenBucketRules::new(quota))
        }) {
            Ok(limiter) => limiter,
            Err(never) => match never {},
        }
    }
}
