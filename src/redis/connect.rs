//! The connection turnstile recommends: a `ConnectionManager` made without waiting for
//! Redis, whose replies time out at the check's timeout, which retries quickly while
//! Redis is away, so checks are decided again soon after it returns, and which lets a
//! setup error (a wrong password or database, an untrusted certificate) reach the
//! checks instead of retrying it forever.

use super::config::RedisConfigError;
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

/// The longest pause between two reconnection attempts of the connections turnstile
/// makes ([`connection_config`]): after Redis comes back, the next attempt is at most
/// this far away.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// The `redis` crate adds a random 0–100 % to each pause (jitter), so the pauses are
/// set to half of what they may reach: 5 ms first, doubling to 25 ms.
const MIN_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(25);

/// Attempts per reconnection (about 0.1 to 0.2 s in all) before the error reaches the
/// checks; the next check starts another round. Without end, a setup error would
/// look like a timeout forever.
const ATTEMPTS: usize = 6;

/// The shortest time a connection attempt is given: connecting, a TLS handshake and
/// `HELLO`/`AUTH` to a remote Redis can take longer than a check may wait, and an
/// attempt cut short at the check's timeout would never connect. A check still gives
/// up at its own timeout while the attempt goes on.
const MIN_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// The connection manager settings turnstile uses (`connect`, `connect_client`,
/// `build_blocking`): replies time out at the check's `timeout`, connection attempts
/// at the longer of it and one second; reconnection pauses grow from 5–10 ms to at
/// most [`MAX_RECONNECT_DELAY`] (the `redis` crate's defaults back off for seconds),
/// six attempts a round, after which the error reaches the checks and the next check
/// starts another round.
pub fn connection_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout.max(MIN_CONNECTION_TIMEOUT)))
        .set_response_timeout(Some(timeout))
        .set_min_delay(MIN_PAUSE)
        .set_max_delay(MAX_PAUSE)
        .set_number_of_retries(ATTEMPTS)
}

/// A connection manager for `client` with [`connection_config`]`(timeout)`, made at
/// once: it connects on the first check, so an application starts while Redis is
/// down, and its checks answer by the failure policy until Redis is up.
///
/// # Errors
/// [`RedisConfigError::NoRuntime`] outside a tokio runtime (the manager's tasks need one);
/// [`RedisConfigError::Connection`] for a client the manager refuses.
pub(crate) fn lazy_manager(
    client: ::redis::Client,
    timeout: Duration,
) -> Result<ConnectionManager, RedisConfigError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(RedisConfigError::NoRuntime);
    }
    ConnectionManager::new_lazy_with_config(client, connection_config(timeout))
        .map_err(RedisConfigError::Connection)
}
