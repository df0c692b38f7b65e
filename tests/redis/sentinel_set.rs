//! A master, its replica and three sentinels watching it, started from PATH for one
//! test (or one benchmark run). Shared by `tests/redis/sentinel.rs` and
//! `benches/redis_sentinel.rs`.
#![allow(dead_code)]

use crate::server::{RedisServer, free_loopback_port, ping};
use ::redis::sentinel::{SentinelClient, SentinelServerType};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the sentinels monitor the master under.
const MASTER: &str = "turnstile";

/// A master, its replica and three sentinels watching it (quorum 2, a master down
/// after 500 ms without an answer); every process killed on drop.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    dir: std::path::PathBuf,
}

impl SentinelSet {
    /// Starts the set and waits until the replica is in sync and every sentinel knows
    /// the replica and the two other sentinels, so a failover can happen.
    pub fn start() -> Self {
        let master = RedisServer::start();
        let replica = RedisServer::start_with_args(&[
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ]);
        wait_for("the replica to sync", || {
            info(replica.port(), "replication").contains("master_link_status:up")
        });
        let dir = std::env::temp_dir().join(format!(
            "turnstile-sentinel-{}-{}",
            std::process::id(),
            master.port()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the sentinels' configs");
        let sentinels = (0..3)
            .map(|_| start_sentinel(&dir, master.port()))
            .collect();
        let set = Self {
            master,
            replica,
            sentinels,
            dir,
        };
        for &(port, _) in &set.sentinels {
            wait_for("the sentinels to find each other and the replica", || {
                let state = sentinel_master(port);
                state.contains("num-slaves\n1") && state.contains("num-other-sentinels\n2")
            });
        }
        set
    }

    /// A client asking the sentinels for the master.
    // `SentinelClient::build` takes a `String` without the `redis` crate's
    // `tls-rustls` and an `impl AsRef<str>` with it: a `String` fits both.
    #[allow(clippy::unnecessary_to_owned)]
    pub fn client(&self) -> SentinelClient {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|(port, _)| format!("redis://127.0.0.1:{port}/"))
            .collect();
        SentinelClient::build(urls, MASTER.to_string(), None, SentinelServerType::Master)
            .expect("a sentinel client")
    }

    /// Waits until the replica has every write the master acknowledged (`WAIT 1`).
    pub fn replicated(&self) {
        let mut conn = self.master.client().get_connection().expect("the master");
        let acked: i64 = ::redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut conn)
            .expect("WAIT");
        assert_eq!(acked, 1, "the replica acknowledged the writes");
    }

    /// Whether the replica has been promoted.
    pub fn promoted(&self) -> bool {
        info(self.replica.port(), "replication").contains("role:master")
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A sentinel on a free port watching the master on `master_port`.
fn start_sentinel(dir: &std::path::Path, master_port: u16) -> (u16, Child) {
    let port = free_loopback_port();
    let config = dir.join(format!("sentinel-{port}.conf"));
    let text = format!(
        "port {port}\nbind 127.0.0.1\ndir {dir}\n\
         sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
         sentinel down-after-milliseconds {MASTER} 500\n\
         sentinel failover-timeout {MASTER} 5000\n\
         sentinel parallel-syncs {MASTER} 1\n",
        dir = dir.display()
    );
    std::fs::write(&config, text).expect("a sentinel config");
    let child = Command::new("redis-server")
        .arg(&config)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server --sentinel runs");
    wait_for("a sentinel to answer", || ping(port));
    (port, child)
}

/// `INFO section` of the server on `port`.
fn info(port: u16, section: &str) -> String {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let Ok(mut conn) = client.get_connection() else {
        return String::new();
    };
    ::redis::cmd("INFO")
        .arg(section)
        .query(&mut conn)
        .unwrap_or_default()
}

/// `SENTINEL MASTER` of the sentinel on `port`, one field or value a line.
fn sentinel_master(port: u16) -> String {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let Ok(mut conn) = client.get_connection() else {
        return String::new();
    };
    let fields: Vec<String> = ::redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(MASTER)
        .query(&mut conn)
        .unwrap_or_default();
    fields.join("\n")
}

/// Waits until `ready`, at most 60 s (a liveness bound for a loaded machine, not a
/// timing assertion).
pub fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
