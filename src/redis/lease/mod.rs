//! Global limits at local speed: tokens leased from a Redis token bucket in batches and
//! served in process from one atomic word per key ([`RedisLeasedTokenBucket`]).
//!
//! [`RedisTokenBucket`](super::RedisTokenBucket) pays one round trip per check. The
//! leased limiter takes tokens from the same Redis bucket (the same script, hash
//! fields and server-time grid, so a leased and a plain limiter on one prefix share
//! one bucket) a batch at a time, and serves requests from the batch with a
//! compare-and-set on an `AtomicU64`: no lock, no allocation, no I/O.
//!
//! # How a check goes
//! 1. **Held tokens** (the hot path): the key's lease holds at least the cost, not
//!    expired: the cost is taken from the word; [`Outcome::Decided`] with
//!    [`Decision::Allowed`]. When that leaves the lease below half its size, one
//!    task fetches the next lease ahead of need, off the request path.
//! 2. **A remembered denial**: Redis denied this key a cost at most this one's, and its
//!    `retry_after` is not over: [`Decision::Denied`] at once, with the rest of that
//!    wait. Exact in one direction: only refill adds tokens to a bucket (no process
//!    returns any), so until then the bucket cannot have the cost. The wait is
//!    measured from the reply's arrival, so it may end up to one round trip after
//!    Redis's: such a denial can be a round trip late, never early.
//! 3. **A fetch**: one script call takes the cost, all or nothing, exactly as the plain
//!    limiter's check, and when allowed, whatever else the bucket holds up to the
//!    key's lease size less what the lease still holds; the rest of the grant goes
//!    into the lease. One fetch per key per process is in flight at a time: a request
//!    that finds the lease short while another fetch is in flight waits for that one
//!    (within the timeout) and then takes from it, or, if it failed, is answered by the
//!    failure policy with its error; it does not start a second.
//!
//! A key seen once has a lease size of one: its fetch takes exactly its cost, one
//! round trip, as today. The size then adapts per key (`size.rs`): doubled by a fetch
//! within half a lifetime of the key's previous one (the lease ran low that fast), up
//! to [`max_lease`](RedisLeasedTokenBucketBuilder::max_lease); halved by a fetch that
//! finds tokens of the previous lease expired unused; kept otherwise. A lease thus
//! settles at about half a lifetime of the key's traffic in this process.
//! [`LeaseCounts::grew`] and [`LeaseCounts::shrank`] count the steps.
//!
//! # The bound
//! Tokens leased are gone from the Redis bucket at the moment of the fetch, and each
//! is served at most once (the word's protocol, model-checked in
//! `loom-tests/tests/lease.rs`). So, for any number of processes (each with its own
//! leased limiter, plain limiters on the same prefix included):
//!
//! - **Never more than the one bucket can admit.** Write `C` for the capacity, `R(a, b]`
//!   for the refill grid points in `(a, b]`, and `H(a)` for the tokens the processes'
//!   leases hold at `a` (at most `processes × max_lease` per key). Over any span
//!   `[a, b]`, the processes together admit at most `C + R(a, b] + H(a)` for a key.
//!   From a moment nothing is held — the key's first request, or a lifetime after its
//!   last fetch everywhere — that is at most `C + R(a, b]`: the most the one bucket can
//!   admit over the span. Exactly: every token a fetch took is served to one request,
//!   still held, or expired — [`LeaseCounts`]: `leased = served_by_fetch +
//!   served_locally + expired + held` — and the bucket lost the tokens the fetches
//!   took; tested across five leased limiters and a plain one on connections of their
//!   own, and on a cluster.
//! - **A shift in time, bounded by the leases.** Against one bucket that sees the same
//!   requests at the same times, a leased token counts against the bucket when it is
//!   fetched and is admitted later; meanwhile the bucket refills from a lower level,
//!   so a burst after a quiet spell can be served both from leases and from the
//!   refilled bucket. That surplus is at most `H(a)` over a window starting at `a`,
//!   which the bound above already counts, and a token is admitted at most
//!   [`lifetime`](RedisLeasedTokenBucketBuilder::lifetime) after the latest fetch of
//!   its key in its process.
//! - **Under-admission, at most what leases hold and drop.** Tokens the bucket gave up
//!   that no request got are exactly the tokens held plus the tokens expired (both
//!   counted). At any moment a process holds at most `max_lease` per key, so the
//!   processes at most `processes × max_lease`; a key's lease in a process expires at
//!   most once per lifetime (its expiry is a lifetime after its latest fetch), so each
//!   process drops at most `max_lease` tokens per key per lifetime. A remembered
//!   denial can also make a token wait up to one round trip longer than Redis would
//!   (see how a check goes); the token stays in the bucket for the next fetch.
//!
//! The lease size never exceeds [`max_lease`](RedisLeasedTokenBucketBuilder::max_lease)
//! (by default 1/32 of the capacity, at least 1): a fetch asks for at most
//! `max(cost, size - held)`, and only the one fetch in flight adds to the lease, so a
//! process holds at most `max_lease` tokens per key (a request above `max_lease`
//! takes its whole cost from the bucket and leaves nothing beyond the lease size).
//!
//! # Expiry: tokens stop counting
//! A lease lives [`lifetime`](RedisLeasedTokenBucketBuilder::lifetime) (default
//! [`DEFAULT_LEASE_LIFETIME`], 1 s) on the limiter's clock from its fetch, less up to
//! one tick of 2^20 ns (the word stores expiry in ticks, rounded down: early, never
//! late); a fetch that adds to a lease still alive extends the tokens held to the new
//! expiry. Expired tokens are dropped and counted ([`LeaseCounts::expired`]), **not
//! returned** to Redis. Returning them is not safe in general: while they were out
//! the bucket kept refilling from a lower level, which the capacity caps later than
//! it would have capped the full bucket, so adding them back (even capped at the
//! capacity) can hand out tokens the one bucket would have lost to its cap, and a
//! return racing the grid (a refill point passed while the return is in flight)
//! needs the bucket's history to be exact. Dropping them costs at most the bound
//! above in under-admission, and keeps "never more than the one bucket" a plain fact.
//!
//! # Failures
//! The failure policy, [`Outcome`], timeouts and the circuit breaker are the plain
//! limiter's, and apply to fetches. **During an outage a process keeps serving the
//! tokens it holds**, as long as they live; a request that finds its lease empty
//! fetches, and when the fetch gets no answer (or the breaker is open), the
//! [`FailurePolicy`] answers with [`Outcome::Fallback`] and counts it, exactly as the
//! plain limiter. A fetch ahead of need that fails answers no request: its error is
//! counted in [`FailureCounts`] (timeouts, errors), not as allowed or denied. A
//! remembered denial is still answered during an outage, until its wait is over.
//!
//! # What `remaining` means here
//! In a [`Decision`] from this limiter, `remaining` is the tokens **this process holds**
//! for the key after the decision (its lease), not the shared bucket's count, which only
//! Redis knows and which a leased check does not ask. `retry_after` of a denial is
//! Redis's (or a remembered one, as above); a cost above the capacity is answered
//! [`Decision::ExceedsCapacity`] locally.
//!
//! # Memory and cost
//! One entry per key with a live lease, a fetch in flight or a remembered denial, in a
//! lock-free-read map (`scc::HashIndex`, the crate's store), about 200 bytes with the
//! key. Entries are swept when the map has doubled since the last sweep: those whose
//! lease is spent or expired, whose last fetch is a lifetime old and whose denial is
//! over go, so the map holds the keys of about one lifetime of traffic. A check on a
//! key with a live lease reads the clock, looks the key up and takes from its word:
//! no allocation, no lock (measured in `results/redis.md`). Starting a fetch ahead
//! allocates (a task, the key). Decisions made locally are not reported to a named
//! limiter's metrics and events; fetches are, as checks.

