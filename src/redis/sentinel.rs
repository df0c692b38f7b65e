//! A connection that follows the master through Redis Sentinel (feature
//! `redis-sentinel`): [`SentinelConnection`].
//!
//! The `redis` crate's [`SentinelClient`] finds the master once, when asked; its
//! connection manager reconnects to one address. This connection asks the sentinels
//! for the master's address when it has none, talks to that master through a
//! [`ConnectionManager`], and forgets it after an error that says the master is gone
//! (a refused or dropped connection, an I/O error, a timeout) or demoted (a
//! `READONLY` reply: the old master came back as a replica), so the next check asks
//! the sentinels again. During a failover the sentinels still name the old master
//! until they promote a replica: checks fail and the limiter's failure policy answers;
//! after the promotion the next check finds the new master and is decided again.
//!
//! **What a failover can forget.** Redis replicates asynchronously: a write the old
//! master acknowledged and had not yet sent to the replica that is promoted is lost,
//! so a key may admit, beyond its limit, the admissions the old master made within
//! its replication lag before it died (the replica's offset behind the master's). The
//! lag is Redis's, not turnstile's: `min-replicas-max-lag` bounds it (in seconds) by
//! refusing writes when no replica is that current, and a `WAIT` after a write makes
//! it zero for that write. Tested against a master, a replica and three sentinels the
//! test starts, with the master killed mid-run after the replica caught up (`WAIT`):
//! the policy answers during the failover, checks are decided again after the
//! promotion, and every key admits exactly its limit.

use crate::sync::Unpoisoned;
use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::sentinel::SentinelClient;
use ::redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use std::fmt;
use std::sync::{Arc, Mutex};

/// A connection to the master that Redis Sentinel names, following it through
/// failovers; cloning shares it. Build limiters on it with the builders'
/// `connect_sentinel` (or `build_blocking_sentinel`), or with `build` on one made by
/// [`SentinelConnection::new`]. See the [module docs](self).
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    /// The sentinels; one request at a time asks them (the rest wait and use its
    /// answer).
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The master as last resolved, if it has not failed since.
    master: Mutex<Master>,
    config: ConnectionManagerConfig,
}

/// The master's connection and which resolution made it.
struct Master {
    resolution: u64,
    conn: Option<ConnectionManager>,
}

impl SentinelConnection {
    /// A connection that asks `sentinels` (a [`SentinelClient`] for the master,
    /// `SentinelServerType::Master`) for the master on its first request, and
    /// connects to it with `config`
    /// ([`connection_config`](super::connection_config) is turnstile's). No I/O
    /// here: an application starts while the sentinels are down.
    pub fn new(sentinels: SentinelClient, config: ConnectionManagerConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                sentinels: tokio::sync::Mutex::new(sentinels),
                master: Mutex::new(Master {
                    resolution: 0,
                    conn: None,
                }),
                config,
            }),
        }
    }

    /// How many times the sentinels were asked for the master and answered.
    pub fn resolutions(&self) -> u64 {
        self.shared.master().resolution
    }

    /// The master's connection, asking the sentinels for it if there is none.
    async fn master(&self) -> Result<(u64, ConnectionManager), RedisError> {
        if let Some(known) = self.shared.known() {
            return Ok(known);
        }
        let mut sentinels = self.shared.sentinels.lock().await;
        // Another request may have resolved it while this one waited.
        if let Some(known) = self.shared.known() {
            return Ok(known);
        }
        let client = sentinels.async_get_client().await?;
        let conn = ConnectionManager::new_lazy_with_config(client, self.shared.config.clone())?;
        let mut master = self.shared.master();
        master.resolution += 1;
        master.conn = Some(conn.clone());
        Ok((master.resolution, conn))
    }

    /// Forgets the master of `resolution` after `error`, if the error says it is gone
    /// or demoted; a later resolution is kept.
    fn after_error(&self, resolution: u64, error: &RedisError) {
        if !master_lost(error) {
            return;
        }
        let mut master = self.shared.master();
        if master.resolution == resolution {
            master.conn = None;
        }
    }
}

impl Shared {
    fn master(&self) -> std::sync::MutexGuard<'_, Master> {
        // A panic while holding it leaves it consistent: each update is one store.
        self.master.lock().unpoisoned()
    }

    fn known(&self) -> Option<(u64, ConnectionManager)> {
        let master = self.master();
        master.conn.clone().map(|conn| (master.resolution, conn))
    }
}

/// Whether `error` says the master this connection talks to is gone, or no longer
/// the master.
fn master_lost(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.code() == Some("READONLY")
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (resolution, mut conn) = self.master().await?;
            let reply = conn.req_packed_command(cmd).await;
            if let Err(error) = &reply {
                self.after_error(resolution, error);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (resolution, mut conn) = self.master().await?;
            let replies = conn.req_packed_commands(cmd, offset, count).await;
            if let Err(error) = &replies {
                self.after_error(resolution, error);
            }
            replies
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.known().map_or(0, |(_, conn)| conn.get_db())
    }
}

impl fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("resolutions", &self.resolutions())
            .finish_non_exhaustive()
    }
}
