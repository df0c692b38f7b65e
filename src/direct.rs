//! Direct (unkeyed) limiters: one state for the whole process — throttling the calls
//! to an outside API, a global cap in front of a database — with no map: a check is
//! one clock reading and one compare-and-set on one word, by the same word protocol
//! as the keyed limiters (model-checked in `loom-tests/`, the direct limiter's
//! `acquire` among them). `try_acquire` runs the same step asked only whether
//! (the algorithm's `admit`: for the token bucket and the GCRA, their `admit`,
//! property-tested against `acquire`, in the word protocol's loop for such a step,
//! `word.rs`'s `admit_word`, which the keyed limiters' `try_acquire` runs too), so the
//! token bucket and the GCRA compute no `remaining` and no `retry_after` for it and
//! reach the verdict without dividing; the window algorithms take their whole step.
//!
//! ```
//! use turnstile::{DirectTokenBucket, Quota};
//!
//! // At most 10 calls a second to the payment provider, in bursts of up to 10.
//! let provider = DirectTokenBucket::new(Quota::per_second(10)?)?;
//! if provider.try_acquire() {
//!     // call it
//! }
//! # Ok::<(), turnstile::QuotaError>(())
//! ```
//!
//! A direct limiter is also a [`RateLimiter`] of the unit key `()`, so it works
//! wherever a keyed one does: in a [`Policy`](crate::policy::Policy) check whose
//! extractor returns `Some(())`, and with `turnstile::wait::until_ready(&limiter, &(),
//! cost, &wait)`.

use crate::algorithm::{Algorithm, Blocked, FromQuota};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::fixed_window::FixedWindowRules;
use crate::gcra::GcraRules;
use crate::sliding_window::SlidingWindowRules;
use crate::sync::yield_now;
use crate::token_bucket::TokenBucketRules;
use crate::{Decision, KeyRef, Quota, QuotaError, RateLimiter};
use std::borrow::Borrow;
use std::fmt;

/// A limiter with one state, not one per key, running algorithm `A`:
/// [`DirectTokenBucket`], [`DirectGcra`], [`DirectFixedWindow`] and
/// [`DirectSlidingWindowCounter`] are this type with their own `A`, each with the
/// semantics of its keyed twin (see [`TokenBucket`](crate::TokenBucket) and the
/// others). Lock-free and allocation-free.
pub struct DirectLimiter<A: Algorithm<()>, C = QuantaClock> {
    algorithm: A,
    state: OwnLine<A::State>,
    epoch: Epoch<C>,
    quota: Quota,
}

/// A value alone on its cache line (and the line next to it, which some cores fetch
/// in pairs). The state is the one thing a direct limiter writes, from every thread;
/// beside it, each admission elsewhere would also evict the clock's scale and the
/// rules that every check reads first, so a check would wait for a miss before it
/// could even read the time.
#[repr(align(128))]
struct OwnLine<T>(T);

/// A direct token bucket: the [`TokenBucket`](crate::TokenBucket)'s semantics for one
/// state.
pub type DirectTokenBucket<C = QuantaClock> = DirectLimiter<TokenBucketRules, C>;
/// A direct GCRA: the [`Gcra`](crate::Gcra)'s semantics for one state.
pub type DirectGcra<C = QuantaClock> = DirectLimiter<GcraRules, C>;
/// A direct fixed window: the [`FixedWindow`](crate::FixedWindow)'s semantics for one
/// state.
pub type DirectFixedWindow<C = QuantaClock> = DirectLimiter<FixedWindowRules, C>;
/// A direct sliding window counter: the
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter)'s semantics for one state.
pub type DirectSlidingWindowCounter<C = QuantaClock> = DirectLimiter<SlidingWindowRules, C>;

impl<A: Algorithm<()>, C: Clock> DirectLimiter<A, C> {
    /// The limiter running `algorithm` under `quota`, its epoch (the refill grid's or
    /// the windows' origin) now.
    fn running(algorithm: A, quota: Quota, clock: C) -> Self {
        let state = OwnLine(algorithm.create(&()));
        Self {
            algorithm,
            state,
            epoch: Epoch::start(clock),
            quota,
        }
    }

