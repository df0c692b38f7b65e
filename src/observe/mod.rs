//! What limiters and policies report to dashboards and logs: metrics through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`) and events through
//! [`tracing`](https://docs.rs/tracing) (feature `tracing`).
//!
//! Only what is **named** reports: a limiter given a name by its builder's `name`, a
//! Redis limiter by its builder's `name`, a policy by
//! [`PolicyBuilder::name`](crate::policy::PolicyBuilder::name) (its checks report
//! under the policy's name and their own). An unnamed one costs one branch per check
//! with either feature on, and nothing with both off.
//!
//! # Metrics
//! Registered once — a limiter's and a policy's when built, a policy check's at its
//! first decision (by then its mode, dry run or not, is final): **install the
//! recorder (say, `metrics-exporter-prometheus`) before building**, or the handles
//! stay no-ops — the `metrics` crate's rule for handles, which keeps a check from
//! looking anything up. Metric descriptions go to the recorder installed when the
//! first thing is named. Names and labels, Prometheus style:
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `turnstile_decisions_total` | counter | `limiter`, `outcome` | decisions: `allowed`, `denied`, `exceeds_capacity`, `overflow` (the `max_keys` cap; only for a limiter that has one), `fallback` (Redis limiters: Redis gave none, the failure policy answered) |
//! | `turnstile_keys` | gauge | `limiter` | keys held, as of the latest insertion or sweep |
//! | `turnstile_keys_forgotten_total` | counter | `limiter` | keys forgotten by sweeps |
//! | `turnstile_sweeps_total` | counter | `limiter` | sweeps of the key map |
//! | `turnstile_sweep_duration_seconds` | histogram | `limiter` | how long each sweep took |
//! | `turnstile_redis_failures_total` | counter | `limiter`, `error` | checks and peeks Redis gave no answer to: `timeout`, `error` |
//! | `turnstile_redis_circuit_open` | gauge | `limiter` | 1 while the circuit breaker is open, else 0 |
//! | `turnstile_redis_circuit_trips_total` | counter | `limiter` | times the circuit breaker opened |
//! | `turnstile_redis_replaced_total` | counter | `limiter` | checks that found another program's data at their key and replaced it |
//! | `turnstile_check_decisions_total` | counter | `policy`, `check`, `outcome`, `dry_run` | each check's decisions: `allowed`, `denied`, `exceeds_capacity`, `overflow`, `missing_key`, `skipped`, and for a shared check answered by its failure policy `fallback_allowed`, `fallback_denied`; `dry_run` is `true` for a check in [dry run](crate::policy#dry-run) |
//! | `turnstile_policy_verdicts_total` | counter | `policy`, `outcome` | what the policy decided (its enforced checks): `allowed`, `denied`, `overflow`, `exceeds_capacity`, `missing_key`, `unavailable` (a shared check's failure policy denied) |
//! | `turnstile_policy_dry_run_refusals_total` | counter | `policy` | requests that went ahead but that the dry-run checks would have refused |
//!
//! What is counted is what was decided, attempt by attempt:
//! - a policy check that allowed and then gave its take back (a later check refused
//!   the request) counts as `allowed`, as does its limiter; the policy's verdict
//!   counts the refusal;
//! - a limiter counts its own decisions whoever asks: a named limiter behind a
//!   dry-run check counts (and logs) its denials like any other, though the request
//!   was served — name the policy, whose check counters carry `dry_run`, and leave a
//!   limiter on trial unnamed (or name it for the trial);
//! - waiting (`Policy::until_ready`, the HTTP layer's delay mode) asks again after
//!   each wait, and each attempt is counted: a request served after one wait counts
//!   one denial and one allowed verdict.
//!
//! Keys never appear in labels: they are unbounded in number and often personal data.
//!
//! # Events
//! At `debug`, target `turnstile`: every refusal by a named limiter or a named
//! policy's check (`denied`, `exceeds_capacity`, `overflow`, `missing_key`), with the
//! limiter's or check's name, the wait, and the key's hash; a dry-run check's refusal
//! says `dry_run = true`. At `warn`: every Redis fallback, with the error (at `debug`
//! when the open circuit breaker answered it: the breaker's opening is the warning),
//! every check that replaced another program's data at its key, and every opening
//! of a circuit breaker; at `info`, its closing. Events are
//! built only when a subscriber wants them.
//!
//! **Keys are logged as hashes, never as themselves**: [`key_hash`], SipHash under a
//! key drawn at random when the process first needs it, so a hash cannot be reversed
//! by trying keys (an IPv4 address has only 2^32) without that process's secret. To
//! find one client's events, compute its hash in the same process (an admin endpoint
//! calling [`key_hash`]). Hash the key as the limiter sees it: in-process limiters
//! hash the key type (`key_hash("alice")` for a `String` key), Redis limiters the
//! key's bytes (`key_hash(b"alice".as_slice())`), which hash differently. Hashes of one key agree within a process, not across
//! processes or restarts.
//!
//! # Cost
//! With a feature on and nothing named, a check pays one branch; named with no
//! recorder, a no-op counter call; named and recorded by the Prometheus exporter, one
//! atomic add on a counter that every thread deciding for the limiter shares, which
//! under contention on many cores costs what a hot key's cache line does. What each
//! costs in instructions and requests per second: `results/ANALYSIS.md` ("Metrics")
//! and `results/http.md` ("Metrics").

