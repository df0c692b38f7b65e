//! What both Redis limiters do around their script: build the key, send one `EVALSHA`
//! with the time and the algorithm's parameters, wait at most the timeout, read the
//! reply, and let the failure policy answer when there is none.

use super::breaker::{Admission, Breaker, CircuitState, Transition};
use super::config::{Settings, TimeSource};
use super::failure::{CheckError, FailureCounters, FailureCounts, FailurePolicy};
use crate::{Decision, Settlement, SharedDecision};
use ::redis::aio::ConnectionLike;
use ::redis::{Script, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The cost argument that asks a script how much is left, writing nothing.
const PEEK: i64 = -1;

/// What every limiter script does first: read the arguments and the key's state.
const PREAMBLE: &str = include_str!("preamble.lua");

/// A limiter's script: the preamble, told the names of the two hash fields of the
/// algorithm's state (a Lua table, `{'t', 'r'}`), then the algorithm's `body`.
pub(crate) fn script(fields: &str, body: &str) -> Script {
    Script::new(&format!("local FIELDS = {fields}\n{PREAMBLE}{body}"))
}

/// What a script is asked beyond a check (its ARGV[6]).
#[derive(Clone, Copy, Debug)]
enum Extra {
    /// A plain check or peek.
    Nothing,
    /// A lease: take up to this many.
    UpTo(u32),
    /// Give the cost back.
    Refund,
    /// Settle a reservation of the cost (its estimate) at `actual`, owing at most
    /// `debt_cap` beyond the capacity.
    Settle { actual: u32, debt_cap: u64 },
}

/// A check's reply: Redis's decision, and whether the script found something other
/// than the limiter's own state at the key and replaced it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Checked {
    pub(crate) decision: Decision,
    pub(crate) replaced: bool,
}

/// A lease's reply: the check of its cost, and the tokens that left the bucket (the
/// cost and whatever more the bucket gave, when allowed; none otherwise).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Leased {
    pub(crate) checked: Checked,
    pub(crate) taken: u32,
}

/// A settle's reply: what it did, and whether the script found something other than
/// the limiter's own state at the key and replaced it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settled {
    pub(crate) settlement: Settlement,
    pub(crate) replaced: bool,
}

/// One algorithm's script and how to read its replies. `pub` only to be named by the
/// sealed side of [`LimiterScript`](super::LimiterScript), in this private module:
/// out of reach outside the crate.
#[derive(Debug)]
pub struct ScriptedAlgorithm {
    /// The script; its SHA-1 is computed once, when the static is first used.
    pub(crate) script: &'static Script,
    /// The script's ARGV[1] and ARGV[2]: capacity and interval, or limit and window
    /// (microseconds).
    pub(crate) params: [u64; 2],
    /// Whether a settle below the estimate can give anything back: the token
    /// bucket's does, the fixed window's never does (it cannot tell which window
    /// counted the estimate), so a reply saying it did is not the script's.
    pub(crate) refunds_on_settle: bool,
    /// Reads an acquire reply for a cost, less its last element (the `replaced` flag
    /// every script appends); `None` when it is not one the script gives.
    pub(crate) decide: fn(params: [u64; 2], reply: &[i64], cost: u32) -> Option<Decision>,
}

impl ScriptedAlgorithm {
    /// The decision an acquire reply for `cost` gives, or `None` when the reply is not
    /// one the script gives or decides what no script can: a request allowed with
    /// more left than the capacity less its cost, denied with enough (for a cost of
    /// 0, with anything left), or told it
    /// exceeds a capacity it fits (a proxy's reply, a foreign script's). Passed on,
    /// such a reply would tell the caller of tokens that do not exist.
    pub(super) fn decision(&self, reply: &[i64], cost: u32) -> Option<Decision> {
        let decision = (self.decide)(self.params, reply, cost)?;
        let capacity = self.params[0];
        let cost = u64::from(cost);
        let possible = match decision {
            Decision::Allowed { remaining } => {
                cost <= capacity && u64::from(remaining) <= capacity - cost
            }
            // A cost of 0 is denied only to a key in debt, which has nothing left.
            Decision::Denied { remaining, .. } => {
                cost <= capacity && u64::from(remaining) < cost.max(1)
            }
            Decision::ExceedsCapacity { .. } => cost > capacity,
            Decision::Overflow { .. } => false,
        };
        possible.then_some(decision)
    }
}

