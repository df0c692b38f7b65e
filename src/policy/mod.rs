//! Policies: the checks a request must pass — a per-user limit for its endpoint, a
//! per-IP limit, … — taken all or nothing.
//!
//! ```
//! use std::sync::Arc;
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! struct Request { user: String, ip: u32 }
//!
//! let clock = ManualClock::new(); // a service uses the default clock
//! let transfers = Quota::per_minute(10)?;
//! let per_ip = Quota::per_minute(300)?;
//! let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_ip, clock.clone())?);
//! let policy: Policy<Request> = Policy::builder()
//!     .check(Check::from_limiter(
//!         "transfer",
//!         Arc::new(TokenBucket::<String, _>::with_clock(transfers, clock.clone())?),
//!         |r: &Request| Some(r.user.clone()),
//!     ))
//!     // The limit (for the RateLimit header fields) is read off the limiter; a
//!     // per-key limiter, whose quota differs by key, states it: `Check::new`.
//!     .check(Check::from_limiter("per-ip", ips.clone(), |r: &Request| Some(r.ip)))
//!     .build()?;
//!
//! let request = Request { user: "alice".into(), ip: 7 };
//! for _ in 0..10 {
//!     assert!(policy.acquire(&request).is_allowed());
//! }
//! // The 11th transfer is denied, and the per-IP token it took is given back.
//! let verdict = policy.acquire(&request);
//! assert!(verdict.retry_after().is_some());
//! assert_eq!(ips.peek(&7), 290);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Semantics
//! - **All or nothing.** Every check is asked, in order, and takes its cost when it
//!   allows. If any check refuses, every cost taken for this request is given back
//!   ([`RateLimiter::refund`], capped at capacity), so a
//!   refused request leaves every key as it found it — the same end state as checking
//!   all first and taking only when all allow, which is what the property tests
//!   compare against.
//! - **Every check is asked, even after a denial**, so that the answer's
//!   `retry_after` is the longest wait of all the checks that deny now: the same
//!   request sent that much later passes every one of them, if nothing else takes from
//!   their keys meanwhile (a check that allows now still allows then: waiting only
//!   adds quota). Stopping at the first denial would be cheaper, but its
//!   `retry_after` could send the client back into a denial by a check that was never
//!   asked. The price is paid on denials only: later checks that allow take and give
//!   back.
//! - **Except when the request can never pass**: a check whose cost exceeds its
//!   key's capacity ([`Outcome::ExceedsCapacity`]), or a missing key under
//!   [`MissingKey::Reject`] ([`Outcome::MissingKey`]), ends the evaluation; the
//!   checks before it give their costs back and the later ones are not asked.
//! - **Precedence** when checks disagree: can-never-pass (first such check in order)
//!   over [`Outcome::Overflow`] over [`Outcome::Denied`] over
//!   [`Outcome::Unavailable`] (a shared check's failure policy denied) over
//!   [`Outcome::Allowed`]. A denial with a wait outranks a fallback: it tells the
//!   client something true about when to come back.
//! - **The answer reports the most restrictive check** ([`Verdict::binding`]): for an
//!   allowed request the check with the fewest units left, for a denied one the check
//!   with the longest wait — which is what the HTTP `RateLimit` field shows.
//! - **Concurrency.** Each key is linearizable on its own, as in every limiter;
//!   a policy is not atomic across keys. While a refused request holds tokens it is
//!   about to give back, a concurrent request on the same key may be denied for want
//!   of them: a transient over-restriction, never an over-admission — refunds give
//!   back exactly what was taken, capped at capacity, so no key ever admits more than
//!   its quota.
//! - Checks are expected to be on different limiters, or on different keys: two
//!   checks taking from the same key see each other's takes within one request.
//! - No allocation: a policy asks its checks through one dynamic call each, with the
//!   rest of the policy nested inside (so a key borrowed from the request lives until
//!   its refund); a check's first request for a new key stores the key, as any
//!   limiter does. A policy awaiting Redis allocates (each shared check's key, its
//!   future, the list of answers), as a Redis check does anyway.
//!
//! # Shared checks
//! A check on a limiter whose state lives in Redis — [`RedisTokenBucket`],
//! [`RedisFixedWindow`], [`RedisLeasedTokenBucket`], or any [`SharedLimiter`] — is
//! made with [`Check::shared`] (keys are bytes) and sits in one policy with in-process
//! checks, under every rule above: all or nothing, every check asked, the precedence,
//! dry run, metrics and events. Such a policy is asked with
//! [`Policy::acquire_async`]:
//! - **In-process checks only**: answered at once, synchronously, as by
//!   [`Policy::acquire`]; nothing is boxed or allocated.
//! - **Leased checks** (and in-process ones): first tried without waiting
//!   ([`Policy::acquire_now`]); when every leased key holds its cost, the answer comes
//!   from the leases, without a round trip, a lock or an allocation. A lease that is
//!   short ends the try (what it took so far is given back) and the policy is asked
//!   as below. (The in-process checks before it were asked in the try and are asked
//!   again: a named policy's metrics count their decisions twice for such a request.)
//! - **Otherwise** every shared check is sent at once, concurrently, and awaited;
//!   then every check is asked in order, the shared ones by their answers, exactly as
//!   above. A shared check past a check that ended the evaluation was asked anyway,
//!   and gives back what it took.
//! - **Refunds.** What a refused request took from Redis goes back in one script
//!   call per check, atomic, capped at the capacity (a fixed window gives back only
//!   to the window that counted it); a leased check's refund goes back to its
//!   process's lease (up to `max_lease`; tokens that find no room, or an expired
//!   lease, are dropped and counted), and to Redis for a key that has no lease. The
//!   refunds are awaited before the verdict returns. A refund that does not reach
//!   Redis is lost and counted as the limiter's failure: the key holds less until it
//!   refills, a restriction, never an admission.
//! - **Fallbacks.** A shared check its limiter could not decide (Redis down or slow,
//!   the circuit breaker open) is answered by its failure policy, and that is an
//!   outcome of its own: the check is listed in [`Verdict::fell_back`], never the
//!   [`binding`](Verdict::binding) check (it knows nothing of its key), and when the
//!   policy denies, the request is refused with [`Outcome::Unavailable`] (no wait:
//!   nobody knows when Redis answers again). The HTTP layer answers 503 without a
//!   `RateLimit` field; metrics count `fallback_allowed` and `fallback_denied` per
//!   check and `unavailable` per policy.
//! - [`Policy::acquire`], which never waits, answers a shared check that needs a
//!   round trip by its failure policy, as if Redis were down, without taking from any
//!   key; use it only for policies of in-process checks ([`Policy::is_shared`] says).
//!
//! A fallback allowed by `FailurePolicy::Open` takes nothing that can be given back:
//! a timed-out check may still run in Redis and take its cost (see
//! [`crate::redis`]'s failures), so a request refused by a later check after such a
//! fallback may have cost its Redis key a token — a restriction, never an admission.
//!
//! [`RedisTokenBucket`]: crate::redis::RedisTokenBucket
//! [`RedisFixedWindow`]: crate::redis::RedisFixedWindow
//! [`RedisLeasedTokenBucket`]: crate::redis::lease::RedisLeasedTokenBucket
//!
//! # Dry run
//! To see what a limit would do before enforcing it — nginx's `limit_req_dry_run`,
//! Envoy's shadow mode — run its check in dry run ([`Check::dry_run`]), a whole
//! policy ([`PolicyBuilder::dry_run`]), or every route of the HTTP layer. A dry-run
//! check is asked, takes and gives back like any other, and is counted in metrics and
//! logs, but never refuses a request:
//! - **The request goes ahead by its enforced checks alone**
//!   ([`Verdict::outcome`]); what the policy would have decided with every check
//!   enforced is [`Verdict::if_enforced`], and the dry-run checks that would have
//!   refused are [`Verdict::refused_in_dry_run`].
//! - **Each check keeps its take only if the request goes ahead in its own world**:
//!   an enforced check when every enforced check passed (the request is served); a
//!   dry-run check when every check, dry-run ones included, passed (the request
//!   would have been served). So a dry-run check's keys hold what they would hold
//!   had it been enforced, given the requests that reached it, and a request the
//!   dry run would have refused takes nothing from them.
//! - **A dry-run check never takes allowance an enforced check needs**: it takes only
//!   from its own limiter, and a policy whose dry-run check shares a limiter with one
//!   of its enforced checks is refused at build time
//!   ([`PolicyError::DryRunSharesLimiter`]). The comparison is by limiter object: a
//!   limiter shared with an enforced check of *another* policy, or reached through a
//!   wrapper of yours, cannot be seen from here; give each dry-run check a limiter of
//!   its own.
//! - **Clients do not see a check on trial**: the HTTP layer's RateLimit fields report
//!   the enforced checks only (a layer in dry run reports all its checks, as it will
//!   once enforced).
//! - A dry-run check whose request can never pass (cost above capacity, missing key)
//!   does not end the evaluation as an enforced one does: the later checks are still
//!   asked.
//!
//! # Reserve, then settle
//! Some costs are known only after the response: the tokens a model call used, the
//! bytes sent, whether a login failed. A check then takes an *estimate* when the
//! request is admitted — a fixed [`cost`](Check::cost), or one made from the request,
//! [`Check::cost_with`] — and is marked [`settled`](Check::settled); once the actual
//! cost is known, [`Policy::settle`] (or [`Policy::settle_async`], for shared checks)
//! settles it through its limiter's [`settle`](RateLimiter::settle): what the request
//! did not use goes back, what it used beyond the estimate is charged even past what
//! the key has left. A key that owes is refused, and the refusal's `retry_after`
//! counts the debt, until refill has repaid it.
//! - **Each check settles its own share**: its own estimate (made again from the
//!   request, so an estimate must be a function of the request), on its own key. The
//!   checks that are not settled keep their estimate: a requests-per-second check
//!   beside a tokens-per-minute one takes 1 per request whatever the tokens.
//! - **Only what was kept is settled**: an allowed request's enforced checks; a
//!   dry-run check when every check passed (its keys then hold what they would hold
//!   were it enforced, debt included); never a refused request (it kept nothing), a
//!   check that skipped the request for lack of a key, or a shared check its failure
//!   policy answered (it took nothing anyone knows of).
//! - **Counting only some responses** — a failed login, not a successful one — is a
//!   settlement at 1 for the responses that count and 0 for the others. With an
//!   estimate of 0 an attempt holds nothing while it is tried; each failure is
//!   charged, and the one past the quota puts the key in debt. A key in debt has
//!   less than nothing, so even an estimate of 0 is refused
//!   ([`RateLimiter::acquire`]): after the quota's failures and the one into debt,
//!   the next attempt is refused until refill has repaid the debt. With an estimate
//!   of 1 each attempt holds one unit while it is tried, a success gives it back
//!   (on the token bucket and GCRA, which give back on settle), and once the
//!   quota's failures have been charged the next attempt is refused until one has
//!   refilled: exactly the quota's failures, never a debt.
//! - **A reservation never settled stays at its estimate**: nothing to do (a client
//!   gone before the response).
//! - Across checks, a settlement is as atomic as a refund: each key settles in one
//!   step, the policy's keys one after another.
//!
//! ```
//! use std::sync::Arc;
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! struct Prompt { user: u32, text: String }
//!
//! let clock = ManualClock::new();
//! let tokens = Arc::new(TokenBucket::<u32, _>::with_clock(Quota::per_minute(1_000)?, clock.clone())?);
//! let requests = Arc::new(TokenBucket::<u32, _>::with_clock(Quota::per_second(5)?, clock.clone())?);
//! let policy: Policy<Prompt> = Policy::builder()
//!     // About one token per four bytes of prompt, settled from what the model used.
//!     .check(
//!         Check::from_limiter("tokens", tokens.clone(), |p: &Prompt| Some(p.user))
//!             .cost_with(|p: &Prompt| (p.text.len() / 4) as u32)
//!             .settled(),
//!     )
//!     .check(Check::from_limiter("requests", requests.clone(), |p: &Prompt| Some(p.user)))
//!     .build()?;
//!
//! let prompt = Prompt { user: 7, text: "x".repeat(400) }; // estimated at 100 tokens
//! let verdict = policy.acquire(&prompt);
//! assert!(verdict.is_allowed());
//! assert_eq!(tokens.peek(&7), 900);
//! // The model used 250 tokens: 150 more are charged; the request check keeps its 1.
//! let settlement = policy.settle(&prompt, &verdict, 250);
//! assert_eq!(settlement.charged, 150);
//! assert_eq!(tokens.peek(&7), 750);
//! assert_eq!(requests.peek(&7), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod check;
mod key;
mod limit;
mod shared;
mod verdict;

