//! Checks on limiters whose state lives outside the process — the Redis limiters, or
//! a store of yours — asked by a policy beside its in-process checks.
//!
//! A shared limiter answers in one of two ways: at once, without I/O, when it can (a
//! leased limiter's held tokens), or after a round trip to its store. The contract
//! says both, so a policy pays the round trip only when one is needed, and nothing
//! when every check is in process.

use super::check::{
    Check, Cost, Evaluate, Fetch, Fetched, MissingKey, Sharing, Taken, check_settings,
};
use super::key::KeyExtractor;
use super::limit::Limit;
use crate::{Settlement, SharedDecision, SharedError};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A shared limiter's work in flight: a boxed future, so that [`SharedLimiter`] is
/// object safe (`Box<dyn SharedLimiter>`, `Arc<dyn SharedLimiter>`). The box costs one
/// allocation beside a round trip to the store, which allocates anyway.
pub type SharedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The check contract of a limiter whose state lives outside the process, so that a
/// [`Policy`](super::Policy) can ask it beside in-process limiters, all or nothing.
///
/// Keys are bytes, as Redis keys are. Implemented by
/// [`RedisTokenBucket`](crate::redis::RedisTokenBucket),
/// [`RedisFixedWindow`](crate::redis::RedisFixedWindow) and
/// [`RedisLeasedTokenBucket`](crate::redis::lease::RedisLeasedTokenBucket); in-process
/// limiters implement [`RateLimiter`](crate::RateLimiter), the synchronous contract,
/// and a policy asks them through it.
///
/// The trait is object safe: limiters of different types sit in one collection as
/// `Arc<dyn SharedLimiter>`, and [`Check::shared`] takes one.
///
/// ```
/// use std::sync::Arc;
/// use turnstile::policy::{SharedFuture, SharedLimiter};
/// use turnstile::{Settlement, SharedError};
/// use turnstile::{Decision, SharedDecision};
///
/// /// A store that admits everything (yours would ask its database).
/// struct Lenient;
///
/// impl SharedLimiter for Lenient {
///     fn acquire<'a>(&'a self, _key: &'a [u8], _cost: u32) -> SharedFuture<'a, SharedDecision> {
///         Box::pin(async { SharedDecision::Decided(Decision::Allowed { remaining: 1 }) })
///     }
///     fn refund<'a>(&'a self, _key: &'a [u8], _cost: u32) -> SharedFuture<'a, ()> {
///         Box::pin(async {})
///     }
///     fn settle<'a>(
///         &'a self,
///         _key: &'a [u8],
///         _estimate: u32,
///         _actual: u32,
///     ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
///         Box::pin(async { Ok(Settlement::default()) })
///     }
///     fn fails_open(&self) -> bool {
///         true
///     }
/// }
///
/// let limiters: Vec<Arc<dyn SharedLimiter>> = vec![Arc::new(Lenient), Arc::new(Lenient)];
/// assert!(limiters.iter().all(|limiter| limiter.fails_open()));
/// ```
pub trait SharedLimiter: Send + Sync + 'static {
    /// Asks for `cost` for `key` without waiting: the answer when the limiter has one
    /// at hand (a leased limiter's held tokens), `None` when only its store can
    /// answer. The default has none.
    fn acquire_now(&self, key: &[u8], cost: u32) -> Option<SharedDecision> {
        let _ = (key, cost);
        None
    }

    /// Asks for `cost` for `key`, all or nothing, as the limiter's own `acquire`
    /// does, waiting for its store at most the limiter's timeout: the store's
    /// decision, or the failure policy's answer and why the store gave none.
    fn acquire<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, SharedDecision>;

    /// Gives back `cost` that [`acquire_now`](SharedLimiter::acquire_now) took for
    /// `key` and the request did not keep (a later check refused it), without waiting.
    /// The default does nothing, for a limiter whose `acquire_now` never takes.
    fn refund_now(&self, key: &[u8], cost: u32) {
        let _ = (key, cost);
    }

    /// Gives back `cost` that [`acquire`](SharedLimiter::acquire) took for `key` and
    /// the request did not keep, capped at the capacity, in one atomic step on the
    /// store. A refund that does not reach the store is lost: the key holds less than
    /// it should until it refills (a restriction, never an admission).
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, ()>;

    /// Settles a request that took `estimate` for `key` (an allowed
    /// [`acquire`](SharedLimiter::acquire)) at what it `actual`ly cost, in one atomic
    /// step on the store, as [`RateLimiter::settle`](crate::RateLimiter::settle) does
    /// in process: the difference given back, or charged even beyond what the key has
    /// left (the key then owes, up to the debt cap). The store's answer, or why there
    /// was none: a settlement that does not reach the store is lost (a charge lost is
    /// an admission the key did not pay for, so it is reported, never hidden).
    ///
    /// A settle is applied as given: the store keeps no record of what an acquire
    /// took, so settle only what an allowed acquire that the store (or the limiter's
    /// own held tokens) decided took, and once. A
    /// [`SharedDecision::Fallback`] with `allowed: true` took nothing: charge its
    /// request as `settle(key, 0, actual)`. Only the difference between `estimate`
    /// and `actual` moves the key's state; an estimate above the capacity, which no
    /// acquire can have taken, is not refused by the Redis limiters (settled as
    /// given: a refund capped at what the key is short of full, a charge at the debt
    /// cap).
    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>>;

    /// Whether the failure policy allows: the answer to a caller that cannot wait for
    /// the store ([`Policy::acquire`](super::Policy::acquire)).
    fn fails_open(&self) -> bool;

    /// Whether [`acquire_now`](SharedLimiter::acquire_now) often answers, so a policy
    /// tries every check without waiting before it awaits. The default: no.
    fn answers_now(&self) -> bool {
        false
    }
}

