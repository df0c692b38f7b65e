//! The connection turnstile recommends: a `ConnectionManager` made without waiting for
//! Redis, that gives up on a connection attempt or a reply at the check's timeout and
//! retries every 10 to 50 ms while Redis is away, so checks are decided again soon
//! after it returns.

use super::config::ConfigError;
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

/// The longest pause between reconnection attempts of the connections turnstile
/// makes ([`connection_config`]): after Redis comes back, the next attempt is at most
/// this far away.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// The first pause between reconnection attempts; each pause doubles (with jitter)
/// up to [`MAX_RECONNECT_DELAY`].
const MIN_RECONNECT_DELAY: Duration = Duration::from_millis(10);

/// The connection manager settings turnstile uses (`connect`, `connect_client`,
/// `build_blocking`): connection attempts and replies time out at the check's
/// `timeout`, and reconnection retries without end, backing off from 10 ms to
/// [`MAX_RECONNECT_DELAY`] — so a check after Redis came back finds it connected
/// within about 50 ms, where the `redis` crate's defaults back off for seconds.
pub fn connection_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_min_delay(MIN_RECONNECT_DELAY)
        .set_max_delay(MAX_RECONNECT_DELAY)
        .set_number_of_retries(usize::MAX)
}

/// A connection manager for `client` with [`connection_config`]`(timeout)`, made at
/// once: it connects on the first check, so an application starts while Redis is
/// down, and its checks answer by the failure policy until Redis is up.
///
/// # Errors
/// [`ConfigError::NoRuntime`] outside a tokio runtime (the manager's tasks need one);
/// [`ConfigError::Connection`] for a client the manager refuses.
pub(crate) fn lazy_manager(
    client: ::redis::Client,
    timeout: Duration,
) -> Result<ConnectionManager, ConfigError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ConfigError::NoRuntime);
    }
    ConnectionManager::new_lazy_with_config(client, connection_config(timeout))
        .map_err(ConfigError::Connection)
}

/// The `connect` and `connect_client` methods of a Redis limiter's builder, for its
/// `impl` block; `$limiter` is the limiter type.
macro_rules! connect_methods {
    ($limiter:ident) => {
        /// The limiter, on a connection to `redis` (a URL such as
        /// `"redis://127.0.0.1/"` or `"rediss://…"`, or a `redis::ConnectionInfo`)
        /// made the way turnstile recommends: it returns at once, without waiting for
        /// Redis — an application starts while Redis is down, its checks answered by
        /// the failure policy — and it reconnects by itself, trying every 10 to 50 ms
        /// while Redis is away ([`connection_config`](crate::redis::connection_config)).
        /// Call it inside a tokio runtime.
        ///
        /// # Errors
        /// A URL the `redis` crate does not accept ([`ConfigError::Connection`]); no
        /// tokio runtime ([`ConfigError::NoRuntime`]); what [`build`](Self::build)
        /// refuses.
        pub fn connect(
            self,
            redis: impl ::redis::IntoConnectionInfo,
        ) -> Result<$limiter<::redis::aio::ConnectionManager>, ConfigError> {
            let client = ::redis::Client::open(redis).map_err(ConfigError::Connection)?;
            self.connect_client(client)
        }

        /// As [`connect`](Self::connect), from a `redis::Client`.
        ///
        /// # Errors
        /// As [`connect`](Self::connect).
        pub fn connect_client(
            self,
            client: ::redis::Client,
        ) -> Result<$limiter<::redis::aio::ConnectionManager>, ConfigError> {
            self.settings.checked()?;
            let conn = crate::redis::connect::lazy_manager(client, self.settings.timeout)?;
            self.build(conn)
        }
    };
}
pub(crate) use connect_methods;
