//! The Redis limiter, generic over its script, as
//! [`KeyedLimiter`](crate::KeyedLimiter) is over its algorithm: one type, one
//! builder, one set of checks for every algorithm that is one Lua script per check
//! ([`RedisTokenBucket`](super::RedisTokenBucket) and
//! [`RedisFixedWindow`](super::RedisFixedWindow) are aliases of it).

use super::breaker::CircuitState;
use super::config::{RedisConfigError, Settings, TimeSource};
use super::connect::lazy_manager;
use super::engine::{ScriptLimiter, ScriptedAlgorithm};
use super::failure::{CheckError, FailureCounts, FailurePolicy};
use crate::{Settlement, SharedDecision};
use ::redis::aio::{ConnectionLike, ConnectionManager};
use std::fmt;
use std::time::Duration;

/// The script a [`RedisLimiter`] runs for each check, with its parameters: the
/// algorithm, as [`TokenBucketScript`](super::TokenBucketScript) (a quota) or
/// [`FixedWindowScript`](super::FixedWindowScript) (a limit and a window).
///
/// Sealed: the scripts are turnstile's, each with its exactness argument (see the
/// [module docs](super#units-and-limits)); the trait only names them.
pub trait LimiterScript: sealed::Sealed + Clone + fmt::Debug + Send + Sync + 'static {}

pub(super) mod sealed {
    use super::{RedisConfigError, ScriptedAlgorithm};

    /// What the limiter asks of its script; out of reach outside the crate.
    pub trait Sealed {
        /// The prefix of the limiter's keys unless told otherwise.
        const DEFAULT_PREFIX: &'static str;

        /// The script and its parameters, or why Redis cannot hold them exactly.
        fn algorithm(&self) -> Result<ScriptedAlgorithm, RedisConfigError>;
    }
}

/// A limiter whose state lives in Redis, one atomic Lua script per check, shared by
/// every process that uses the same Redis, prefix and parameters. `S` is its script
/// ([`LimiterScript`]); `C` its connection. Use it through its aliases,
/// [`RedisTokenBucket`](super::RedisTokenBucket) and
/// [`RedisFixedWindow`](super::RedisFixedWindow), whose pages say what each decides.
///
/// Checks are `async` and return a [`SharedDecision`]: Redis's exact
/// [`Decision`](crate::Decision), or the [`FailurePolicy`]'s answer and the error when
/// Redis gave none within the timeout. For threads without a runtime, see
/// [`BlockingRedisLimiter`](super::BlockingRedisLimiter).
///
/// Cloning is cheap and shares the connection, the circuit breaker and the failure
/// counters.
pub struct RedisLimiter<S, C = ConnectionManager> {
    pub(crate) limiter: ScriptLimiter<C>,
    pub(crate) script: S,
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for RedisLimiter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("script", &self.script)
            .field("limiter", &self.limiter)
            .finish()
    }
}

impl<S: Clone, C: Clone> Clone for RedisLimiter<S, C> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            script: self.script.clone(),
        }
    }
}

