//! What a check advertises about its limiter: the quota, and how soon a key that has
//! used some of it gets more.

use crate::Quota;
use std::time::Duration;

/// A check's quota as clients are told of it (the `q` and `w` of the IETF
/// `RateLimit-Policy` field), and the longest a key not in debt can wait for more quota
/// (which bounds the `t` of an admitted request's `RateLimit` field from above; a
/// denial's `t` is its `retry_after`, which counts a debt).
///
/// The [`RateLimiter`](crate::RateLimiter) trait does not say which algorithm a
/// limiter runs, and the two families regain quota differently, so a check states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    quota: Quota,
    regain: Regain,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Regain {
    /// One unit per refill interval.
    Steady,
    /// Everything at most one window (capacity × refill interval) later.
    Window,
}

impl Limit {
    /// A limiter that regains one unit every refill interval — the token bucket
    /// ([`TokenBucket`](crate::TokenBucket)) and GCRA — under `quota`.
    pub fn steady(quota: Quota) -> Self {
        Self {
            quota,
            regain: Regain::Steady,
        }
    }

    /// A limiter whose used quota comes back at most one window (capacity × refill
    /// interval) later — fixed window, sliding window counter, sliding log — under
    /// `quota`.
    pub fn windowed(quota: Quota) -> Self {
        Self {
            quota,
            regain: Regain::Window,
        }
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The longest a key not in debt can wait, from any state, until it next gains
    /// quota: the refill interval for a steady limiter, the window for a windowed one.
    /// A key in debt (a settle charged it more than it had) gains nothing until refill
    /// has repaid the debt, which can take longer.
    pub fn regained_within(&self) -> Duration {
        match self.regain {
            Regain::Steady => self.quota.refill_every(),
            Regain::Window => window(&self.quota),
        }
    }

    /// The window in whole seconds, for `RateLimit-Policy`'s `w` (which has no
    /// sub-second precision): capacity × refill interval, rounded up, at least 1.
    ///
    /// Rounding up advertises a rate no faster than the real one. One exception keeps
    /// `Quota::per_second(3)` at `w=1` rather than `w=2`: the `per_*` constructors
    /// round the interval up by under 1 ns per token when the period does not divide
    /// evenly, so up to `capacity - 1` ns of excess are disregarded.
    pub fn window_secs(&self) -> u64 {
        let capacity = u128::from(self.quota.capacity());
        let nanos = capacity * self.quota.refill_every().as_nanos() - (capacity - 1);
        u64::try_from(nanos.div_ceil(1_000_000_000))
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// A limiter with one quota for every key, whose [`Limit`] a check reads off it
/// ([`Check::from_limiter`](super::Check::from_limiter)) instead of being told the
/// quota a second time: the keyed limiters built with one quota. A per-key limiter's
/// quota differs by key, so its check states the limit it advertises
/// ([`Check::new`](super::Check::new)).
pub trait KnownLimit {
    /// The quota the limiter was built with, and how it regains it.
    fn limit(&self) -> Limit;
}

/// The token bucket regains its quota steadily, a token per interval.
impl<K, C, S> KnownLimit for crate::KeyedLimiter<crate::token_bucket::TokenBucketRules, K, C, S>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    C: crate::Clock,
    S: std::hash::BuildHasher + Clone + 'static,
{
    fn limit(&self) -> Limit {
        Limit::steady(self.quota())
    }
}

/// The GCRA regains its quota steadily, as the token bucket does.
impl<K, C, S> KnownLimit for crate::KeyedLimiter<crate::gcra::GcraRules, K, C, S>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    C: crate::Clock,
    S: std::hash::BuildHasher + Clone + 'static,
{
    fn limit(&self) -> Limit {
        Limit::steady(self.quota())
    }
}

/// The fixed window regains its quota when the window ends.
impl<K, C, S> KnownLimit for crate::KeyedLimiter<crate::fixed_window::FixedWindowRules, K, C, S>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    C: crate::Clock,
    S: std::hash::BuildHasher + Clone + 'static,
{
    fn limit(&self) -> Limit {
        Limit::windowed(self.quota())
    }
}

/// The sliding window counter regains its quota as the window slides.
impl<K, C, S> KnownLimit for crate::KeyedLimiter<crate::sliding_window::SlidingWindowRules, K, C, S>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    C: crate::Clock,
    S: std::hash::BuildHasher + Clone + 'static,
{
    fn limit(&self) -> Limit {
        Limit::windowed(self.quota())
    }
}

/// The sliding log regains each request a window after it.
impl<K, C, S> KnownLimit for crate::KeyedLimiter<crate::sliding_log::SlidingLogRules, K, C, S>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    C: crate::Clock,
    S: std::hash::BuildHasher + Clone + 'static,
{
    fn limit(&self) -> Limit {
        Limit::windowed(self.quota())
    }
}

/// Capacity × refill interval, saturating at `Duration::MAX`.
fn window(quota: &Quota) -> Duration {
    quota
        .refill_every()
        .checked_mul(quota.capacity())
        .unwrap_or(Duration::MAX)
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_window_is_capacity_times_interval_in_whole_seconds_rounded_up() {
        let w = |q: Quota| Limit::steady(q).window_secs();
        assert_eq!(w(Quota::per_minute(100).unwrap()), 60);
        assert_eq!(w(Quota::per_hour(7).unwrap()), 3600);
        // 333,333,334 ns × 3 = 1.000000002 s: the per_* rounding is not a second longer.
        assert_eq!(w(Quota::per_second(3).unwrap()), 1);
        assert_eq!(w(Quota::new(1, Duration::from_millis(1500)).unwrap()), 2);
        assert_eq!(w(Quota::new(2, Duration::from_millis(1500)).unwrap()), 3);
        // Sub-second windows advertise one second: a slower rate, never a faster one.
        assert_eq!(w(Quota::new(5, Duration::from_millis(10)).unwrap()), 1);
    }

    #[test]
    fn steady_limiters_regain_within_an_interval_windowed_ones_within_a_window() {
        let quota = Quota::per_minute(100).unwrap();
        assert_eq!(
            Limit::steady(quota).regained_within(),
            Duration::from_millis(600)
        );
        assert_eq!(
            Limit::windowed(quota).regained_within(),
            Duration::from_secs(60)
        );
    }
}