/// Everything a limiter shares between its clones.
#[derive(Debug)]
struct Core {
    algorithm: ScriptedAlgorithm,
    prefix: Vec<u8>,
    timeout: Duration,
    policy: FailurePolicy,
    time: TimeSource,
    expire_idle_keys: bool,
    counters: FailureCounters,
    breaker: Breaker,
    /// Metrics and events, for a named limiter.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    observer: Option<crate::observe::LimiterObserver>,
}

/// A Redis limiter: its core and a connection. Cloning shares both (the connection
/// types of the `redis` crate multiplex one socket between clones).
#[derive(Debug)]
pub(crate) struct ScriptLimiter<C> {
    core: Arc<Core>,
    conn: C,
}

impl<C: Clone> Clone for ScriptLimiter<C> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
            conn: self.conn.clone(),
        }
    }
}

impl<C> ScriptLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(algorithm: ScriptedAlgorithm, settings: Settings, conn: C) -> Self {
        let Settings {
            prefix,
            timeout,
            policy,
            time,
            expire_idle_keys,
            breaker,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            name,
        } = settings;
        // The breaker's clock: the client clock if the limiter has one, else its own.
        let breaker_clock: Arc<dyn crate::Clock> = match &time {
            TimeSource::Client { clock, .. } => Arc::clone(clock),
            TimeSource::Server => Arc::new(crate::StdClock::new()),
        };
        let core = Core {
            algorithm,
            prefix,
            timeout,
            policy,
            time,
            expire_idle_keys,
            counters: FailureCounters::default(),
            breaker: Breaker::new(breaker, breaker_clock, timeout),
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer: name.map(crate::observe::LimiterObserver::redis),
        };
        Self {
            core: Arc::new(core),
            conn,
        }
    }

    /// The check of `cost` for `key`, as a future that owns what it needs, so it can
    /// be spawned. Failures are not yet counted: see [`ScriptLimiter::settle`].
    pub(crate) fn check(
        &self,
        key: &[u8],
        cost: u32,
    ) -> impl Future<Output = Result<Checked, CheckError>> + Send + use<C> {
        let run = self.run(key, i64::from(cost), Extra::Nothing);
        let core = Arc::clone(&self.core);
        async move {
            read_reply(&run.await?, |numbers| {
                let (replaced, reply) = replaced_flag(numbers)?;
                let decision = core.algorithm.decision(reply, cost)?;
                Some(Checked { decision, replaced })
            })
        }
    }

    /// What `key` has left, as a future that owns what it needs. Failures are not
    /// yet counted: see [`ScriptLimiter::count_error`].
    pub(crate) fn available(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<u32, CheckError>> + Send + use<C> {
        let run = self.run(key, PEEK, Extra::Nothing);
        let capacity = self.core.algorithm.params[0];
        async move { count_reply(run.await?, capacity, "a peek reply out of range") }
    }

    /// Gives back `cost` to `key`, capped at the capacity (a refused request's take),
    /// in one script call; what the key has left after it. Failures are not yet
    /// counted: see [`ScriptLimiter::count_error`].
    pub(crate) fn give_back(
        &self,
        key: &[u8],
        cost: u32,
    ) -> impl Future<Output = Result<u32, CheckError>> + Send + use<C> {
        let run = self.run(key, i64::from(cost), Extra::Refund);
        let capacity = self.core.algorithm.params[0];
        async move { count_reply(run.await?, capacity, "a refund reply out of range") }
    }

    /// Settles a reservation of `estimate` for `key` at `actual`, in one script call
    /// (none when the two are equal: nothing to settle): the difference given back
    /// (capped at the capacity), or charged even beyond what the key holds, up to a
    /// debt of one capacity. Failures are not yet counted: see
    /// [`ScriptLimiter::count_settled`].
    pub(crate) fn settle_reservation(
        &self,
        key: &[u8],
        estimate: u32,
        actual: u32,
    ) -> impl Future<Output = Result<Settled, CheckError>> + Send + use<C> {
        // The debt cap: one capacity, as in process. What a key owes is then repaid
        // within one full refill (a window), and a bucket's stored refill point stays
        // within capacity × interval of now, which construction has checked fits
        // the scripts' 2^52 µs.
        let debt_cap = self.core.algorithm.params[0];
        let refunds = self.core.algorithm.refunds_on_settle;
        let run = (estimate != actual)
            .then(|| self.run(key, i64::from(estimate), Extra::Settle { actual, debt_cap }));
        async move {
            let Some(run) = run else {
                return Ok(Settled {
                    settlement: Settlement::default(),
                    replaced: false,
                });
            };
            read_reply(&run.await?, |numbers| {
                let (replaced, reply) = replaced_flag(numbers)?;
                let settlement = settlement_reply(reply, estimate, actual, refunds)?;
                Some(Settled {
                    settlement,
                    replaced,
                })
            })
        }
    }

    /// Counts (and, for a named limiter, reports) a settle's result for `key`: a
    /// failure as a refund's or a peek's, never as a check's (there is nothing to
    /// allow or deny); a replaced key as a check's.
    pub(crate) fn count_settled(
        &self,
        key: &[u8],
        result: Result<Settled, CheckError>,
    ) -> Result<Settlement, CheckError> {
        match result {
            Ok(settled) => {
                if settled.replaced {
                    self.core.counters.count_replaced();
                    #[cfg(any(feature = "metrics", feature = "tracing"))]
                    if let Some(observer) = &self.core.observer {
                        observer.replaced(key);
                    }
                }
                Ok(settled.settlement)
            }
            Err(error) => {
                self.count_error(key, &error);
                Err(error)
            }
        }
    }

    /// Whether the failure policy allows.
    pub(crate) fn fails_open(&self) -> bool {
        self.core.policy == FailurePolicy::Open
    }

    /// A lease of `key`'s bucket: the check of `cost`, exactly as [`check`](Self::check),
    /// that, when allowed, takes up to `up_to` tokens in all (see `token_bucket.lua`).
    /// Failures are not yet counted.
    pub(crate) fn lease(
        &self,
        key: &[u8],
        cost: u32,
        up_to: u32,
    ) -> impl Future<Output = Result<Leased, CheckError>> + Send + use<C> {
        let run = self.run(key, i64::from(cost), Extra::UpTo(up_to));
        let core = Arc::clone(&self.core);
        async move {
            read_reply(&run.await?, |numbers| {
                let (replaced, reply) = replaced_flag(numbers)?;
                let (&taken, reply) = reply.split_last()?;
                let decision = core.algorithm.decision(reply, cost)?;
                let taken = u32::try_from(taken).ok()?;
                // The script takes the cost when it allows, and nothing otherwise.
                let consistent = match decision {
                    Decision::Allowed { .. } => taken >= cost && taken <= up_to.max(cost),
                    _ => taken == 0,
                };
                consistent.then_some(Leased {
                    checked: Checked { decision, replaced },
                    taken,
                })
            })
        }
    }

    /// Counts (and, for a named limiter, reports) `result` like a check's, without
    /// turning it into an outcome: for a lease fetched ahead of need, which answers no
    /// request, so the failure policy has nothing to allow or deny.
    pub(crate) fn count_background(&self, key: &[u8], result: &Result<Leased, CheckError>) {
        match result {
            Ok(leased) if leased.checked.replaced => self.core.counters.count_replaced(),
            Ok(_) => {}
            Err(error) => self.count_error(key, error),
        }
    }

    /// One `EVALSHA` of the algorithm's script for `key`, within the timeout, with
    /// `extra` as ARGV[6]. The script is loaded and retried when Redis does
    /// not know it (`NOSCRIPT`: a restarted server, a `SCRIPT FLUSH`, a new cluster
    /// node).
    fn run(
        &self,
        key: &[u8],
        cost: i64,
        extra: Extra,
    ) -> impl Future<Output = Result<Value, CheckError>> + Send + use<C> {
        let core = &self.core;
        let mut full_key = Vec::with_capacity(core.prefix.len() + key.len());
        full_key.extend_from_slice(&core.prefix);
        full_key.extend_from_slice(key);
        let mut invocation = core.algorithm.script.key(full_key);
        let [first, second] = core.algorithm.params;
        invocation.arg(first).arg(second).arg(cost);
        match core.time.now_micros() {
            Some(now) => invocation.arg(now),
            None => invocation.arg(""),
        };
        invocation.arg(if core.expire_idle_keys { "1" } else { "0" });
        match extra {
            Extra::Nothing => {}
            Extra::UpTo(up_to) => {
                invocation.arg(up_to);
            }
            Extra::Refund => {
                invocation.arg("refund");
            }
            Extra::Settle { actual, debt_cap } => {
                invocation.arg("settle").arg(actual).arg(debt_cap);
            }
        }
        let timeout = core.timeout;
        let mut conn = self.conn.clone();
        let core = Arc::clone(core);
        async move {
            let admission = core.breaker.admit(core.breaker.now());
            if let Admission::Refuse(retry_in) = admission {
                return Err(CheckError::CircuitOpen { retry_in });
            }
            // Settles the breaker however this future ends: by its result below, or,
            // dropped before one, by giving up a probe so another check can probe.
            let mut pending = Pending {
                core: &core,
                admission: Some(admission),
            };
            let result =
                match tokio::time::timeout(timeout, invocation.invoke_async::<Value>(&mut conn))
                    .await
                {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(error)) => Err(CheckError::Redis(error)),
                    Err(_elapsed) => Err(CheckError::Timeout(timeout)),
                };
            pending.tell_breaker(&result);
            result
        }
    }

    /// Where the limiter's circuit breaker stands.
    pub(crate) fn circuit(&self) -> CircuitState {
        self.core.breaker.circuit(self.core.breaker.now())
    }

    /// The outcome of a check's result for `key`: the failure policy answers a
    /// failure, which is counted (and, for a named limiter, reported).
    pub(crate) fn settle(
        &self,
        key: &[u8],
        result: Result<Checked, CheckError>,
    ) -> SharedDecision<CheckError> {
        let replaced = matches!(result, Ok(Checked { replaced: true, .. }));
        if replaced {
            self.core.counters.count_replaced();
        }
        let outcome = self
            .core
            .counters
            .apply_policy(self.core.policy, result.map(|checked| checked.decision));
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.core.observer {
            if replaced {
                observer.replaced(key);
            }
            match &outcome {
                SharedDecision::Decided(decision) => observer.decided(key, decision),
                SharedDecision::Fallback { allowed, error } => {
                    observer.failed(key, failure(error), error, Some(*allowed));
                }
            }
        }
        let _ = key;
        outcome
    }

    /// Counts (and, for a named limiter, reports) a failed peek of `key`.
    pub(crate) fn count_error(&self, key: &[u8], error: &CheckError) {
        self.core.counters.count_error(error);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.core.observer {
            observer.failed(key, failure(error), error, None);
        }
        let _ = key;
    }

    /// How often Redis gave no decision.
    pub(crate) fn failures(&self) -> FailureCounts {
        self.core.counters.snapshot()
    }

    /// The timeout of one check.
    pub(crate) fn timeout(&self) -> Duration {
        self.core.timeout
    }
}