/// A shared limiter in a [`Check`]: made by [`Check::shared`]. `L` may be a trait
/// object: `Shared<dyn SharedLimiter>`.
pub struct Shared<L: ?Sized>(Arc<L>);

impl<L: ?Sized> fmt::Debug for Shared<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A trait object has no `Debug`; the limiter's type name says which it is.
        f.debug_tuple("Shared")
            .field(&std::any::type_name::<L>())
            .finish()
    }
}

impl<L: SharedLimiter + ?Sized, E> Check<Shared<L>, Vec<u8>, E> {
    /// A check on a shared `limiter` (say, a Redis limiter, or an
    /// `Arc<dyn SharedLimiter>`): as [`Check::new`], with keys given to the limiter as
    /// bytes (`E::Key: AsRef<[u8]>`: a `String`, a `&str`, a `Vec<u8>`), and
    /// [`MissingKey::Shared`] naming a key of bytes.
    ///
    /// A policy with shared checks is asked with
    /// [`Policy::acquire_async`](super::Policy::acquire_async).
    pub fn shared(name: impl Into<String>, limiter: Arc<L>, limit: Limit, extractor: E) -> Self {
        Check::with_limiter(name.into(), Arc::new(Shared(limiter)), limit, extractor)
    }
}

impl<R, L, E, C> Evaluate<R> for Check<Shared<L>, Vec<u8>, E, C>
where
    R: ?Sized,
    L: SharedLimiter + ?Sized,
    E: KeyExtractor<R>,
    E::Key: AsRef<[u8]>,
    C: Cost<R>,
{
    check_settings!();

    fn limiter_address(&self) -> usize {
        Arc::as_ptr(&self.limiter.0).cast::<()>() as usize
    }

    fn sharing(&self) -> Sharing {
        if self.limiter.0.answers_now() {
            Sharing::AnswersNow
        } else {
            Sharing::Remote
        }
    }

    fn acquire_then(&self, request: &R, rest: &mut dyn FnMut(Taken) -> bool) {
        let cost = self.cost.of(request);
        let found = self.extractor.with_key(request, |key| {
            self.acquire_now_for_key(key.as_ref(), cost, &mut *rest)
        });
        if found.is_some() {
            return;
        }
        match &self.missing {
            MissingKey::Shared(key) => self.acquire_now_for_key(key, cost, rest),
            MissingKey::Reject | MissingKey::Skip => self.keyless(rest),
        }
    }

    fn fetch<'a>(&'a self, request: &R) -> Option<Fetch<'a>> {
        let key = self.key_of(request)?;
        let cost = self.cost.of(request);
        Some(Box::pin(async move {
            let answer = self.limiter.0.acquire(&key, cost).await;
            Fetched {
                key,
                cost,
                answer,
                keep: false,
            }
        }))
    }

    fn settle_shared<'a>(
        &'a self,
        request: &R,
        actual: u32,
    ) -> Option<Fetch<'a, Result<Settlement, SharedError>>> {
        let key = self.key_of(request)?;
        let estimate = self.cost.of(request);
        Some(Box::pin(async move {
            self.limiter.0.settle(&key, estimate, actual).await
        }))
    }

    fn decide_then(
        &self,
        _request: &R,
        fetched: Option<&mut Fetched>,
        rest: &mut dyn FnMut(Taken) -> bool,
    ) {
        // Not fetched: the request has no key, and the check has no shared one.
        let Some(fetched) = fetched else {
            return self.keyless(rest);
        };
        self.report(&fetched.key, &fetched.answer);
        fetched.keep = rest(taken(&fetched.answer));
    }

    fn give_back<'a>(&'a self, fetched: Fetched) -> Option<Fetch<'a, ()>> {
        if fetched.keep || fetched.cost == 0 || !took(&fetched.answer) {
            return None;
        }
        Some(Box::pin(async move {
            self.limiter.0.refund(&fetched.key, fetched.cost).await;
        }))
    }
}

