//! How long a Sentinel failover leaves checks undecided after the promotion, against a
//! master, a replica and three sentinels this binary starts (down-after 500 ms). Each
//! round: checks run back to back on a `SentinelConnection` (`connect_sentinel`),
//! the master is killed, a thread polls the replica's role every millisecond; the
//! time from the replica reporting `role:master` to the first check Redis decides,
//! and, for the record, from the kill to the promotion (the sentinels' detection and
//! election, which no client can shorten). Two limiters side by side, the circuit
//! breaker on (the default) and off. Median and range of 5 rounds.
//!
//! Run: `cargo bench --features redis-sentinel --bench redis_sentinel`

#[path = "../tests/redis/sentinel_set.rs"]
mod sentinel_set;
#[path = "../tests/redis/server.rs"]
mod server;

use sentinel_set::SentinelSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use turnstile::Quota;
use turnstile::redis::sentinel::SentinelConnection;
use turnstile::redis::{CircuitBreaker, FailurePolicy, RedisTokenBucket};

const ROUNDS: usize = 5;

/// Checks back to back until one is decided after `killed`; the instant it was.
async fn first_decided_after(
    limiter: &RedisTokenBucket<SentinelConnection>,
    killed: &AtomicBool,
) -> Instant {
    loop {
        // Acquire: pairs with the Release store after the kill, so a decision seen
        // after reading true came from a check sent after the kill.
        let after_kill = killed.load(Ordering::Acquire);
        let outcome = limiter.acquire("k", 1).await;
        if after_kill && outcome.decision().is_some() {
            return Instant::now();
        }
    }
}

fn limiter(set: &SentinelSet, breaker: bool) -> RedisTokenBucket<SentinelConnection> {
    let quota = Quota::new(1_000_000, Duration::from_micros(1)).expect("a quota");
    let builder = RedisTokenBucket::builder(quota, FailurePolicy::Open).prefix(if breaker {
        "bench:breaker:"
    } else {
        "bench:no-breaker:"
    });
    let builder = if breaker {
        builder
    } else {
        builder.circuit_breaker(CircuitBreaker::off())
    };
    builder.connect_sentinel(set.client()).expect("a limiter")
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(name: &str, mut samples: Vec<f64>) {
    samples.sort_by(f64::total_cmp);
    println!(
        "{name:<32} median {:7.1} ms  range {:.1}–{:.1} ms",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1]
    );
}

fn main() {
    if std::env::args().any(|arg| arg == "--list" || arg == "--test") {
        return;
    }
    if !server::RedisServer::available() {
        eprintln!("redis-server is not on PATH: nothing to measure");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (mut detection, mut with_breaker, mut without_breaker) = (vec![], vec![], vec![]);
    for round in 1..=ROUNDS {
        let mut set = SentinelSet::start();
        let (on, off) = runtime.block_on(async { (limiter(&set, true), limiter(&set, false)) });
        runtime.block_on(async {
            assert!(on.acquire("k", 1).await.decision().is_some());
            assert!(off.acquire("k", 1).await.decision().is_some());
        });
        let killed = Arc::new(AtomicBool::new(false));
        let checks = {
            let killed = Arc::clone(&killed);
            runtime.spawn(async move {
                let (on_at, off_at) = tokio::join!(
                    first_decided_after(&on, &killed),
                    first_decided_after(&off, &killed)
                );
                (on_at, off_at)
            })
        };
        let kill_at = Instant::now();
        set.master.kill();
        // Release: see `first_decided_after`.
        killed.store(true, Ordering::Release);
        while !set.promoted() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let promoted_at = Instant::now();
        let (on_at, off_at) = runtime.block_on(checks).expect("the checks ran");
        let after = |at: Instant| millis(at.saturating_duration_since(promoted_at));
        println!(
            "round {round}: promoted {:.0} ms after the kill; first decided check {:.1} ms \
             after it (breaker on), {:.1} ms (breaker off)",
            millis(promoted_at - kill_at),
            after(on_at),
            after(off_at)
        );
        detection.push(millis(promoted_at - kill_at));
        with_breaker.push(after(on_at));
        without_breaker.push(after(off_at));
    }
    println!("== {ROUNDS} rounds");
    summary("kill to promotion (sentinels)", detection);
    summary("promotion to decided, breaker on", with_breaker);
    summary("promotion to decided, breaker off", without_breaker);
}