impl<S, C> RedisLimiter<S, C>
where
    S: LimiterScript,
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Asks for `cost` for `key` (any bytes; the prefix is prepended), all or
    /// nothing, in one round trip: one script call.
    ///
    /// A key's first request finds its whole allowance; a denial changes nothing; a
    /// cost of zero is allowed unless the key is in debt (a
    /// [settle](Self::settle) charged it beyond what it had, and refill has not yet
    /// repaid it): a key in debt has less than nothing, so even a cost of zero waits
    /// until the debt is repaid. When Redis does not answer within the timeout,
    /// or answers with an error, the failure policy answers
    /// ([`SharedDecision::Fallback`]) and the failure is counted (`failures`); the
    /// check never waits longer than the timeout.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, cost: u32) -> SharedDecision<CheckError> {
        let check = self.limiter.check(key.as_ref(), cost);
        self.limiter.settle(key.as_ref(), check.await)
    }

    /// Asks for one for `key`: `acquire(key, 1).await.is_allowed()`, the failure
    /// policy included.
    pub async fn try_acquire(&self, key: impl AsRef<[u8]>) -> bool {
        self.acquire(key, 1).await.is_allowed()
    }

    /// What `key` has left now, without taking any or writing anything (an unknown
    /// key has its whole allowance).
    ///
    /// # Errors
    /// Redis did not answer within the timeout, answered with an error, or gave a
    /// reply the scripts never give ([`CheckError::UnexpectedReply`]: not one integer
    /// from 0 to the capacity). There is nothing to allow or deny, so the failure
    /// policy does not apply; the failure is counted in [`FailureCounts::timeouts`]
    /// or [`FailureCounts::errors`].
    pub async fn peek(&self, key: impl AsRef<[u8]>) -> Result<u32, CheckError> {
        let available = self.limiter.available(key.as_ref());
        available
            .await
            .inspect_err(|error| self.limiter.count_error(key.as_ref(), error))
    }

    /// Settles a request admitted for `estimate` (an ordinary
    /// [`acquire`](Self::acquire)) at what it actually cost, in one round trip (none
    /// when `actual == estimate`): below the estimate the token bucket gives the
    /// difference back, capped at the capacity ([`Settlement::refunded`] says what
    /// was), and the fixed window gives nothing back (see
    /// [`RedisFixedWindow`](super::RedisFixedWindow)); above it the difference is
    /// charged even beyond what the key has left, and the key owes it: refused, even
    /// a cost of zero, until refill has repaid the debt, each denial's `retry_after`
    /// counting the debt exactly. A debt is capped at one capacity; what the cap
    /// turns away is [`Settlement::forgiven`]. The key's expiry covers the debt's
    /// repayment, so Redis does not forget what it owes. See the
    /// [module docs](super#reserve-then-settle).
    ///
    /// **A settle is applied as given**: nothing in Redis records what an acquire
    /// took, so settle only what an allowed acquire decided by Redis took, once. A
    /// [`SharedDecision::Fallback`] that allowed took nothing: charge such a request
    /// as `settle(key, 0, actual)`. Only the difference between `estimate` and
    /// `actual` moves the key's state, so an estimate above the capacity (which no
    /// acquire can have taken: it is answered
    /// [`ExceedsCapacity`](crate::Decision::ExceedsCapacity)) is not refused: it is
    /// settled as given, a refund still capped at what the key is short of full, a
    /// charge at the debt cap.
    ///
    /// # Errors
    /// Redis did not answer within the timeout, answered with an error, or gave a
    /// reply the scripts never give. Nothing was settled that this limiter knows of
    /// (a timed-out settle may still run in Redis), and the failure policy does not
    /// apply: a lost charge is an admission not paid for, so the error is returned,
    /// and counted in [`FailureCounts`] as a failed peek is.
    pub async fn settle(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, CheckError> {
        let key = key.as_ref();
        let settle = self.limiter.settle_reservation(key, estimate, actual);
        self.limiter.count_settled(key, settle.await)
    }

    /// How often Redis gave no decision, since this limiter (or the one it was
    /// cloned from) was built.
    pub fn failures(&self) -> FailureCounts {
        self.limiter.failures()
    }

    /// Where the limiter's circuit breaker stands (shared with its clones).
    pub fn circuit(&self) -> CircuitState {
        self.limiter.circuit()
    }

    /// The script and its parameters.
    pub fn script(&self) -> &S {
        &self.script
    }
}

/// Builds a [`RedisLimiter`]: made by [`RedisTokenBucket::builder`] or
/// [`RedisFixedWindow::builder`], then its settings, then a connection.
///
/// [`RedisTokenBucket::builder`]: super::RedisTokenBucket::builder
/// [`RedisFixedWindow::builder`]: super::RedisFixedWindow::builder
#[must_use = "a builder does nothing until it is built"]
#[derive(Debug)]
pub struct RedisLimiterBuilder<S> {
    pub(crate) script: S,
    pub(crate) settings: Settings,
}

impl<S: LimiterScript> RedisLimiterBuilder<S> {
    /// A builder for `script`, answering `policy` when Redis does not.
    pub(crate) fn new(script: S, policy: FailurePolicy) -> Self {
        Self {
            script,
            settings: Settings::new(policy, S::DEFAULT_PREFIX),
        }
    }

