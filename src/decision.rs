//! The answer to a request.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// What a limiter decided for one request.
///
/// `remaining` is always the number of tokens (or, for window limiters, requests)
/// left for the key *after* this decision.
///
/// The four answers are every answer a limiter can give (admitted; not yet, with the
/// exact wait; never; no room for a new key), so the enum is exhaustive and a `match`
/// on it needs no catch-all arm: a key in debt (a cost settled above what was left)
/// is a denial whose `retry_after` counts the debt, not a fifth answer. An answer
/// that is not a limiter's exact decision — a shared limiter's failure policy
/// answering for its store — is a [`SharedDecision`], never a `Decision`.
#[must_use = "a decision that is not checked limits nothing"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The request was admitted and its cost taken.
    Allowed {
        /// Tokens left after taking the cost.
        remaining: u32,
    },
    /// The request was not admitted and the key's state is unchanged. Sending the same
    /// request `retry_after` from now succeeds, if nothing else takes from the key
    /// meanwhile; sending it any earlier does not.
    Denied {
        /// Tokens available now (fewer than the cost).
        remaining: u32,
        /// Exact time until enough tokens exist; never rounded down.
        /// `Duration::MAX` means never: the wait lies beyond the end of the limiter's
        /// clock (584 years; GCRA, a fixed window or a 1 ns token bucket, whose
        /// states cannot name later times, stop earlier, as their documentation
        /// says).
        retry_after: Duration,
    },
    /// The cost is larger than the quota's capacity: this request can never succeed,
    /// however long the caller waits. The key's state is unchanged.
    ExceedsCapacity {
        /// Tokens available now.
        remaining: u32,
        /// The quota's capacity, which the cost exceeded.
        capacity: u32,
    },
    /// The limiter already holds its `max_keys` keys, none of them could be forgotten,
    /// and its overflow policy is [`Overflow::Deny`](crate::Overflow::Deny): this new
    /// key was not admitted and has no state.
    Overflow {
        /// When the limiter will next try to make room by forgetting idle keys — a
        /// hint, not the promise [`Decision::Denied`] makes: room depends on other
        /// keys going idle, which nobody can promise. Named apart from `retry_after`
        /// so that no code reads it as the exact wait.
        retry_hint: Duration,
    },
}

impl Decision {
    /// Whether the request was admitted.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }

    /// Tokens left for the key after this decision.
    #[inline]
    pub fn remaining(&self) -> u32 {
        match *self {
            Decision::Allowed { remaining }
            | Decision::Denied { remaining, .. }
            | Decision::ExceedsCapacity { remaining, .. } => remaining,
            Decision::Overflow { .. } => 0,
        }
    }

    /// For a [`Decision::Denied`] request, the exact wait: the same request sent that
    /// much later succeeds, if nothing else takes from the key meanwhile. `None`
    /// otherwise: allowed, never satisfiable ([`Decision::exceeds_capacity`]), or an
    /// overflow, whose wait is only a hint ([`Decision::retry_hint`]).
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Decision::Denied { retry_after, .. } => Some(retry_after),
            Decision::Allowed { .. }
            | Decision::ExceedsCapacity { .. }
            | Decision::Overflow { .. } => None,
        }
    }

    /// For a [`Decision::Overflow`], when to try again: a hint (when the limiter next
    /// tries to make room), not an exact wait. `None` for every other decision.
    #[inline]
    pub fn retry_hint(&self) -> Option<Duration> {
        match *self {
            Decision::Overflow { retry_hint } => Some(retry_hint),
            Decision::Allowed { .. }
            | Decision::Denied { .. }
            | Decision::ExceedsCapacity { .. } => None,
        }
    }

    /// When to try again, whatever the reason: the exact wait of a denial or the hint
    /// of an overflow (what an HTTP `Retry-After` carries); `None` when the request
    /// was allowed or can never succeed.
    #[inline]
    pub fn retry_in(&self) -> Option<Duration> {
        match *self {
            Decision::Denied { retry_after, .. } => Some(retry_after),
            Decision::Overflow { retry_hint } => Some(retry_hint),
            Decision::Allowed { .. } | Decision::ExceedsCapacity { .. } => None,
        }
    }

    /// Whether the cost exceeds the capacity, so that no wait can make it succeed.
    #[inline]
    pub fn exceeds_capacity(&self) -> bool {
        matches!(self, Decision::ExceedsCapacity { .. })
    }
}