#[cfg(feature = "tracing")]
mod events;
#[cfg(feature = "metrics")]
mod metrics;

use crate::Decision;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, OnceLock};

/// The hash under which `key` appears in this process's events: SipHash-1-3 under a
/// secret key drawn at random once per process (see the [module docs](self)). Keys
/// equal under `Borrow` (a `String` and its `&str`) hash alike.
pub fn key_hash<Q: Hash + ?Sized>(key: &Q) -> u64 {
    static SECRET: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    SECRET.get_or_init(Default::default).hash_one(key)
}

/// Why a Redis check got no answer, as the reports tell it apart.
#[cfg(feature = "redis")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No reply within the timeout.
    Timeout,
    /// An error: the connection, the server, the reply.
    Error,
    /// The open circuit breaker answered without asking Redis.
    CircuitOpen,
}

/// A policy's verdict, as its reports count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VerdictKind {
    Allowed,
    Denied,
    Overflow,
    ExceedsCapacity,
    MissingKey,
    Unavailable,
}

/// What a named limiter reports, made when it is built.
pub(crate) struct LimiterObserver {
    #[cfg(feature = "tracing")]
    name: Arc<str>,
    #[cfg(feature = "metrics")]
    metrics: metrics::LimiterMetrics,
}

impl LimiterObserver {
    /// The reports of an in-process limiter named `name`; `capped`: it has a
    /// `max_keys` cap.
    pub(crate) fn in_process(name: Arc<str>, capped: bool) -> Self {
        let _ = capped;
        Self {
            #[cfg(feature = "metrics")]
            metrics: metrics::LimiterMetrics::in_process(&name, capped),
            #[cfg(feature = "tracing")]
            name,
        }
    }

    /// The reports of a Redis limiter named `name`.
    #[cfg(feature = "redis")]
    pub(crate) fn redis(name: Arc<str>) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            metrics: metrics::LimiterMetrics::redis(&name),
            #[cfg(feature = "tracing")]
            name,
        }
    }

    /// A decision for `key`.
    #[inline]
    pub(crate) fn decided<Q: Hash + ?Sized>(&self, key: &Q, decision: &Decision) {
        #[cfg(feature = "metrics")]
        self.metrics.decided(decision);
        #[cfg(feature = "tracing")]
        if !decision.is_allowed() {
            events::refused(&self.name, None, key, decision, false);
        }
        let _ = key;
    }

    /// A sweep that forgot `forgotten` keys in `took`, leaving `keys`.
    pub(crate) fn swept(&self, forgotten: usize, keys: usize, took: std::time::Duration) {
        #[cfg(feature = "metrics")]
        self.metrics.swept(forgotten, keys, took);
        let _ = (forgotten, keys, took);
    }

    /// The number of keys held, sampled.
    pub(crate) fn keys(&self, keys: usize) {
        #[cfg(feature = "metrics")]
        self.metrics.keys(keys);
        let _ = keys;
    }

    /// A Redis limiter's circuit breaker opened (`true`) or closed.
    #[cfg(feature = "redis")]
    pub(crate) fn circuit(&self, open: bool) {
        #[cfg(feature = "metrics")]
        self.metrics.circuit(open);
        #[cfg(feature = "tracing")]
        events::circuit(&self.name, open);
        let _ = open;
    }

    /// A Redis check for `key` that found foreign data there and replaced it.
    #[cfg(feature = "redis")]
    pub(crate) fn replaced(&self, key: &[u8]) {
        #[cfg(feature = "metrics")]
        self.metrics.replaced();
        #[cfg(feature = "tracing")]
        events::replaced(&self.name, key);
        let _ = key;
    }

    /// A Redis check or peek for `key` that got no answer (`failure`, described by
    /// `error`); `fallback` is the failure policy's answer for a check, `None` for a
    /// peek.
    #[cfg(feature = "redis")]
    pub(crate) fn failed(
        &self,
        key: &[u8],
        failure: Failure,
        error: &dyn std::fmt::Display,
        fallback: Option<bool>,
    ) {
        #[cfg(feature = "metrics")]
        self.metrics.failed(failure, fallback.is_some());
        #[cfg(feature = "tracing")]
        events::fallback(&self.name, key, failure, error, fallback);
        let _ = (key, failure, error, fallback);
    }
}

