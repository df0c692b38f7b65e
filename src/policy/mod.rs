//! Policies: the checks a request must pass — a per-user limit for its endpoint, a
//! per-IP limit, … — taken all or nothing.
//!
//! ```
//! use std::sync::Arc;
//! use turnstile::policy::{Check, Limit, Policy};
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! struct Request { user: String, ip: u32 }
//!
//! let clock = ManualClock::new(); // a service uses the default clock
//! let transfers = Quota::per_minute(10)?;
//! let per_ip = Quota::per_minute(300)?;
//! let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_ip, clock.clone()));
//! let policy: Policy<Request> = Policy::builder()
//!     .check(Check::new(
//!         "transfer",
//!         Arc::new(TokenBucket::<String, _>::with_clock(transfers, clock.clone())),
//!         Limit::steady(transfers),
//!         |r: &Request| Some(r.user.clone()),
//!     ))
//!     .check(Check::new("per-ip", ips.clone(), Limit::steady(per_ip), |r: &Request| Some(r.ip)))
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
//!   over [`Outcome::Overflow`] over [`Outcome::Denied`] over [`Outcome::Allowed`].
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
//!   limiter does.

mod check;
mod key;
mod limit;
mod verdict;

pub use check::{Check, MissingKey};
pub use key::KeyExtractor;
pub use limit::Limit;
pub use verdict::{Binding, Outcome, Verdict};

use crate::{KeyRef, RateLimiter};
use check::Evaluate;
use std::borrow::Borrow;
use std::fmt;
use verdict::Tally;

/// The checks a request of type `R` must pass, taken all or nothing (see the
/// [module documentation](self) for the exact semantics).
pub struct Policy<R: ?Sized> {
    checks: Box<[Box<dyn Evaluate<R>>]>,
}

impl<R: ?Sized> Policy<R> {
    /// A builder; add checks in the order they are to be asked.
    pub fn builder() -> PolicyBuilder<R> {
        PolicyBuilder { checks: Vec::new() }
    }

    /// A policy with no checks: every request is allowed, and nothing is reported.
    pub fn unlimited() -> Self {
        Self {
            checks: Box::new([]),
        }
    }

    /// Asks every check for `request`, all or nothing.
    pub fn acquire(&self, request: &R) -> Verdict {
        let mut tally = Tally::default();
        take_from(&self.checks, request, 0, &mut tally);
        tally.verdict()
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
}

impl<R: ?Sized> fmt::Debug for Policy<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for check in self.checks.iter() {
            let (name, limit, cost) = check.describe();
            list.entry(&format_args!("{name}: cost {cost} of {limit:?}"));
        }
        list.finish()
    }
}

/// Asks `checks[index..]`; returns whether the request goes ahead, in which case every
/// check keeps what it took.
fn take_from<R: ?Sized>(
    checks: &[Box<dyn Evaluate<R>>],
    request: &R,
    index: usize,
    tally: &mut Tally,
) -> bool {
    let Some(check) = checks.get(index) else {
        return tally.all_passed();
    };
    let mut go_ahead = false;
    check.take_then(request, &mut |taken| {
        go_ahead = tally.record(index, taken) && take_from(checks, request, index + 1, tally);
        go_ahead
    });
    go_ahead
}

/// Builds a [`Policy`]; see [`Policy::builder`].
pub struct PolicyBuilder<R: ?Sized> {
    checks: Vec<Box<dyn Evaluate<R>>>,
}

impl<R: ?Sized> PolicyBuilder<R> {
    /// Adds `check`, to be asked after the ones already added.
    pub fn check<L, K, E>(mut self, check: Check<L, K, E>) -> Self
    where
        L: RateLimiter<K> + Send + Sync + 'static,
        K: Borrow<E::Key> + Send + Sync + 'static,
        E: KeyExtractor<R> + 'static,
        E::Key: KeyRef<K>,
    {
        self.checks.push(Box::new(check));
        self
    }

    /// The policy.
    ///
    /// # Errors
    /// A check name that is empty, longer than 64 bytes, has a character other than
    /// ASCII letters, digits and `-_.:/`, or repeats another check's name; a cost above
    /// its check's advertised capacity (such a check could never pass); more than
    /// [`PolicyError::MAX_CHECKS`] checks.
    pub fn build(self) -> Result<Policy<R>, PolicyError> {
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
            if cost > capacity {
                return Err(PolicyError::CostExceedsCapacity {
                    name: name.into(),
                    cost,
                    capacity,
                });
            }
        }
        Ok(Policy {
            checks: self.checks.into_boxed_slice(),
        })
    }
}

/// A name that is safe, unescaped, inside a structured-field string and a JSON string.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b))
}

/// Why a policy was refused.
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
            PolicyError::TooManyChecks { checks } => write!(
                f,
                "a policy has at most {} checks, not {checks}",
                PolicyError::MAX_CHECKS
            ),
        }
    }
}

impl std::error::Error for PolicyError {}
