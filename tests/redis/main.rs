//! The Redis limiters against a real `redis-server` (never a mock): each test starts
//! its own on a free loopback port, with persistence off, and kills it at the end.
//! Built only with the `redis` feature; `bash .ci/test` installs the server if needed.

mod cluster_server;
mod server;

mod blocking;
mod breaker;
mod cluster;
#[cfg(feature = "config")]
mod config;
mod connect;
mod expiry;
mod failure;
mod five_servers;
mod fixed_window;
mod foreign;
mod keys;
mod lease;
mod policy;
#[cfg(feature = "redis-sentinel")]
mod sentinel;
#[cfg(feature = "redis-sentinel")]
mod sentinel_set;
mod settle;
#[cfg(feature = "redis-tls")]
mod tls;
mod token_bucket;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use server::RedisServer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A connection manager for `server` that retries quickly after an outage.
pub async fn manager(server: &RedisServer) -> ConnectionManager {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_max_delay(Duration::from_millis(100));
    ConnectionManager::new_with_config(server.client(), config)
        .await
        .expect("connects to the test server")
}

/// A plain connection for looking at what the limiters stored.
pub async fn inspector(server: &RedisServer) -> MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connects to the test server")
}

/// `PTTL key`: milliseconds left, -1 without expiry, -2 when the key does not exist.
pub async fn pttl(conn: &mut MultiplexedConnection, key: &[u8]) -> i64 {
    ::redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// Whether `key` exists.
pub async fn exists(conn: &mut MultiplexedConnection, key: &[u8]) -> bool {
    ::redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(conn)
        .await
        .expect("EXISTS")
        == 1
}

/// The server's clock, in microseconds since the Unix epoch.
pub async fn server_time(conn: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1_000_000 + micros
}

/// A prefix no other test case uses, so each case starts from an empty keyspace.
pub fn fresh_prefix(name: &str) -> String {
    static CASES: AtomicU64 = AtomicU64::new(0);
    format!("test:{name}:{}:", CASES.fetch_add(1, Ordering::Relaxed))
}

/// A multi-threaded runtime for tests that drive async limiters from plain code.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}
