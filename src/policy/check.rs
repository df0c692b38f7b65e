//! One check of a policy: a limiter, where to find its key in a request, what a request
//! costs, and what to do when a request has no key.

use super::key::KeyExtractor;
use super::limit::{KnownLimit, Limit};
use crate::{
    Decision, DynRateLimiter, KeyRef, RateLimiter, Settlement, SharedDecision, SharedError,
};
use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

/// What a check does with a request in which its extractor finds no usable key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingKey<K> {
    /// Refuse the request ([`Outcome::MissingKey`](super::Outcome::MissingKey)); the
    /// HTTP layer answers with its configured status, 400 by default. The default.
    Reject,
    /// Let this check pass without taking anything: the request is limited by the
    /// policy's other checks only (say, anonymous requests by their IP address alone).
    Skip,
    /// Count the request against this one key, shared by every request without a key
    /// of its own. One busy keyless client then slows all the others down.
    Shared(K),
}

/// What a check's request costs: a fixed number (`u32`, [`Check::cost`]), or a
/// function of the request ([`PerRequest`], [`Check::cost_with`]).
pub trait Cost<R: ?Sized>: Send + Sync {
    /// What `request` takes from its key.
    fn of(&self, request: &R) -> u32;

    /// The cost of every request, when it is fixed: checked against the capacity when
    /// the policy is built. `None` for a cost made from each request.
    fn fixed(&self) -> Option<u32>;
}

impl<R: ?Sized> Cost<R> for u32 {
    #[inline(always)]
    fn of(&self, _: &R) -> u32 {
        *self
    }

    fn fixed(&self) -> Option<u32> {
        Some(*self)
    }
}

/// A cost estimated from each request: made by [`Check::cost_with`].
#[derive(Clone, Copy)]
pub struct PerRequest<F>(F);

impl<R: ?Sized, F: Fn(&R) -> u32 + Send + Sync> Cost<R> for PerRequest<F> {
    #[inline]
    fn of(&self, request: &R) -> u32 {
        (self.0)(request)
    }

    fn fixed(&self) -> Option<u32> {
        None
    }
}

/// A closure has no `Debug`: the cost says only that it is made per request.
impl<F> fmt::Debug for PerRequest<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PerRequest(..)")
    }
}

/// One limit a request must pass: `limiter`, asked for `cost` under the key that
/// `extractor` finds in the request.
///
/// A check is built with [`Check::new`], adjusted with [`cost`](Check::cost) (or a
/// cost estimated from each request, [`cost_with`](Check::cost_with), which
/// [`settled`](Check::settled) corrects once the actual cost is known) and
/// [`on_missing_key`](Check::on_missing_key), and added to a policy with
/// [`PolicyBuilder::check`](super::PolicyBuilder::check). The limiter is shared
/// (`Arc`): one per-IP limiter can sit in the policies of many routes. It may be a
/// trait object, `Arc<dyn DynRateLimiter<K, Q>>` ([`DynRateLimiter`]), for a limiter
/// chosen at run time; `Q` is then a form the extractor's key borrows as (`str` for an
/// extractor that finds a `String`).
pub struct Check<L: ?Sized, K, E, C = u32> {
    pub(super) name: String,
    pub(super) limiter: Arc<L>,
    pub(super) limit: Limit,
    pub(super) extractor: E,
    /// What a request takes: a fixed `u32`, or [`PerRequest`].
    pub(super) cost: C,
    /// Whether [`Policy::settle`](super::Policy::settle) settles the check at the
    /// request's actual cost ([`Check::settled`]).
    pub(super) settled: bool,
    pub(super) missing: MissingKey<K>,
    pub(super) dry_run: bool,
    /// The name of the policy the check reports under, once it is in a named one.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) policy: Option<std::sync::Arc<str>>,
    /// Its metrics and events, registered at its first decision: by then the check's
    /// mode is final (the HTTP layer may put a built policy in dry run), so no series
    /// is registered under a mode the check never runs in.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) observer: std::sync::OnceLock<crate::observe::CheckObserver>,
    pub(super) _key: PhantomData<fn(K)>,
}

impl<L: ?Sized, K, E> Check<L, K, E> {
    /// A check named `name` (the policy name in the RateLimit header fields: ASCII
    /// letters, digits and `-_.:/`, at most 64 bytes — checked when the policy is
    /// built), costing 1 per request, refusing requests without a key.
    ///
    /// `limit` says what the limiter's quota is, for the headers; give the quota the
    /// limiter was built with (a policy refuses a check whose cost exceeds it).
    pub fn new(name: impl Into<String>, limiter: Arc<L>, limit: Limit, extractor: E) -> Self {
        Self::with_limiter(name.into(), limiter, limit, extractor)
    }

