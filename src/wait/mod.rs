//! Waiting instead of rejecting: sleep until a request can go ahead, up to a limit.
//!
//! ```
//! # async fn run() -> Result<(), turnstile::QuotaError> {
//! use std::time::Duration;
//! use turnstile::wait::{until_ready, Wait};
//! use turnstile::{Quota, TokenBucket};
//!
//! let limiter = TokenBucket::<String>::new(Quota::per_second(10)?)?;
//! let wait = Wait::up_to(Duration::from_secs(2)).jitter(Duration::from_millis(20));
//! match until_ready(&limiter, "alice", 1, &wait).await {
//!     Ok(_allowed) => { /* go ahead */ }
//!     Err(refused) => { /* more than 2 s away, or never: refused.retry_after() */ }
//! }
//! # Ok(()) }
//! ```
//!
//! # Semantics
//! - A request allowed now returns at once.
//! - A denied one sleeps for its exact `retry_after`, plus jitter when configured,
//!   then asks again; another waiter may have taken the tokens meanwhile, so it may
//!   sleep again, for the new `retry_after`, while the total stays within the maximum.
//! - **No sleeping into a refusal**: if the `retry_after` is beyond what is left of
//!   the maximum wait, the caller is told no at once, with that denial.
//! - **Jitter only ever adds delay**, uniformly up to the configured amount, and never
//!   past the maximum wait: waking before `retry_after` could only meet a denial.
//!   It spreads a crowd of waiters denied together so they do not all wake at once.
//! - A cost that can never pass ([`Decision::ExceedsCapacity`]) is refused at once; a
//!   `max_keys` overflow ([`Decision::Overflow`]) is waited on like a denial, using
//!   its hint.
//! - Sleeping uses tokio's timer, whose resolution is one millisecond: a wake comes up
//!   to 1 ms after the deadline, never before it. Elapsed time is measured on tokio's
//!   clock, so tests can run under `tokio::time::pause`.
//! - Waiters do not queue: a request arriving while others sleep may take the token
//!   they wait for. What is fair is that nobody takes more than the quota.
//!
//! # Streams
//! [`throttle`] holds a stream to a limiter's pace: each item is asked of the limiter
//! (one unit, under the key a closure makes of it; `()` for a direct limiter) and
//! held through denials for its exact `retry_after`, plus optional jitter — items are
//! never dropped or reordered. It is governor's `ratelimit_stream`, for keyed limiters
//! too.

use crate::policy::{Outcome, Policy, Verdict};
use crate::{Decision, KeyRef, RateLimiter};
use rand::Rng;
mod stream;

pub use stream::{Throttled, throttle};

use std::borrow::Borrow;
use std::time::Duration;
use tokio::time::Instant;

/// How long to wait, at most, and how much jitter to add to each sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    max: Duration,
    jitter: Duration,
}

impl Wait {
    /// Wait at most `max` in all, with no jitter.
    pub fn up_to(max: Duration) -> Self {
        Self {
            max,
            jitter: Duration::ZERO,
        }
    }

    /// Adds a uniformly random extra delay of up to `jitter` to each sleep (never
    /// past the maximum wait).
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// The longest wait in all.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The most jitter added to one sleep.
    pub fn max_jitter(&self) -> Duration {
        self.jitter
    }

    /// One sleep for a wait of `retry_after`, when `left` of the maximum remains:
    /// `None` when the wait does not fit, so the caller is refused without sleeping.
    fn sleep_for(&self, retry_after: Duration, left: Duration) -> Option<Duration> {
        if retry_after > left {
            return None;
        }
        Some(retry_after.saturating_add(self.random_jitter()).min(left))
    }

    fn random_jitter(&self) -> Duration {
        random_up_to(self.jitter)
    }
}