/// How the reports tell `error` apart.
#[cfg(any(feature = "metrics", feature = "tracing"))]
fn failure(error: &CheckError) -> crate::observe::Failure {
    match error {
        CheckError::Timeout(_) => crate::observe::Failure::Timeout,
        CheckError::CircuitOpen { .. } => crate::observe::Failure::CircuitOpen,
        _ => crate::observe::Failure::Error,
    }
}

/// A check the breaker let through, until it has a result: dropped without one (the
/// caller stopped waiting), it gives up its probe.
struct Pending<'a> {
    core: &'a Core,
    admission: Option<Admission>,
}

impl Pending<'_> {
    /// Tells the breaker whether Redis answered, and counts and reports what that
    /// changed.
    fn tell_breaker<T>(&mut self, result: &Result<T, CheckError>) {
        let Some(admission) = self.admission.take() else {
            return;
        };
        let answered = match result {
            Ok(_) => true,
            Err(error) => !error.is_unavailability(),
        };
        let transition = self
            .core
            .breaker
            .record(&admission, answered, self.core.breaker.now());
        if transition == Transition::Opened {
            self.core.counters.count_trip();
        }
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.core.observer {
            match transition {
                Transition::Opened => observer.circuit(true),
                Transition::Closed => observer.circuit(false),
                Transition::None => {}
            }
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(admission) = self.admission.take() {
            self.core.breaker.abandon(&admission);
        }
    }
}

