//! Redis Cluster: three masters on loopback, started by the test (`redis-cli --cluster
//! create`). Five limiters with connections of their own share one limit exactly;
//! keys spread over the masters; a master restarted mid-run (with its data on disk)
//! keeps every decision exact, the checks in between answered by the policy.

use crate::cluster_server::Cluster;
use crate::{fresh_prefix, server_time};
use redis::cluster_async::ClusterConnection;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use turnstile::Decision;
use turnstile::Quota;
use turnstile::SharedDecision;
use turnstile::redis::{CheckError, CircuitBreaker, FailurePolicy, RedisTokenBucket};

/// One token back every 360 s: `per_hour(10)`.
const REFILL: Duration = Duration::from_secs(360);

/// Master `master`'s clock, in microseconds since the Unix epoch.
async fn master_time(cluster: &Cluster, master: usize) -> u64 {
    let mut conn = cluster.masters[master]
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("a master's connection");
    server_time(&mut conn).await
}

/// Refill times (multiples of `interval` since the Unix epoch, the grid the scripts
/// refill on) between two server clock readings: each gives every key written before
/// it one more token, so a test that counts admissions exactly allows that many more.
fn refills_between(before: u64, after: u64, interval: Duration) -> u32 {
    let interval = interval.as_micros() as u64;
    (after / interval - before / interval) as u32
}

async fn limiter(
    cluster: &Cluster,
    prefix: &str,
    timeout: Duration,
) -> RedisTokenBucket<ClusterConnection> {
    RedisTokenBucket::builder(Quota::per_hour(10).unwrap(), FailurePolicy::Closed)
        .prefix(prefix)
        .timeout(timeout)
        // One limiter serves keys on every master: a master down must not stop the
        // checks for the others (the breaker is per limiter, not per node).
        .circuit_breaker(CircuitBreaker::off())
        .build(cluster.connection().await)
        .unwrap()
}

