//! A reconfigurable limiter under one of its configurations: each request carries
//! that configuration's quota into the limiter ([`crate::per_key::Pinned`]), so a
//! reload can publish a new quota before it swaps its routes (a refused file's
//! included) and the new quota reaches requests exactly with the new routes, while
//! requests of the old routes go on deciding under the old quota.

use super::KeyedLimiter;
use crate::algorithm::Reconfigurable;
use crate::clock::Clock;
use crate::per_key::{PerKey, Pinned};
use crate::{Decision, KeyRef, Quota, RateLimiter, Settlement};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// `limiter` under one of its configurations: every request through it is that
/// configuration's (see [`crate::per_key::Pinned`]).
pub(crate) struct PinnedLimiter<A, K, C, S>
where
    A: Reconfigurable,
    K: Send + Sync,
    S: BuildHasher,
{
    limiter: Arc<KeyedLimiter<PerKey<A, K>, K, C, S>>,
    rules: Pinned<A>,
}

impl<A, K, C, S> KeyedLimiter<PerKey<A, K>, K, C, S>
where
    A: Reconfigurable,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + 'static,
{
    /// Publishes `quota` for every key as [`set_quota`](Self::set_quota) does, and
    /// returns the limiter under that configuration: requests through it move the
    /// keys they meet to `quota` at once, whatever the limiter publishes later, and
    /// requests through a handle of an earlier configuration keep theirs for every
    /// key not moved yet.
    pub(crate) fn pin_quota(self: &Arc<Self>, quota: Quota) -> PinnedLimiter<A, K, C, S> {
        let configuration = self.algorithm().reconfigure(Arc::new(move |_: &K| quota));
        PinnedLimiter {
            limiter: Arc::clone(self),
            rules: Pinned::new(configuration, quota),
        }
    }
}

impl<A, K, C, S> RateLimiter<K> for PinnedLimiter<A, K, C, S>
where
    A: Reconfigurable,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    #[inline(always)]
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.limiter.core.acquire(&self.rules, key, cost)
    }

    #[inline]
    fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.limiter.core.try_acquire(&self.rules, key)
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.limiter.core.peek(&self.rules, key)
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.limiter.core.refund(&self.rules, key, cost)
    }

    fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> Settlement
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.limiter.core.settle(&self.rules, key, estimate, actual)
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use crate::{ManualClock, Quota, RateLimiter, TokenBucket};
    use std::sync::Arc;
    use std::time::Duration;

    /// A key a later configuration moved, then forgot (full and idle past the margin),
    /// is a new key again: a request of the earlier configuration still in flight makes
    /// it afresh under its own quota, where the kept key would have decided under the
    /// later one. What the per-key module docs say of requests of one configuration.
    #[test]
    fn a_forgotten_key_is_new_again_for_an_earlier_configuration() {
        let clock = ManualClock::new();
        let limiter = Arc::new(
            TokenBucket::<u64>::builder(Quota::per_second(10).unwrap())
                .clock(clock.clone())
                .build_reconfigurable(),
        );
        let (earlier, later) = (
            limiter.pin_quota(Quota::per_second(10).unwrap()),
            limiter.pin_quota(Quota::per_second(3).unwrap()),
        );
        assert!(earlier.acquire(&7, 1).is_allowed());
        assert!(later.acquire(&7, 1).is_allowed()); // moved: 9 left, capped at 3, one taken
        // Kept: the earlier configuration's request is decided under the later quota.
        assert!(!earlier.acquire(&7, 5).is_allowed());
        clock.advance(Duration::from_secs(10));
        assert_eq!(limiter.evict_idle(), 1);
        // Forgotten: made afresh under the earlier quota, which has the 5.
        assert!(earlier.acquire(&7, 5).is_allowed());
        assert_eq!(
            later.peek(&7),
            3,
            "moved again by the later one: 5 left, capped"
        );
    }
}
