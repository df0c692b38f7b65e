//! Shared by the integration tests: a plain reference model of the token bucket and
//! constructors for every implementation under test; `schedule` has the random
//! schedules and the driver the other algorithms' reference-model tests share;
//! `keyed` has every algorithm's model with per-key quotas and reconfiguration.
#![allow(dead_code)]

pub mod keyed;
pub mod schedule;

use std::collections::HashMap;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{Decision, ManualClock, Quota, TokenBucket};

/// The token bucket of the design notes, written as plainly as possible: a map from
/// key to `(tokens, last refill grid index)`, in u128 arithmetic so nothing overflows.
pub struct Reference {
    capacity: u128,
    interval: u128,
    buckets: HashMap<u32, (u128, u128)>,
}

impl Reference {
    pub fn new(quota: Quota) -> Self {
        Self {
            capacity: quota.capacity().into(),
            interval: quota.refill_every().as_nanos(),
            buckets: HashMap::new(),
        }
    }

    /// Tokens and refill index of `key` at `now`: a new key is full; whole grid points
    /// passed since the last refill add one token each, up to the capacity; a reading
    /// before the last refill counts as the last refill.
    fn refilled(&self, key: u32, now: u64) -> (u128, u128) {
        let Some(&(tokens, last)) = self.buckets.get(&key) else {
            return (self.capacity, u128::from(now) / self.interval);
        };
        let index = (u128::from(now) / self.interval).max(last);
        ((tokens + (index - last)).min(self.capacity), index)
    }

    pub fn acquire(&mut self, key: u32, now: u64, cost: u32) -> Decision {
        let (tokens, index) = self.refilled(key, now);
        let cost = u128::from(cost);
        if cost > self.capacity {
            return Decision::ExceedsCapacity {
                remaining: tokens as u32,
                capacity: self.capacity as u32,
            };
        }
        if tokens >= cost {
            self.buckets.insert(key, (tokens - cost, index));
            Decision::Allowed {
                remaining: (tokens - cost) as u32,
            }
        } else {
            self.buckets.insert(key, (tokens, index));
            // The missing tokens arrive at the next (cost - tokens) grid points.
            let ready_at = (index + (cost - tokens)) * self.interval;
            Decision::Denied {
                remaining: tokens as u32,
                retry_after: Duration::from_nanos((ready_at - u128::from(now)) as u64),
            }
        }
    }

    /// Gives `cost` back to a key that is missing tokens, capped at the capacity; a
    /// full bucket (an unknown key is full) is left as it is.
    pub fn refund(&mut self, key: u32, now: u64, cost: u32) {
        let (tokens, index) = self.refilled(key, now);
        if tokens < self.capacity {
            let tokens = (tokens + u128::from(cost)).min(self.capacity);
            self.buckets.insert(key, (tokens, index));
        }
    }

    pub fn peek(&self, key: u32, now: u64) -> u32 {
        self.refilled(key, now).0 as u32
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
        TokenBucket::with_clock(quota, clock.clone()),
        MutexPerKey::with_clock(quota, clock.clone()),
        GlobalLock::with_clock(quota, clock.clone()),
    )
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
