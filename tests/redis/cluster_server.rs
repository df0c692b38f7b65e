//! A Redis Cluster of three masters on loopback, for one test or one benchmark run:
//! started by `redis-cli --cluster create` (Debian's redis-tools, installed with
//! redis-server), each master's data on disk in a directory of its own, everything
//! killed and removed when dropped. Shared by tests/redis/cluster.rs and
//! benches/redis.rs.
#![allow(dead_code)]

use crate::server::{RedisServer, free_loopback_port};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Three masters, their data and node files in a directory of their own.
pub struct Cluster {
    pub masters: Vec<RedisServer>,
    dir: std::path::PathBuf,
}

impl Cluster {
    /// Three masters on loopback ports, the slots spread over them, the cluster ok;
    /// each writes its data to disk before replying, so a restarted master keeps it.
    pub fn start() -> Self {
        Self::start_with(true)
    }

    /// As [`Cluster::start`]; `durable: false` keeps the data in memory only (no
    /// fsync per write: what a throughput comparison with a memory-only single node
    /// wants).
    pub fn start_with(durable: bool) -> Self {
        static CLUSTERS: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "turnstile-cluster-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let masters: Vec<RedisServer> = (0..3)
            .map(|i| {
                let node_dir = dir.join(format!("node{i}"));
                std::fs::create_dir_all(&node_dir).unwrap();
                RedisServer::start_with_args(&[
                    "--cluster-enabled".into(),
                    "yes".into(),
                    // The bus port is normally port + 10000, which may not exist.
                    "--cluster-port".into(),
                    free_loopback_port().to_string(),
                    "--cluster-node-timeout".into(),
                    "2000".into(),
                    "--dir".into(),
                    node_dir.to_string_lossy().into_owned(),
                    // On disk, written before each reply: a restarted master keeps
                    // every decision it made.
                    "--appendonly".into(),
                    if durable { "yes" } else { "no" }.into(),
                    "--appendfsync".into(),
                    "always".into(),
                ])
            })
            .collect();
        let addresses: Vec<String> = masters
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("redis-cli (Debian's redis-tools, installed with redis-server)");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = Self { masters, dir };
        cluster.until_ok();
        cluster
    }

    /// Waits until every master says the cluster is ok.
    pub fn until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for master in &self.masters {
            let mut conn = master.client().get_connection().unwrap();
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster never became ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// A client that knows every master. Its response timeout is longer than the
    /// limiters' check timeout: the cluster client retries a request that timed out,
    /// and a script run twice takes twice — the check gives up first instead.
    pub fn client(&self) -> ClusterClient {
        ClusterClient::builder(self.masters.iter().map(|m| m.url()))
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }

    /// A connection of its own.
    pub async fn connection(&self) -> ClusterConnection {
        self.client().get_async_connection().await.unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for master in &mut self.masters {
            master.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