impl<L: SharedLimiter + ?Sized, E, C> Check<Shared<L>, Vec<u8>, E, C> {
    /// The key `request` is counted under, copied out of it: its own, or the check's
    /// shared one; `None` when it has neither.
    fn key_of<R: ?Sized>(&self, request: &R) -> Option<Vec<u8>>
    where
        E: KeyExtractor<R>,
        E::Key: AsRef<[u8]>,
    {
        match self
            .extractor
            .with_key(request, |key| key.as_ref().to_vec())
        {
            Some(key) => Some(key),
            None => match &self.missing {
                MissingKey::Shared(key) => Some(key.clone()),
                MissingKey::Reject | MissingKey::Skip => None,
            },
        }
    }

    /// The limiter's answer without waiting, then the rest of the policy; what was
    /// taken and not kept goes back at once. No answer at hand ends here: the policy
    /// awaits, or answers by the failure policy.
    fn acquire_now_for_key(&self, key: &[u8], cost: u32, rest: &mut dyn FnMut(Taken) -> bool) {
        let limiter = &self.limiter.0;
        let Some(answer) = limiter.acquire_now(key, cost) else {
            rest(Taken::Later {
                fails_open: limiter.fails_open(),
            });
            return;
        };
        self.report(key, &answer);
        let keep = rest(taken(&answer));
        if took(&answer) && !keep && cost > 0 {
            limiter.refund_now(key, cost);
        }
    }

    /// A request with no key, for a check without a shared one.
    fn keyless(&self, rest: &mut dyn FnMut(Taken) -> bool) {
        let refused = matches!(self.missing, MissingKey::Reject);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = self.observer() {
            observer.keyless(refused);
        }
        rest(if refused {
            Taken::NoKey
        } else {
            Taken::Skipped
        });
    }

    /// Reports the answer for `key` (a named policy's metrics and events).
    fn report(&self, key: &[u8], answer: &SharedDecision) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = self.observer() {
            match answer {
                SharedDecision::Decided(decision) => observer.decided(key, decision),
                SharedDecision::Fallback { allowed, .. } => observer.fell_back(*allowed),
            }
        }
        let _ = (key, answer);
    }
}

/// Whether `answer` allowed the request and took from the key: a decision that
/// allowed (a fallback took nothing anyone knows of).
fn took(answer: &SharedDecision) -> bool {
    matches!(answer, SharedDecision::Decided(decision) if decision.is_allowed())
}

/// What `answer` tells the tally.
fn taken(answer: &SharedDecision) -> Taken {
    match *answer {
        SharedDecision::Decided(decision) => Taken::Decided(decision),
        SharedDecision::Fallback { allowed, .. } => Taken::Fallback { allowed },
    }
}