pub use check::{Check, Cost, MissingKey, PerRequest};
pub use key::KeyExtractor;
pub use limit::{KnownLimit, Limit};
pub use shared::{Shared, SharedFuture, SharedLimiter};
pub use verdict::{Binding, Outcome, Verdict};

use crate::{DynRateLimiter, KeyRef, RateLimiter, Settlement, SharedError};
use check::{Evaluate, Fetch, Fetched, Sharing};
use std::borrow::Borrow;
use std::fmt;
use std::future::poll_fn;
use std::task::Poll;
use verdict::{Passed, Tally};

/// The checks a request of type `R` must pass, taken all or nothing (see the
/// [module documentation](self) for the exact semantics).
pub struct Policy<R: ?Sized> {
    checks: Box<[Box<dyn Evaluate<R>>]>,
    /// Whether any check runs in dry run: only then does a request keep two tallies.
    dry_run_checks: bool,
    /// How the policy is asked: as its most demanding check needs.
    sharing: Sharing,
    /// Whether any check is settled at the actual cost.
    settles: bool,
    /// Metrics and events, for a named policy.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    observer: Option<Box<crate::observe::PolicyObserver>>,
}

impl<R: ?Sized> Policy<R> {
    /// A builder; add checks in the order they are to be asked.
    pub fn builder() -> PolicyBuilder<R> {
        PolicyBuilder {
            checks: Vec::new(),
            dry_run: false,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            name: None,
        }
    }