mod counts;
mod local;
mod size;

pub use counts::LeaseCounts;

use super::breaker::CircuitState;
use super::config::{ConfigError, Settings, TimeSource, settings_methods};
use super::connect::connect_methods;
use super::engine::{Checked, Leased, ScriptLimiter};
use super::failure::{CheckError, FailureCounts, FailurePolicy, Outcome};
use crate::lease_word::{self, MAX_HELD, tick};
use crate::sync::Ordering;
use crate::{Clock, Decision, Quota};
use ::redis::aio::{ConnectionLike, ConnectionManager};
use counts::LeaseCounters;
use local::{Denial, KeyLease, Leases, Slow, held};
use size::{Observed, refill_below};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How long a lease's tokens count unless told otherwise: one second.
pub const DEFAULT_LEASE_LIFETIME: Duration = Duration::from_secs(1);

/// The shortest lease lifetime accepted: ten ticks of the word's expiry (about 10 ms).
const MIN_LIFETIME: Duration = Duration::from_nanos(10 << lease_word::TICK_SHIFT);

/// A token bucket in Redis, shared by every process like
/// [`RedisTokenBucket`](super::RedisTokenBucket), whose tokens each process leases in
/// batches and serves in process: a check on a key with a lease is a compare-and-set
/// on one atomic word, not a round trip.
///
/// The processes together never admit more than the one Redis bucket can (its
/// capacity plus its refills over any span, plus what leases held at the span's
/// start); unused leased tokens are under-admission, at most `processes × max_lease`
/// per key held at once. See the [module docs](self) for the bound, stated exactly,
/// and how a check goes.
///
/// Cloning is cheap and shares the leases, the connection and the counters.
///
/// ```no_run
/// use std::time::Duration;
/// use turnstile::Quota;
/// use turnstile::redis::{FailurePolicy, RedisLeasedTokenBucket};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RedisLeasedTokenBucket::builder(Quota::per_second(10_000)?, FailurePolicy::Open)
///     .prefix("api:per-tenant:")
///     .max_lease(200)
///     .lifetime(Duration::from_millis(500))
///     .connect("redis://127.0.0.1/")?;
/// if limiter.acquire("tenant-7", 1).await.is_allowed() { /* serve */ }
/// # Ok(())
/// # }
/// ```
pub struct RedisLeasedTokenBucket<C = ConnectionManager> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for RedisLeasedTokenBucket<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for RedisLeasedTokenBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLeasedTokenBucket")
            .field("quota", &self.inner.quota)
            .field("lifetime", &Duration::from_nanos(self.inner.lifetime))
            .field("max_lease", &self.inner.max_lease)
            .field("keys", &self.inner.leases.len())
            .finish_non_exhaustive()
    }
}