    /// Asks for `cost`, all or nothing (see [`RateLimiter::acquire`]).
    #[inline]
    pub fn acquire(&self, cost: u32) -> Decision {
        let reading = self.epoch.read();
        loop {
            match self.algorithm.acquire(&self.state.0, reading.since, cost) {
                Ok(decision) => return reading.tell(decision),
                // The single-word algorithms block a state only while it is retired or
                // moved, which a direct limiter never does (it forgets nothing and has
                // no per-key quotas); should one ever, it is resolved by trying again.
                Err(blocked) => unblocked(blocked),
            }
        }
    }

    /// What the limiter has now, taking nothing.
    pub fn peek(&self) -> u32 {
        let now = self.epoch.elapsed();
        loop {
            match self.algorithm.available(&self.state.0, now) {
                Ok(available) => return available,
                Err(blocked) => unblocked(blocked),
            }
        }
    }

    /// Gives back `cost` that an allowed request took but did not use, never beyond
    /// what the limiter can hold (see [`RateLimiter::refund`]).
    pub fn refund(&self, cost: u32) {
        let now = self.epoch.elapsed();
        loop {
            match self.algorithm.refund(&self.state.0, now, cost) {
                Ok(()) => return,
                Err(blocked) => unblocked(blocked),
            }
        }
    }

    /// Settles a request that took `estimate` at what it actually cost: the difference
    /// given back (by the token bucket and GCRA; the fixed window and the sliding
    /// window counter give nothing back on settle), or charged even beyond what the
    /// limiter has left (see [`RateLimiter::settle`]).
    ///
    /// One compare-and-set on the limiter's word: a refund never gives back beyond
    /// what the limiter can hold, and a charge beyond what it has left makes it owe,
    /// up to one capacity (what passes it is [`Settlement::forgiven`](crate::Settlement::forgiven)).
    /// While it owes, every request is denied, even a cost of zero, `retry_after`
    /// counting the debt.
    pub fn settle(&self, estimate: u32, actual: u32) -> crate::Settlement {
        if actual == estimate {
            return crate::Settlement::default();
        }
        let now = self.epoch.elapsed();
        loop {
            match self.algorithm.settle(&self.state.0, now, estimate, actual) {
                Ok(settlement) => return settlement,
                Err(blocked) => unblocked(blocked),
            }
        }
    }

    /// Asks for one unit: `acquire(1).is_allowed()`, and the same step, asked only
    /// whether (the algorithm's `admit`) — without the parts of a [`Decision`] nobody
    /// reads (the token bucket and GCRA decide without dividing, and compute no
    /// `remaining` and no `retry_after`).
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let now = self.epoch.elapsed();
        match self.algorithm.admit(&self.state.0, now, 1) {
            Ok(allowed) => allowed,
            // Never, for a direct limiter (see `acquire`); the full path handles it.
            Err(_) => self.try_acquire_blocked(),
        }
    }

    /// `try_acquire` on a blocked state, by the full path; out of line, so that the
    /// hot path stays small enough to inline into its caller.
    #[cold]
    #[inline(never)]
    fn try_acquire_blocked(&self) -> bool {
        self.acquire(1).is_allowed()
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The raw state, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn state(&self) -> &A::State {
        &self.state.0
    }

    /// The algorithm, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn algorithm(&self) -> &A {
        &self.algorithm
    }
}

/// Waits out what blocked a state, before trying it again.
#[cold]
fn unblocked(_: Blocked) {
    yield_now();
}

impl<A: Algorithm<()>, C: Clock> RateLimiter<()> for DirectLimiter<A, C> {
    #[inline]
    fn acquire<Q>(&self, _: &Q, cost: u32) -> Decision
    where
        (): Borrow<Q>,
        Q: ?Sized + KeyRef<()>,
    {
        DirectLimiter::acquire(self, cost)
    }