/// The reply as a list of integers, if it is one.
/// `read` applied to a script's reply of integers, or why the reply was not one.
fn read_reply<T>(reply: &Value, read: impl FnOnce(&[i64]) -> Option<T>) -> Result<T, CheckError> {
    integers(reply)
        .as_deref()
        .and_then(read)
        .ok_or_else(|| CheckError::UnexpectedReply(format!("{reply:?}")))
}

/// A check's reply ends with whether the script replaced foreign data (0 or 1): that
/// flag, and the numbers before it.
fn replaced_flag(numbers: &[i64]) -> Option<(bool, &[i64])> {
    let (&replaced, rest) = numbers.split_last()?;
    match replaced {
        0 => Some((false, rest)),
        1 => Some((true, rest)),
        _ => None,
    }
}

/// A reply that is one count (a peek's, a refund's) between 0 and the capacity, or the
/// error saying it is not: a key can never hold more than its capacity, so a larger
/// count is a reply the scripts cannot give (a proxy's, a foreign script's), and
/// passing it on would tell the caller of tokens that do not exist.
fn count_reply(reply: Value, capacity: u64, what: &str) -> Result<u32, CheckError> {
    match reply {
        Value::Int(n) => u64::try_from(n)
            .ok()
            .filter(|&n| n <= capacity)
            .and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }
    .ok_or_else(|| CheckError::UnexpectedReply(what.into()))
}