    /// A policy with no checks: every request is allowed, and nothing is reported.
    pub fn unlimited() -> Self {
        Self {
            checks: Box::new([]),
            dry_run_checks: false,
            sharing: Sharing::Local,
            settles: false,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer: None,
        }
    }

    /// Asks every check for `request`, all or nothing, without waiting.
    ///
    /// For a policy of in-process checks, the whole answer. A shared check (Redis)
    /// that cannot answer without a round trip is answered by its failure policy
    /// here, as if its store were down (and reported in [`Verdict::fell_back`]):
    /// ask a policy with shared checks ([`Policy::is_shared`]) with
    /// [`Policy::acquire_async`].
    pub fn acquire(&self, request: &R) -> Verdict {
        let mut tally = Tally::new(self.dry_run_checks);
        acquire_in_turn(&self.checks, request, 0, &mut tally);
        self.observed(tally.verdict())
    }

    /// The verdict without waiting, if every check can give its answer so: always for
    /// a policy of in-process checks (it is [`Policy::acquire`]'s), and for a policy
    /// whose shared checks answer at once (a leased limiter holding tokens for the
    /// key). `None`, with nothing taken, when a shared check needs its store.
    pub fn acquire_now(&self, request: &R) -> Option<Verdict> {
        match self.sharing {
            Sharing::Local => Some(self.acquire(request)),
            Sharing::AnswersNow => {
                let mut tally = Tally::attempt(self.dry_run_checks);
                acquire_in_turn(&self.checks, request, 0, &mut tally);
                (!tally.later).then(|| self.observed(tally.verdict()))
            }
            Sharing::Remote => None,
        }
    }