    #[inline]
    fn try_acquire<Q>(&self, _: &Q) -> bool
    where
        (): Borrow<Q>,
        Q: ?Sized + KeyRef<()>,
    {
        DirectLimiter::try_acquire(self)
    }

    fn peek<Q>(&self, _: &Q) -> u32
    where
        (): Borrow<Q>,
        Q: ?Sized + KeyRef<()>,
    {
        DirectLimiter::peek(self)
    }

    fn refund<Q>(&self, _: &Q, cost: u32)
    where
        (): Borrow<Q>,
        Q: ?Sized + KeyRef<()>,
    {
        DirectLimiter::refund(self, cost)
    }

    fn settle<Q>(&self, _: &Q, estimate: u32, actual: u32) -> crate::Settlement
    where
        (): Borrow<Q>,
        Q: ?Sized + KeyRef<()>,
    {
        DirectLimiter::settle(self, estimate, actual)
    }
}

impl<A: Algorithm<()>, C> fmt::Debug for DirectLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectLimiter")
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl<A: FromQuota> DirectLimiter<A> {
    /// A direct limiter under `quota`, on the default clock.
    ///
    /// As the keyed limiters' `new`, every algorithm's returns a `Result`:
    /// [`DirectTokenBucket`] and [`DirectFixedWindow`] hold every quota and never
    /// refuse one.
    ///
    /// # Errors
    /// The quotas the keyed twin refuses:
    /// [`QuotaError::Unsupported`](crate::QuotaError::Unsupported) from [`DirectGcra`]
    /// and [`DirectSlidingWindowCounter`] (see [`Gcra`](crate::Gcra) and
    /// [`SlidingWindowCounter`](crate::SlidingWindowCounter)).
    pub fn new(quota: Quota) -> Result<Self, QuotaError> {
        Self::with_clock(quota, QuantaClock::new())
    }
}

impl<A: FromQuota, C: Clock> DirectLimiter<A, C> {
    /// A direct limiter on `clock` — a [`ManualClock`](crate::ManualClock) in tests,
    /// say. For a fixed window or a sliding window counter, `capacity` per window of
    /// `capacity × refill_every`.
    ///
    /// # Errors
    /// As [`new`](DirectLimiter::new).
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        Ok(Self::running(A::from_quota(&quota)?, quota, clock))
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use crate::ManualClock;
    use std::time::Duration;

    /// Two twins on one clock, one asked by `try_acquire`, the other by `acquire(1)`,
    /// through drain, refill and idle: the same answers and the same tokens left.
    fn twins_agree<A: Algorithm<()>, C: Clock>(
        quick: &DirectLimiter<A, C>,
        full: &DirectLimiter<A, C>,
        clock: &ManualClock,
    ) {
        let steps_ms = [0, 0, 0, 0, 0, 250, 999, 1, 0, 3_000, 0, 0, 0, 0, 0, 0, 500];
        for (i, &step) in steps_ms.iter().enumerate() {
            clock.advance(Duration::from_millis(step));
            assert_eq!(
                quick.try_acquire(),
                full.acquire(1).is_allowed(),
                "request {i}"
            );
            assert_eq!(quick.peek(), full.peek(), "after request {i}");
        }
    }

    #[test]
    fn try_acquire_answers_as_acquire_one_on_every_algorithm() {
        let quota = Quota::new(3, Duration::from_millis(500)).unwrap();
        let clock = ManualClock::new();
        let twins = || DirectTokenBucket::with_clock(quota, clock.clone()).unwrap();
        twins_agree(&twins(), &twins(), &clock);
        let twins = || DirectGcra::with_clock(quota, clock.clone()).unwrap();
        twins_agree(&twins(), &twins(), &clock);
        let twins = || DirectFixedWindow::with_clock(quota, clock.clone()).unwrap();
        twins_agree(&twins(), &twins(), &clock);
        let twins = || DirectSlidingWindowCounter::with_clock(quota, clock.clone()).unwrap();
        twins_agree(&twins(), &twins(), &clock);
    }
}
