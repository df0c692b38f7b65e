//! The token bucket on Redis: the in-process semantics, one Lua script per check.

use super::config::{MAX_MICROS, RedisConfigError, micros_ceil};
use super::engine::{ScriptedAlgorithm, script};
use super::failure::FailurePolicy;
use super::limiter::sealed::Sealed;
use super::limiter::{LimiterScript, RedisLimiter, RedisLimiterBuilder};
use crate::{Decision, Quota};
use ::redis::Script;
use ::redis::aio::ConnectionManager;
use std::sync::LazyLock;
use std::time::Duration;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script("{'t', 'r'}", include_str!("token_bucket.lua")));

/// A token bucket whose state lives in Redis (a [`RedisLimiter`] running the
/// [`TokenBucketScript`]), shared by every process that uses the
/// same Redis, prefix and quota: five app servers admit the quota once, not five times.
///
/// The semantics are [`TokenBucket`](crate::TokenBucket)'s, exactly: a refill grid
/// shared by all keys, whole-interval refill keeping the unfinished part, the capacity
/// as the cap, all-or-nothing costs, denials that change nothing, exact `retry_after`,
/// a cost above the capacity reported as never satisfiable, and a time older than the
/// key's last refill seeing the tokens still to come by then as missing. Each check is
/// one `EVALSHA` of one Lua script, so it is atomic on the Redis side; time is Redis's own (`TIME`, in
/// microseconds), and the refill grid starts at the Unix epoch, the same for every app
/// server. Quotas whose refill interval is not a whole number of microseconds are
/// refused at construction ([`RedisConfigError::IntervalNotWholeMicros`]).
///
/// Each written key expires when its bucket would be full again; a missing key is a
/// full bucket, so Redis forgets idle clients by itself (see the
/// [module docs](super#state-and-expiry)).
///
/// Checks are `async` and return a [`SharedDecision`](crate::SharedDecision): Redis's
/// exact [`Decision`], or the [`FailurePolicy`]'s answer when Redis did not answer
/// within the timeout. For threads without a runtime, see
/// [`BlockingRedisTokenBucket`](super::BlockingRedisTokenBucket).
///
/// Cloning is cheap and shares the connection and the failure counters.
///
/// ```no_run
/// use std::time::Duration;
/// use turnstile::Quota;
/// use turnstile::redis::{FailurePolicy, RedisTokenBucket};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let conn = redis::aio::ConnectionManager::new(client).await?;
/// let limiter = RedisTokenBucket::builder(Quota::per_second(10)?, FailurePolicy::Open)
///     .prefix("api:")
///     .timeout(Duration::from_millis(20))
///     .build(conn)?;
/// let outcome = limiter.acquire("alice", 1).await;
/// if !outcome.is_allowed() {
///     // 429, with outcome.retry_after() when Redis gave one
/// }
/// # Ok(())
/// # }
/// ```
pub type RedisTokenBucket<C = ConnectionManager> = RedisLimiter<TokenBucketScript, C>;

/// Builds a [`RedisTokenBucket`] (made by [`RedisTokenBucket::builder`]).
pub type RedisTokenBucketBuilder = RedisLimiterBuilder<TokenBucketScript>;

/// The token bucket's script, with its quota: what a [`RedisTokenBucket`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucketScript {
    quota: Quota,
}

impl TokenBucketScript {
    /// The quota every key gets.
    pub fn quota(&self) -> Quota {
        self.quota
    }
}

impl LimiterScript for TokenBucketScript {}

impl Sealed for TokenBucketScript {
    const DEFAULT_PREFIX: &'static str = "turnstile:tb:";

    fn algorithm(&self) -> Result<ScriptedAlgorithm, RedisConfigError> {
        algorithm(&self.quota)
    }
}

impl RedisTokenBucket {
    /// A builder for a limiter applying `quota` to every key, answering `policy` when
    /// Redis does not. Keys are prefixed with `turnstile:tb:` unless told otherwise.
    pub fn builder(quota: Quota, policy: FailurePolicy) -> RedisTokenBucketBuilder {
        RedisLimiterBuilder::new(TokenBucketScript { quota }, policy)
    }
}

impl<C> RedisTokenBucket<C> {
    /// The quota every key gets.
    pub fn quota(&self) -> Quota {
        self.script.quota
    }
}

/// The script and its parameters for `quota`, or why Redis cannot hold it exactly.
pub(super) fn algorithm(quota: &Quota) -> Result<ScriptedAlgorithm, RedisConfigError> {
    let refill_every = quota.refill_every();
    let (interval, whole) = micros_ceil(refill_every);
    let capacity = quota.capacity();
    if u128::from(capacity) * interval > u128::from(MAX_MICROS) {
        return Err(RedisConfigError::RefillTooLong {
            capacity,
            refill_every,
        });
    }
    // In range: capacity >= 1, so interval <= 2^52.
    let interval = interval as u64;
    if !whole {
        return Err(RedisConfigError::IntervalNotWholeMicros {
            refill_every,
            rounded_up: Duration::from_micros(interval),
        });
    }
    Ok(ScriptedAlgorithm {
        script: &SCRIPT,
        params: [u64::from(capacity), interval],
        decide,
        refunds_on_settle: true,
    })
}