    /// [`Check::new`] with the limit read off `limiter`, which has one quota for every
    /// key ([`KnownLimit`]): the quota is given once, to the limiter.
    pub fn from_limiter(name: impl Into<String>, limiter: Arc<L>, extractor: E) -> Self
    where
        L: KnownLimit,
    {
        let limit = limiter.limit();
        Self::with_limiter(name.into(), limiter, limit, extractor)
    }
}

/// The check's configuration (name, limit, cost, mode), not its limiter or extractor.
impl<L: ?Sized, K, E, C: fmt::Debug> fmt::Debug for Check<L, K, E, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("cost", &self.cost)
            .field("settled", &self.settled)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

impl<L: ?Sized, K, E> Check<L, K, E> {
    /// A check on `limiter`, costing 1, refusing requests without a key.
    pub(super) fn with_limiter(name: String, limiter: Arc<L>, limit: Limit, extractor: E) -> Self {
        Self {
            name,
            limiter,
            limit,
            extractor,
            cost: 1,
            settled: false,
            missing: MissingKey::Reject,
            dry_run: false,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            policy: None,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer: std::sync::OnceLock::new(),
            _key: PhantomData,
        }
    }

    /// Each request takes `cost` from its key (default 1). Zero takes nothing: the
    /// check then only reports, in the headers, what its key has left (or, in a
    /// [`settled`](Check::settled) check, counts only the requests that report a cost:
    /// a failed login).
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// Each request takes what `estimate` makes of it: the tokens a prompt will use,
    /// say, counted from its length. The estimate is made again, from the same
    /// request, when the check is [settled](Check::settled), so `estimate` must give
    /// the same answer for the same request (a function of the request, not of the
    /// time or a counter). An estimate above the key's capacity is refused as
    /// [`Outcome::ExceedsCapacity`](super::Outcome::ExceedsCapacity) when it is made
    /// (a fixed [`cost`](Check::cost) is checked when the policy is built).
    pub fn cost_with<R, F>(self, estimate: F) -> Check<L, K, E, PerRequest<F>>
    where
        R: ?Sized,
        F: Fn(&R) -> u32 + Send + Sync,
    {
        Check {
            name: self.name,
            limiter: self.limiter,
            limit: self.limit,
            extractor: self.extractor,
            cost: PerRequest(estimate),
            settled: self.settled,
            missing: self.missing,
            dry_run: self.dry_run,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            policy: self.policy,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer: self.observer,
            _key: PhantomData,
        }
    }
}

impl<L: ?Sized, K, E, C> Check<L, K, E, C> {
    /// Settles this check at the request's actual cost: its cost is an estimate, taken
    /// when the request is admitted, and [`Policy::settle`](super::Policy::settle)
    /// later gives back what the request did not use, or charges what it used beyond
    /// the estimate, even past what the key has left (the key then owes, and is
    /// refused until its refill has repaid the debt; see
    /// [`RateLimiter::settle`]). A check that is not settled keeps its estimate —
    /// a requests-per-second check beside a tokens-per-minute one.
    pub fn settled(mut self) -> Self {
        self.settled = true;
        self
    }

    /// What to do with a request in which no usable key is found (default
    /// [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, missing: MissingKey<K>) -> Self {
        self.missing = missing;
        self
    }

    /// Runs this check in dry run: it is asked and counted (and settled) like any other, but never
    /// refuses a request; what it would have refused shows in
    /// [`Verdict::refused_in_dry_run`](super::Verdict::refused_in_dry_run) (see
    /// [dry run](super#dry-run)). Its limiter must be its own: a policy refuses a
    /// dry-run check that shares its limiter with an enforced check.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

/// What one check made of a request.
#[derive(Clone, Copy, Debug)]
pub(super) enum Taken {
    /// The limiter's decision.
    Decided(Decision),
    /// A shared limiter gave no decision; its failure policy answered.
    Fallback { allowed: bool },
    /// A shared limiter cannot answer without waiting (for Redis); `fails_open` is
    /// its failure policy, for a caller that cannot wait.
    Later { fails_open: bool },
    /// No key, and the check lets such requests through untouched.
    Skipped,
    /// No key, and the check refuses such requests.
    NoKey,
}

/// The [`Evaluate`] methods that read and set a [`Check`]'s own settings, the same
/// for every kind of limiter.
macro_rules! check_settings {
    () => {
        fn describe(&self) -> (&str, Limit, Option<u32>) {
            (&self.name, self.limit, Cost::<R>::fixed(&self.cost))
        }

        fn settles(&self) -> bool {
            self.settled
        }

        fn is_dry_run(&self) -> bool {
            self.dry_run
        }

        fn set_dry_run(&mut self) {
            self.dry_run = true;
        }

        #[cfg(any(feature = "metrics", feature = "tracing"))]
        fn observe(&mut self, policy: &std::sync::Arc<str>) {
            self.policy = Some(policy.clone());
            self.observer = std::sync::OnceLock::new();
        }
    };
}

