//! The circuit breaker: after consecutive failures, checks are answered by the failure
//! policy at once, without I/O, for a back-off, and one check at a time probes whether
//! Redis is back.
//!
//! One per limiter, shared by its clones, behind a mutex: a check is a network round
//! trip, beside which an uncontended lock is noise, and a lock keeps the state machine
//! plain (no atomic protocol to model-check). Times are nanoseconds on the limiter's
//! clock: its client clock when it has one (so tests move the back-off with a
//! `ManualClock`), else a monotonic clock of its own.

use crate::Clock;
use crate::sync::Unpoisoned;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// When a limiter stops asking Redis, and how it finds out that Redis is back.
///
/// After `trip_after` consecutive checks or peeks that got no answer (timeouts,
/// errors), the breaker **opens**: checks are answered by the failure policy at once
/// ([`CheckError::CircuitOpen`](super::CheckError::CircuitOpen)), costing no I/O and
/// no timeout, for a back-off of `min_backoff`. Then one check is let through as a
/// **probe**, the others still answered at once; if it succeeds the breaker closes, if
/// it fails the back-off doubles, up to `max_backoff`. Any check that succeeds closes
/// it.
///
/// The default trips after 3 failures and backs off from 10 ms to 50 ms: during an
/// outage one request every 50 ms at most waits for a timeout, and after Redis comes
/// back the next probe finds it within about 50 ms (plus the connection's own
/// reconnection delay; see [`connection_config`](super::connection_config)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitBreaker {
    trip_after: u32,
    min_backoff: Duration,
    max_backoff: Duration,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self {
            trip_after: 3,
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
        }
    }
}

impl CircuitBreaker {
    /// A breaker that opens after `trip_after` consecutive failures and backs off from
    /// `min_backoff`, doubling per failed probe, up to `max_backoff`. Validated when
    /// the limiter is built: `trip_after` and `min_backoff` non-zero, `max_backoff` at
    /// least `min_backoff`.
    pub fn new(trip_after: u32, min_backoff: Duration, max_backoff: Duration) -> Self {
        Self {
            trip_after,
            min_backoff,
            max_backoff,
        }
    }

    /// No breaker: every check asks Redis and waits up to its timeout, however long
    /// Redis has been down.
    pub fn off() -> Self {
        Self {
            trip_after: 0,
            min_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
        }
    }

    /// Whether this is [`CircuitBreaker::off`].
    pub fn is_off(&self) -> bool {
        self.trip_after == 0
    }

    /// Why these settings are refused, if they are.
    pub(crate) fn invalid(&self) -> Option<&'static str> {
        if self.is_off() {
            return None;
        }
        if self.min_backoff.is_zero() {
            return Some("its minimum back-off is zero");
        }
        if self.max_backoff < self.min_backoff {
            return Some("its maximum back-off is below its minimum");
        }
        None
    }
}

/// Where a limiter's breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitState {
    /// Checks ask Redis.
    Closed,
    /// Checks are answered by the failure policy at once; the next probe goes in
    /// `retry_in` (zero: the next check is the probe, or one is in flight).
    Open {
        /// Until the next probe.
        retry_in: Duration,
    },
}

/// What the breaker lets a check do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Ask Redis.
    Ask,
    /// Ask Redis, as the one probe of an open breaker.
    Probe,
    /// Answer by the failure policy now; the next probe goes in this long.
    Refuse(Duration),
}

/// The breaker's state.
#[derive(Debug)]
struct State {
    consecutive_failures: u32,
    /// Open until this instant (nanoseconds); `None`: closed.
    open_until: Option<u64>,
    /// The back-off the next failed probe doubles.
    backoff: Duration,
    /// A probe is in flight, since this instant.
    probing: Option<u64>,
}

/// What happened, for the caller to count and report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    /// The breaker opened (tripped).
    Opened,
    /// The breaker closed: Redis answered again.
    Closed,
}

