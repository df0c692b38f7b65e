//! The simplest design: one lock around one map.

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::sync::Unpoisoned;
use crate::token_bucket::TokenBucketRules;
use crate::word::WordAlgorithm;
use crate::{Decision, KeyRef, Quota, RateLimiter};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

/// A token bucket with every key's state word in one `Mutex<HashMap>`.
pub struct GlobalLock<K, C = QuantaClock, S = DefaultHasher> {
    words: Mutex<HashMap<K, u64, S>>,
    rules: TokenBucketRules,
    epoch: Epoch<C>,
    quota: Quota,
}

impl<K, C, S> fmt::Debug for GlobalLock<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalLock")
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> GlobalLock<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder for the clock, the hasher and the expected number of keys.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<K: Hash + Eq, C: Clock> GlobalLock<K, C> {
    /// A limiter on `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<GlobalLock<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> Builder<GlobalLock<K>, C, S> {
    /// Builds the limiter; its epoch is now.
    pub fn build(self) -> GlobalLock<K, C, S> {
        let map = HashMap::with_capacity_and_hasher(self.expected_keys, self.hasher);
        GlobalLock {
            words: Mutex::new(map),
            rules: TokenBucketRules::new(&self.quota),
            epoch: Epoch::start(self.clock),
            quota: self.quota,
        }
    }
}

impl<K, C, S> RateLimiter<K> for GlobalLock<K, C, S>
where
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let apply = |word: &mut u64| {
            let (new, decision) = self.rules.acquire(*word, now, cost);
            *word = new;
            decision
        };
        let mut words = self.words.lock().unpoisoned();
        if let Some(word) = words.get_mut(key) {
            return apply(word);
        }
        apply(words.entry(key.to_key()).or_insert(self.rules.full()))
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        self.words
            .lock()
            .unpoisoned()
            .get(key)
            .map_or(self.quota.capacity(), |&word| {
                self.rules.available(word, now)
            })
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        if let Some(word) = self.words.lock().unpoisoned().get_mut(key) {
            *word = self.rules.refund(*word, now, cost);
        }
    }

    fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> crate::Settlement
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let settle = |word: &mut u64| {
            let (new, settlement) = self.rules.settle(*word, now, estimate, actual);
            *word = new;
            settlement
        };
        let mut words = self.words.lock().unpoisoned();
        if let Some(word) = words.get_mut(key) {
            return settle(word);
        }
        if actual <= estimate {
            // No state is a full bucket: nothing to give back, nothing to store.
            return crate::Settlement::default();
        }
        settle(words.entry(key.to_key()).or_insert(self.rules.full()))
    }
}
