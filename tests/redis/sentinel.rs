//! Redis Sentinel: a master, a replica and three sentinels the test starts, the
//! master killed mid-run. The failure policy answers during the failover, checks are
//! decided again after the promotion, and — the replica caught up before the kill
//! (`WAIT`), so the replication-lag bound is zero here — every key admits exactly its
//! limit, for the async and the blocking limiter alike.

use crate::runtime;
use crate::server::{RedisServer, free_loopback_port, ping};
use ::redis::sentinel::{SentinelClient, SentinelServerType};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use turnstile::redis::{CircuitBreaker, FailurePolicy, Outcome, RedisTokenBucket};
use turnstile::{ManualClock, Quota};

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

/// A limiter's builder: `capacity` a day (no refill within the test), failing closed,
/// no breaker (so each check during the failover tries Redis), a client clock that
/// does not move.
fn builder(
    capacity: u32,
    prefix: &str,
    clock: &ManualClock,
) -> turnstile::redis::RedisTokenBucketBuilder {
    let quota = Quota::new(capacity, Duration::from_secs(24 * 3600) / capacity).unwrap();
    RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(prefix)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .timeout(Duration::from_millis(250))
        .circuit_breaker(CircuitBreaker::off())
}

/// What the checks of one phase came to.
#[derive(Default, Debug)]
struct Tally {
    admitted: u32,
    fallbacks: u32,
}

impl Tally {
    fn add(&mut self, outcome: &Outcome) -> bool {
        match outcome {
            Outcome::Decided(decision) => {
                self.admitted += u32::from(decision.is_allowed());
                decision.is_allowed()
            }
            Outcome::Fallback { allowed, .. } => {
                assert!(!allowed, "the policy is Closed");
                self.fallbacks += 1;
                false
            }
        }
    }
}

#[test]
fn checks_follow_the_master_through_a_failover_and_admit_exactly_the_limit() {
    let set = SentinelSet::start();
    let runtime = runtime();
    let clock = ManualClock::new();
    let limit = 100;
    let async_limiter = runtime.block_on(async {
        builder(limit, "sentinel:async:", &clock)
            .connect_sentinel(set.client())
            .unwrap()
    });
    let blocking = builder(limit, "sentinel:blocking:", &clock)
        .build_blocking_sentinel(set.client())
        .unwrap();
    let mut async_tally = Tally::default();
    let mut blocking_tally = Tally::default();
    let check = |async_tally: &mut Tally, blocking_tally: &mut Tally| {
        let outcome = runtime.block_on(async_limiter.acquire("k", 1));
        let decided = outcome.decision().is_some();
        async_tally.add(&outcome);
        let outcome = blocking.acquire("k", 1);
        let both = decided && outcome.decision().is_some();
        blocking_tally.add(&outcome);
        both
    };

    for _ in 0..40 {
        assert!(check(&mut async_tally, &mut blocking_tally));
    }
    assert_eq!((async_tally.admitted, blocking_tally.admitted), (40, 40));
    set.replicated();
    let mut set = set;
    set.master.kill();

    // Until the replica is promoted, the sentinels name the dead master: the policy
    // answers. Then the checks are decided again, on the new master.
    wait_for("checks decided on the new master", || {
        check(&mut async_tally, &mut blocking_tally)
    });
    assert!(set.promoted());
    assert!(async_tally.fallbacks >= 1, "{async_tally:?}");
    assert!(blocking_tally.fallbacks >= 1, "{blocking_tally:?}");

    // The new master holds what the old one had admitted: exactly the limit in all.
    for _ in 0..2 * limit {
        check(&mut async_tally, &mut blocking_tally);
    }
    assert_eq!(async_tally.admitted, limit, "{async_tally:?}");
    assert_eq!(blocking_tally.admitted, limit, "{blocking_tally:?}");
}
