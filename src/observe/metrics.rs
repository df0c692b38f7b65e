//! The metric handles of named limiters and policies, registered once with whatever
//! recorder is installed when they are built (see the [module docs](super)).

use super::VerdictKind;
use crate::Decision;
use metrics::{Counter, Gauge, Histogram, Unit, counter, gauge, histogram};
use std::sync::Once;
use std::time::Duration;

const DECISIONS: &str = "turnstile_decisions_total";
const KEYS: &str = "turnstile_keys";
const FORGOTTEN: &str = "turnstile_keys_forgotten_total";
const SWEEPS: &str = "turnstile_sweeps_total";
const SWEEP_SECONDS: &str = "turnstile_sweep_duration_seconds";
const REDIS_FAILURES: &str = "turnstile_redis_failures_total";
const REDIS_REPLACED: &str = "turnstile_redis_replaced_total";
const CIRCUIT_OPEN: &str = "turnstile_redis_circuit_open";
const CIRCUIT_TRIPS: &str = "turnstile_redis_circuit_trips_total";
const CHECK_DECISIONS: &str = "turnstile_check_decisions_total";
const VERDICTS: &str = "turnstile_policy_verdicts_total";
const DRY_RUN_REFUSALS: &str = "turnstile_policy_dry_run_refusals_total";

/// Describes every metric to the recorder installed now: once per process, the first
/// time anything is named.
fn describe() {
    static DESCRIBED: Once = Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(DECISIONS, "Decisions of a named limiter, by outcome.");
        metrics::describe_gauge!(KEYS, "Keys a named limiter holds.");
        metrics::describe_counter!(FORGOTTEN, "Keys a named limiter's sweeps forgot.");
        metrics::describe_counter!(SWEEPS, "Sweeps of a named limiter's key map.");
        metrics::describe_histogram!(SWEEP_SECONDS, Unit::Seconds, "Duration of each sweep.");
        metrics::describe_counter!(
            REDIS_FAILURES,
            "Redis checks and peeks that got no answer, by error."
        );
        metrics::describe_gauge!(
            CIRCUIT_OPEN,
            "1 while a Redis limiter's circuit breaker is open."
        );
        metrics::describe_counter!(
            CIRCUIT_TRIPS,
            "Times a Redis limiter's circuit breaker opened."
        );
        metrics::describe_counter!(
            REDIS_REPLACED,
            "Redis checks that replaced another program's data at their key."
        );
        metrics::describe_counter!(
            CHECK_DECISIONS,
            "Decisions of each check of a named policy, by outcome."
        );
        metrics::describe_counter!(VERDICTS, "Verdicts of a named policy, by outcome.");
        metrics::describe_counter!(
            DRY_RUN_REFUSALS,
            "Requests a named policy served that its dry-run checks would have refused."
        );
    });
}

/// A decision counter per outcome; `overflow` only where one can happen (a limiter
/// with a `max_keys` cap; any check, whose limiter is not known), so a limiter adds no
/// series for an outcome it can never count.
struct Outcomes {
    /// Allowed, denied, exceeds capacity, overflow: in [`slot`]'s order.
    counters: [Counter; 4],
}

/// Where `decision`'s counter is in [`Outcomes::counters`].
#[inline]
fn slot(decision: &Decision) -> usize {
    match decision {
        Decision::Allowed { .. } => 0,
        Decision::Denied { .. } => 1,
        Decision::ExceedsCapacity { .. } => 2,
        Decision::Overflow { .. } => 3,
    }
}

impl Outcomes {
    /// The counters of `metric` with `labels` plus `outcome`; `overflow`'s only if
    /// one can happen.
    fn new(metric: &'static str, labels: &[(&'static str, String)], overflow: bool) -> Self {
        let counter = |outcome: &'static str| {
            let mut labels: Vec<(&'static str, String)> = labels.to_vec();
            labels.push(("outcome", outcome.to_owned()));
            counter!(metric, &labels)
        };
        Self {
            counters: [
                counter("allowed"),
                counter("denied"),
                counter("exceeds_capacity"),
                if overflow {
                    counter("overflow")
                } else {
                    Counter::noop()
                },
            ],
        }
    }

    #[inline]
    fn count(&self, decision: &Decision) {
        self.counters[slot(decision)].increment(1);
    }
}

/// A named limiter's handles.
pub(super) struct LimiterMetrics {
    outcomes: Outcomes,
    keys: Gauge,
    forgotten: Counter,
    sweeps: Counter,
    sweep_seconds: Histogram,
    #[cfg(feature = "redis")]
    redis: Option<RedisMetrics>,
}

/// A Redis limiter's own handles.
#[cfg(feature = "redis")]
struct RedisMetrics {
    fallback: Counter,
    timeouts: Counter,
    errors: Counter,
    circuit_open_errors: Counter,
    replaced: Counter,
    circuit_open: Gauge,
    trips: Counter,
}

impl LimiterMetrics {
    /// An in-process limiter's: decisions, keys and sweeps; `capped`: it has a
    /// `max_keys` cap, so it can overflow.
    pub(super) fn in_process(name: &str, capped: bool) -> Self {
        describe();
        let labels = [("limiter", name.to_owned())];
        Self {
            outcomes: Outcomes::new(DECISIONS, &labels, capped),
            keys: gauge!(KEYS, &labels),
            forgotten: counter!(FORGOTTEN, &labels),
            sweeps: counter!(SWEEPS, &labels),
            sweep_seconds: histogram!(SWEEP_SECONDS, &labels),
            #[cfg(feature = "redis")]
            redis: None,
        }
    }

