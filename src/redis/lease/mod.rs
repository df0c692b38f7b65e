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
//! 0. **A key not seen lately** (no entry, and not seen within a lifetime): the plain
//!    limiter's check, one round trip taking exactly the cost, leaving no lease and no
//!    entry; the key is noted in a fixed table of sightings (`seen.rs`). Seen again
//!    within a lifetime, it gets an entry and goes on as below. (Requests that arrive
//!    together for a key not seen before are each such a check, as with the plain
//!    limiter: "one fetch in flight" starts with the entry.)
//! 1. **Held tokens** (the hot path): the key's lease holds at least the cost, not
//!    expired: the cost is taken from the word; [`SharedDecision::Decided`] with
//!    [`Decision::Allowed`]. When that leaves the lease below half its size, one
//!    task fetches the next lease ahead of need, off the request path.
//! 2. **A remembered denial**: Redis denied this key a cost at most this one's, and its
//!    `retry_after` is not over: [`Decision::Denied`] at once, with the rest of that
//!    wait. It never admits: it only refuses until the wait is over, then asks Redis
//!    again. It can refuse a request Redis would admit: the wait is measured from the
//!    reply's arrival, so it may end up to one round trip after Redis's, and tokens
//!    given back to the bucket meanwhile — a refund or a settle below its estimate,
//!    by any process, or a reset (the key deleted, the database flushed) — are seen
//!    only when the wait is over. Its `retry_after` can be short: a settle charged
//!    in Redis by another process meanwhile puts the bucket in debt that the
//!    remembered wait does not count (a charge by this process forgets the denial,
//!    and a denial computed before it is not remembered after it); the request
//!    after the wait then asks Redis, which counts the debt.
//! 3. **A fetch**: one script call takes the cost, all or nothing, exactly as the plain
//!    limiter's check, and when allowed, whatever else the bucket holds up to the
//!    key's lease size less what the lease still holds; the rest of the grant goes
//!    into the lease. One fetch per key per process is awaited at a time: a request
//!    that finds the lease short while another fetch is in flight waits for that one
//!    (within the timeout) and then takes from it, or, if it failed, is answered by the
//!    failure policy with its error; it does not start a second. (A fetch whose caller
//!    drops it — a timeout or `select!` of the caller's own — frees the slot at once,
//!    while its command may still run in Redis; see "the bound".)
//!
//! A key seen once costs one round trip, as with the plain limiter. Its entry starts
//! at a lease size of one, with the first sighting as its previous fetch; the size
//! then adapts per key (`size.rs`): doubled by a fetch within half a lifetime of the
//! key's previous one (the lease ran low that fast), up to
//! [`max_lease`](RedisLeasedTokenBucketBuilder::max_lease); halved by a fetch that
//! finds tokens of the previous lease expired unused; kept otherwise. Only a fetch
//! Redis answers moves the size: a failed one says nothing of the key's traffic. A
//! lease thus settles at about half a lifetime of the key's traffic in this process.
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
//!   still held, or expired — [`LeaseCounts`]: `leased + refunded = served_by_fetch +
//!   served_locally + expired + held`, where `refunded` counts tokens given back to
//!   the lease, to be served again: by a policy's refused request (see
//!   [shared checks](crate::policy#shared-checks)) or a settle below its estimate —
//!   and the bucket lost the tokens the fetches took (with settles, read "admit" as
//!   the tokens requests keep: a settle's refund gives tokens back, to the lease or
//!   to the bucket, and a charge takes more); tested across five leased limiters
//!   and a plain one on connections of their own (in one OS process), and on a
//!   cluster. That is for the fetches Redis
//!   answered. A fetch sent whose answer is lost — it timed out, its connection
//!   dropped, its caller dropped it — may still run in Redis and take up to what it
//!   asked, unseen: never admitted, so never more than the bound; counted in
//!   [`LeaseCounts::unanswered`] and [`LeaseCounts::unanswered_asked`]. As for the
//!   plain limiters, the bound is Redis's durability: a Redis restarted without its
//!   data, or a replica promoted before it caught up, comes back with fuller buckets.
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
//!   counted), plus what unanswered fetches took (at most
//!   [`LeaseCounts::unanswered_asked`]). At any moment a process holds at most `max_lease` per key, so the
//!   processes at most `processes × max_lease`; a key's lease in a process expires at
//!   most once per lifetime (its expiry is a lifetime after its latest fetch), so each
//!   process drops at most `max_lease` tokens per key per lifetime. A remembered
//!   denial can also make a token wait up to one round trip longer than Redis would
//!   (see how a check goes); the token stays in the bucket for the next fetch.
//!
//! The lease size never exceeds [`max_lease`](RedisLeasedTokenBucketBuilder::max_lease)
//! (by default 1/32 of the capacity, at least 1 and at most 2^24 − 1): a fetch asks
//! for at most `max(cost, size - held)`, and only the one fetch in flight adds to the
//! lease, so a process holds at most `max_lease` tokens per key (a request above `max_lease`
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
//! Expiry is read at each check's reading: tokens expired at one reading but not yet
//! dropped (a fetch or a sweep drops them) can still be taken by a later check whose
//! clock reads earlier (a clock stepped back). They were leased, so the bound holds;
//! only "a token is admitted at most a lifetime after its fetch" bends by the step.
//!
//! # Failures
//! The failure policy, [`SharedDecision`], timeouts and the circuit breaker are the plain
//! limiter's, and apply to fetches. **During an outage a process keeps serving the
//! tokens it holds**, as long as they live; a request that finds its lease empty
//! fetches, and when the fetch gets no answer (or the breaker is open), the
//! [`FailurePolicy`](super::FailurePolicy) answers with [`SharedDecision::Fallback`] and
//! counts it, exactly as the plain limiter. A fetch ahead of need that fails answers no request: its error is
//! counted in [`FailureCounts`] (timeouts, errors, short-circuited), not as allowed
//! or denied. While the breaker is open no fetch ahead of need starts, so checks
//! served from held tokens stay free of tasks and failures. A remembered denial is
//! still answered during an outage, until its wait is over.
//!
//! # What `remaining` means here
//! In a [`Decision`] from this limiter, `remaining` is the tokens **this process holds**
//! for the key after the decision (its lease), not the shared bucket's count, which only
//! Redis knows and which a leased check does not ask. `retry_after` of a denial is
//! Redis's (or a remembered one, as above); a cost above the capacity is answered
//! [`Decision::ExceedsCapacity`] locally.
//!
//! # Memory and cost
//! Keys seen once take no entry, only a slot of a fixed table of 8,192 sightings
//! (64 KiB a limiter). A key seen again gets one entry in a lock-free-read map
//! (papaya, the crate's default store): about 200 bytes (the entry is 144) plus the
//! key's. Entries are swept when the map has doubled since the last sweep: those whose
//! lease is spent or expired, whose last fetch is a lifetime old and whose denial is
//! over go, so the map holds the keys that came back within about one lifetime, and
//! keys whose remembered denial still runs (as long as `capacity × interval`). The
//! sweep runs on the limiter's own thread, named `turnstile-lease`, started when the
//! first sweep is due and ended when the last clone of the limiter is dropped (that
//! drop waits for a sweep under way to reach its next entry); the request whose new
//! entry made the sweep due only asks for it. A request sweeps itself (unless a sweep
//! is running) only if there is no thread to ask (the OS refused one, or a sweep
//! panicked and ended it), or if the map has grown to four times the keys at which a
//! sweep became due (the thread falling behind): so the map stays bounded whatever
//! CPU the thread gets. A
//! check on a key with a live lease reads the clock, looks the key up and takes from
//! its word: no allocation, no lock (tested in `tests/redis/lease.rs`). Starting a
//! fetch ahead allocates (a task, the key). Decisions made locally are not reported
//! to a named limiter's metrics and events; fetches on the request path are, as
//! checks; fetches ahead of need report only their errors.

