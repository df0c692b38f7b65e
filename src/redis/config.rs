//! Settings shared by the Redis limiters, their builder, and what construction refuses.

use super::breaker::CircuitBreaker;
use super::failure::FailurePolicy;
use crate::Clock;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The largest time the scripts handle, in microseconds: 2^52 µs, about 142 years.
/// Times, refill-to-full spans and windows up to it keep every sum in the scripts
/// below 2^53, where Lua's doubles are still exact integers.
pub(crate) const MAX_MICROS: u64 = 1 << 52;

/// How long a check waits for Redis unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// Where a limiter's time comes from.
#[derive(Clone)]
pub(crate) enum TimeSource {
    /// Redis's `TIME`, read inside the script: one clock for every app server, in
    /// microseconds since the Unix epoch, which is the refill grid's origin.
    Server,
    /// The caller's clock, in microseconds since the limiter was built. A trait object
    /// rather than a type parameter: one virtual call beside a network round trip costs
    /// nothing measurable, and it keeps the limiter's type to its connection.
    Client { clock: Arc<dyn Clock>, epoch: u64 },
}

impl TimeSource {
    /// The time to send with a check: `None` for the server's own, otherwise whole
    /// microseconds since the epoch, saturating at [`MAX_MICROS`].
    pub(crate) fn now_micros(&self) -> Option<u64> {
        match self {
            TimeSource::Server => None,
            TimeSource::Client { clock, epoch } => {
                Some((clock.now().saturating_sub(*epoch) / 1000).min(MAX_MICROS))
            }
        }
    }
}

impl fmt::Debug for TimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeSource::Server => f.write_str("Server"),
            TimeSource::Client { epoch, .. } => {
                f.debug_struct("Client").field("epoch", epoch).finish()
            }
        }
    }
}

/// Settings every Redis limiter has.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) prefix: Vec<u8>,
    pub(crate) timeout: Duration,
    pub(crate) policy: FailurePolicy,
    pub(crate) time: TimeSource,
    pub(crate) expire_idle_keys: bool,
    pub(crate) breaker: CircuitBreaker,
    /// The name metrics and events report the limiter under.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(crate) name: Option<Arc<str>>,
}

impl Settings {
    /// The settings every limiter starts with.
    pub(crate) fn new(policy: FailurePolicy, default_prefix: &str) -> Self {
        Self {
            prefix: default_prefix.as_bytes().to_vec(),
            timeout: DEFAULT_TIMEOUT,
            policy,
            time: TimeSource::Server,
            expire_idle_keys: true,
            breaker: CircuitBreaker::default(),
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            name: None,
        }
    }

    /// The settings, checked.
    pub(crate) fn checked(&self) -> Result<Settings, RedisConfigError> {
        if self.timeout.is_zero() {
            return Err(RedisConfigError::ZeroTimeout);
        }
        if let Some(why) = self.breaker.invalid() {
            return Err(RedisConfigError::CircuitBreaker(why));
        }
        Ok(self.clone())
    }
}

/// `d` in microseconds rounded up, and whether it was a whole number of them.
pub(crate) fn micros_ceil(d: Duration) -> (u128, bool) {
    let nanos = d.as_nanos();
    (nanos.div_ceil(1000), nanos.is_multiple_of(1000))
}