/// A uniformly random duration from zero to `jitter`.
fn random_up_to(jitter: Duration) -> Duration {
    if jitter.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

/// One attempt's result, as the waiting loop sees it.
pub(crate) enum Attempt<T> {
    /// Go ahead.
    Ready(T),
    /// Try again after this long.
    RetryIn(Duration, T),
    /// No wait helps.
    Never(T),
}

impl Attempt<Decision> {
    pub(crate) fn of_decision(decision: Decision) -> Self {
        match decision {
            Decision::Allowed { .. } => Attempt::Ready(decision),
            Decision::Denied { retry_after, .. } => Attempt::RetryIn(retry_after, decision),
            // The hint is when room may be made: the best time to try again.
            Decision::Overflow { retry_hint } => Attempt::RetryIn(retry_hint, decision),
            Decision::ExceedsCapacity { .. } => Attempt::Never(decision),
        }
    }
}

impl Attempt<Verdict> {
    pub(crate) fn of_verdict(verdict: Verdict) -> Self {
        match verdict.outcome() {
            Outcome::Allowed => Attempt::Ready(verdict),
            Outcome::Denied { retry_after } => Attempt::RetryIn(retry_after, verdict),
            Outcome::Overflow { retry_hint } => Attempt::RetryIn(retry_hint, verdict),
            // No wait is known to help a store that gave no answer.
            Outcome::ExceedsCapacity | Outcome::MissingKey | Outcome::Unavailable => {
                Attempt::Never(verdict)
            }
        }
    }
}

/// Sleeps and asks `again` until it answers ready, or until the next wait would go
/// past `wait.max()` since `started`, or it answers never. `first` is the answer
/// already in hand.
pub(crate) async fn keep_trying<T, F>(
    wait: &Wait,
    started: Instant,
    first: Attempt<T>,
    mut again: impl FnMut() -> F,
) -> Result<T, T>
where
    F: std::future::Future<Output = Attempt<T>>,
{
    let mut attempt = first;
    loop {
        match attempt {
            Attempt::Ready(answer) => return Ok(answer),
            Attempt::Never(answer) => return Err(answer),
            Attempt::RetryIn(retry_after, answer) => {
                let left = wait.max.saturating_sub(started.elapsed());
                let Some(sleep) = wait.sleep_for(retry_after, left) else {
                    return Err(answer);
                };
                tokio::time::sleep(sleep).await;
                attempt = again().await;
            }
        }
    }
}

/// Asks `limiter` for `cost` for `key`, sleeping through denials while the wait fits
/// `wait`: `Ok` with the allowing decision, or `Err` with the refusal (a wait beyond
/// what is left of the maximum, or a cost that can never pass). See the
/// [module documentation](self) for the semantics.
pub async fn until_ready<L, K, Q>(
    limiter: &L,
    key: &Q,
    cost: u32,
    wait: &Wait,
) -> Result<Decision, Decision>
where
    L: RateLimiter<K> + ?Sized,
    K: Borrow<Q>,
    Q: ?Sized + KeyRef<K>,
{
    let started = Instant::now();
    let attempt = || Attempt::of_decision(limiter.acquire(key, cost));
    let again = || std::future::ready(attempt());
    keep_trying(wait, started, attempt(), again).await
}

impl<R: ?Sized> Policy<R> {
    /// Asks the policy for `request`, sleeping through denials while the wait fits
    /// `wait`: `Ok` with the allowing verdict, or `Err` with the refusal. Each attempt
    /// is all or nothing ([`Policy::acquire_async`]: shared checks are awaited); see
    /// [`until_ready`] for the waiting semantics. A request refused by a shared
    /// check's failure policy ([`Outcome::Unavailable`](crate::policy::Outcome)) is
    /// refused at once: no wait is known to help.
    pub async fn until_ready(&self, request: &R, wait: &Wait) -> Result<Verdict, Verdict> {
        let started = Instant::now();
        let attempt = || async { Attempt::of_verdict(self.acquire_async(request).await) };
        keep_trying(wait, started, attempt().await, attempt).await
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn jitter_only_adds_and_never_past_the_maximum() {
        let wait = Wait::up_to(Duration::from_secs(1)).jitter(Duration::from_millis(100));
        let retry = Duration::from_millis(500);
        for _ in 0..1000 {
            let sleep = wait.sleep_for(retry, Duration::from_secs(1)).unwrap();
            assert!(retry <= sleep && sleep <= retry + Duration::from_millis(100));
            let sleep = wait.sleep_for(retry, Duration::from_millis(520)).unwrap();
            assert!(retry <= sleep && sleep <= Duration::from_millis(520));
        }
    }

    #[test]
    fn a_wait_beyond_what_is_left_is_refused_not_slept() {
        let wait = Wait::up_to(Duration::from_secs(1));
        assert_eq!(
            wait.sleep_for(Duration::from_millis(600), Duration::from_millis(599)),
            None
        );
        assert_eq!(
            wait.sleep_for(Duration::from_millis(600), Duration::from_millis(600)),
            Some(Duration::from_millis(600))
        );
    }
}