/// What the clones share.
struct Inner<C> {
    limiter: ScriptLimiter<C>,
    quota: Quota,
    leases: Leases,
    /// The clock leases expire on: the client clock if the limiter has one, else a
    /// monotonic one of its own.
    clock: Arc<dyn Clock>,
    /// The clock's reading when the limiter was built.
    epoch: u64,
    /// A lease's lifetime, nanoseconds.
    lifetime: u64,
    max_lease: u32,
    refill_ahead: bool,
    counters: LeaseCounters,
}

impl RedisLeasedTokenBucket {
    /// A builder for a limiter applying `quota` to every key, answering `policy` when
    /// Redis does not and the key's lease is spent. Keys are prefixed with
    /// `turnstile:tb:`, as [`RedisTokenBucket`](super::RedisTokenBucket)'s, unless told
    /// otherwise: the two share a key's bucket.
    pub fn builder(quota: Quota, policy: FailurePolicy) -> RedisLeasedTokenBucketBuilder {
        RedisLeasedTokenBucketBuilder {
            quota,
            settings: Settings::new(policy, "turnstile:tb:"),
            lifetime: DEFAULT_LEASE_LIFETIME,
            max_lease: None,
            refill_ahead: true,
        }
    }
}

/// Builds a [`RedisLeasedTokenBucket`] (made by [`RedisLeasedTokenBucket::builder`]).
#[must_use = "a builder does nothing until it is built"]
#[derive(Debug)]
pub struct RedisLeasedTokenBucketBuilder {
    quota: Quota,
    pub(crate) settings: Settings,
    lifetime: Duration,
    max_lease: Option<u32>,
    refill_ahead: bool,
}

impl RedisLeasedTokenBucketBuilder {
    settings_methods!();
    connect_methods!(RedisLeasedTokenBucket);

