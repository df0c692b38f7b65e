//! Shared by the integration tests: the token bucket's plain reference model for
//! many keys and constructors for every implementation under test; `schedule` has the random
//! schedules and the driver the other algorithms' reference-model tests share;
//! `keyed` has every algorithm's model with per-key quotas and reconfiguration.
#![allow(dead_code)]

pub mod keyed;
pub mod schedule;

use keyed::{Bucket, KeyModel};
use std::collections::HashMap;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{Decision, ManualClock, Quota, Settlement, TokenBucket};

/// The token bucket of the design notes for many keys: a map from key to its plain
/// model ([`keyed::Bucket`]); a key not in it is new, full at every reading.
pub struct Reference {
    quota: Quota,
    buckets: HashMap<u32, Bucket>,
}

impl Reference {
    pub fn new(quota: Quota) -> Self {
        Self {
            quota,
            buckets: HashMap::new(),
        }
    }

    pub fn acquire(&mut self, key: u32, now: u64, cost: u32) -> Decision {
        let quota = self.quota;
        let bucket = self
            .buckets
            .entry(key)
            .or_insert_with(|| Bucket::new(quota));
        bucket.acquire(now, cost)
    }

    /// Gives `cost` back to a key that is missing tokens, capped at full; a full
    /// bucket (an unknown key is full) is left as it is.
    pub fn refund(&mut self, key: u32, now: u64, cost: u32) {
        if let Some(bucket) = self.buckets.get_mut(&key) {
            bucket.refund(now, cost);
        }
    }

    /// A request that took `estimate` settled at `actual`: given back as a refund
    /// (saying how much), or charged beyond what is left up to the debt cap, a new
    /// key's bucket made first (the plain [`keyed::Keyed::settle`] for one quota).
    pub fn settle(&mut self, key: u32, now: u64, estimate: u32, actual: u32) -> Settlement {
        if actual <= estimate {
            let refunded = match self.buckets.get_mut(&key) {
                Some(bucket) => bucket.give_back(now, estimate - actual),
                None => 0,
            };
            return Settlement {
                refunded,
                ..Settlement::default()
            };
        }
        let quota = self.quota;
        let bucket = self
            .buckets
            .entry(key)
            .or_insert_with(|| Bucket::new(quota));
        let extra = actual - estimate;
        let charged = bucket.charge(now, extra);
        Settlement {
            refunded: 0,
            charged,
            forgiven: extra - charged,
        }
    }

    pub fn peek(&self, key: u32, now: u64) -> u32 {
        match self.buckets.get(&key) {
            Some(bucket) => bucket.peek(now),
            None => self.quota.capacity(),
        }
    }
}

/// Every token bucket implementation, each on its own handle to `clock`.
pub fn all_limiters(
    quota: Quota,
    clock: &ManualClock,
) -> (
    TokenBucket<u32, ManualClock>,
    MutexPerKey<u32, ManualClock>,
    GlobalLock<u32, ManualClock>,
) {
    (
        TokenBucket::with_clock(quota, clock.clone()).unwrap(),
        MutexPerKey::with_clock(quota, clock.clone()),
        GlobalLock::with_clock(quota, clock.clone()),
    )
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
