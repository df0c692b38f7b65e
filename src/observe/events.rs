//! The `tracing` events of named limiters and policies (see the [module docs](super)).
//! Each field is computed only when a subscriber wants the event; no key appears, only
//! its [`key_hash`](super::key_hash).

use super::key_hash;
use crate::Decision;
use std::hash::Hash;

/// What an outcome is called in events.
fn outcome_name(decision: &Decision) -> &'static str {
    match decision {
        Decision::Allowed { .. } => "allowed",
        Decision::Denied { .. } => "denied",
        Decision::ExceedsCapacity { .. } => "exceeds_capacity",
        Decision::Overflow { .. } => "overflow",
    }
}

/// A refusal by limiter or check `name` (of `policy`, for a check) of a request for
/// `key`.
pub(super) fn refused<Q: Hash + ?Sized>(
    name: &str,
    policy: Option<&str>,
    key: &Q,
    decision: &Decision,
    dry_run: bool,
) {
    tracing::debug!(
        target: "turnstile",
        limiter = name,
        policy,
        key_hash = key_hash(key),
        outcome = outcome_name(decision),
        retry_after_ms = decision.retry_after().map(|wait| wait.as_secs_f64() * 1e3),
        remaining = decision.remaining(),
        dry_run,
        "request refused"
    );
}

/// A refusal by check `check` of `policy` of a request with no usable key.
pub(super) fn keyless(check: &str, policy: &str, dry_run: bool) {
    tracing::debug!(
        target: "turnstile",
        limiter = check,
        policy,
        outcome = "missing_key",
        dry_run,
        "request refused"
    );
}

/// A check of `policy` on a shared limiter that gave no decision, answered by its
/// failure policy (the limiter itself, if named, reports why).
pub(super) fn check_fell_back(check: &str, policy: &str, allowed: bool, dry_run: bool) {
    tracing::debug!(
        target: "turnstile",
        limiter = check,
        policy,
        outcome = if allowed { "fallback_allowed" } else { "fallback_denied" },
        dry_run,
        "answered by the failure policy"
    );
}

/// A Redis check (or peek: `fallback` is `None`) for `key` that got no answer. At
/// `warn`, but a check the open circuit breaker answered is at `debug`: the breaker's
/// opening was the warning, and an outage would otherwise log every request.
#[cfg(feature = "redis")]
pub(super) fn fallback(
    name: &str,
    key: &[u8],
    failure: super::Failure,
    error: &dyn std::fmt::Display,
    fallback: Option<bool>,
) {
    if failure == super::Failure::CircuitOpen {
        tracing::debug!(
            target: "turnstile",
            limiter = name,
            key_hash = key_hash(key),
            allowed = fallback,
            "circuit breaker open: the failure policy answered without asking Redis"
        );
        return;
    }
    match fallback {
        Some(allowed) => tracing::warn!(
            target: "turnstile",
            limiter = name,
            key_hash = key_hash(key),
            %error,
            allowed,
            "Redis gave no decision; the failure policy answered"
        ),
        None => tracing::warn!(
            target: "turnstile",
            limiter = name,
            key_hash = key_hash(key),
            %error,
            "Redis gave no answer to a peek"
        ),
    }
}

/// A Redis check for `key` that found another program's data there and replaced it.
#[cfg(feature = "redis")]
pub(super) fn replaced(name: &str, key: &[u8]) {
    tracing::warn!(
        target: "turnstile",
        limiter = name,
        key_hash = key_hash(key),
        "foreign data at the limiter's key replaced by a fresh state"
    );
}

/// A Redis limiter's circuit breaker opened or closed.
#[cfg(feature = "redis")]
pub(super) fn circuit(name: &str, open: bool) {
    if open {
        tracing::warn!(
            target: "turnstile",
            limiter = name,
            "circuit breaker opened: Redis failed repeatedly; checks answer by the failure \
             policy without asking it until a probe succeeds"
        );
    } else {
        tracing::info!(
            target: "turnstile",
            limiter = name,
            "circuit breaker closed: Redis answers again"
        );
    }
}