    /// Asks every check for `request`, all or nothing, awaiting the shared checks'
    /// stores (see [shared checks](self#shared-checks)). A policy of in-process
    /// checks answers at once, as [`Policy::acquire`].
    pub async fn acquire_async(&self, request: &R) -> Verdict {
        if let Some(verdict) = self.acquire_now(request) {
            return verdict;
        }
        // The shared checks first, all at once; then every check in order, the shared
        // ones by what they answered; then the refunds of what is not kept.
        let fetches = self.checks.iter().map(|check| check.fetch(request));
        let mut fetched = join_all(fetches).await;
        let mut tally = Tally::new(self.dry_run_checks);
        decide_in_turn(&self.checks, request, 0, &mut tally, &mut fetched);
        // Only the refunds there are: an allowed request has none, and allocates none.
        let refunds = self
            .checks
            .iter()
            .zip(fetched)
            .filter_map(|(check, fetched)| check.give_back(fetched?))
            .map(Some);
        join_all(refunds).await;
        self.observed(tally.verdict())
    }

    /// Settles what `request` took, admitted with `verdict` (what this policy's
    /// [`acquire`](Policy::acquire) answered for it), at what it `actual`ly cost: each
    /// [settled](Check::settled) check that kept a take for the request settles its
    /// own share, its estimate made again from the request, through its limiter's
    /// [`settle`](RateLimiter::settle) (the difference given back, or charged even
    /// beyond what the key has left). See [reserve, then settle](self#reserve-then-settle).
    ///
    /// Returns the checks' settlements added up (each field saturating): with one
    /// settled check, the usual case, that check's [`Settlement`]. A refused request,
    /// a check that is not settled, that skipped the request (no key) or that its
    /// failure policy answered settles nothing; a shared check is settled only by
    /// [`Policy::settle_async`].
    pub fn settle(&self, request: &R, verdict: &Verdict, actual: u32) -> Settlement {
        if !self.settles {
            return Settlement::default();
        }
        self.settled_checks(verdict)
            .map(|check| check.settle(request, actual))
            .fold(Settlement::default(), add_up)
    }

