//! Keyed limiters with per-key quotas: built with a resolver, reconfigured while they
//! run. What a move to a new quota does to a key is [`crate::per_key`]'s to say.

use super::KeyedLimiter;
use crate::Quota;
use crate::algorithm::{Algorithm, Reconfigurable};
use crate::builder::Builder;
use crate::clock::Clock;
use crate::per_key::{PerKey, Resolver};
use std::convert::Infallible;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// A quota for each key, from `quota_for`.
fn resolver<K>(quota_for: impl Fn(&K) -> Quota + Send + Sync + 'static) -> Resolver<K> {
    Arc::new(quota_for)
}

impl<A, K, C, S> Builder<KeyedLimiter<A, K>, C, S>
where
    A: Reconfigurable + Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds a limiter in which each key gets `quota_for(key)`, asked once when the
    /// key's state is created (premium users more, say). The builder's quota is what
    /// [`quota`](KeyedLimiter::quota) reports. A known key's request still takes one
    /// lookup and one compare-and-set: its rules are stored beside its state.
    ///
    /// The resolver is user code: it runs in the request that creates or moves a key,
    /// with nothing frozen, so a panic in it reaches that request's caller and leaves
    /// the key as it was.
    pub fn build_per_key(
        self,
        quota_for: impl Fn(&K) -> Quota + Send + Sync + 'static,
    ) -> KeyedLimiter<PerKey<A, K>, K, C, S> {
        let per_key = PerKey::new(resolver(quota_for));
        match self.build_running(per_key, |quota| Ok::<_, Infallible>(A::for_quota(quota))) {
            Ok(limiter) => limiter,
            Err(never) => match never {},
        }
    }

    /// Builds a limiter whose quota can be changed while it runs
    /// ([`set_quota`](KeyedLimiter::set_quota), [`reconfigure`](KeyedLimiter::reconfigure)):
    /// every key gets the builder's quota until then.
    pub fn build_reconfigurable(self) -> KeyedLimiter<PerKey<A, K>, K, C, S> {
        let quota = self.quota;
        self.build_per_key(move |_| quota)
    }
}

impl<A, K, C, S> KeyedLimiter<PerKey<A, K>, K, C, S>
where
    A: Reconfigurable + Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + 'static,
{
    /// From now on each key gets `quota_for(key)`: new keys at once, existing keys at
    /// their next request, as the [`per_key`](crate::per_key) module docs say (a key
    /// whose quota is unchanged keeps its state exactly). No request waits for this
    /// call, which only publishes the new resolver.
    pub fn reconfigure(&self, quota_for: impl Fn(&K) -> Quota + Send + Sync + 'static) {
        self.algorithm().reconfigure(resolver(quota_for));
    }

    /// From now on every key gets `quota`, as [`reconfigure`](Self::reconfigure) says.
    pub fn set_quota(&self, quota: Quota) {
        self.reconfigure(move |_| quota);
    }
}