pub(super) use check_settings;

/// A check with its types erased, so that checks on different limiters, key types and
/// extractors share one list. (The limiter alone is erased by [`DynRateLimiter`], which
/// is also how a check asks its limiter; this erases the extractor and the key with it.)
pub(super) trait Evaluate<R: ?Sized>: Send + Sync {
    /// The check's name, advertised limit and cost (`None`: made per request).
    fn describe(&self) -> (&str, Limit, Option<u32>);

    /// Whether the check is settled at the actual cost ([`Check::settled`]).
    fn settles(&self) -> bool;

    /// Settles what an in-process check took for `request` (its estimate, made again
    /// from the request) at `actual`. Nothing for a shared check, or a request with no
    /// key.
    fn settle(&self, request: &R, actual: u32) -> Settlement {
        let _ = (request, actual);
        Settlement::default()
    }

    /// A shared check's settlement of what it took for `request` at `actual`, to be
    /// awaited; `None` for an in-process check, or a request with no key.
    fn settle_shared<'a>(
        &'a self,
        request: &R,
        actual: u32,
    ) -> Option<Fetch<'a, Result<Settlement, SharedError>>> {
        let _ = (request, actual);
        None
    }

    /// Whether the check runs in dry run.
    fn is_dry_run(&self) -> bool;

    /// Puts the check in dry run.
    fn set_dry_run(&mut self);

    /// The address of the check's limiter: the identity of the allowance it takes
    /// from.
    fn limiter_address(&self) -> usize;

    /// Reports the check's decisions under policy `policy`, as it is now (dry run or
    /// not).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    fn observe(&mut self, policy: &std::sync::Arc<str>);

    /// Where the check's limiter keeps its state, which says how a policy asks it.
    fn sharing(&self) -> Sharing {
        Sharing::Local
    }

    /// A shared check's question to its limiter for `request`, to be awaited: the key
    /// copied out of the request and the limiter's answer. `None` for an in-process
    /// check, and for a request with no key (and no shared key to count it under).
    fn fetch<'a>(&'a self, request: &R) -> Option<Fetch<'a>> {
        let _ = request;
        None
    }

    /// As [`acquire_then`](Evaluate::acquire_then), for a check a policy fetched first:
    /// `fetched` holds the answer (`None`: not fetched, the request has no key), and
    /// learns whether the request keeps what was taken. An in-process check takes now.
    fn decide_then(
        &self,
        request: &R,
        fetched: Option<&mut Fetched>,
        rest: &mut dyn FnMut(Taken) -> bool,
    ) {
        let _ = fetched;
        self.acquire_then(request, rest);
    }

    /// Gives back what a shared check's fetch took, for a request that does not keep
    /// it; `None` when there is nothing to give back.
    fn give_back<'a>(&'a self, fetched: Fetched) -> Option<Fetch<'a, ()>> {
        let _ = fetched;
        None
    }

    /// Takes this check's cost for `request`, then asks `rest` whether to keep it:
    /// `rest` sees what was taken and answers whether the whole request goes ahead.
    /// When it answers no, an allowed take is given back to the same key. Nesting the
    /// rest of the policy inside this call is what keeps the extracted key, which may
    /// borrow from the request, alive until the refund.
    fn acquire_then(&self, request: &R, rest: &mut dyn FnMut(Taken) -> bool);
}

/// The [`Evaluate`] methods of a check on an in-process limiter, the same whether the
/// limiter's type is known or a trait object.
macro_rules! in_process {
    ($q:ty) => {
        check_settings!();

        fn limiter_address(&self) -> usize {
            Arc::as_ptr(&self.limiter).cast::<()>() as usize
        }

        fn acquire_then(&self, request: &R, rest: &mut dyn FnMut(Taken) -> bool) {
            self.acquire_then_in_process::<R, $q>(request, rest);
        }

        fn settle(&self, request: &R, actual: u32) -> Settlement {
            self.settle_in_process::<R, $q>(request, actual)
        }
    };
}

/// A check on a limiter whose type is known: asked by static calls.
impl<R, L, K, E, C> Evaluate<R> for Check<L, K, E, C>
where
    R: ?Sized,
    L: RateLimiter<K> + Send + Sync,
    K: Borrow<E::Key> + Send + Sync,
    E: KeyExtractor<R>,
    E::Key: KeyRef<K>,
    C: Cost<R>,
{
    in_process!(E::Key);
}

/// A check on a limiter chosen at run time, `Arc<dyn DynRateLimiter<K, Q>>`: asked by
/// one dynamic call each time, with the extractor's key borrowed as `Q` (a closure
/// that finds a `String` asks a `dyn DynRateLimiter<String, str>` with a `&str`).
impl<R, K, Q, E, C> Evaluate<R> for Check<dyn DynRateLimiter<K, Q>, K, E, C>
where
    R: ?Sized,
    K: Borrow<Q> + Send + Sync,
    Q: ?Sized + KeyRef<K>,
    E: KeyExtractor<R>,
    E::Key: Borrow<Q>,
    C: Cost<R>,
{
    in_process!(Q);
}