    /// As [`Policy::settle`], with the shared checks too, each settled on its store
    /// (one round trip each, all at once, awaited). A policy of in-process checks
    /// settles at once, as [`Policy::settle`].
    ///
    /// # Errors
    /// The first error of a shared check whose settlement did not reach its store (the
    /// other checks are settled all the same): what it was to charge is lost, an
    /// admission its key did not pay for, so it is reported.
    pub async fn settle_async(
        &self,
        request: &R,
        verdict: &Verdict,
        actual: u32,
    ) -> Result<Settlement, SharedError> {
        let in_process = self.settle(request, verdict, actual);
        if !self.settles || !self.is_shared() {
            return Ok(in_process);
        }
        let shared = self
            .settled_checks(verdict)
            .map(|check| check.settle_shared(request, actual));
        let mut total = Ok(in_process);
        for settled in join_all(shared).await.into_iter().flatten() {
            total = match (total, settled) {
                (Ok(total), Ok(settlement)) => Ok(add_up(total, settlement)),
                (Err(first), _) | (Ok(_), Err(first)) => Err(first),
            };
        }
        total
    }

    /// The settled checks that kept a take for the request `verdict` answered: an
    /// enforced one when the request went ahead, a dry-run one when it would have
    /// with every check enforced (its keys hold what they would hold enforced), and in
    /// either case not answered by its failure policy.
    fn settled_checks<'a>(
        &'a self,
        verdict: &'a Verdict,
    ) -> impl Iterator<Item = &'a dyn Evaluate<R>> + 'a {
        self.checks
            .iter()
            .enumerate()
            .filter(move |(index, check)| {
                check.settles() && verdict.kept(*index, check.is_dry_run())
            })
            .map(|(_, check)| &**check)
    }

    /// Whether any check is [settled](Check::settled) at the actual cost: only then
    /// has [`Policy::settle`] anything to do.
    pub fn settles(&self) -> bool {
        self.settles
    }

    /// Whether any check is on a shared limiter ([`Check::shared`]): then
    /// [`Policy::acquire_async`] is the way to ask.
    pub fn is_shared(&self) -> bool {
        self.sharing != Sharing::Local
    }

    /// `verdict`, reported for a named policy.
    #[inline]
    fn observed(&self, verdict: Verdict) -> Verdict {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer {
            use crate::observe::VerdictKind;
            let kind = match verdict.outcome() {
                Outcome::Allowed => VerdictKind::Allowed,
                Outcome::Denied { .. } => VerdictKind::Denied,
                Outcome::Overflow { .. } => VerdictKind::Overflow,
                Outcome::ExceedsCapacity => VerdictKind::ExceedsCapacity,
                Outcome::MissingKey => VerdictKind::MissingKey,
                Outcome::Unavailable => VerdictKind::Unavailable,
            };
            let refused_in_dry_run = verdict.is_allowed() && !verdict.if_enforced().is_allowed();
            observer.verdict(kind, refused_in_dry_run);
        }
        verdict
    }

    /// The number of checks.
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether the policy has no checks.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// The name and advertised limit of the check at `index`, in policy order.
    pub fn check_info(&self, index: usize) -> Option<(&str, Limit)> {
        let (name, limit, _) = self.checks.get(index)?.describe();
        Some((name, limit))
    }

    /// Whether any check runs in dry run.
    pub fn has_dry_run_checks(&self) -> bool {
        self.dry_run_checks
    }

    /// Whether the check at `index` runs in dry run.
    pub fn is_dry_run(&self, index: usize) -> bool {
        self.checks
            .get(index)
            .is_some_and(|check| check.is_dry_run())
    }

    /// Puts every check in dry run (the HTTP layer's dry run).
    #[cfg(feature = "tower")]
    pub(crate) fn set_dry_run(&mut self) {
        self.dry_run_checks = !self.checks.is_empty();
        for check in self.checks.iter_mut() {
            check.set_dry_run();
            // Reported again, now as a dry-run check.
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            if let Some(observer) = &self.observer {
                check.observe(observer.name());
            }
        }
    }
}

