//! The fixed window counter on Redis: count and expiry in one Lua script per check.

use super::config::{MAX_MICROS, RedisConfigError, micros_ceil};
use super::engine::{ScriptedAlgorithm, script};
use super::failure::FailurePolicy;
use super::limiter::sealed::Sealed;
use super::limiter::{LimiterScript, RedisLimiter, RedisLimiterBuilder};
use crate::Decision;
use ::redis::Script;
use ::redis::aio::ConnectionManager;
use std::sync::LazyLock;
use std::time::Duration;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| script("{'w', 'n'}", include_str!("fixed_window.lua")));

/// The classic fixed window counter in Redis (a [`RedisLimiter`] running the
/// [`FixedWindowScript`]): at most `limit` per window, windows
/// following each other from the Unix epoch (`[k·window, (k+1)·window)`), counted per
/// key. Simple and one small hash per active key; it lets up to twice the limit
/// through across a window boundary (the end of one window and the start of the next).
///
/// Semantics, exact:
/// - A request of `cost` is allowed iff the key's count in the current window plus
///   `cost` is at most `limit`; then it is counted. A denial changes nothing and is
///   not counted. A cost of zero is allowed unless the key is in debt (counts past
///   its limit, below).
/// - `retry_after` of a denial is the exact time until the window ends, when the
///   count starts over (for a key in debt, until the first window with room for the
///   cost). A cost above `limit` is reported as never satisfiable.
/// - A time older than the key's counted window (a server clock stepped back) counts
///   as inside that window.
/// - A settle above the estimate ([`RedisLimiter::settle`]) counts past the limit,
///   up to twice the limit. What a window counts past the limit is carried into the
///   next windows, each starting one limit lower, and a denial waits for the first
///   window with room for its cost (see the
///   [module docs](super#reserve-then-settle)).
/// - **A settle below the estimate gives nothing back** (`refunded: 0`): the stored
///   count cannot tell which window counted the estimate, and giving it to a later
///   window would admit more than the limit there. For refunds on settle, use the
///   token bucket. (A policy's [`refund`](crate::policy::SharedLimiter::refund),
///   right after the take, still gives back to the window being counted.)
///
/// The count and its expiry are set by one script, so no client ever sees one without
/// the other (the classic `INCR` followed by a separate `EXPIRE` leaks a key that
/// never expires when the client dies between the two). The script also stores the
/// window's start beside the count, and that, not the expiry, decides when the count
/// starts over: expiry has millisecond resolution and is applied lazily, so it cannot
/// draw an exact boundary. The expiry only makes Redis forget the key.
///
/// Time, failure policy, timeouts and keys work as for
/// [`RedisTokenBucket`](super::RedisTokenBucket).
pub type RedisFixedWindow<C = ConnectionManager> = RedisLimiter<FixedWindowScript, C>;

/// Builds a [`RedisFixedWindow`] (made by [`RedisFixedWindow::builder`]).
pub type RedisFixedWindowBuilder = RedisLimiterBuilder<FixedWindowScript>;

/// The fixed window's script, with its limit and window: what a [`RedisFixedWindow`]
/// runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowScript {
    limit: u32,
    window: Duration,
}

impl FixedWindowScript {
    /// Requests admitted per window.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.window
    }
}

impl LimiterScript for FixedWindowScript {}

impl Sealed for FixedWindowScript {
    const DEFAULT_PREFIX: &'static str = "turnstile:fw:";

    fn algorithm(&self) -> Result<ScriptedAlgorithm, RedisConfigError> {
        algorithm(self.limit, self.window)
    }
}

impl RedisFixedWindow {
    /// A builder for a limiter admitting at most `limit` per `window` for every key,
    /// answering `policy` when Redis does not. Keys are prefixed with `turnstile:fw:`
    /// unless told otherwise.
    pub fn builder(limit: u32, window: Duration, policy: FailurePolicy) -> RedisFixedWindowBuilder {
        RedisLimiterBuilder::new(FixedWindowScript { limit, window }, policy)
    }
}