/// A decision from the script's reply `{status, tokens, ahead, missing}` to a check
/// of `cost`; `None` for a reply the script never gives: an allowance or a cost above
/// the capacity with a wait (`ahead`, `missing`) beside it, or a denial whose numbers
/// do not fit the bucket (see `script_decision` in `fuzz/fuzz_targets/redis_reply.rs`).
fn decide([capacity, interval]: [u64; 2], reply: &[i64], cost: u32) -> Option<Decision> {
    let &[status, tokens, ahead, missing] = reply else {
        return None;
    };
    let remaining = u32::try_from(tokens).ok()?;
    match status {
        0 if ahead == 0 && missing == 0 => Some(Decision::Allowed { remaining }),
        1 => {
            // Allowed `missing` grid points after the refill point, which is `ahead`
            // µs from now: the latest grid point at or before the reading (`ahead` in
            // `(−interval, 0]`, and `missing` what the reading holds short of the
            // cost), or a later one the key was refilled at, `behind` grid points
            // ahead of the reading's (`ahead` positive), where the bucket holds
            // `cost − missing` and the reading that less `behind`.
            let (interval, cost) = (i128::from(interval), i128::from(cost));
            let (ahead, missing, held) =
                (i128::from(ahead), i128::from(missing), i128::from(tokens));
            let possible = if ahead <= 0 {
                ahead > -interval && missing == cost - held
            } else {
                let behind = (ahead + interval - 1) / interval;
                let bucket = cost - missing;
                (0..=i128::from(capacity)).contains(&bucket) && held == (bucket - behind).max(0)
            };
            if !possible {
                return None;
            }
            let wait = ahead + missing * interval;
            let wait = u64::try_from(wait).ok().filter(|&wait| wait > 0)?;
            Some(Decision::Denied {
                remaining,
                retry_after: Duration::from_micros(wait),
            })
        }
        2 if ahead == 0 && missing == 0 => Some(Decision::ExceedsCapacity {
            remaining,
            capacity: u32::try_from(capacity).ok()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_in_whole_microseconds_are_accepted() {
        let quota = Quota::per_second(1000).unwrap();
        let algorithm = algorithm(&quota).unwrap();
        assert_eq!(algorithm.params, [1000, 1000]);
    }

    #[test]
    fn an_interval_that_is_not_whole_microseconds_is_refused_with_the_rounded_up_one() {
        // 1 s / 3 = 333,333,334 ns (rounded up by Quota): not whole microseconds.
        let quota = Quota::per_second(3).unwrap();
        let error = algorithm(&quota).unwrap_err();
        assert!(matches!(
            error,
            RedisConfigError::IntervalNotWholeMicros { rounded_up, .. }
                if rounded_up == Duration::from_micros(333_334)
        ));
        let message = error.to_string();
        assert!(message.contains("333.334ms"), "{message}");
        // The suggestion is itself accepted.
        assert!(algorithm(&Quota::new(3, Duration::from_micros(333_334)).unwrap()).is_ok());
    }

    #[test]
    fn a_refill_to_full_beyond_2_pow_52_microseconds_is_refused() {
        let interval = Duration::from_micros(MAX_MICROS / 4);
        assert!(algorithm(&Quota::new(4, interval).unwrap()).is_ok());
        assert!(matches!(
            algorithm(&Quota::new(5, interval).unwrap()),
            Err(RedisConfigError::RefillTooLong { capacity: 5, .. })
        ));
    }

    #[test]
    fn a_denial_reply_is_read_as_the_exact_wait() {
        // Refill point 300 µs ago, 2 tokens missing, 1000 µs interval: 1700 µs.
        let decision = decide([5, 1000], &[1, 0, -300, 2], 2).unwrap();
        assert_eq!(
            decision,
            Decision::Denied {
                remaining: 0,
                retry_after: Duration::from_micros(1700)
            }
        );
    }

    #[test]
    fn replies_the_script_never_gives_are_refused() {
        assert_eq!(decide([5, 1000], &[0, 1, 0], 1), None);
        assert_eq!(decide([5, 1000], &[7, 1, 0, 0], 1), None);
        assert_eq!(decide([5, 1000], &[0, -1, 0, 0], 1), None);
        // A denial whose wait is not in the future.
        assert_eq!(decide([5, 1000], &[1, 0, -1000, 1], 1), None);
    }

    /// Found by the `redis_reply` fuzz target (its reference of the script's replies):
    /// an allowance or a cost above the capacity with a wait beside it, and denials
    /// whose numbers no bucket gives, were read as decisions.
    #[test]
    fn replies_whose_numbers_no_bucket_gives_are_refused() {
        assert_eq!(decide([5, 1000], &[0, 1, 300, 0], 1), None);
        assert_eq!(decide([5, 1000], &[0, 1, 0, 2], 1), None);
        assert_eq!(decide([5, 1000], &[2, 1, 0, 1], 6), None);
        // The refill point more than an interval before the reading.
        assert_eq!(decide([5, 1000], &[1, 0, -1500, 2], 2), None);
        // Not behind, yet missing other than the cost less what the reading holds.
        assert_eq!(decide([5, 1000], &[1, 1, -300, 3], 2), None);
        // Behind by one grid point (ahead 700 µs): the bucket holds 2 − 1 = 1 and the
        // reading none; holding 1 would need a bucket of 2, missing 0.
        assert!(decide([5, 1000], &[1, 0, 700, 1], 2).is_some());
        assert_eq!(decide([5, 1000], &[1, 1, 700, 1], 2), None);
        assert!(decide([5, 1000], &[1, 1, 700, 0], 2).is_some());
        // A bucket holding more than the capacity.
        assert_eq!(decide([5, 1000], &[1, 0, 5700, -4], 2), None);
    }
}