impl<R: ?Sized> fmt::Debug for Policy<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        ListChecks(&self.checks).fmt(f)
    }
}

/// Checks listed as `Policy`, `PolicyBuilder` and `PolicyCheck` show them.
struct ListChecks<'a, R: ?Sized>(&'a [Box<dyn Evaluate<R>>]);

impl<R: ?Sized> fmt::Debug for ListChecks<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|check| Described(&**check)))
            .finish()
    }
}

/// One check: `name: cost C of LIMIT`, with ` (dry run)` after a check in dry run.
struct Described<'a, R: ?Sized>(&'a dyn Evaluate<R>);

impl<R: ?Sized> fmt::Debug for Described<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, limit, cost) = self.0.describe();
        match cost {
            Some(cost) => write!(f, "{name}: cost {cost} of {limit:?}")?,
            None => write!(f, "{name}: cost per request of {limit:?}")?,
        }
        if self.0.settles() {
            f.write_str(", settled")?;
        }
        if self.0.is_dry_run() {
            f.write_str(" (dry run)")?;
        }
        Ok(())
    }
}

/// Asks `checks[index..]` in turn, each inside the one before; returns whether the
/// request goes ahead (by the enforced checks) and whether it would (by all of them).
/// An enforced check keeps what it took in the first case, a dry-run check in the
/// second.
fn acquire_in_turn<R: ?Sized>(
    checks: &[Box<dyn Evaluate<R>>],
    request: &R,
    index: usize,
    tally: &mut Tally,
) -> Passed {
    let Some(check) = checks.get(index) else {
        return tally.passed();
    };
    let dry_run = check.is_dry_run();
    let mut passed = Passed::NEITHER;
    check.acquire_then(request, &mut |taken| {
        if tally.record(index, taken, dry_run) {
            passed = acquire_in_turn(checks, request, index + 1, tally);
        }
        if dry_run { passed.all } else { passed.enforced }
    });
    passed
}

/// As [`acquire_in_turn`], for a policy whose shared checks were fetched first: `fetched[0]`
/// is what check `index` fetched, if anything.
fn decide_in_turn<R: ?Sized>(
    checks: &[Box<dyn Evaluate<R>>],
    request: &R,
    index: usize,
    tally: &mut Tally,
    fetched: &mut [Option<Fetched>],
) -> Passed {
    let (Some(check), Some((here, later))) = (checks.get(index), fetched.split_first_mut()) else {
        return tally.passed();
    };
    let dry_run = check.is_dry_run();
    let mut passed = Passed::NEITHER;
    check.decide_then(request, here.as_mut(), &mut |taken| {
        if tally.record(index, taken, dry_run) {
            passed = decide_in_turn(checks, request, index + 1, tally, later);
        }
        if dry_run { passed.all } else { passed.enforced }
    });
    passed
}