    /// Prepends `prefix` to every key (binary-safe). Give each quota its own prefix:
    /// limiters with different quotas under one prefix share their keys' state. On
    /// Redis Cluster, leave hash tags (`{...}`) out of the prefix, or every key lands
    /// in one slot; see the [module docs](crate::redis).
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.settings.prefix = prefix.as_ref().to_vec();
        self
    }

    /// How long a check waits for Redis before the failure policy answers (default
    /// [`DEFAULT_TIMEOUT`](crate::redis::DEFAULT_TIMEOUT), 50 ms). The wait covers
    /// connecting, sending, the script and the reply.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// Takes the time from `clock` instead of Redis's `TIME`, in whole microseconds
    /// since this call (the limiter's epoch, as in-process).
    ///
    /// For tests: under a [`ManualClock`](crate::ManualClock) the limiter decides
    /// exactly as the in-process one does. Each app server's clock has its own epoch
    /// and skew, so app servers sharing a limit keep the default, Redis's time. Key
    /// expiry runs on Redis's own clock: with a clock that does not advance in real
    /// time, turn it off (`expire_idle_keys(false)`), or a key may be forgotten before
    /// this clock says its state stopped mattering.
    pub fn client_clock(mut self, clock: impl crate::Clock + 'static) -> Self {
        let epoch = clock.now();
        self.settings.time = TimeSource::Client {
            clock: std::sync::Arc::new(clock),
            epoch,
        };
        self
    }

    /// Whether each written key gets a `PEXPIRE` at the moment its state stops
    /// mattering (a bucket full again, a window over), so Redis forgets idle clients
    /// by itself. Default `true`; turn it off only for a client clock that does not
    /// run in real time (see `client_clock`).
    pub fn expire_idle_keys(mut self, expire: bool) -> Self {
        self.settings.expire_idle_keys = expire;
        self
    }

    /// The circuit breaker (default [`CircuitBreaker::default`](crate::redis::CircuitBreaker):
    /// open after 3 consecutive failures, back off 10 to 50 ms;
    /// [`CircuitBreaker::off`](crate::redis::CircuitBreaker::off) for none).
    pub fn circuit_breaker(mut self, breaker: crate::redis::CircuitBreaker) -> Self {
        self.settings.breaker = breaker;
        self
    }

    /// Names the limiter in metrics and events (features `metrics`, `tracing`): its
    /// decisions, fallbacks and Redis failures are reported under this name (see
    /// [`crate::observe`]). An unnamed limiter reports nothing.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<std::sync::Arc<str>>) -> Self {
        self.settings.name = Some(name.into());
        self
    }

    /// The limiter, on `conn`: a [`ConnectionManager`] (reconnects by itself: the
    /// usual choice; [`connect`](Self::connect) makes one), a
    /// `MultiplexedConnection`, or a cluster connection.
    ///
    /// # Errors
    /// Parameters the script cannot hold exactly (a token bucket's refill interval
    /// that is not a whole number of microseconds, or a capacity × interval above
    /// 2^52 µs; a fixed window's zero limit, or a window under 1 µs, over 2^52 µs or
    /// not a whole number of microseconds), or settings that cannot work (a zero
    /// timeout, a circuit breaker's back-offs out of order).
    pub fn build<C>(self, conn: C) -> Result<RedisLimiter<S, C>, RedisConfigError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let algorithm = self.script.algorithm()?;
        let settings = self.settings.checked()?;
        Ok(RedisLimiter {
            limiter: ScriptLimiter::new(algorithm, settings, conn),
            script: self.script,
        })
    }

    /// The limiter, on a connection to `redis` (a URL such as `"redis://127.0.0.1/"`
    /// or `"rediss://…"`, or a `redis::ConnectionInfo`) made the way turnstile
    /// recommends: it returns at once, without waiting for Redis — an application
    /// starts while Redis is down, its checks answered by the failure policy — and it
    /// reconnects by itself, at most 50 ms between attempts while Redis is away
    /// ([`connection_config`](crate::redis::connection_config)). Call it inside a
    /// tokio runtime.
    ///
    /// # Errors
    /// A URL the `redis` crate does not accept ([`RedisConfigError::Connection`]); no
    /// tokio runtime ([`RedisConfigError::NoRuntime`]); what [`build`](Self::build)
    /// refuses.
    pub fn connect(
        self,
        redis: impl ::redis::IntoConnectionInfo,
    ) -> Result<RedisLimiter<S, ConnectionManager>, RedisConfigError> {
        let client = ::redis::Client::open(redis).map_err(RedisConfigError::Connection)?;
        self.connect_client(client)
    }

    /// As [`connect`](Self::connect), from a `redis::Client`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn connect_client(
        self,
        client: ::redis::Client,
    ) -> Result<RedisLimiter<S, ConnectionManager>, RedisConfigError> {
        self.validate()?;
        let conn = lazy_manager(client, self.settings.timeout)?;
        self.build(conn)
    }

    /// The limiter, on a [`SentinelConnection`](crate::redis::sentinel::SentinelConnection)
    /// to the master `sentinels` names, with
    /// [`connection_config`](crate::redis::connection_config): it follows the master
    /// through failovers (see [`crate::redis::sentinel`]). Returns at once, without
    /// asking the sentinels.
    ///
    /// # Errors
    /// What [`build`](Self::build) refuses.
    #[cfg(feature = "redis-sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-sentinel")))]
    pub fn connect_sentinel(
        self,
        sentinels: ::redis::sentinel::SentinelClient,
    ) -> Result<RedisLimiter<S, crate::redis::sentinel::SentinelConnection>, RedisConfigError> {
        self.validate()?;
        let config = crate::redis::connection_config(self.settings.timeout);
        self.build(crate::redis::sentinel::SentinelConnection::new(
            sentinels, config,
        ))
    }

    /// Checks the parameters and settings without building: for the blocking
    /// limiter, which starts its runtime only for a limiter that will be built, and
    /// for `connect`, which makes its connection only then.
    pub(crate) fn validate(&self) -> Result<(), RedisConfigError> {
        self.script.algorithm()?;
        self.settings.checked().map(drop)
    }
}
