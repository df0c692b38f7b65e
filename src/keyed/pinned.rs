//! A reconfigurable limiter under one of its configurations: each request carries
//! that configuration's quota into the limiter ([`crate::per_key::Pinned`]), so a
//! reload can publish a new quota at the moment it swaps its routes, while requests
//! of the old routes go on deciding under the old quota.

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
    #[inline]
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