impl<L: ?Sized, K, E, C> Check<L, K, E, C> {
    /// [`Evaluate::acquire_then`] for an in-process limiter asked with keys borrowed as
    /// `Q` (the extractor's own key type, for a limiter whose type is known). Always
    /// inlined: it is the body of each impl's `acquire_then`, the policy's hot path.
    #[inline(always)]
    fn acquire_then_in_process<R, Q>(&self, request: &R, rest: &mut dyn FnMut(Taken) -> bool)
    where
        R: ?Sized,
        Q: ?Sized + KeyRef<K>,
        L: DynRateLimiter<K, Q>,
        K: Borrow<Q>,
        E: KeyExtractor<R>,
        E::Key: Borrow<Q>,
        C: Cost<R>,
    {
        let cost = self.cost.of(request);
        let found = self.extractor.with_key(request, |key| {
            self.acquire_for_key(key.borrow(), cost, &mut *rest)
        });
        if found.is_some() {
            return;
        }
        let keyless = |refused: bool| {
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            if let Some(observer) = self.observer() {
                observer.keyless(refused);
            }
            let _ = refused;
        };
        match &self.missing {
            MissingKey::Reject => {
                keyless(true);
                rest(Taken::NoKey);
            }
            MissingKey::Skip => {
                keyless(false);
                rest(Taken::Skipped);
            }
            MissingKey::Shared(key) => self.acquire_for_key(key.borrow(), cost, rest),
        }
    }

    /// [`Evaluate::settle`] for an in-process limiter asked with keys borrowed as `Q`:
    /// the key and the estimate found again in `request`, as
    /// [`acquire_then_in_process`](Self::acquire_then_in_process) found them.
    fn settle_in_process<R, Q>(&self, request: &R, actual: u32) -> Settlement
    where
        R: ?Sized,
        Q: ?Sized + KeyRef<K>,
        L: DynRateLimiter<K, Q>,
        K: Borrow<Q>,
        E: KeyExtractor<R>,
        E::Key: Borrow<Q>,
        C: Cost<R>,
    {
        let estimate = self.cost.of(request);
        let settle = |key: &Q| self.limiter.settle(key, estimate, actual);
        let found = self.extractor.with_key(request, |key| settle(key.borrow()));
        match (found, &self.missing) {
            (Some(settlement), _) => settlement,
            (None, MissingKey::Shared(key)) => settle(key.borrow()),
            // No key: the request took nothing here (a refused request is not settled).
            (None, MissingKey::Skip | MissingKey::Reject) => Settlement::default(),
        }
    }
}

impl<L: ?Sized, K, E, C> Check<L, K, E, C> {
    /// The check's reports, registered now if this is its first decision; `None`
    /// outside a named policy.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[inline]
    pub(super) fn observer(&self) -> Option<&crate::observe::CheckObserver> {
        let policy = self.policy.as_ref()?;
        Some(self.observer.get_or_init(|| {
            crate::observe::CheckObserver::new(policy.clone(), &self.name, self.dry_run)
        }))
    }
}

impl<L: ?Sized, K, E, C> Check<L, K, E, C> {
    /// [`acquire_then`](Evaluate::acquire_then) once the key is found: takes `cost` from
    /// `key`, then gives it back if `rest` answers that the request does not go ahead.
    fn acquire_for_key<Q>(&self, key: &Q, cost: u32, rest: &mut dyn FnMut(Taken) -> bool)
    where
        L: DynRateLimiter<K, Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let decision = self.limiter.acquire(key, cost);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = self.observer() {
            observer.decided(key, &decision);
        }
        let go_ahead = rest(Taken::Decided(decision));
        if decision.is_allowed() && !go_ahead {
            self.limiter.refund(key, cost);
        }
    }
}

/// Where a check's limiter keeps its state, which says how a policy asks it. Ordered:
/// a policy asks as its most demanding check needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Sharing {
    /// In process: asked synchronously.
    Local,
    /// Shared, and often answering without waiting: tried without waiting first.
    AnswersNow,
    /// Shared, answering after a round trip.
    Remote,
}

/// A shared check's answer, fetched ahead of the in-process checks: its key, the
/// answer, and whether the request keeps what it took.
pub(super) struct Fetched {
    pub(super) key: Vec<u8>,
    /// What the check asked for: its cost for this request.
    pub(super) cost: u32,
    pub(super) answer: SharedDecision,
    pub(super) keep: bool,
}

/// A shared limiter's work in flight.
pub(super) type Fetch<'a, T = Fetched> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
