//! What a check answers when Redis cannot: the policy, why Redis gave no decision,
//! and the counters that say how often.

use crate::sync::{AtomicU64, Ordering};
use crate::{Decision, SharedDecision};
use std::fmt;
use std::time::Duration;

/// What a check answers when Redis is unreachable, answers with an error, or does not
/// answer within the limiter's timeout.
///
/// There is no default: failing open risks overloading what the limit protects,
/// failing closed turns a Redis outage into an outage of your own service. Which is
/// worse depends on the service, so the choice is the caller's, made once per limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// Allow the request, and count it in [`FailureCounts::allowed`].
    Open,
    /// Deny the request, and count it in [`FailureCounts::denied`].
    Closed,
}

/// Why Redis gave no decision: the error of a Redis limiter's
/// [`SharedDecision::Fallback`](crate::SharedDecision::Fallback) and of a failed `peek`.
#[non_exhaustive]
#[derive(Debug)]
pub enum CheckError {
    /// No reply within the limiter's timeout (Redis slow, paused, or unreachable while
    /// the connection keeps retrying). The script may still run later: a timed-out
    /// check can have taken its tokens.
    Timeout(Duration),
    /// The connection or the server reported an error.
    Redis(::redis::RedisError),
    /// The script answered something it never answers (a script of another version
    /// loaded under the same SHA-1 is the one known way). Data another program wrote
    /// at a limiter's key is not this: the script replaces it, and the check is
    /// decided ([`FailureCounts::replaced`]).
    UnexpectedReply(String),
    /// A blocking limiter's check ended without a result (its task panicked). Never
    /// expected; reported rather than hidden.
    TaskLost,
    /// The limiter's circuit breaker is open after consecutive failures: Redis was not
    /// asked (see [`CircuitBreaker`](super::CircuitBreaker)). The next probe goes in
    /// `retry_in`.
    CircuitOpen {
        /// Until the breaker lets the next probe through (zero: a probe is in flight).
        retry_in: Duration,
    },
}

impl CheckError {
    /// Whether this says Redis is unreachable or slow (a timeout, a connection or I/O
    /// error), which is what the circuit breaker counts; an error reply means Redis
    /// is up.
    pub fn is_unavailability(&self) -> bool {
        match self {
            CheckError::Timeout(_) | CheckError::TaskLost | CheckError::CircuitOpen { .. } => true,
            CheckError::Redis(error) => {
                error.is_io_error()
                    || error.is_connection_refusal()
                    || error.is_connection_dropped()
                    || error.is_timeout()
            }
            CheckError::UnexpectedReply(_) => false,
        }
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Timeout(after) => write!(f, "no reply from Redis within {after:?}"),
            CheckError::Redis(error) => write!(f, "Redis error: {error}"),
            CheckError::UnexpectedReply(reply) => {
                write!(f, "unexpected reply from the limiter's script: {reply}")
            }
            CheckError::TaskLost => write!(f, "the check's task ended without a result"),
            CheckError::CircuitOpen { retry_in } => write!(
                f,
                "circuit breaker open after consecutive failures: Redis not asked (next \
                 probe in {retry_in:?})"
            ),
        }
    }
}

impl std::error::Error for CheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckError::Redis(error) => Some(error),
            _ => None,
        }
    }
}

/// How often a limiter got no decision from Redis, since it was built. Shared by the
/// limiter's clones. A snapshot: each field is read on its own, so a snapshot taken
/// while checks fail may be off by the checks in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureCounts {
    /// Checks (and peeks) that got no reply within the timeout.
    pub timeouts: u64,
    /// Checks (and peeks) that got an error: connection refused or lost, a server
    /// error, an unexpected reply, a lost task.
    pub errors: u64,
    /// Checks and peeks the open circuit breaker answered without asking Redis (the
    /// checks among them are also in `allowed` or `denied`).
    pub short_circuited: u64,
    /// Times the circuit breaker opened.
    pub trips: u64,
    /// Checks the policy allowed ([`FailurePolicy::Open`]).
    pub allowed: u64,
    /// Checks the policy denied ([`FailurePolicy::Closed`]).
    pub denied: u64,
    /// Checks that found something other than the limiter's own state at their key
    /// (another type, or fields that are not the limiter's integers: data another
    /// program wrote under the limiter's prefix) and replaced it by a fresh state —
    /// a full bucket, an empty window — before deciding. Not a failure: the check was
    /// decided, exactly, on the fresh state. Counted here because it means the prefix
    /// is not the limiter's alone.
    pub replaced: u64,
}

/// The live counters behind [`FailureCounts`].
#[derive(Debug, Default)]
pub(crate) struct FailureCounters {
    timeouts: AtomicU64,
    errors: AtomicU64,
    short_circuited: AtomicU64,
    trips: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    replaced: AtomicU64,
}

impl FailureCounters {
    /// Counts a failed check or peek by its cause.
    pub(crate) fn count_error(&self, error: &CheckError) {
        let counter = match error {
            CheckError::Timeout(_) => &self.timeouts,
            CheckError::CircuitOpen { .. } => &self.short_circuited,
            _ => &self.errors,
        };
        // Relaxed: statistics; the counters guard no other memory.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an opening of the circuit breaker.
    pub(crate) fn count_trip(&self) {
        // Relaxed: as in `count_error`.
        self.trips.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a check that replaced foreign data at its key.
    pub(crate) fn count_replaced(&self) {
        // Relaxed: as in `count_error`.
        self.replaced.fetch_add(1, Ordering::Relaxed);
    }

    /// Turns a check's result into its answer, applying `policy` to a failure and
    /// counting it.
    pub(crate) fn apply_policy(
        &self,
        policy: FailurePolicy,
        result: Result<Decision, CheckError>,
    ) -> SharedDecision<CheckError> {
        match result {
            Ok(decision) => SharedDecision::Decided(decision),
            Err(error) => {
                self.count_error(&error);
                let (allowed, counter) = match policy {
                    FailurePolicy::Open => (true, &self.allowed),
                    FailurePolicy::Closed => (false, &self.denied),
                };
                // Relaxed: as in `count_error`.
                counter.fetch_add(1, Ordering::Relaxed);
                SharedDecision::Fallback { allowed, error }
            }
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn snapshot(&self) -> FailureCounts {
        // Relaxed: as in `count_error`; the fields are independent statistics.
        FailureCounts {
            timeouts: self.timeouts.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            short_circuited: self.short_circuited.load(Ordering::Relaxed),
            trips: self.trips.load(Ordering::Relaxed),
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            replaced: self.replaced.load(Ordering::Relaxed),
        }
    }
}
