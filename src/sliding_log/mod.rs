//! The keyed sliding log: exact, with a lock per key.

mod log;

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::store::{KeyMap, Store};
use crate::{Decision, KeyRef, Quota, RateLimiter};
use log::{Log, Rules};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard};

/// A keyed sliding log: at most `limit` requests in **any** window — exact.
///
/// From a [`Quota`]: `limit = capacity` and `window = capacity × refill_every`, so
/// `Quota::per_minute(100)` means at most 100 in any 60 seconds, wherever they start.
///
/// Semantics (exact):
/// - The key keeps the time of each admitted request; a request at `s` counts while
///   `now − window < s`, so it leaves exactly one window later. A request is
///   admitted iff the requests counted plus its cost are at most `limit`; a cost `k`
///   is recorded as `k` requests at the same time.
/// - Only admitted requests are recorded: a denial changes nothing, so a client that
///   keeps retrying while denied is not locked out. Its `retry_after` is the exact
///   wait until enough recorded requests have left the window.
/// - A clock reading older than the key's newest recorded request counts as no time
///   elapsed.
///
/// The edge: none. No window of length `window` ever holds more than `limit`
/// admitted requests, at any boundary, for any schedule (with a non-decreasing clock;
/// a lagging reading is recorded as the key's newest time, so the limit holds for
/// the times recorded).
///
/// Memory and cost: each key keeps up to `limit` timestamps, so this is the one
/// algorithm whose state grows with the limit. Per key: a 32-byte `Mutex` and ring
/// header in the map, plus 8 bytes per timestamp slot; the ring starts empty, grows
/// by doubling from 4 slots while the requests in the window need room, never
/// beyond `limit` slots, and keeps its largest size. A check takes the key's own
/// lock (never a global one) and allocates only while the key's ring grows; an
/// admitted cost `k` writes `k` timestamps. Prefer
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) (one word, lock-free,
/// approximate) unless the limit must hold exactly in every window.
///
/// ```
/// use turnstile::{ManualClock, Quota, RateLimiter, SlidingLog};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = SlidingLog::<u64, _>::with_clock(Quota::per_minute(100)?, clock.clone());
/// clock.set(Duration::from_secs(59));
/// assert!(limiter.acquire(&1, 100).is_allowed());
/// clock.set(Duration::from_secs(118));
/// assert!(!limiter.acquire(&1, 1).is_allowed()); // all 100 are within the last minute
/// clock.set(Duration::from_secs(119));
/// assert!(limiter.acquire(&1, 100).is_allowed()); // exactly one minute later
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub struct SlidingLog<K, C = QuantaClock, S = DefaultHasher> {
    logs: KeyMap<K, Mutex<Log>, S>,
    rules: Rules,
    epoch: Epoch<C>,
    quota: Quota,
}

impl<K: Hash + Eq> SlidingLog<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder for the clock, the hasher and the expected number of keys.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<K: Hash + Eq, C: Clock> SlidingLog<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<SlidingLog<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> Builder<SlidingLog<K>, C, S> {
    /// Builds the limiter; its epoch is now.
    pub fn build(self) -> SlidingLog<K, C, S> {
        SlidingLog {
            logs: KeyMap::with_hasher(self.hasher, self.expected_keys),
            rules: Rules::new(&self.quota),
            epoch: Epoch::start(self.clock),
            quota: self.quota,
        }
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> SlidingLog<K, C, S> {
    /// The quota every key gets.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Number of keys that have state.
    pub fn len(&self) -> usize {
        self.logs.len()
    }

    /// Whether no key has state yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Locks a key's log, ignoring poisoning: the step under the lock cannot panic
/// (only an allocation failure could end it early, and that aborts), so a poisoned
/// lock still guards a valid log.
fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> RateLimiter<K> for SlidingLog<K, C, S> {
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let fresh = || Mutex::new(Log::new());
        self.logs
            .get_or_insert(key, fresh, |log| lock(log).acquire(&self.rules, now, cost))
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let now = self.epoch.elapsed();
        self.logs
            .get(key, |log| lock(log).available(&self.rules, now))
            .unwrap_or(self.rules.limit())
    }
}
