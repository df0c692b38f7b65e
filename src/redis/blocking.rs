//! The Redis limiters for threads without an async runtime: [`BlockingRedisLimiter`]
//! and its aliases.

use super::breaker::CircuitState;
use super::config::RedisConfigError;
use super::connect::connection_config;
use super::engine::ScriptLimiter;
use super::failure::{CheckError, FailureCounts};
use super::fixed_window::FixedWindowScript;
use super::limiter::{LimiterScript, RedisLimiter, RedisLimiterBuilder};
use super::token_bucket::TokenBucketScript;
use crate::{Quota, Settlement, SharedDecision};
use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

/// A runtime that shuts down without blocking when the last limiter using it is
/// dropped, so dropping a blocking limiter inside async code does not panic.
struct OwnedRuntime {
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl OwnedRuntime {
    fn start() -> Result<Self, RedisConfigError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("turnstile-redis")
            .enable_all()
            .build()
            .map_err(RedisConfigError::Runtime)?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }
}

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for OwnedRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnedRuntime")
    }
}

/// A runtime and a connection manager on it, for `client`.
fn connect(
    client: ::redis::Client,
    config: ConnectionManagerConfig,
) -> Result<(Arc<OwnedRuntime>, ConnectionManager), RedisConfigError> {
    let runtime = OwnedRuntime::start()?;
    let conn = {
        let _entered = runtime.handle.enter();
        ConnectionManager::new_lazy_with_config(client, config)
            .map_err(RedisConfigError::Connection)?
    };
    Ok((Arc::new(runtime), conn))
}

/// Runs `future` on `runtime`, waiting at most `timeout` for its result.
fn block_on<T: Send + 'static>(
    runtime: &OwnedRuntime,
    timeout: Duration,
    future: impl Future<Output = Result<T, CheckError>> + Send + 'static,
) -> Result<T, CheckError> {
    let (send, receive) = mpsc::sync_channel(1);
    runtime.handle.spawn(async move {
        // The receiver may have stopped waiting (timeout); then nobody needs the result.
        let _ = send.send(future.await);
    });
    match receive.recv_timeout(timeout) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(CheckError::Timeout(timeout)),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(CheckError::TaskLost),
    }
}

/// The blocking twin of [`RedisLimiter`]: same script, same semantics, same method
/// names, called from plain threads. Made by a builder's
/// [`build_blocking`](RedisLimiterBuilder::build_blocking); used through its aliases,
/// [`BlockingRedisTokenBucket`] and [`BlockingRedisFixedWindow`].
///
/// It owns a small tokio runtime (one worker thread) that drives its
/// [`ConnectionManager`]; a check hands the async check to that worker and waits on a
/// channel for at most the timeout. Any number of threads may check at once: their
/// requests share the one multiplexed connection, pipelined. Waiting on a channel
/// rather than `Runtime::block_on` keeps a check from panicking when it is called from
/// inside another runtime (it still blocks that runtime's thread: async code should
/// use the async limiters).
///
/// Cloning is cheap and shares the runtime, connection and counters.
///
/// ```no_run
/// use turnstile::Quota;
/// use turnstile::redis::{FailurePolicy, RedisTokenBucket};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let limiter = RedisTokenBucket::builder(Quota::per_second(10)?, FailurePolicy::Closed)
///     .build_blocking(client)?;
/// if limiter.try_acquire("alice") {
///     // serve the request
/// }
/// # Ok(())
/// # }
/// ```
pub struct BlockingRedisLimiter<S, C = ConnectionManager> {
    inner: RedisLimiter<S, C>,
    runtime: Arc<OwnedRuntime>,
}

/// The blocking twin of [`RedisTokenBucket`](super::RedisTokenBucket).
pub type BlockingRedisTokenBucket<C = ConnectionManager> =
    BlockingRedisLimiter<TokenBucketScript, C>;

/// The blocking twin of [`RedisFixedWindow`](super::RedisFixedWindow).
pub type BlockingRedisFixedWindow<C = ConnectionManager> =
    BlockingRedisLimiter<FixedWindowScript, C>;

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for BlockingRedisLimiter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingRedisLimiter")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S: Clone, C: Clone> Clone for BlockingRedisLimiter<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            runtime: Arc::clone(&self.runtime),
        }
    }
}

impl<S: LimiterScript> RedisLimiterBuilder<S> {
    /// A blocking limiter with its own runtime and a [`ConnectionManager`] for
    /// `client`, configured by [`connection_config`]. Redis need not be up yet.
    ///
    /// # Errors
    /// As [`build`](Self::build), plus a runtime that cannot start or a client the
    /// connection manager refuses.
    pub fn build_blocking(
        self,
        client: ::redis::Client,
    ) -> Result<BlockingRedisLimiter<S>, RedisConfigError> {
        let config = connection_config(self.settings.timeout);
        self.build_blocking_with_config(client, config)
    }

    /// As [`build_blocking`](Self::build_blocking), with your own connection manager
    /// settings.
    ///
    /// # Errors
    /// As [`build_blocking`](Self::build_blocking).
    pub fn build_blocking_with_config(
        self,
        client: ::redis::Client,
        config: ConnectionManagerConfig,
    ) -> Result<BlockingRedisLimiter<S>, RedisConfigError> {
        self.validate()?;
        let (runtime, conn) = connect(client, config)?;
        Ok(BlockingRedisLimiter {
            inner: self.build(conn)?,
            runtime,
        })
    }