mod builder;
mod counts;
mod fetch;
pub(crate) mod hold;
mod local;
mod seen;
mod size;

pub use builder::{DEFAULT_LEASE_LIFETIME, RedisLeasedTokenBucketBuilder};
#[cfg(feature = "config")]
pub(crate) use builder::{LIFETIME_BOUNDS, lifetime_fits};

pub use counts::LeaseCounts;

use super::breaker::CircuitState;
use super::engine::ScriptLimiter;
use super::failure::{CheckError, FailureCounts};
use crate::evict::sweeper::Sweeper;
use crate::sync::Ordering;
use crate::{Clock, Decision, Quota};
use crate::{Settlement, SharedDecision};
use ::redis::aio::{ConnectionLike, ConnectionManager};
use counts::LeaseCounters;
use hold::tick;
use local::{KeyLease, Leases, held};
use seen::Sightings;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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
/// use turnstile::redis::FailurePolicy;
/// use turnstile::redis::lease::RedisLeasedTokenBucket;
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
    core: Arc<Core<C>>,
    /// Stops the sweeper thread when the last clone is dropped.
    sweeper: Arc<StopOnDrop>,
}

impl<C> Clone for RedisLeasedTokenBucket<C> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
            sweeper: Arc::clone(&self.sweeper),
        }
    }
}

