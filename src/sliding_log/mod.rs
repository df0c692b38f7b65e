//! The keyed sliding log: exact, with a lock per key.

mod log;

use crate::Decision;
use crate::Quota;
use crate::algorithm::{Algorithm, Blocked, Reconfigurable, Renewal, Retirement};
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::KeyedLimiter;
use crate::per_key::PerKey;
pub use log::SlidingLogRules;
use log::{Log, Status};
use std::convert::Infallible;
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
/// A refund drops the oldest timestamps still in the window rather than the
/// refunded request's own (which it cannot tell apart): the log then frees room no
/// earlier than the exact one would, so it never admits more. A key whose
/// timestamps have all left the window is forgotten like any idle key.
///
/// Memory and cost: each key keeps up to `limit` timestamps, so this is the one
/// algorithm whose state grows with the limit. Per key: a 32-byte `Mutex` and ring
/// header in the map, plus 8 bytes per timestamp slot; the ring starts empty, grows
/// by doubling from 4 slots while the requests in the window need room, never
/// beyond `limit` slots, and keeps its largest size. A check takes the key's own
/// lock (never a global one) and allocates only while the key's ring grows; an
/// admitted cost `k` writes `k` timestamps. Every quota is accepted, but a large
/// limit is as large in memory: a key that uses a limit of a billion holds 8 GB, and
/// an allocation that fails aborts the process, as anywhere in Rust. For limits in
/// the millions and beyond (bandwidth in bytes, say), use
/// [`TokenBucket`](crate::TokenBucket). Prefer
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) (one word, lock-free,
/// approximate) unless the limit must hold exactly in every window.
///
/// ```
/// use turnstile::{ManualClock, Quota, SlidingLog};
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
pub type SlidingLog<K, C = QuantaClock, S = DefaultHasher> = KeyedLimiter<SlidingLogRules, K, C, S>;

/// A [`SlidingLog`] in which each key has its own quota, from a resolver asked once when
/// the key's state is created, and whose quotas can be changed while it runs: built by
/// [`Builder::build_per_key`] or [`Builder::build_reconfigurable`]; see
/// [`crate::per_key`].
pub type PerKeySlidingLog<K, C = QuantaClock, S = DefaultHasher> =
    KeyedLimiter<PerKey<SlidingLogRules, K>, K, C, S>;

impl<K: Hash + Eq + Clone + Send + Sync + 'static> SlidingLog<K> {
    /// A limiter applying `quota` to every key, on the default clock and hasher.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock + 'static> SlidingLog<K, C> {
    /// A limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests, say.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Builder::<SlidingLog<K>, C>::with_clock(quota, clock).build()
    }
}

impl<K, C, S> Builder<SlidingLog<K>, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the limiter; its epoch is now.
    pub fn build(self) -> SlidingLog<K, C, S> {
        let rules = SlidingLogRules::new(&self.quota);
        match self.assemble(rules, |quota| {
            Ok::<_, Infallible>(SlidingLogRules::new(quota))
        }) {
            Ok(limiter) => limiter,
            Err(never) => match never {},
        }
    }
}

/// Locks a key's log, ignoring poisoning: the step under the lock cannot panic
/// (only an allocation failure could end it early, and that aborts), so a poisoned
/// lock still guards a valid log.
fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The log, if requests may still use it.
fn live(log: &mut MutexGuard<'_, Log>) -> Result<(), Blocked> {
    match log.status {
        Status::Live => Ok(()),
        Status::Retired => Err(Blocked::Retired),
        Status::Moved => Err(Blocked::Moving),
    }
}

/// Each key's log under its own lock; the lock makes freezing a log and changing it
/// mutually exclusive, as the compare-and-set does for a word.
impl<K> Algorithm<K> for SlidingLogRules {
    type State = Mutex<Log>;
    type Resolved = ();

    fn create(&self, _key: &K) -> Mutex<Log> {
        Mutex::new(Log::new())
    }

    fn acquire(&self, log: &Mutex<Log>, now: u64, cost: u32) -> Result<Decision, Blocked> {
        let mut log = lock(log);
        live(&mut log)?;
        Ok(log.acquire(self, now, cost))
    }

    fn available(&self, log: &Mutex<Log>, now: u64) -> Result<u32, Blocked> {
        let mut log = lock(log);
        live(&mut log)?;
        Ok(log.available(self, now))
    }

    fn refund(&self, log: &Mutex<Log>, now: u64, cost: u32) -> Result<(), Blocked> {
        let mut log = lock(log);
        live(&mut log)?;
        log.refund(self, now, cost);
        Ok(())
    }

    fn fresh_available(&self, _key: impl FnOnce() -> K, now: u64) -> u32 {
        Log::new().available(self, now)
    }

    fn is_retired(&self, log: &Mutex<Log>) -> bool {
        lock(log).status == Status::Retired
    }

    fn retire_if_forgettable(&self, log: &Mutex<Log>, at: u64) -> Retirement {
        let mut log = lock(log);
        match log.status {
            Status::Retired => Retirement::AlreadyRetired,
            Status::Moved => Retirement::Moving,
            Status::Live => match log.forgettable_from(self) {
                Some(from) if from <= at => {
                    log.status = Status::Retired;
                    Retirement::Retired
                }
                from => Retirement::Kept(from.unwrap_or(u64::MAX)),
            },
        }
    }

    fn resolve(&self, _key: &K) {}

    /// Never asked: one quota for every key is never outdated.
    fn renew(
        &self,
        _log: &Mutex<Log>,
        _resolved: &(),
        _now: u64,
        _swap: impl FnOnce(Mutex<Log>) -> bool,
    ) -> Renewal {
        Renewal::Current
    }
}

impl Reconfigurable for SlidingLogRules {
    type Frozen = Log;

    fn for_quota(quota: &Quota) -> Self {
        SlidingLogRules::new(quota)
    }

    /// Takes the log's entries out, leaving it marked as moved.
    fn freeze(&self, log: &Mutex<Log>) -> Result<Log, Blocked> {
        let mut log = lock(log);
        live(&mut log)?;
        let frozen = std::mem::take(&mut *log);
        log.status = Status::Moved;
        Ok(frozen)
    }

    fn moment(&self, frozen: &Log) -> u64 {
        frozen.newest()
    }

    fn left(&self, frozen: &Log, now: u64) -> u32 {
        frozen.available(self, now)
    }

    /// Puts the entries back: the log taken out was live.
    fn thaw(&self, log: &Mutex<Log>, frozen: Log) {
        *lock(log) = frozen;
    }
}