/// A shared limiter's answer (one whose state lives outside the process, such as the
/// [Redis limiters](crate::redis)): its store's exact [`Decision`], or, when the store
/// gave none, the failure policy's answer and why.
///
/// A separate type rather than a fifth [`Decision`] variant: a `Decision` is always
/// exact (its `remaining` and `retry_after` are facts about the key), and every
/// in-process limiter returns one. A fallback knows neither, so it says so, and keeps
/// the error for logging. [`SharedDecision::is_allowed`] is the one call a request
/// handler needs; [`SharedDecision::decision`] gives the exact answer when there is
/// one.
///
/// `E` is why the store gave no decision: the Redis limiters answer with their own
/// [`CheckError`](crate::redis::CheckError); the
/// [`SharedLimiter`](crate::policy::SharedLimiter) contract, which any store may
/// implement, with a boxed error ([`SharedError`], the default).
#[must_use = "a decision that is not checked limits nothing"]
#[derive(Debug)]
pub enum SharedDecision<E = SharedError> {
    /// The store decided: the exact decision, with the meaning it has in process.
    Decided(Decision),
    /// The store gave no decision (down, slow, its circuit breaker open); the
    /// limiter's failure policy answered.
    Fallback {
        /// What the failure policy answered: `true` when it fails open.
        allowed: bool,
        /// Why the store gave no decision.
        error: E,
    },
}

/// Why a shared limiter's store gave no decision, whatever the store: any error,
/// boxed. A Redis limiter's is a [`CheckError`](crate::redis::CheckError), which
/// `downcast_ref` recovers.
pub type SharedError = Box<dyn Error + Send + Sync + 'static>;

impl<E> SharedDecision<E> {
    /// Whether the request may proceed: the store allowed it, or it gave no decision
    /// and the failure policy allows.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        match self {
            SharedDecision::Decided(decision) => decision.is_allowed(),
            SharedDecision::Fallback { allowed, .. } => *allowed,
        }
    }

    /// The store's decision, or `None` when the failure policy answered.
    #[inline]
    pub fn decision(&self) -> Option<Decision> {
        match self {
            SharedDecision::Decided(decision) => Some(*decision),
            SharedDecision::Fallback { .. } => None,
        }
    }

    /// The exact wait of a request the store denied ([`Decision::retry_after`]);
    /// `None` otherwise (allowed, never satisfiable, or answered by the failure
    /// policy, which knows no wait).
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        self.decision().and_then(|decision| decision.retry_after())
    }

    /// Why the store gave no decision, when it gave none.
    #[inline]
    pub fn error(&self) -> Option<&E> {
        match self {
            SharedDecision::Decided(_) => None,
            SharedDecision::Fallback { error, .. } => Some(error),
        }
    }

    /// Whether the failure policy answered instead of the store.
    #[inline]
    pub fn is_fallback(&self) -> bool {
        matches!(self, SharedDecision::Fallback { .. })
    }

    /// The same answer with its error turned by `f` (say, boxed into a
    /// [`SharedError`] with `Into::into`).
    #[inline]
    pub fn map_error<F>(self, f: impl FnOnce(E) -> F) -> SharedDecision<F> {
        match self {
            SharedDecision::Decided(decision) => SharedDecision::Decided(decision),
            SharedDecision::Fallback { allowed, error } => SharedDecision::Fallback {
                allowed,
                error: f(error),
            },
        }
    }
}

impl<E: fmt::Display> fmt::Display for SharedDecision<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SharedDecision::Decided(decision) => write!(f, "{decision:?}"),
            SharedDecision::Fallback { allowed, error } => {
                let answer = if *allowed { "allowed" } else { "denied" };
                write!(f, "{answer} by the failure policy: {error}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_denial_answers_retry_after_and_only_an_overflow_a_hint() {
        let denied = Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_millis(5),
        };
        let overflow = Decision::Overflow {
            retry_hint: Duration::from_millis(7),
        };
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(5)));
        assert_eq!(denied.retry_hint(), None);
        assert_eq!(overflow.retry_after(), None);
        assert_eq!(overflow.retry_hint(), Some(Duration::from_millis(7)));
        assert_eq!(denied.retry_in(), Some(Duration::from_millis(5)));
        assert_eq!(overflow.retry_in(), Some(Duration::from_millis(7)));
        for never in [
            Decision::Allowed { remaining: 1 },
            Decision::ExceedsCapacity {
                remaining: 1,
                capacity: 1,
            },
        ] {
            assert_eq!((never.retry_after(), never.retry_hint()), (None, None));
        }
    }

    #[test]
    fn a_fallback_knows_no_decision_and_keeps_its_error() {
        let fallback: SharedDecision<&str> = SharedDecision::Fallback {
            allowed: true,
            error: "down",
        };
        assert!(fallback.is_allowed() && fallback.is_fallback());
        assert_eq!((fallback.decision(), fallback.retry_after()), (None, None));
        let boxed: SharedDecision = fallback.map_error(|error| error.into());
        assert_eq!(
            boxed.error().map(ToString::to_string).as_deref(),
            Some("down")
        );
        assert_eq!(boxed.to_string(), "allowed by the failure policy: down");
    }
}