/// The sweeper thread, as the limiter's handles hold it: stopped, and joined, when the
/// last handle is dropped. Only handles hold one, never the thread (which holds the
/// limiter weakly) nor a fetch's task (which may outlive the handles), so the thread is
/// always joined from another thread, and it ends with the limiter its user holds.
struct StopOnDrop(Arc<Sweeper>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

impl<C> fmt::Debug for RedisLeasedTokenBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLeasedTokenBucket")
            .field("quota", &self.core.quota)
            .field("lifetime", &Duration::from_nanos(self.core.lifetime))
            .field("max_lease", &self.core.max_lease)
            .field("keys", &self.core.leases.len())
            .finish_non_exhaustive()
    }
}

/// What the clones share.
struct Core<C> {
    limiter: ScriptLimiter<C>,
    quota: Quota,
    leases: Leases,
    /// Keys seen lately: a key gets a lease entry when it is seen again.
    seen: Sightings,
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
    /// A cost of zero is allowed in process, without asking Redis — even while the
    /// key owes in Redis, which only Redis knows (the plain
    /// [`RedisTokenBucket`](super::RedisTokenBucket) refuses it then); a cost above
    /// the capacity is answered [`Decision::ExceedsCapacity`] without asking Redis.
    /// When the lease is short and Redis does not answer within the timeout, the
    /// failure policy answers
    /// ([`SharedDecision::Fallback`]). A check waits at most the timeout for a fetch in flight
    /// and at most the timeout for a fetch of its own (which it starts only when the
    /// one it waited for answered with too few tokens): at most twice the timeout.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, cost: u32) -> SharedDecision<CheckError> {
        let key = key.as_ref();
        if let Some(decision) = self.decide_now(key, cost) {
            return SharedDecision::Decided(decision);
        }
        self.core.acquire_slow(key, cost).await
    }

    /// The decisions a check makes without Redis: a cost above the capacity, a cost
    /// of zero, and a cost the key's lease holds (taken). `None`: Redis is needed.
    #[inline]
    pub(crate) fn decide_now(&self, key: &[u8], cost: u32) -> Option<Decision> {
        let inner = &self.core;
        let now = inner.now();
        let capacity = inner.quota.capacity();
        if cost > capacity {
            let remaining = inner.leases.with(key, |lease| held(lease, now));
            return Some(Decision::ExceedsCapacity {
                remaining: remaining.unwrap_or(0),
                capacity,
            });
        }
        if cost == 0 {
            let remaining = inner.leases.with(key, |lease| held(lease, now));
            return Some(Decision::Allowed {
                remaining: remaining.unwrap_or(0),
            });
        }
        let taken = inner
            .leases
            .with(key, |lease| inner.acquire_fast(lease, key, cost, now));
        match taken {
            Some(Ok(remaining)) => Some(Decision::Allowed { remaining }),
            _ => None,
        }
    }

    /// Gives back `cost` that a refused request took for `key` to the key's lease,
    /// up to `max_lease` (the rest, or all of it when the lease has expired, is
    /// dropped and counted as expired); `false` when the key has no lease entry, so
    /// the tokens go back to Redis.
    pub(crate) fn give_back_locally(&self, key: &[u8], cost: u32) -> bool {
        let inner = &self.core;
        let now = tick(inner.now());
        inner
            .leases
            .with(key, |lease| {
                let back = hold::give_back(&lease.word, cost, inner.max_lease, now);
                inner.counters.refunded(cost, back);
            })
            .is_some()
    }

    /// Settles a request admitted for `estimate` at what it actually cost (see
    /// [`RedisTokenBucket::settle`](super::RedisTokenBucket::settle) for what settling
    /// means, and for why a settle is applied as given: settle only what an allowed
    /// acquire that this limiter or Redis decided took, and charge a request a
    /// fallback allowed as `settle(key, 0, actual)`), through the key's lease when it
    /// has one:
    ///
    /// - **Below the estimate**, the difference goes back to the key's lease, as a
    ///   policy's refund does, up to `max_lease`, with no round trip; what the lease
    ///   cannot take (all of it when the lease has expired or the key has no lease
    ///   entry, the part above `max_lease` when it is full) goes back to Redis in one
    ///   round trip, as the plain limiter's refund on settle. [`Settlement::refunded`]
    ///   is the sum; what the lease took is counted in [`LeaseCounts::refunded`].
    /// - **Above it**, the difference comes out of the key's lease first, as far as
    ///   the lease holds it, with no round trip: those tokens already left the Redis
    ///   bucket, so spending them on the request that used them is what serving
    ///   another request would have done, and this process's lease is empty before
    ///   the bucket is charged into debt. Only what the lease does not hold is charged
    ///   in Redis, one round trip, into debt as the plain limiter's; a denial this
    ///   process remembers for the key is then forgotten, and a fetch in flight that
    ///   Redis denied before the charge is not remembered, so the next request asks
    ///   Redis, whose `retry_after` counts the debt. The tokens taken from the lease
    ///   count in [`LeaseCounts::served_locally`]. Tokens leased before the charge —
    ///   by other processes, or by a fetch in flight here — are still served while
    ///   the bucket owes: they left the bucket before the debt, so the bound of the
    ///   [module docs](self#the-bound) holds.
    ///
    /// A settle waits for no other request: not for a fetch in flight, whose grant it
    /// neither takes nor waits for.
    ///
    /// # Errors
    /// As [`RedisTokenBucket::settle`](super::RedisTokenBucket::settle), for the part
    /// charged or refunded in Redis; what the lease took back or gave to a charge
    /// stays there.
    pub async fn settle(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, CheckError> {
        let key = key.as_ref();
        let inner = &self.core;
        let now = tick(inner.now());
        let lease_part = if actual < estimate {
            let back = inner
                .leases
                .with(key, |lease| {
                    hold::give_back(&lease.word, estimate - actual, inner.max_lease, now)
                })
                .unwrap_or(0);
            // What the lease took back, and nothing dropped: the rest goes to Redis.
            inner.counters.refunded(back, back);
            Settlement {
                refunded: back,
                ..Settlement::default()
            }
        } else {
            let taken = inner
                .leases
                .with(key, |lease| take_up_to(&lease.word, actual - estimate, now))
                .unwrap_or(0);
            Settlement {
                charged: taken,
                ..Settlement::default()
            }
        };
        // The rest, as a reservation of what the lease did not settle: only the
        // difference moves the bucket.
        let (estimate, actual) = (estimate - lease_part.refunded, actual - lease_part.charged);
        if estimate == actual {
            return Ok(lease_part);
        }
        let settle = inner.limiter.settle_reservation(key, estimate, actual);
        let mut settlement = inner.limiter.count_settled(key, settle.await)?;
        if settlement.charged > 0 {
            // The bucket owes more than when Redis last denied this key: that denial's
            // wait, or one a fetch in flight brings back, may end before the debt is
            // repaid.
            inner.leases.with(key, |lease| lease.slow().charged());
        }
        settlement.refunded += lease_part.refunded;
        settlement.charged += lease_part.charged;
        Ok(settlement)
    }

    /// The connection to Redis, for a refund of tokens no lease holds.
    pub(crate) fn script_limiter(&self) -> &ScriptLimiter<C> {
        &self.core.limiter
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
        let limiter = &self.core.limiter;
        let available = limiter.available(key.as_ref());
        available
            .await
            .inspect_err(|error| limiter.count_error(key.as_ref(), error))
    }

    /// The tokens this process holds for `key` now (0 without a lease).
    pub fn held(&self, key: impl AsRef<[u8]>) -> u32 {
        let now = self.core.now();
        self.core
            .leases
            .with(key.as_ref(), |lease| held(lease, now))
            .unwrap_or(0)
    }

    /// Where `key`'s lease stands in this process; `None` when the key has no entry.
    pub fn lease(&self, key: impl AsRef<[u8]>) -> Option<LeaseState> {
        let now = self.core.now();
        self.core.leases.with(key.as_ref(), |lease| LeaseState {
            held: held(lease, now),
            size: lease.slow().size,
            // Relaxed: a snapshot for observation.
            fetching: lease.fetching.load(Ordering::Relaxed),
        })
    }

    /// Keys this process has a lease entry for (see the
    /// [module docs](self#memory-and-cost)).
    pub fn keys(&self) -> u64 {
        self.core.leases.len()
    }

    /// What the leases did, since this limiter (or the one it was cloned from) was
    /// built.
    pub fn counts(&self) -> LeaseCounts {
        self.core.counters.snapshot()
    }

    /// How often Redis gave no answer to a fetch (and how often the policy answered).
    pub fn failures(&self) -> FailureCounts {
        self.core.limiter.failures()
    }

    /// Where the limiter's circuit breaker stands (shared with its clones).
    pub fn circuit(&self) -> CircuitState {
        self.core.limiter.circuit()
    }

    /// The quota every key gets, from the bucket all processes share.
    pub fn quota(&self) -> Quota {
        self.core.quota
    }

    /// The most tokens this process holds for one key.
    pub fn max_lease(&self) -> u32 {
        self.core.max_lease
    }
}

/// Takes up to `want` tokens from a lease's word at tick `now`: what it took. Each
/// try that finds fewer held asks for exactly those, fewer than before, so the loop
/// ends; every change is [`hold::take`]'s compare-and-set.
fn take_up_to(word: &crate::sync::AtomicU64, mut want: u32, now: u64) -> u32 {
    loop {
        match hold::take(word, want, now) {
            Ok(_) => return want,
            Err(held) => want = held,
        }
    }
}

impl<C> Core<C>
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
    fn acquire_fast(
        self: &Arc<Self>,
        lease: &Arc<KeyLease>,
        key: &[u8],
        cost: u32,
        now: u64,
    ) -> Result<u32, u32> {
        let left = hold::take(&lease.word, cost, tick(now))?;
        // Relaxed: both are hints; the swap in `start_refill` decides.
        if self.refill_ahead
            && u64::from(left) < lease.refill_below.load(Ordering::Relaxed)
            && !lease.fetching.load(Ordering::Relaxed)
        {
            self.start_refill(lease, key);
        }
        Ok(left)
    }
}