/// Every future in `futures`, awaited at once; their outputs in order (`None` where
/// there was no future).
async fn join_all<'a, T>(futures: impl Iterator<Item = Option<Fetch<'a, T>>>) -> Vec<Option<T>> {
    let mut pending: Vec<Option<Fetch<'a, T>>> = futures.collect();
    let mut done: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in pending.iter_mut().zip(done.iter_mut()) {
            let Some(running) = future else { continue };
            match running.as_mut().poll(cx) {
                Poll::Ready(value) => {
                    *output = Some(value);
                    *future = None;
                }
                Poll::Pending => waiting = true,
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done
}

/// A check ready to join a policy: any [`Check`] on an in-process limiter
/// ([`Check::new`]) or on a shared one ([`Check::shared`]), converted by
/// [`PolicyBuilder::check`].
pub struct PolicyCheck<R: ?Sized>(Box<dyn Evaluate<R>>);

impl<R: ?Sized> fmt::Debug for PolicyCheck<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PolicyCheck")
            .field(&Described(&*self.0))
            .finish()
    }
}

impl<R, L, K, E, C> From<Check<L, K, E, C>> for PolicyCheck<R>
where
    R: ?Sized,
    L: RateLimiter<K> + Send + Sync + 'static,
    K: Borrow<E::Key> + Send + Sync + 'static,
    E: KeyExtractor<R> + 'static,
    E::Key: KeyRef<K>,
    C: Cost<R> + 'static,
{
    fn from(check: Check<L, K, E, C>) -> Self {
        PolicyCheck(Box::new(check))
    }
}

/// A check on a limiter chosen at run time ([`DynRateLimiter`]), asked with the
/// extractor's key borrowed as `Q`.
impl<R, K, Q, E, C> From<Check<dyn DynRateLimiter<K, Q>, K, E, C>> for PolicyCheck<R>
where
    R: ?Sized,
    K: Borrow<Q> + Send + Sync + 'static,
    Q: ?Sized + KeyRef<K> + 'static,
    E: KeyExtractor<R> + 'static,
    E::Key: Borrow<Q>,
    C: Cost<R> + 'static,
{
    fn from(check: Check<dyn DynRateLimiter<K, Q>, K, E, C>) -> Self {
        PolicyCheck(Box::new(check))
    }
}

impl<R, L, E, C> From<Check<Shared<L>, Vec<u8>, E, C>> for PolicyCheck<R>
where
    R: ?Sized,
    L: SharedLimiter + ?Sized,
    E: KeyExtractor<R> + 'static,
    E::Key: AsRef<[u8]>,
    C: Cost<R> + 'static,
{
    fn from(check: Check<Shared<L>, Vec<u8>, E, C>) -> Self {
        PolicyCheck(Box::new(check))
    }
}

/// Builds a [`Policy`]; see [`Policy::builder`].
pub struct PolicyBuilder<R: ?Sized> {
    checks: Vec<Box<dyn Evaluate<R>>>,
    dry_run: bool,
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    name: Option<std::sync::Arc<str>>,
}

/// The checks added so far, as [`Policy`]'s `Debug` lists them.
impl<R: ?Sized> fmt::Debug for PolicyBuilder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut builder = f.debug_struct("PolicyBuilder");
        builder.field("checks", &ListChecks(&self.checks));
        builder.field("dry_run", &self.dry_run);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        builder.field("name", &self.name);
        builder.finish()
    }
}

impl<R: ?Sized> PolicyBuilder<R> {
    /// Adds `check` (a [`Check`], on an in-process or a shared limiter), to be asked
    /// after the ones already added.
    pub fn check(mut self, check: impl Into<PolicyCheck<R>>) -> Self {
        self.checks.push(check.into().0);
        self
    }