/// A limiter's circuit breaker.
pub(crate) struct Breaker {
    settings: CircuitBreaker,
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    /// How long a probe may be out before another check may probe (nanoseconds).
    probe_timeout: u64,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("settings", &self.settings)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Breaker {
    /// A breaker on `clock` for checks that time out at `timeout`.
    pub(crate) fn new(settings: CircuitBreaker, clock: Arc<dyn Clock>, timeout: Duration) -> Self {
        Self {
            clock,
            probe_timeout: later(0, timeout.saturating_mul(2)),
            settings,
            state: Mutex::new(State {
                consecutive_failures: 0,
                open_until: None,
                backoff: settings.min_backoff,
                probing: None,
            }),
        }
    }

    /// Now, on the breaker's clock, in nanoseconds.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    /// The state, even if a thread panicked holding the lock: every update below
    /// leaves it consistent at each step.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unpoisoned()
    }

    /// Whether a check may ask Redis now.
    pub(crate) fn admit(&self, now: u64) -> Admission {
        if self.settings.is_off() {
            return Admission::Ask;
        }
        let mut state = self.state();
        match state.open_until {
            None => Admission::Ask,
            Some(until) if now < until => Admission::Refuse(Duration::from_nanos(until - now)),
            // One probe at a time; a probe still out after twice the check's timeout
            // is one whose caller stopped polling it (parked in a `select!`, say), and
            // another check may probe.
            Some(_)
                if state
                    .probing
                    .is_some_and(|since| now.saturating_sub(since) < self.probe_timeout) =>
            {
                Admission::Refuse(Duration::ZERO)
            }
            Some(_) => {
                state.probing = Some(now);
                Admission::Probe
            }
        }
    }

    /// A check admitted as `admission` got an answer (`answered`) or none.
    pub(crate) fn record(&self, admission: &Admission, answered: bool, now: u64) -> Transition {
        if self.settings.is_off() || matches!(admission, Admission::Refuse(_)) {
            return Transition::None;
        }
        let mut state = self.state();
        if *admission == Admission::Probe {
            state.probing = None;
        }
        if answered {
            state.consecutive_failures = 0;
            state.backoff = self.settings.min_backoff;
            return match state.open_until.take() {
                Some(_) => Transition::Closed,
                None => Transition::None,
            };
        }
        state.consecutive_failures = state.consecutive_failures.saturating_add(1);
        match (state.open_until, admission) {
            // A failed probe: open again for twice as long.
            (Some(_), Admission::Probe) => {
                state.backoff = state
                    .backoff
                    .saturating_mul(2)
                    .min(self.settings.max_backoff);
                state.open_until = Some(later(now, state.backoff));
                Transition::None
            }
            (None, _) if state.consecutive_failures >= self.settings.trip_after => {
                state.backoff = self.settings.min_backoff;
                state.open_until = Some(later(now, state.backoff));
                Transition::Opened
            }
            // Closed and under the threshold, or a check sent before the breaker
            // opened that failed since.
            _ => Transition::None,
        }
    }

    /// A probe that ended without a result (its future was dropped): another check
    /// may probe at once.
    pub(crate) fn abandon(&self, admission: &Admission) {
        if *admission == Admission::Probe {
            self.state().probing = None;
        }
    }

    /// Where the breaker stands at `now`.
    pub(crate) fn circuit(&self, now: u64) -> CircuitState {
        match self.state().open_until {
            None => CircuitState::Closed,
            Some(until) => CircuitState::Open {
                retry_in: Duration::from_nanos(until.saturating_sub(now)),
            },
        }
    }
}