/// Why a Redis limiter was not built. More reasons may come with more settings,
/// hence `#[non_exhaustive]`.
#[non_exhaustive]
#[derive(Debug)]
pub enum RedisConfigError {
    /// The quota's refill interval is not a whole number of microseconds. The scripts
    /// count time in microseconds (the resolution of Redis's `TIME`); rounding the
    /// interval silently would change the rate.
    IntervalNotWholeMicros {
        /// The interval asked for.
        refill_every: Duration,
        /// The interval rounded up to the microsecond, which keeps the rate at or
        /// below the one asked for.
        rounded_up: Duration,
    },
    /// Refilling an empty bucket would take longer than 2^52 µs (about 142 years):
    /// capacity × interval must stay within what the script's numbers hold exactly.
    RefillTooLong {
        /// The capacity asked for.
        capacity: u32,
        /// The interval asked for.
        refill_every: Duration,
    },
    /// A fixed window's limit is zero: nothing could ever pass.
    ZeroLimit,
    /// A fixed window's window is shorter than one microsecond.
    ZeroWindow,
    /// A fixed window's window is not a whole number of microseconds.
    WindowNotWholeMicros {
        /// The window asked for.
        window: Duration,
        /// The window rounded up to the microsecond.
        rounded_up: Duration,
    },
    /// A fixed window's window is longer than 2^52 µs (about 142 years).
    WindowTooLong {
        /// The window asked for.
        window: Duration,
    },
    /// The timeout is zero: every check would fail.
    ZeroTimeout,
    /// The circuit breaker's settings: a zero minimum back-off, or a maximum below
    /// the minimum.
    CircuitBreaker(&'static str),
    /// A leased limiter's settings: a lease lifetime too short or too long, or a
    /// `max_lease` of zero or beyond the capacity or 2^24 - 1.
    Lease(&'static str),
    /// The blocking limiter's runtime could not be started.
    Runtime(std::io::Error),
    /// The connection manager could not be made: a URL the `redis` crate does not
    /// accept, or a client configuration it refuses. An unreachable server is not an
    /// error at construction.
    Connection(::redis::RedisError),
    /// `connect` was called outside a tokio runtime, which the connection manager's
    /// tasks need.
    NoRuntime,
}

impl fmt::Display for RedisConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = Duration::from_micros(MAX_MICROS);
        match self {
            RedisConfigError::IntervalNotWholeMicros {
                refill_every,
                rounded_up,
            } => write!(
                f,
                "refill interval {refill_every:?} is not a whole number of microseconds: Redis \
                 limiters count time in microseconds (the resolution of Redis TIME), and \
                 rounding silently would change the rate; use a quota with a refill interval \
                 of {rounded_up:?} (rounded up, so the rate stays at or below the one asked for)"
            ),
            RedisConfigError::RefillTooLong {
                capacity,
                refill_every,
            } => write!(
                f,
                "capacity {capacity} × refill interval {refill_every:?} exceeds {max:?} (2^52 µs): \
                 the Redis script's numbers are doubles, exact only below 2^53"
            ),
            RedisConfigError::ZeroLimit => write!(f, "fixed window limit must be at least 1"),
            RedisConfigError::ZeroWindow => {
                write!(f, "fixed window must be at least 1 microsecond")
            }
            RedisConfigError::WindowNotWholeMicros { window, rounded_up } => write!(
                f,
                "window {window:?} is not a whole number of microseconds: Redis limiters count \
                 time in microseconds (the resolution of Redis TIME); use a window of \
                 {rounded_up:?}"
            ),
            RedisConfigError::WindowTooLong { window } => write!(
                f,
                "window {window:?} exceeds {max:?} (2^52 µs): the Redis script's numbers are \
                 doubles, exact only below 2^53"
            ),
            RedisConfigError::ZeroTimeout => write!(f, "timeout must be longer than zero"),
            RedisConfigError::CircuitBreaker(why) => write!(f, "circuit breaker refused: {why}"),
            RedisConfigError::Lease(why) => write!(f, "lease settings refused: {why}"),
            RedisConfigError::Runtime(error) => {
                write!(f, "could not start the blocking limiter's runtime: {error}")
            }
            RedisConfigError::Connection(error) => {
                write!(f, "could not make the connection manager: {error}")
            }
            RedisConfigError::NoRuntime => write!(
                f,
                "no tokio runtime: connect inside one (the connection manager runs on it), \
                 or use build_blocking"
            ),
        }
    }
}

impl std::error::Error for RedisConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisConfigError::Runtime(error) => Some(error),
            RedisConfigError::Connection(error) => Some(error),
            _ => None,
        }
    }
}