impl std::fmt::Debug for LimiterObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LimiterObserver")
    }
}

/// What one check of a named policy reports.
pub(crate) struct CheckObserver {
    #[cfg(feature = "tracing")]
    policy: Arc<str>,
    #[cfg(feature = "tracing")]
    check: Arc<str>,
    #[cfg(feature = "tracing")]
    dry_run: bool,
    #[cfg(feature = "metrics")]
    metrics: metrics::CheckMetrics,
}

impl CheckObserver {
    /// The reports of check `check` of policy `policy`.
    pub(crate) fn new(policy: Arc<str>, check: &str, dry_run: bool) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            metrics: metrics::CheckMetrics::new(&policy, check, dry_run),
            #[cfg(feature = "tracing")]
            policy,
            #[cfg(feature = "tracing")]
            check: check.into(),
            #[cfg(feature = "tracing")]
            dry_run,
        }
    }

    /// The check's decision for `key`.
    #[inline]
    pub(crate) fn decided<Q: Hash + ?Sized>(&self, key: &Q, decision: &Decision) {
        #[cfg(feature = "metrics")]
        self.metrics.decided(decision);
        #[cfg(feature = "tracing")]
        if !decision.is_allowed() {
            events::refused(&self.check, Some(&self.policy), key, decision, self.dry_run);
        }
        let _ = key;
    }

    /// The check's shared limiter gave no decision; its failure policy answered
    /// `allowed` or not.
    pub(crate) fn fell_back(&self, allowed: bool) {
        #[cfg(feature = "metrics")]
        self.metrics.fell_back(allowed);
        #[cfg(feature = "tracing")]
        events::check_fell_back(&self.check, &self.policy, allowed, self.dry_run);
        let _ = allowed;
    }

    /// The request had no usable key; `refused` under `MissingKey::Reject`, else the
    /// check was skipped.
    pub(crate) fn keyless(&self, refused: bool) {
        #[cfg(feature = "metrics")]
        self.metrics.keyless(refused);
        #[cfg(feature = "tracing")]
        if refused {
            events::keyless(&self.check, &self.policy, self.dry_run);
        }
        let _ = refused;
    }
}

/// What a named policy reports about its verdicts.
pub(crate) struct PolicyObserver {
    #[cfg(feature = "metrics")]
    metrics: metrics::PolicyMetrics,
    /// For the checks the HTTP layer puts in dry run after the policy is built.
    #[cfg(feature = "tower")]
    name: Arc<str>,
}

impl PolicyObserver {
    /// The reports of policy `name`.
    pub(crate) fn new(name: Arc<str>) -> Self {
        let _ = &name; // kept only with `tower`, read only with `metrics`
        Self {
            #[cfg(feature = "metrics")]
            metrics: metrics::PolicyMetrics::new(&name),
            #[cfg(feature = "tower")]
            name,
        }
    }

    /// The policy's verdict for one request: what the enforced checks decided, and
    /// whether a request they let through would have been refused by its dry-run
    /// checks.
    pub(crate) fn verdict(&self, kind: VerdictKind, refused_in_dry_run: bool) {
        #[cfg(feature = "metrics")]
        self.metrics.verdict(kind, refused_in_dry_run);
        let _ = (kind, refused_in_dry_run);
    }

    /// The policy's name.
    #[cfg(feature = "tower")]
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }
}