    /// How long a lease's tokens count after its fetch (default
    /// [`DEFAULT_LEASE_LIFETIME`], 1 s; at least about 10 ms). Shorter: unused tokens
    /// stop counting sooner; longer: a key's lease can grow to cover slower traffic.
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The most tokens this process holds for one key (default 1/32 of the capacity,
    /// at least 1). The under-admission and the window bound are at most
    /// `processes × max_lease` per key; a hot key amortises a round trip over up to
    /// about `max_lease / 2` checks. At most the capacity and 2^24 - 1.
    pub fn max_lease(mut self, tokens: u32) -> Self {
        self.max_lease = Some(tokens);
        self
    }

    /// Whether a lease below half its size is refilled by a task ahead of need
    /// (default `true`). Off, every refill is made by the request that finds the lease
    /// short, on its path.
    pub fn refill_ahead(mut self, ahead: bool) -> Self {
        self.refill_ahead = ahead;
        self
    }

    /// The limiter, on `conn` (see
    /// [`RedisTokenBucketBuilder::build`](super::RedisTokenBucketBuilder::build)).
    ///
    /// # Errors
    /// What the plain token bucket refuses; a lifetime under about 10 ms or beyond
    /// 2^52 µs; a `max_lease` of zero, above the capacity or above 2^24 - 1.
    pub fn build<C>(self, conn: C) -> Result<RedisLeasedTokenBucket<C>, ConfigError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let algorithm = super::token_bucket::algorithm(&self.quota)?;
        let settings = self.settings.checked()?;
        let capacity = self.quota.capacity();
        let max_lease = self.max_lease.unwrap_or((capacity / 32).max(1));
        if max_lease == 0 || max_lease > capacity || max_lease > MAX_HELD {
            return Err(ConfigError::Lease(
                "max_lease must be at least 1 and at most the capacity and 2^24 - 1",
            ));
        }
        if self.lifetime < MIN_LIFETIME
            || self.lifetime > Duration::from_micros(super::config::MAX_MICROS)
        {
            return Err(ConfigError::Lease(
                "a lease lifetime must be at least 10.5 ms and at most 2^52 µs",
            ));
        }
        let clock: Arc<dyn Clock> = match &settings.time {
            TimeSource::Client { clock, .. } => Arc::clone(clock),
            TimeSource::Server => Arc::new(crate::QuantaClock::new()),
        };
        let epoch = clock.now();
        let inner = Inner {
            limiter: ScriptLimiter::new(algorithm, settings, conn),
            quota: self.quota,
            leases: Leases::new(),
            clock,
            epoch,
            // In range: at most 2^52 µs.
            lifetime: self.lifetime.as_nanos() as u64,
            max_lease,
            refill_ahead: self.refill_ahead,
            counters: LeaseCounters::default(),
        };
        Ok(RedisLeasedTokenBucket {
            inner: Arc::new(inner),
        })
    }
}

/// Where a key's lease stands in this process (see
/// [`RedisLeasedTokenBucket::lease`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseState {
    /// Tokens held now (unexpired).
    pub held: u32,
    /// The size of the key's next lease.
    pub size: u32,
    /// Whether a fetch for the key is in flight.
    pub fetching: bool,
}