    /// Names the policy in metrics and events (features `metrics`, `tracing`): its
    /// verdicts, and each check's decisions under the check's own name, are reported
    /// (see [`crate::observe`]). An unnamed policy reports nothing.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<std::sync::Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Runs every check in dry run: the policy never refuses a request, and its
    /// verdict's [`if_enforced`](Verdict::if_enforced) says what it would have decided
    /// (see [dry run](self#dry-run)).
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// The policy.
    ///
    /// # Errors
    /// A check name that is empty, longer than 64 bytes, has a character other than
    /// ASCII letters, digits and `-_.:/`, or repeats another check's name; a cost above
    /// its check's advertised capacity (such a check could never pass); a dry-run check
    /// sharing its limiter with an enforced check; more than
    /// [`PolicyError::MAX_CHECKS`] checks.
    pub fn build(mut self) -> Result<Policy<R>, PolicyError> {
        if self.dry_run {
            for check in self.checks.iter_mut() {
                check.set_dry_run();
            }
        }
        if self.checks.len() > PolicyError::MAX_CHECKS {
            return Err(PolicyError::TooManyChecks {
                checks: self.checks.len(),
            });
        }
        for (i, check) in self.checks.iter().enumerate() {
            let (name, limit, cost) = check.describe();
            if !valid_name(name) {
                return Err(PolicyError::InvalidName { name: name.into() });
            }
            if self.checks[..i].iter().any(|c| c.describe().0 == name) {
                return Err(PolicyError::DuplicateName { name: name.into() });
            }
            let capacity = limit.quota().capacity();
            if let Some(cost) = cost
                && cost > capacity
            {
                return Err(PolicyError::CostExceedsCapacity {
                    name: name.into(),
                    cost,
                    capacity,
                });
            }
            if check.is_dry_run()
                && let Some(enforced) = self.checks.iter().find(|other| {
                    !other.is_dry_run() && other.limiter_address() == check.limiter_address()
                })
            {
                return Err(PolicyError::DryRunSharesLimiter {
                    name: name.into(),
                    enforced: enforced.describe().0.into(),
                });
            }
        }
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let observer = self.name.map(|name| {
            for check in self.checks.iter_mut() {
                check.observe(&name);
            }
            Box::new(crate::observe::PolicyObserver::new(name))
        });
        let dry_run_checks = self.checks.iter().any(|check| check.is_dry_run());
        let sharing = self.checks.iter().map(|check| check.sharing()).max();
        let settles = self.checks.iter().any(|check| check.settles());
        Ok(Policy {
            checks: self.checks.into_boxed_slice(),
            dry_run_checks,
            sharing: sharing.unwrap_or(Sharing::Local),
            settles,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer,
        })
    }
}

/// Two settlements added up, each field saturating.
fn add_up(a: Settlement, b: Settlement) -> Settlement {
    Settlement {
        refunded: a.refunded.saturating_add(b.refunded),
        charged: a.charged.saturating_add(b.charged),
        forgiven: a.forgiven.saturating_add(b.forgiven),
    }
}

/// A name that is safe, unescaped, inside a structured-field string and a JSON string.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b))
}

/// Why a policy was refused. More reasons may come with more settings, hence
/// `#[non_exhaustive]`.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyError {
    /// A check name is empty, longer than 64 bytes, or has a character other than
    /// ASCII letters, digits and `-_.:/`.
    InvalidName {
        /// The name.
        name: String,
    },
    /// Two checks share a name, so the headers could not tell them apart.
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A check costs more than its quota's capacity: it could never pass.
    CostExceedsCapacity {
        /// The check's name.
        name: String,
        /// Its cost.
        cost: u32,
        /// Its quota's capacity.
        capacity: u32,
    },
    /// A dry-run check takes from the same limiter as an enforced check, so its takes
    /// would spend the enforced check's allowance.
    DryRunSharesLimiter {
        /// The dry-run check's name.
        name: String,
        /// The enforced check's name.
        enforced: String,
    },
    /// More than [`PolicyError::MAX_CHECKS`] checks.
    TooManyChecks {
        /// How many were given.
        checks: usize,
    },
}

impl PolicyError {
    /// The most checks one policy may have.
    pub const MAX_CHECKS: usize = 64;
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::InvalidName { name } => write!(
                f,
                "check name {name:?} must be 1 to 64 ASCII letters, digits or -_.:/ \
                 (it appears unescaped in HTTP header fields)"
            ),
            PolicyError::DuplicateName { name } => {
                write!(f, "two checks of one policy are named {name:?}")
            }
            PolicyError::CostExceedsCapacity {
                name,
                cost,
                capacity,
            } => write!(
                f,
                "check {name:?} costs {cost} per request, more than its capacity of \
                 {capacity}: no request could ever pass it"
            ),
            PolicyError::DryRunSharesLimiter { name, enforced } => write!(
                f,
                "dry-run check {name:?} shares its limiter with enforced check \
                 {enforced:?}: its takes would spend the enforced check's allowance; give \
                 it a limiter of its own"
            ),
            PolicyError::TooManyChecks { checks } => write!(
                f,
                "a policy has at most {} checks, not {checks}",
                PolicyError::MAX_CHECKS
            ),
        }
    }
}

impl std::error::Error for PolicyError {}