/// `after` past `now`, in nanoseconds, saturating.
fn later(now: u64, after: Duration) -> u64 {
    now.saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A breaker; the tests pass their own times.
    fn breaker(settings: CircuitBreaker) -> Breaker {
        Breaker::new(settings, Arc::new(crate::ManualClock::new()), ms(100))
    }

    /// `n` milliseconds as a clock reading.
    fn at(n: u64) -> u64 {
        n * 1_000_000
    }

    #[test]
    fn it_opens_after_consecutive_failures_probes_after_each_backoff_and_closes_on_success() {
        let breaker = breaker(CircuitBreaker::new(2, ms(10), ms(30)));
        let t0 = 0;
        assert_eq!(breaker.admit(t0), Admission::Ask);
        assert_eq!(breaker.record(&Admission::Ask, false, t0), Transition::None);
        assert_eq!(
            breaker.record(&Admission::Ask, false, t0),
            Transition::Opened
        );
        assert_eq!(breaker.admit(t0 + at(5)), Admission::Refuse(ms(5)));
        // After the back-off, one probe; the others are still refused.
        assert_eq!(breaker.admit(t0 + at(10)), Admission::Probe);
        assert_eq!(
            breaker.admit(t0 + at(10)),
            Admission::Refuse(Duration::ZERO)
        );
        // A failed probe doubles the back-off: 20 ms, then capped at 30.
        let t1 = t0 + at(11);
        assert_eq!(
            breaker.record(&Admission::Probe, false, t1),
            Transition::None
        );
        assert_eq!(breaker.circuit(t1), CircuitState::Open { retry_in: ms(20) });
        assert_eq!(breaker.admit(t1 + at(20)), Admission::Probe);
        let t2 = t1 + at(21);
        assert_eq!(
            breaker.record(&Admission::Probe, false, t2),
            Transition::None
        );
        assert_eq!(breaker.circuit(t2), CircuitState::Open { retry_in: ms(30) });
        // A successful probe closes it, and the back-off starts over.
        assert_eq!(breaker.admit(t2 + at(30)), Admission::Probe);
        assert_eq!(
            breaker.record(&Admission::Probe, true, t2 + at(31)),
            Transition::Closed
        );
        assert_eq!(breaker.circuit(t2), CircuitState::Closed);
        assert_eq!(breaker.admit(t2 + at(31)), Admission::Ask);
    }

    #[test]
    fn a_success_between_failures_starts_the_count_over() {
        let breaker = breaker(CircuitBreaker::new(2, ms(10), ms(10)));
        let now = at(1);
        breaker.record(&Admission::Ask, false, now);
        breaker.record(&Admission::Ask, true, now);
        assert_eq!(
            breaker.record(&Admission::Ask, false, now),
            Transition::None
        );
        assert_eq!(breaker.admit(now), Admission::Ask);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_check_probe() {
        let breaker = breaker(CircuitBreaker::new(1, ms(10), ms(10)));
        let now = at(1);
        breaker.record(&Admission::Ask, false, now);
        let probe = breaker.admit(now + at(10));
        assert_eq!(probe, Admission::Probe);
        breaker.abandon(&probe);
        assert_eq!(breaker.admit(now + at(10)), Admission::Probe);
    }

    #[test]
    fn a_probe_out_for_twice_the_timeout_lets_another_check_probe() {
        // A probe whose caller stopped polling it is neither answered nor dropped.
        let breaker = breaker(CircuitBreaker::new(1, ms(10), ms(10)));
        breaker.record(&Admission::Ask, false, at(0));
        assert_eq!(breaker.admit(at(10)), Admission::Probe);
        assert_eq!(breaker.admit(at(209)), Admission::Refuse(Duration::ZERO));
        assert_eq!(breaker.admit(at(210)), Admission::Probe);
    }

    #[test]
    fn off_always_asks() {
        let breaker = breaker(CircuitBreaker::off());
        let now = at(1);
        for _ in 0..10 {
            assert_eq!(
                breaker.record(&Admission::Ask, false, now),
                Transition::None
            );
        }
        assert_eq!(breaker.admit(now), Admission::Ask);
    }

    #[test]
    fn bad_settings_are_named() {
        assert!(CircuitBreaker::new(1, ms(0), ms(10)).invalid().is_some());
        assert!(CircuitBreaker::new(1, ms(20), ms(10)).invalid().is_some());
        assert!(CircuitBreaker::new(1, ms(10), ms(10)).invalid().is_none());
        assert!(CircuitBreaker::off().invalid().is_none());
        assert!(CircuitBreaker::default().invalid().is_none());
    }
}