impl<C> RedisLeasedTokenBucket<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Asks for `cost` tokens for `key` (any bytes; the prefix is prepended), all or
    /// nothing: from the key's lease when it holds them (no round trip), else from
    /// Redis in one fetch that also refills the lease (see the
    /// [module docs](self#how-a-check-goes)).
    ///
    /// A cost of zero is always allowed; a cost above the capacity is answered
    /// [`Decision::ExceedsCapacity`] without asking Redis. When the lease is short and
    /// Redis does not answer within the timeout, the failure policy answers
    /// ([`Outcome::Fallback`]); a check never waits longer than the timeout.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, cost: u32) -> Outcome {
        let key = key.as_ref();
        let inner = &self.inner;
        let now = inner.now();
        let capacity = inner.quota.capacity();
        if cost > capacity {
            let remaining = inner.leases.with(key, |lease| held(lease, now));
            return Outcome::Decided(Decision::ExceedsCapacity {
                remaining: remaining.unwrap_or(0),
                capacity,
            });
        }
        let taken = inner
            .leases
            .with(key, |lease| inner.take(lease, key, cost, now));
        if let Some(Ok(remaining)) = taken {
            return Outcome::Decided(Decision::Allowed { remaining });
        }
        inner.acquire_slow(key, cost).await
    }

    /// Asks for one token for `key`: `acquire(key, 1).await.is_allowed()`, the failure
    /// policy included.
    pub async fn try_acquire(&self, key: impl AsRef<[u8]>) -> bool {
        self.acquire(key, 1).await.is_allowed()
    }

    /// Tokens `key`'s bucket has in Redis now, without taking any (the leases processes
    /// hold are not in it: they left the bucket when fetched).
    ///
    /// # Errors
    /// As [`RedisTokenBucket::peek`](super::RedisTokenBucket::peek).
    pub async fn peek(&self, key: impl AsRef<[u8]>) -> Result<u32, CheckError> {
        let limiter = &self.inner.limiter;
        let left = limiter.left(key.as_ref());
        left.await
            .inspect_err(|error| limiter.count_error(key.as_ref(), error))
    }

    /// The tokens this process holds for `key` now (0 without a lease).
    pub fn held(&self, key: impl AsRef<[u8]>) -> u32 {
        let now = self.inner.now();
        self.inner
            .leases
            .with(key.as_ref(), |lease| held(lease, now))
            .unwrap_or(0)
    }

    /// Where `key`'s lease stands in this process; `None` when the key has no entry.
    pub fn lease(&self, key: impl AsRef<[u8]>) -> Option<LeaseState> {
        let now = self.inner.now();
        self.inner.leases.with(key.as_ref(), |lease| LeaseState {
            held: held(lease, now),
            size: lease.slow().size,
            // Relaxed: a snapshot for observation.
            fetching: lease.fetching.load(Ordering::Relaxed),
        })
    }

    /// Keys this process has a lease entry for (see the
    /// [module docs](self#memory-and-cost)).
    pub fn keys(&self) -> u64 {
        self.inner.leases.len()
    }

    /// What the leases did, since this limiter (or the one it was cloned from) was
    /// built.
    pub fn counts(&self) -> LeaseCounts {
        self.inner.counters.snapshot()
    }

    /// How often Redis gave no answer to a fetch (and how often the policy answered).
    pub fn failures(&self) -> FailureCounts {
        self.inner.limiter.failures()
    }

    /// Where the limiter's circuit breaker stands (shared with its clones).
    pub fn circuit(&self) -> CircuitState {
        self.inner.limiter.circuit()
    }

    /// The quota every key gets, from the bucket all processes share.
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// The most tokens this process holds for one key.
    pub fn max_lease(&self) -> u32 {
        self.inner.max_lease
    }
}

/// What a fetch came to.
enum Fetched {
    /// The sweep removed the key's entry before the fetch began: look it up again.
    Retired,
    /// Ahead of need, with the lease already at its size: nothing asked.
    Full,
    /// Redis's answer (or why there was none), and the tokens held after it.
    Done(Result<Leased, CheckError>, u32),
}

/// Holds a key's one fetch slot: released however the fetch ends (its future dropped
/// included), waking the requests that waited on it.
struct FetchSlot(Arc<KeyLease>);

impl Drop for FetchSlot {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next fetcher's swap, so that it reads
        // the lease after this fetch's grant (and asks for no more than the size).
        self.0.fetching.store(false, Ordering::Release);
        self.0.fetched.notify_waiters();
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Nanoseconds since the limiter was built, on its clock.
    #[inline]
    fn now(&self) -> u64 {
        self.clock.now().saturating_sub(self.epoch)
    }

    /// The hot path: `cost` from `key`'s lease, or the tokens it holds (fewer). A take
    /// that leaves the lease below half its size starts a fetch ahead of need.
    #[inline]
    fn take(
        self: &Arc<Self>,
        lease: &Arc<KeyLease>,
        key: &[u8],
        cost: u32,
        now: u64,
    ) -> Result<u32, u32> {
        let left = lease_word::take(&lease.word, cost, tick(now))?;
        // Relaxed: both are hints; the swap in `refill_ahead` decides.
        if self.refill_ahead
            && u64::from(left) < lease.refill_below.load(Ordering::Relaxed)
            && !lease.fetching.load(Ordering::Relaxed)
        {
            self.start_refill(lease, key);
        }
        Ok(left)
    }