    /// A Redis limiter's: decisions, fallbacks and failures.
    #[cfg(feature = "redis")]
    pub(super) fn redis(name: &str) -> Self {
        describe();
        let labels = [("limiter", name.to_owned())];
        let failures = |error: &'static str| counter!(REDIS_FAILURES, "limiter" => name.to_owned(), "error" => error);
        Self {
            outcomes: Outcomes::new(DECISIONS, &labels, false),
            keys: Gauge::noop(),
            forgotten: Counter::noop(),
            sweeps: Counter::noop(),
            sweep_seconds: Histogram::noop(),
            redis: Some(RedisMetrics {
                fallback: counter!(DECISIONS, "limiter" => name.to_owned(), "outcome" => "fallback"),
                timeouts: failures("timeout"),
                errors: failures("error"),
                circuit_open_errors: failures("circuit_open"),
                replaced: counter!(REDIS_REPLACED, "limiter" => name.to_owned()),
                circuit_open: gauge!(CIRCUIT_OPEN, "limiter" => name.to_owned()),
                trips: counter!(CIRCUIT_TRIPS, "limiter" => name.to_owned()),
            }),
        }
    }

    #[inline]
    pub(super) fn decided(&self, decision: &Decision) {
        self.outcomes.count(decision);
    }

    pub(super) fn swept(&self, forgotten: usize, keys: usize, took: Duration) {
        self.sweeps.increment(1);
        self.forgotten.increment(forgotten as u64);
        self.sweep_seconds.record(took.as_secs_f64());
        self.keys(keys);
    }

    pub(super) fn keys(&self, keys: usize) {
        // A gauge holds an f64: exact up to 2^53 keys.
        self.keys.set(keys as f64);
    }

    #[cfg(feature = "redis")]
    pub(super) fn circuit(&self, open: bool) {
        if let Some(redis) = &self.redis {
            redis.circuit_open.set(if open { 1.0 } else { 0.0 });
            if open {
                redis.trips.increment(1);
            }
        }
    }

    #[cfg(feature = "redis")]
    pub(super) fn replaced(&self) {
        if let Some(redis) = &self.redis {
            redis.replaced.increment(1);
        }
    }

    #[cfg(feature = "redis")]
    pub(super) fn failed(&self, failure: super::Failure, fell_back: bool) {
        let Some(redis) = &self.redis else { return };
        match failure {
            super::Failure::Timeout => &redis.timeouts,
            super::Failure::CircuitOpen => &redis.circuit_open_errors,
            super::Failure::Error => &redis.errors,
        }
        .increment(1);
        if fell_back {
            redis.fallback.increment(1);
        }
    }
}

/// One check's handles.
pub(super) struct CheckMetrics {
    outcomes: Outcomes,
    missing_key: Counter,
    skipped: Counter,
    fallback_allowed: Counter,
    fallback_denied: Counter,
}

impl CheckMetrics {
    pub(super) fn new(policy: &str, check: &str, dry_run: bool) -> Self {
        describe();
        let labels = [
            ("policy", policy.to_owned()),
            ("check", check.to_owned()),
            ("dry_run", dry_run.to_string()),
        ];
        let counter = |outcome: &'static str| {
            let mut labels = labels.to_vec();
            labels.push(("outcome", outcome.to_owned()));
            counter!(CHECK_DECISIONS, &labels)
        };
        Self {
            outcomes: Outcomes::new(CHECK_DECISIONS, &labels, true),
            missing_key: counter("missing_key"),
            skipped: counter("skipped"),
            fallback_allowed: counter("fallback_allowed"),
            fallback_denied: counter("fallback_denied"),
        }
    }

    #[inline]
    pub(super) fn decided(&self, decision: &Decision) {
        self.outcomes.count(decision);
    }

    pub(super) fn fell_back(&self, allowed: bool) {
        if allowed {
            self.fallback_allowed.increment(1);
        } else {
            self.fallback_denied.increment(1);
        }
    }

    pub(super) fn keyless(&self, refused: bool) {
        if refused {
            self.missing_key.increment(1);
        } else {
            self.skipped.increment(1);
        }
    }
}

/// A policy's verdict handles.
pub(super) struct PolicyMetrics {
    allowed: Counter,
    denied: Counter,
    overflow: Counter,
    exceeds_capacity: Counter,
    missing_key: Counter,
    unavailable: Counter,
    dry_run_refusals: Counter,
}

impl PolicyMetrics {
    pub(super) fn new(policy: &str) -> Self {
        describe();
        let counter = |outcome: &'static str| counter!(VERDICTS, "policy" => policy.to_owned(), "outcome" => outcome);
        Self {
            allowed: counter("allowed"),
            denied: counter("denied"),
            overflow: counter("overflow"),
            exceeds_capacity: counter("exceeds_capacity"),
            missing_key: counter("missing_key"),
            unavailable: counter("unavailable"),
            dry_run_refusals: counter!(DRY_RUN_REFUSALS, "policy" => policy.to_owned()),
        }
    }

    pub(super) fn verdict(&self, kind: VerdictKind, refused_in_dry_run: bool) {
        match kind {
            VerdictKind::Allowed => &self.allowed,
            VerdictKind::Denied => &self.denied,
            VerdictKind::Overflow => &self.overflow,
            VerdictKind::ExceedsCapacity => &self.exceeds_capacity,
            VerdictKind::MissingKey => &self.missing_key,
            VerdictKind::Unavailable => &self.unavailable,
        }
        .increment(1);
        if refused_in_dry_run {
            self.dry_run_refusals.increment(1);
        }
    }
}