const KEYS: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_limiters_on_a_cluster_share_one_limit_exactly() {
    let cluster = Cluster::start();
    let prefix = fresh_prefix("cluster");
    let mut limiters = Vec::new();
    for _ in 0..5 {
        limiters.push(limiter(&cluster, &prefix, Duration::from_secs(2)).await);
    }
    let before = master_time(&cluster, 0).await;
    let mut tasks = tokio::task::JoinSet::new();
    for limiter in limiters {
        tasks.spawn(async move {
            let mut admitted = vec![0u32; KEYS];
            for _ in 0..4 {
                for (key, count) in admitted.iter_mut().enumerate() {
                    match limiter.acquire(format!("user{key}"), 1).await {
                        SharedDecision::Decided(decision) => {
                            *count += u32::from(decision.is_allowed())
                        }
                        SharedDecision::Fallback { error, .. } => {
                            panic!("no fallback expected: {error}")
                        }
                    }
                }
            }
            admitted
        });
    }
    let mut total = vec![0u32; KEYS];
    while let Some(admitted) = tasks.join_next().await {
        for (sum, n) in total.iter_mut().zip(admitted.unwrap()) {
            *sum += n;
        }
    }
    let refills = refills_between(before, master_time(&cluster, 0).await, REFILL);
    // 5 limiters × 4 requests per key, 20 each, for a capacity of 10 (and a token
    // more if a refill time passed meanwhile).
    for (key, total) in total.into_iter().enumerate() {
        assert!((10..=10 + refills).contains(&total), "user{key}: {total}");
    }

    // The keys live on more than one master: the cluster really shards them.
    let mut holders = HashSet::new();
    for (i, master) in cluster.masters.iter().enumerate() {
        let mut conn = master.client().get_connection().unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query(&mut conn)
            .unwrap();
        if !keys.is_empty() {
            holders.insert(i);
        }
    }
    assert!(holders.len() >= 2, "keys on masters {holders:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_mid_run_keeps_every_decision_exact() {
    let mut cluster = Cluster::start();
    let prefix = fresh_prefix("cluster-restart");
    // Patient limiters for the decisions; quick ones, on the same keys, for the
    // outage, so the checks for the dead master's keys fall back soon.
    let (mut limiters, mut quick) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        limiters.push(limiter(&cluster, &prefix, Duration::from_secs(2)).await);
        quick.push(limiter(&cluster, &prefix, Duration::from_millis(300)).await);
    }
    let key = |k: usize| format!("user{k}");
    let mut admitted = [0u32; KEYS];
    // Master 1 is never restarted: its clock times the run.
    let before = master_time(&cluster, 1).await;
    // Half of every key's capacity, spread over the five limiters (a refill time
    // passing meanwhile leaves a token more).
    for (k, count) in admitted.iter_mut().enumerate() {
        for limiter in limiters.iter() {
            let decision = limiter.acquire(key(k), 1).await.decision();
            assert!(
                matches!(decision, Some(Decision::Allowed { remaining })
                    if (9 - *count..=10 - *count).contains(&remaining)),
                "{decision:?} after {count}"
            );
            *count += 1;
        }
    }

    // A master dies: its keys are answered by the policy (Closed: denied), the
    // others are decided as before.
    cluster.masters[0].kill();
    let mut fell_back = 0;
    // A check that timed out may still run later (the cluster client can send it
    // once the master is back) and take its token unseen: such a key can only have
    // admitted fewer.
    let mut unseen = [false; KEYS];
    for (k, count) in admitted.iter_mut().enumerate() {
        match quick[k % 5].acquire(key(k), 1).await {
            SharedDecision::Decided(decision) => *count += u32::from(decision.is_allowed()),
            SharedDecision::Fallback { allowed, error } => {
                assert!(!allowed);
                unseen[k] |= matches!(error, CheckError::Timeout(_));
                fell_back += 1;
            }
        }
    }
    assert!(
        fell_back > 0 && fell_back < KEYS,
        "{fell_back} of {KEYS} fell back"
    );

    // Back, with its data from disk: every key admits exactly the rest of its
    // capacity, counted until a decided denial.
    cluster.masters[0].restart();
    cluster.until_ok();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refills = 0;
    for (k, count) in admitted.iter_mut().enumerate() {
        let mut turn = k;
        loop {
            turn += 1;
            match limiters[turn % 5].acquire(key(k), 1).await {
                SharedDecision::Decided(Decision::Allowed { .. }) => *count += 1,
                SharedDecision::Decided(_) => break,
                SharedDecision::Fallback { allowed, error } => {
                    assert!(!allowed);
                    unseen[k] |= matches!(error, CheckError::Timeout(_));
                    assert!(Instant::now() < deadline, "key {k} never decided again");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        // A refill time since the run began gives the key a token more: read after
        // the key's denial, so the count covers every one that could have counted.
        refills = refills_between(before, master_time(&cluster, 1).await, REFILL);
        if unseen[k] {
            assert!(*count <= 10 + refills, "key {k}: {count}");
        } else {
            assert!((10..=10 + refills).contains(count), "key {k}: {count}");
        }
    }
    assert!(refills <= 1, "the run spanned {refills} refill times");
}

/// The blocking limiters take a cluster client too; settles go where checks go.
#[cfg(feature = "redis-cluster")]
#[test]
fn a_blocking_limiter_on_a_cluster_decides_exactly() {
    let cluster = Cluster::start();
    let limiter = RedisTokenBucket::builder(Quota::per_hour(3).unwrap(), FailurePolicy::Closed)
        .prefix(fresh_prefix("cluster-blocking"))
        .timeout(Duration::from_secs(2))
        .build_blocking_cluster(cluster.client())
        .unwrap();
    let clock = || {
        let mut conn = cluster.masters[0].client().get_connection().unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        secs * 1_000_000 + micros
    };
    let before = clock();
    let decisions: Vec<Vec<Option<Decision>>> = (0..KEYS)
        .map(|k| {
            let key = format!("user{k}");
            (0..4)
                .map(|_| limiter.acquire(&key, 1).decision())
                .collect()
        })
        .collect();
    // One token back every 1,200 s on the Unix epoch's grid: a refill time passed
    // during the run (once in a blue moon) leaves nothing exact to check.
    if refills_between(before, clock(), Duration::from_secs(1200)) > 0 {
        return;
    }
    for decisions in decisions {
        let allowed = [2, 1, 0].map(|remaining| Some(Decision::Allowed { remaining }));
        assert_eq!(decisions[..3], allowed);
        assert!(matches!(decisions[3], Some(Decision::Denied { .. })));
    }
    // A settle runs on the key's own master, as a check does: the three given back,
    // then five charged, two of them owed.
    for k in 0..KEYS {
        let key = format!("user{k}");
        assert_eq!(limiter.settle(&key, 3, 0).unwrap().refunded, 3, "{key}");
        assert_eq!(limiter.peek(&key).unwrap(), 3, "{key}");
        assert_eq!(limiter.settle(&key, 0, 5).unwrap().charged, 5, "{key}");
        assert!(!limiter.acquire(&key, 1).is_allowed(), "{key}");
    }
}