impl<C> RedisFixedWindow<C> {
    /// Requests admitted per window.
    pub fn limit(&self) -> u32 {
        self.script.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.script.window
    }
}

/// The script and its parameters, or why Redis cannot hold them exactly.
pub(super) fn algorithm(
    limit: u32,
    window: Duration,
) -> Result<ScriptedAlgorithm, RedisConfigError> {
    if limit == 0 {
        return Err(RedisConfigError::ZeroLimit);
    }
    if window < Duration::from_micros(1) {
        return Err(RedisConfigError::ZeroWindow);
    }
    let (micros, whole) = micros_ceil(window);
    if micros > u128::from(MAX_MICROS) {
        return Err(RedisConfigError::WindowTooLong { window });
    }
    // In range: at most 2^52.
    let micros = micros as u64;
    if !whole {
        return Err(RedisConfigError::WindowNotWholeMicros {
            window,
            rounded_up: Duration::from_micros(micros),
        });
    }
    Ok(ScriptedAlgorithm {
        script: &SCRIPT,
        params: [u64::from(limit), micros],
        decide,
        refunds_on_settle: false,
    })
}

/// A decision from the script's reply `{status, remaining, wait}`; `None` for a reply
/// the script never gives, an allowance or a cost above the limit with a wait beside
/// it among them. (The cost is checked against the decision by the engine.)
fn decide([limit, _window]: [u64; 2], reply: &[i64], _cost: u32) -> Option<Decision> {
    let &[status, remaining, wait] = reply else {
        return None;
    };
    let remaining = u32::try_from(remaining).ok()?;
    match status {
        0 if wait == 0 => Some(Decision::Allowed { remaining }),
        1 => {
            let wait = u64::try_from(wait).ok().filter(|&wait| wait > 0)?;
            Some(Decision::Denied {
                remaining,
                retry_after: Duration::from_micros(wait),
            })
        }
        2 if wait == 0 => Some(Decision::ExceedsCapacity {
            remaining,
            capacity: u32::try_from(limit).ok()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_validated_at_construction() {
        let second = Duration::from_secs(1);
        assert!(matches!(
            algorithm(0, second),
            Err(RedisConfigError::ZeroLimit)
        ));
        assert!(matches!(
            algorithm(1, Duration::from_nanos(999)),
            Err(RedisConfigError::ZeroWindow)
        ));
        assert!(matches!(
            algorithm(1, Duration::from_nanos(1500)),
            Err(RedisConfigError::WindowNotWholeMicros { rounded_up, .. })
                if rounded_up == Duration::from_micros(2)
        ));
        let longest = Duration::from_micros(MAX_MICROS);
        assert!(algorithm(1, longest).is_ok());
        assert!(matches!(
            algorithm(1, longest + Duration::from_micros(1)),
            Err(RedisConfigError::WindowTooLong { .. })
        ));
        assert!(matches!(
            algorithm(1, Duration::MAX),
            Err(RedisConfigError::WindowTooLong { .. })
        ));
        assert_eq!(algorithm(100, second).unwrap().params, [100, 1_000_000]);
    }

    #[test]
    fn replies_are_read_exactly_and_strange_ones_refused() {
        assert_eq!(
            decide([3, 1000], &[1, 0, 250], 1),
            Some(Decision::Denied {
                remaining: 0,
                retry_after: Duration::from_micros(250)
            })
        );
        assert_eq!(
            decide([3, 1000], &[2, 1, 0], 1),
            Some(Decision::ExceedsCapacity {
                remaining: 1,
                capacity: 3
            })
        );
        assert_eq!(decide([3, 1000], &[1, 0, 0], 1), None);
        assert_eq!(decide([3, 1000], &[0, 1], 1), None);
        // Found by the `redis_reply` fuzz target: an allowance, or a cost above the
        // limit, with a wait beside it was read as a decision.
        assert_eq!(decide([3, 1000], &[0, 0, 101_284_336], 0), None);
        assert_eq!(decide([3, 1000], &[2, 1, 250], 4), None);
    }
}