/// A settle's reply `{refunded, charged, forgiven}` (after its `replaced` flag is
/// taken off), or `None` when the script never gives it for a reservation of
/// `estimate` settled at `actual`: more given back than the difference (anything,
/// for a script that `refunds` nothing on settle), a charge beside a refund, or a
/// charge and a forgiven part that do not add up to the difference. Passed on, such
/// a reply would report tokens that did not move.
fn settlement_reply(
    reply: &[i64],
    estimate: u32,
    actual: u32,
    refunds: bool,
) -> Option<Settlement> {
    let &[refunded, charged, forgiven] = reply else {
        return None;
    };
    let [refunded, charged, forgiven] =
        [refunded, charged, forgiven].map(|n| u32::try_from(n).ok());
    let (refunded, charged, forgiven) = (refunded?, charged?, forgiven?);
    let possible = if actual < estimate {
        refunded <= estimate - actual && (refunds || refunded == 0) && charged == 0 && forgiven == 0
    } else {
        refunded == 0 && u64::from(charged) + u64::from(forgiven) == u64::from(actual - estimate)
    };
    possible.then_some(Settlement {
        refunded,
        charged,
        forgiven,
    })
}

fn integers(reply: &Value) -> Option<Vec<i64>> {
    match reply {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_replies_that_do_not_add_up_are_unexpected() {
        let read =
            |reply: &[i64], estimate, actual| settlement_reply(reply, estimate, actual, true);
        let settled = |refunded, charged, forgiven| {
            Some(Settlement {
                refunded,
                charged,
                forgiven,
            })
        };
        assert_eq!(read(&[3, 0, 0], 5, 2), settled(3, 0, 0));
        // Capped at the capacity: less given back than the difference.
        assert_eq!(read(&[1, 0, 0], 5, 2), settled(1, 0, 0));
        assert_eq!(read(&[0, 4, 0], 2, 6), settled(0, 4, 0));
        assert_eq!(read(&[0, 1, 3], 2, 6), settled(0, 1, 3));
        for (wrong, estimate, actual) in [
            (&[4, 0, 0][..], 5, 2),
            (&[3, 1, 0], 5, 2),
            (&[0, 0, 1], 5, 2),
            (&[0, 3, 0], 2, 6),
            (&[1, 4, 0], 2, 6),
            (&[0, 5, 0], 2, 6),
            (&[0, -1, 5], 2, 6),
            (&[0, 4], 2, 6),
            (&[0, 4, 0, 0], 2, 6),
        ] {
            assert_eq!(read(wrong, estimate, actual), None, "{wrong:?}");
        }
        // The fixed window gives nothing back on settle: a refund is not its reply.
        assert_eq!(
            settlement_reply(&[0, 0, 0], 5, 2, false),
            Some(Settlement::default())
        );
        assert_eq!(settlement_reply(&[1, 0, 0], 5, 2, false), None);
        assert_eq!(settlement_reply(&[0, 1, 3], 2, 6, false), settled(0, 1, 3));
    }

    /// Found by the `redis_reply` fuzz target: a server (or a proxy) answering a peek
    /// of a capacity-8 limiter with 56 had the limiter report 56 tokens.
    #[test]
    fn a_count_above_the_capacity_is_an_unexpected_reply() {
        let count = |n| count_reply(Value::Int(n), 8, "out of range");
        assert_eq!(count(0).unwrap(), 0);
        assert_eq!(count(8).unwrap(), 8);
        for wrong in [9, 56, -1, i64::MAX, i64::MIN] {
            assert!(
                matches!(count(wrong), Err(CheckError::UnexpectedReply(_))),
                "{wrong} taken as a count"
            );
        }
        assert!(matches!(
            count_reply(Value::Okay, 8, "not a number"),
            Err(CheckError::UnexpectedReply(_))
        ));
    }
}
