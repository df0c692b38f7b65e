//! The textbook design: a map of per-key mutexes.

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::store::{BuildMap, Map};
use crate::sync::Unpoisoned;
use crate::token_bucket::TokenBucketRules;
use crate::word::WordAlgorithm;
use crate::{Decision, KeyRef, Quota, RateLimiter};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

/// A token bucket with the same map as [`TokenBucket`](crate::TokenBucket)'s young
/// generation (papaya, configured alike) but a `Mutex` around each key's state word
/// instead of a compare-and-set loop. It never forgets a key.
pub struct MutexPerKey<K, C = QuantaClock, S: BuildHasher = DefaultHasher> {
    words: BuildMap<K, Mutex<u64>, S>,
    rules: TokenBucketRules,
    epoch: Epoch<C>,
    quota: Quota,
}

impl<K, C, S: BuildHasher> fmt::Debug for MutexPerKey<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexPerKey")
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> MutexPerKey<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder for the clock, the hasher and the expected number of keys.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> MutexPerKey<K, C> {
    /// A limiter on `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<MutexPerKey<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K, C, S> Builder<MutexPerKey<K>, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch is now.
    pub fn build(self) -> MutexPerKey<K, C, S> {
        MutexPerKey {
            words: BuildMap::with_hasher(self.hasher, self.expected_keys),
            rules: TokenBucketRules::new(&self.quota),
            epoch: Epoch::start(self.clock),
            quota: self.quota,
        }
    }
}

impl<K, C, S> RateLimiter<K> for MutexPerKey<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let step = |word: &Mutex<u64>| {
            let mut word = word.lock().unpoisoned();
            let (new, decision) = self.rules.acquire(*word, now, cost);
            *word = new;
            decision
        };
        if let Some(decision) = self.words.get(key, step) {
            return decision;
        }
        // A new key: its first request on its word before any other thread sees it,
        // or, if another stored the key first, on that one.
        let fresh = Mutex::new(self.rules.full());
        let decision = step(&fresh);
        match self.words.insert(key.to_key(), fresh, step) {
            Ok(()) => decision,
            Err(decision) => decision,
        }
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        self.words
            .get(key, |word| {
                self.rules.available(*word.lock().unpoisoned(), now)
            })
            .unwrap_or(self.quota.capacity())
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        self.words.get(key, |word| {
            let mut word = word.lock().unpoisoned();
            *word = self.rules.refund(*word, now, cost);
        });
    }

    fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> crate::Settlement
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let step = |word: &Mutex<u64>| {
            let mut word = word.lock().unpoisoned();
            let (new, settlement) = self.rules.settle(*word, now, estimate, actual);
            *word = new;
            settlement
        };
        if let Some(settlement) = self.words.get(key, step) {
            return settlement;
        }
        if actual <= estimate {
            // No state is a full bucket: nothing to give back, nothing to store.
            return crate::Settlement::default();
        }
        // A charge on a new key: on its word before any other thread sees it, or, if
        // another stored the key first, on that one (as `acquire`).
        let fresh = Mutex::new(self.rules.full());
        let settlement = step(&fresh);
        match self.words.insert(key.to_key(), fresh, step) {
            Ok(()) => settlement,
            Err(settlement) => settlement,
        }
    }
}