    /// A blocking limiter with its own runtime, on Redis Cluster: a connection to the
    /// cluster `client` names, made now (within the check's timeout, at least one
    /// second), which routes each check to its key's node and follows the cluster's
    /// slot map as it changes. Build it with `circuit_breaker(CircuitBreaker::off())`
    /// and a client whose response timeout is longer than the check's: see
    /// [Keys and Redis Cluster](super#keys-and-redis-cluster).
    ///
    /// # Errors
    /// As [`build`](Self::build), plus a runtime that cannot start or no node
    /// answering ([`RedisConfigError::Connection`]).
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn build_blocking_cluster(
        self,
        client: ::redis::cluster::ClusterClient,
    ) -> Result<BlockingRedisLimiter<S, ::redis::cluster_async::ClusterConnection>, RedisConfigError>
    {
        self.validate()?;
        let wait = self.settings.timeout.max(Duration::from_secs(1));
        let (runtime, conn) = connect_cluster(client, wait)?;
        Ok(BlockingRedisLimiter {
            inner: self.build(conn)?,
            runtime,
        })
    }

    /// A blocking limiter with its own runtime, on a
    /// [`SentinelConnection`](super::sentinel::SentinelConnection) to the master
    /// `sentinels` names, configured by [`connection_config`]: it follows the master
    /// through failovers (see [`super::sentinel`]). Asks nothing yet.
    ///
    /// # Errors
    /// As [`build`](Self::build), plus a runtime that cannot start.
    #[cfg(feature = "redis-sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-sentinel")))]
    pub fn build_blocking_sentinel(
        self,
        sentinels: ::redis::sentinel::SentinelClient,
    ) -> Result<BlockingRedisLimiter<S, super::sentinel::SentinelConnection>, RedisConfigError>
    {
        self.validate()?;
        let runtime = Arc::new(OwnedRuntime::start()?);
        let config = connection_config(self.settings.timeout);
        Ok(BlockingRedisLimiter {
            inner: self.build(super::sentinel::SentinelConnection::new(sentinels, config))?,
            runtime,
        })
    }
}

impl<S, C> BlockingRedisLimiter<S, C>
where
    S: LimiterScript,
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// As [`RedisLimiter::acquire`], blocking for at most the timeout.
    pub fn acquire(&self, key: impl AsRef<[u8]>, cost: u32) -> SharedDecision<CheckError> {
        let limiter = &self.inner.limiter;
        let key = key.as_ref();
        let check = limiter.check(key, cost);
        let result = block_on(&self.runtime, limiter.timeout(), check);
        limiter.settle(key, result)
    }

    /// `acquire(key, 1).is_allowed()`, the failure policy included.
    pub fn try_acquire(&self, key: impl AsRef<[u8]>) -> bool {
        self.acquire(key, 1).is_allowed()
    }

    /// As [`RedisLimiter::peek`], blocking for at most the timeout.
    ///
    /// # Errors
    /// As [`RedisLimiter::peek`].
    pub fn peek(&self, key: impl AsRef<[u8]>) -> Result<u32, CheckError> {
        let limiter: &ScriptLimiter<C> = &self.inner.limiter;
        let key = key.as_ref();
        let available = limiter.available(key);
        block_on(&self.runtime, limiter.timeout(), available)
            .inspect_err(|error| limiter.count_error(key, error))
    }

    /// As [`RedisLimiter::settle`], blocking for at most the timeout.
    ///
    /// # Errors
    /// As [`RedisLimiter::settle`].
    pub fn settle(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, CheckError> {
        let limiter: &ScriptLimiter<C> = &self.inner.limiter;
        let key = key.as_ref();
        let settle = limiter.settle_reservation(key, estimate, actual);
        let result = block_on(&self.runtime, limiter.timeout(), settle);
        limiter.count_settled(key, result)
    }

    /// How often Redis gave no decision.
    pub fn failures(&self) -> FailureCounts {
        self.inner.failures()
    }

    /// Where the limiter's circuit breaker stands (shared with its clones).
    pub fn circuit(&self) -> CircuitState {
        self.inner.circuit()
    }

    /// The script and its parameters.
    pub fn script(&self) -> &S {
        self.inner.script()
    }
}

impl<C> BlockingRedisTokenBucket<C> {
    /// The quota every key gets.
    pub fn quota(&self) -> Quota {
        self.inner.quota()
    }
}

impl<C> BlockingRedisFixedWindow<C> {
    /// Requests admitted per window.
    pub fn limit(&self) -> u32 {
        self.inner.limit()
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.inner.window()
    }
}

/// A runtime and a connection to the cluster `client` names, made on it: within
/// `timeout`, or refused.
#[cfg(feature = "redis-cluster")]
fn connect_cluster(
    client: ::redis::cluster::ClusterClient,
    timeout: Duration,
) -> Result<(Arc<OwnedRuntime>, ::redis::cluster_async::ClusterConnection), RedisConfigError> {
    let runtime = OwnedRuntime::start()?;
    let connect = async move {
        client
            .get_async_connection()
            .await
            .map_err(CheckError::Redis)
    };
    match block_on(&runtime, timeout, connect) {
        Ok(conn) => Ok((Arc::new(runtime), conn)),
        Err(CheckError::Redis(error)) => Err(RedisConfigError::Connection(error)),
        Err(other) => Err(RedisConfigError::Connection(::redis::RedisError::from((
            ::redis::ErrorKind::Io,
            "no cluster node answered",
            other.to_string(),
        )))),
    }
}