    /// Starts one task fetching `key`'s next lease, unless a fetch is in flight or
    /// there is no tokio runtime to run it.
    #[cold]
    fn start_refill(self: &Arc<Self>, lease: &Arc<KeyLease>, key: &[u8]) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Acquire: see `FetchSlot::drop`.
        if lease.fetching.swap(true, Ordering::Acquire) {
            return;
        }
        let slot = FetchSlot(Arc::clone(lease));
        let inner = Arc::clone(self);
        let key = key.to_vec();
        runtime.spawn(async move {
            let fetched = inner.fetch(&slot.0, &key, 0, None).await;
            if let Fetched::Done(result, _) = &fetched {
                inner.limiter.count_background(&key, result);
            }
            drop(slot);
        });
    }

    /// A check the lease could not answer: a remembered denial, a wait for the fetch in
    /// flight, or a fetch, within the timeout.
    async fn acquire_slow(self: &Arc<Self>, key: &[u8], cost: u32) -> Outcome {
        let timeout = self.limiter.timeout();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let lease = self
                .leases
                .entry(key, |lease, slow| self.removable(lease, slow));
            let now = self.now();
            let held = match self.take(&lease, key, cost, now) {
                Ok(remaining) => return Outcome::Decided(Decision::Allowed { remaining }),
                Err(held) => held,
            };
            if let Some(denied) = self.remembered_denial(&lease, cost, held, now) {
                return Outcome::Decided(denied);
            }
            let notified = lease.fetched.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Acquire: see `FetchSlot::drop`.
            if lease.fetching.swap(true, Ordering::Acquire) {
                // Another fetch is in flight: wait for it rather than start a second.
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return self.limiter.settle(key, Err(CheckError::Timeout(timeout)));
                }
                let now = self.now();
                if let Ok(remaining) = self.take(&lease, key, cost, now) {
                    return Outcome::Decided(Decision::Allowed { remaining });
                }
                let failure = lease.slow().failure.as_ref().map(copy_error);
                if let Some(error) = failure {
                    return self.limiter.settle(key, Err(error));
                }
                // It answered, for less than this cost: a remembered denial, or this
                // request's own fetch, next.
                continue;
            }
            let slot = FetchSlot(Arc::clone(&lease));
            match self.fetch(&lease, key, cost, Some(deadline)).await {
                Fetched::Retired => continue,
                // A fetch for a cost of at least one always asks.
                Fetched::Full => unreachable!("a request's fetch asks for its cost"),
                Fetched::Done(result, held) => {
                    drop(slot);
                    let result = result.map(|leased| Checked {
                        decision: with_remaining(leased.checked.decision, held),
                        replaced: leased.checked.replaced,
                    });
                    return self.limiter.settle(key, result);
                }
            }
        }
    }

    /// A denial from the one Redis gave `key` for a cost at most `cost`, while its wait
    /// lasts.
    fn remembered_denial(
        &self,
        lease: &KeyLease,
        cost: u32,
        held: u32,
        now: u64,
    ) -> Option<Decision> {
        let denial = lease.slow().denied?;
        if now >= denial.until || cost < denial.cost {
            return None;
        }
        self.counters.denied_locally();
        Some(Decision::Denied {
            remaining: held,
            retry_after: Duration::from_nanos(denial.until - now),
        })
    }

    /// One fetch for `key`, by the holder of its fetch slot: sizes the lease by the
    /// rule (`size.rs`), then runs the check of `cost` (zero ahead of need) taking up
    /// to the size less what the lease holds; the grant beyond the cost goes into the
    /// lease, and a denial is remembered.
    async fn fetch(
        &self,
        lease: &KeyLease,
        key: &[u8],
        cost: u32,
        deadline: Option<tokio::time::Instant>,
    ) -> Fetched {
        let Some(up_to) = self.size_lease(lease, cost) else {
            return Fetched::Retired;
        };
        if up_to == 0 {
            return Fetched::Full;
        }
        let request = self.limiter.lease(key, cost, up_to);
        let result = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, request)
                .await
                .unwrap_or_else(|_| Err(CheckError::Timeout(self.limiter.timeout()))),
            None => request.await,
        };
        let now = self.now();
        let mut slow = lease.slow();
        let held = match &result {
            Ok(leased) => {
                slow.failure = None;
                self.counters.fetched(cost == 0, leased.taken, cost);
                self.settle_lease(lease, &mut slow, leased, cost, now)
            }
            Err(error) => {
                slow.failure = Some(copy_error(error));
                held(lease, now)
            }
        };
        Fetched::Done(result, held)
    }

    /// Before a fetch: drops the lease's expired tokens, moves its size by the rule,
    /// and says how many tokens to ask for at most (`None`: the entry was swept away).
    fn size_lease(&self, lease: &KeyLease, cost: u32) -> Option<u32> {
        let now = self.now();
        let mut slow = lease.slow();
        if slow.retired {
            return None;
        }
        let expired = lease_word::drop_expired(&lease.word, tick(now));
        self.counters.expired(expired);
        let observed = Observed {
            since_last_fetch: slow.last_fetch.map(|last| now.saturating_sub(last)),
            expired,
        };
        let (size, resize) = size::next(slow.size, self.max_lease, self.lifetime, observed);
        self.counters.resized(resize);
        slow.size = size;
        slow.last_fetch = Some(now);
        // Relaxed: a hint for the hot path (see `take`).
        lease
            .refill_below
            .store(u64::from(refill_below(size)), Ordering::Relaxed);
        Some(size.saturating_sub(held(lease, now)).max(cost))
    }

    /// Puts what a fetch Redis answered into the lease, or remembers its denial; the
    /// tokens held after it.
    fn settle_lease(
        &self,
        lease: &KeyLease,
        slow: &mut Slow,
        leased: &Leased,
        cost: u32,
        now: u64,
    ) -> u32 {
        match leased.checked.decision {
            Decision::Allowed { .. } => {
                slow.denied = None;
                let leftover = leased.taken - cost;
                if leftover == 0 {
                    return held(lease, now);
                }
                let until = tick(now.saturating_add(self.lifetime));
                let added = lease_word::add(&lease.word, leftover, until, tick(now));
                // Tokens that expired during the round trip, and any grant beyond the
                // word (never, within `max_lease`), are dropped and counted.
                self.counters.expired(added.expired + added.overflow);
                added.held
            }
            Decision::Denied { retry_after, .. } => {
                let wait = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
                slow.denied = Some(Denial {
                    until: now.saturating_add(wait),
                    cost,
                });
                held(lease, now)
            }
            _ => held(lease, now),
        }
    }

    /// Whether the sweep may forget `lease`: nothing held (expired tokens are dropped
    /// and counted here), its last fetch a lifetime old, no denial remembered.
    fn removable(&self, lease: &KeyLease, slow: &Slow) -> bool {
        let now = self.now();
        self.counters
            .expired(lease_word::drop_expired(&lease.word, tick(now)));
        held(lease, now) == 0
            && slow
                .last_fetch
                .is_none_or(|last| now.saturating_sub(last) >= self.lifetime)
            && slow.denied.is_none_or(|denial| now >= denial.until)
    }
}

/// `decision` with `remaining` set to the tokens this process holds.
fn with_remaining(decision: Decision, held: u32) -> Decision {
    match decision {
        Decision::Allowed { .. } => Decision::Allowed { remaining: held },
        Decision::Denied { retry_after, .. } => Decision::Denied {
            remaining: held,
            retry_after,
        },
        Decision::ExceedsCapacity { capacity, .. } => Decision::ExceedsCapacity {
            remaining: held,
            capacity,
        },
        other => other,
    }
}

/// A copy of `error` for each request that waited on the fetch that got it.
fn copy_error(error: &CheckError) -> CheckError {
    match error {
        CheckError::Timeout(after) => CheckError::Timeout(*after),
        CheckError::Redis(error) => CheckError::Redis(error.clone()),
        CheckError::UnexpectedReply(reply) => CheckError::UnexpectedReply(reply.clone()),
        CheckError::TaskLost => CheckError::TaskLost,
        CheckError::CircuitOpen { retry_in } => CheckError::CircuitOpen {
            retry_in: *retry_in,
        },
    }
}
