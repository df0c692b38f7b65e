//! One check of a policy: a limiter, where to find its key in a request, what a request
//! costs, and what to do when a request has no key.

use super::key::KeyExtractor;
use super::limit::{KnownLimit, Limit};
use crate::{Decision, DynRateLimiter, KeyRef, RateLimiter, SharedDecision};
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

/// One limit a request must pass: `limiter`, asked for `cost` under the key that
/// `extractor` finds in the request.
///
/// A check is built with [`Check::new`], adjusted with [`cost`](Check::cost) and
/// [`on_missing_key`](Check::on_missing_key), and added to a policy with
/// [`PolicyBuilder::check`](super::PolicyBuilder::check). The limiter is shared
/// (`Arc`): one per-IP limiter can sit in the policies of many routes. It may be a
/// trait object, `Arc<dyn DynRateLimiter<K, Q>>` ([`DynRateLimiter`]), for a limiter
/// chosen at run time; `Q` is then a form the extractor's key borrows as (`str` for an
/// extractor that finds a `String`).
pub struct Check<L: ?Sized, K, E> {
    pub(super) name: String,
    pub(super) limiter: Arc<L>,
    pub(super) limit: Limit,
    pub(super) extractor: E,
    pub(super) cost: u32,
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
impl<L: ?Sized, K, E> fmt::Debug for Check<L, K, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("cost", &self.cost)
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
    /// check then only reports, in the headers, what its key has left.
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// What to do with a request in which no usable key is found (default
    /// [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, missing: MissingKey<K>) -> Self {
        self.missing = missing;
        self
    }

    /// Runs this check in dry run: it is asked and counted like any other, but never
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
        fn describe(&self) -> (&str, Limit, u32) {
            (&self.name, self.limit, self.cost)
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
    /// The check's name, advertised limit and cost.
    fn describe(&self) -> (&str, Limit, u32);

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
    fn settle_then(
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
    };
}

/// A check on a limiter whose type is known: asked by static calls.
impl<R, L, K, E> Evaluate<R> for Check<L, K, E>
where
    R: ?Sized,
    L: RateLimiter<K> + Send + Sync,
    K: Borrow<E::Key> + Send + Sync,
    E: KeyExtractor<R>,
    E::Key: KeyRef<K>,
{
    in_process!(E::Key);
}

/// A check on a limiter chosen at run time, `Arc<dyn DynRateLimiter<K, Q>>`: asked by
/// one dynamic call each time, with the extractor's key borrowed as `Q` (a closure
/// that finds a `String` asks a `dyn DynRateLimiter<String, str>` with a `&str`).
impl<R, K, Q, E> Evaluate<R> for Check<dyn DynRateLimiter<K, Q>, K, E>
where
    R: ?Sized,
    K: Borrow<Q> + Send + Sync,
    Q: ?Sized + KeyRef<K>,
    E: KeyExtractor<R>,
    E::Key: Borrow<Q>,
{
    in_process!(Q);
}

impl<L: ?Sized, K, E> Check<L, K, E> {
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
    {
        let found = self.extractor.with_key(request, |key| {
            self.acquire_for_key(key.borrow(), &mut *rest)
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
            MissingKey::Shared(key) => self.acquire_for_key(key.borrow(), rest),
        }
    }
}

impl<L: ?Sized, K, E> Check<L, K, E> {
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

impl<L: ?Sized, K, E> Check<L, K, E> {
    /// [`acquire_then`](Evaluate::acquire_then) once the key is found: takes the cost from
    /// `key`, then gives it back if `rest` answers that the request does not go ahead.
    fn acquire_for_key<Q>(&self, key: &Q, rest: &mut dyn FnMut(Taken) -> bool)
    where
        L: DynRateLimiter<K, Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let decision = self.limiter.acquire(key, self.cost);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = self.observer() {
            observer.decided(key, &decision);
        }
        let go_ahead = rest(Taken::Decided(decision));
        if decision.is_allowed() && !go_ahead {
            self.limiter.refund(key, self.cost);
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
    pub(super) answer: SharedDecision,
    pub(super) keep: bool,
}

/// A shared limiter's work in flight.
pub(super) type Fetch<'a, T = Fetched> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
