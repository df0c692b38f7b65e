//! The leased Redis limiter (`RedisLeasedTokenBucket`) beside the plain one
//! (`RedisTokenBucket`, one script per check), against a real `redis-server` this
//! binary starts on a free loopback port (persistence off); skips when there is none
//! on PATH. Side by side in one run, the contenders interleaved over six rounds, each
//! going first, second and third twice (medians and ranges printed):
//!
//! - **one hot key**: checks per second with 1, 8 and 64 tokio tasks on one limiter,
//!   and a second plain limiter against the first (A/A: the harness's noise floor);
//! - **cold keys**: every check a key never seen before, 1 and 64 tasks;
//! - **latency**: each check on a hot key timed alone (one task), p50 / p99 / p99.9;
//!   and each check on a new key, the two limiters taking turns check by check;
//! - **five processes** (five limiters, each on a connection of its own) sharing one
//!   hot key for 10 s at ten times its rate: admitted against the one bucket's bound
//!   (capacity plus the grid points Redis's clock passed) and that bound less
//!   `5 × max_lease`.
//!
//! - **outage**: a hot key's lease while its Redis (one of its own) is killed: the
//!   checks its held tokens still decide, and what the checks after them cost.
//!
//! Prints markdown tables for `results/redis.md`.
//!
//! Run: `cargo bench --features redis --bench redis_lease`

#[path = "../tests/redis/server.rs"]
mod server;

use ::redis::aio::ConnectionManager;
use hdrhistogram::Histogram;
use server::RedisServer;
use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;
use turnstile::Quota;
use turnstile::redis::lease::RedisLeasedTokenBucket;
use turnstile::redis::{FailurePolicy, RedisTokenBucket};

const ROUNDS: usize = 6;

/// A bucket no run empties: the largest capacity, one more a second (a full refill
/// of 136 years, within the Redis scripts' 2^52 µs).
fn roomy() -> Quota {
    Quota::new(u32::MAX, Duration::from_secs(1)).expect("a valid quota")
}

/// Runs `checks` checks split over `tasks` tasks; checks per second.
async fn rate<F, Fut>(tasks: u64, checks: u64, check: F) -> f64
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let per_task = checks / tasks;
    let started = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let check = check.clone();
        set.spawn(async move {
            for i in 0..per_task {
                black_box(check(task * per_task + i).await);
            }
        });
    }
    while let Some(result) = set.join_next().await {
        result.expect("a benchmark task finished");
    }
    (per_task * tasks) as f64 / started.elapsed().as_secs_f64()
}

/// The median and range of `samples`.
fn summary(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

fn per_second(rate: (f64, f64, f64)) -> String {
    let (median, low, high) = rate;
    format!("{median:.0} ({low:.0}–{high:.0})")
}

struct Limiters {
    leased: RedisLeasedTokenBucket,
    plain: RedisTokenBucket,
    /// A second plain limiter, on a connection of its own: plain against plain (an
    /// A/A comparison) shows how far the harness's noise alone moves a ratio.
    other_plain: RedisTokenBucket,
}

async fn limiters(server: &RedisServer, prefix: &str) -> Limiters {
    let conn = || async {
        ConnectionManager::new(server.client())
            .await
            .expect("connects to the benchmark's redis-server")
    };
    let leased = RedisLeasedTokenBucket::builder(roomy(), FailurePolicy::Open)
        .prefix(format!("{prefix}:leased:"))
        .timeout(Duration::from_secs(1))
        .max_lease(16_384)
        .build(conn().await)
        .expect("a valid limiter");
    let plain = |name: &str| {
        RedisTokenBucket::builder(roomy(), FailurePolicy::Open)
            .prefix(format!("{prefix}:{name}:"))
            .timeout(Duration::from_secs(1))
    };
    Limiters {
        leased,
        plain: plain("plain").build(conn().await).expect("a valid limiter"),
        other_plain: plain("other").build(conn().await).expect("a valid limiter"),
    }
}

/// Empties the benchmark's Redis.
async fn flush(server: &RedisServer) {
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connects to the benchmark's redis-server");
    ::redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn)
        .await
        .expect("FLUSHALL");
}

/// Hot key and cold keys: checks per second, leased and plain, interleaved.
fn throughput(runtime: &Runtime, server: &RedisServer) {
    println!(
        "\n| workload | tasks | leased checks/s | plain checks/s | leased / plain | A/A: plain / plain |"
    );
    println!("|---|---|---|---|---|---|");
    let round_counter = Arc::new(AtomicU64::new(0));
    for (workload, tasks, leased_checks, plain_checks) in [
        ("one hot key", 1, 4_000_000, 20_000),
        ("one hot key", 8, 4_000_000, 40_000),
        ("one hot key", 64, 4_000_000, 60_000),
        ("cold keys", 1, 20_000, 20_000),
        ("cold keys", 64, 60_000, 60_000),
    ] {
        let (mut leased_rates, mut plain_rates, mut other_rates) =
            (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let round = round_counter.fetch_add(1, Ordering::Relaxed);
            let Limiters {
                leased,
                plain,
                other_plain,
            } = runtime.block_on(limiters(server, &format!("bench:{round}")));
            let cold = workload == "cold keys";
            let key = move |i: u64| {
                if cold {
                    format!("user:{i}")
                } else {
                    "hot".to_owned()
                }
            };
            // Each round starts from an empty Redis, and the contenders take turns
            // going first: a cold check adds a key, and a bigger keyspace (its
            // rehashing included) must not fall on one side only.
            runtime.block_on(flush(server));
            let run_leased = || {
                let limiter = leased.clone();
                runtime.block_on(rate(tasks, leased_checks, move |i| {
                    let limiter = limiter.clone();
                    async move { limiter.try_acquire(key(i)).await }
                }))
            };
            let run_plain = |limiter: &RedisTokenBucket| {
                let limiter = limiter.clone();
                runtime.block_on(rate(tasks, plain_checks, move |i| {
                    let limiter = limiter.clone();
                    async move { limiter.try_acquire(key(i)).await }
                }))
            };
            // Each of the three goes first, second and third equally often.
            for turn in 0..3 {
                match (round + turn) % 3 {
                    0 => leased_rates.push(run_leased()),
                    1 => plain_rates.push(run_plain(&plain)),
                    _ => other_rates.push(run_plain(&other_plain)),
                }
            }
            assert_eq!(
                leased.failures(),
                Default::default(),
                "every fetch answered"
            );
            assert_eq!(plain.failures(), Default::default(), "every check answered");
        }
        let (leased_rate, plain_rate) = (summary(leased_rates), summary(plain_rates));
        let other_rate = summary(other_rates);
        println!(
            "| {workload} | {tasks} | {} | {} | {:.1}× | {:.2}× |",
            per_second(leased_rate),
            per_second(plain_rate),
            leased_rate.0 / plain_rate.0,
            other_rate.0 / plain_rate.0
        );
    }
}

/// `checks` checks, each timed alone, one after another.
async fn histogram<F, Fut>(checks: u64, check: F) -> Histogram<u64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut histogram = Histogram::<u64>::new(3).expect("a histogram");
    for _ in 0..checks {
        let started = Instant::now();
        black_box(check().await);
        histogram
            .record(started.elapsed().as_nanos() as u64)
            .expect("in range");
    }
    histogram
}

/// Each check on a hot key timed alone, one task.
fn latency(runtime: &Runtime, server: &RedisServer) {
    let Limiters { leased, plain, .. } = runtime.block_on(limiters(server, "bench:latency"));
    let leased_histogram = runtime.block_on(histogram(2_000_000, || leased.try_acquire("hot")));
    let plain_histogram = runtime.block_on(histogram(20_000, || plain.try_acquire("hot")));
    println!("\n| hot-key check, one task | p50 | p99 | p99.9 | max |");
    println!("|---|---|---|---|---|");
    for (name, h) in [("leased", &leased_histogram), ("plain", &plain_histogram)] {
        let at = |q: f64| Duration::from_nanos(h.value_at_quantile(q));
        println!(
            "| {name} | {:.2?} | {:.2?} | {:.2?} | {:.2?} |",
            at(0.5),
            at(0.99),
            at(0.999),
            Duration::from_nanos(h.max())
        );
    }
    let counts = leased.counts();
    println!(
        "\nleased: {} fetches ({} ahead of need) for {} checks",
        counts.fetches, counts.fetched_ahead, 2_000_000
    );
}

/// Each check on a key never seen before timed alone, one task, the two limiters
/// taking turns check by check (so drift in the machine's load falls on both alike).
fn cold_latency(runtime: &Runtime, server: &RedisServer) {
    const CHECKS: u64 = 20_000;
    runtime.block_on(flush(server));
    let Limiters { leased, plain, .. } = runtime.block_on(limiters(server, "bench:cold"));
    let new = || Histogram::<u64>::new(3).expect("a histogram");
    let (mut leased_histogram, mut plain_histogram) = (new(), new());
    runtime.block_on(async {
        for i in 0..CHECKS {
            let key = format!("user:{i}");
            let turns = if i % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for leased_turn in turns {
                let started = Instant::now();
                if leased_turn {
                    black_box(leased.try_acquire(&key).await);
                } else {
                    black_box(plain.try_acquire(&key).await);
                }
                let took = started.elapsed().as_nanos() as u64;
                let histogram = if leased_turn {
                    &mut leased_histogram
                } else {
                    &mut plain_histogram
                };
                histogram.record(took).expect("in range");
            }
        }
    });
    println!("\n| cold-key check, one task, turn by turn | mean | p50 | p99 | p99.9 |");
    println!("|---|---|---|---|---|");
    for (name, h) in [("leased", &leased_histogram), ("plain", &plain_histogram)] {
        let at = |q: f64| Duration::from_nanos(h.value_at_quantile(q));
        println!(
            "| {name} | {:.2?} | {:.2?} | {:.2?} | {:.2?} |",
            Duration::from_nanos(h.mean() as u64),
            at(0.5),
            at(0.99),
            at(0.999)
        );
    }
}

/// Redis's clock, microseconds since the Unix epoch.
async fn server_time(conn: &mut ConnectionManager) -> u64 {
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1_000_000 + micros
}

/// Five limiters, one hot key, 10 s at ten times its rate.
fn five_processes(runtime: &Runtime, server: &RedisServer) {
    const PROCESSES: usize = 5;
    const RATE: u32 = 1000;
    const SPAN: Duration = Duration::from_secs(10);
    // Ten times the rate between them: 2,000 a second each, 2 every millisecond.
    const PER_TICK: usize = 2;
    let quota = Quota::new(RATE, Duration::from_micros(1_000_000 / u64::from(RATE))).unwrap();
    println!(
        "\n| five processes, 10 s at 10× | admitted | one bucket's bound | bound − 5 × max_lease | held at end | expired | left in Redis | fetches | denied locally |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for round in 0..ROUNDS {
        let prefix = format!("bench:five:{round}:");
        let (admitted, bound, lower, held, counts, left) = runtime.block_on(async {
            let mut limiters = Vec::new();
            for _ in 0..PROCESSES {
                let conn = ConnectionManager::new(server.client()).await.unwrap();
                let limiter = RedisLeasedTokenBucket::builder(quota, FailurePolicy::Closed)
                    .prefix(&prefix)
                    .timeout(Duration::from_secs(1))
                    .build(conn)
                    .unwrap();
                limiters.push(limiter);
            }
            let mut inspect = ConnectionManager::new(server.client()).await.unwrap();
            let before = server_time(&mut inspect).await;
            let mut set = JoinSet::new();
            for limiter in &limiters {
                let limiter = limiter.clone();
                set.spawn(async move {
                    let mut admitted = 0u64;
                    let mut ticks = tokio::time::interval(Duration::from_millis(1));
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                    let end = tokio::time::Instant::now() + SPAN;
                    while ticks.tick().await < end {
                        for _ in 0..PER_TICK {
                            admitted += u64::from(limiter.try_acquire("hot").await);
                        }
                    }
                    admitted
                });
            }
            let mut admitted = 0;
            while let Some(count) = set.join_next().await {
                admitted += count.unwrap();
            }
            let after = server_time(&mut inspect).await;
            let interval = 1_000_000 / u64::from(RATE);
            let bound = u64::from(RATE) + (after / interval - before / interval);
            let max_lease = u64::from(limiters[0].max_lease());
            let lower = bound - PROCESSES as u64 * max_lease;
            let held: u64 = limiters.iter().map(|l| u64::from(l.held("hot"))).sum();
            let mut counts = limiters[0].counts();
            for limiter in &limiters[1..] {
                let more = limiter.counts();
                counts.fetches += more.fetches;
                counts.expired += more.expired;
                counts.denied_locally += more.denied_locally;
            }
            for limiter in &limiters {
                assert_eq!(
                    limiter.failures(),
                    Default::default(),
                    "every fetch answered"
                );
            }
            let left = limiters[0].peek("hot").await.unwrap();
            (admitted, bound, lower, held, counts, left)
        });
        println!(
            "| round {} | {admitted} | {bound} | {lower} | {held} | {} | {left} | {} | {} |",
            round + 1,
            counts.expired,
            counts.fetches,
            counts.denied_locally
        );
        assert!(
            admitted <= bound,
            "admitted {admitted} above the one bucket's {bound}"
        );
    }
}

/// A hot key's lease while its Redis is killed: the checks the held tokens still
/// serve, how fast, and what the checks after them cost (the policy answering; the
/// circuit breaker on, as by default).
fn outage(runtime: &Runtime) {
    let mut server = RedisServer::start();
    let Limiters { leased, .. } = runtime.block_on(limiters(&server, "bench:outage"));
    runtime.block_on(async {
        // Grow the lease to its largest, and let the last fetch ahead land.
        for _ in 0..200_000 {
            black_box(leased.try_acquire("hot").await);
        }
        while leased.lease("hot").is_some_and(|lease| lease.fetching) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let held = leased.held("hot");
    server.kill();
    let (served, took, after) = runtime.block_on(async {
        let started = Instant::now();
        let (mut served, mut took) = (0u64, Duration::ZERO);
        // Until the first check the policy answers (its fetch's wait not counted).
        while leased.acquire("hot", 1).await.decision().is_some() {
            served += 1;
            took = started.elapsed();
        }
        let mut after = Histogram::<u64>::new(3).expect("a histogram");
        for _ in 0..1000 {
            let started = Instant::now();
            black_box(leased.acquire("hot", 1).await.is_allowed());
            after
                .record(started.elapsed().as_nanos() as u64)
                .expect("in range");
        }
        (served, took, after)
    });
    println!(
        "\n| Redis killed, one hot key | held at the kill | decided after the kill | their rate | then, per check: p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| leased, open policy, breaker on | {held} | {served} | {:.1} M/s | {:.2?} | {:.2?} |",
        served as f64 / took.as_secs_f64() / 1e6,
        Duration::from_nanos(after.value_at_quantile(0.5)),
        Duration::from_nanos(after.value_at_quantile(0.99))
    );
}

fn main() {
    if !RedisServer::available() {
        eprintln!(
            "benches/redis_lease: no redis-server on PATH; skipping (apt-get install redis-server)"
        );
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this as a test: skip.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if std::env::var("ONLY").as_deref() == Ok("policy") {
        in_a_policy(&runtime, &server);
        return;
    }
    throughput(&runtime, &server);
    in_a_policy(&runtime, &server);
    latency(&runtime, &server);
    cold_latency(&runtime, &server);
    five_processes(&runtime, &server);
    outage(&runtime);
}

/// One hot key, one task: the bare leased limiter against the same limiter as the
/// one check of a policy (`Policy::acquire_async`, answered from the lease), and as
/// the first of two checks with an in-process token bucket; interleaved rounds.
fn in_a_policy(runtime: &Runtime, server: &RedisServer) {
    use turnstile::TokenBucket;
    use turnstile::policy::{Check, Limit, Policy};
    const CHECKS: u64 = 4_000_000;
    let leased = runtime.block_on(limiters(server, "bench:policy")).leased;
    let leased = Arc::new(leased);
    let check = || {
        Check::shared(
            "leased",
            Arc::clone(&leased),
            Limit::steady(roomy()),
            |key: &&'static str| Some(*key),
        )
    };
    let alone: Arc<Policy<&'static str>> =
        Arc::new(Policy::builder().check(check()).build().unwrap());
    let local = Arc::new(TokenBucket::<&'static str>::new(roomy()).unwrap());
    let with_local: Arc<Policy<&'static str>> = Arc::new(
        Policy::builder()
            .check(check())
            .check(Check::new(
                "local",
                local,
                Limit::steady(roomy()),
                |key: &&'static str| Some(*key),
            ))
            .build()
            .unwrap(),
    );
    let (mut bare, mut one, mut two) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for turn in 0..3 {
            let sample = match (round + turn) % 3 {
                0 => {
                    let limiter = Arc::clone(&leased);
                    let rate = rate(1, CHECKS, move |_| {
                        let limiter = Arc::clone(&limiter);
                        async move { limiter.try_acquire("hot").await }
                    });
                    (&mut bare, runtime.block_on(rate))
                }
                1 => {
                    let policy = Arc::clone(&alone);
                    let rate = rate(1, CHECKS, move |_| {
                        let policy = Arc::clone(&policy);
                        async move { policy.acquire_async(&"hot").await.is_allowed() }
                    });
                    (&mut one, runtime.block_on(rate))
                }
                _ => {
                    let policy = Arc::clone(&with_local);
                    let rate = rate(1, CHECKS, move |_| {
                        let policy = Arc::clone(&policy);
                        async move { policy.acquire_async(&"hot").await.is_allowed() }
                    });
                    (&mut two, runtime.block_on(rate))
                }
            };
            sample.0.push(sample.1);
        }
    }
    assert_eq!(
        leased.failures(),
        Default::default(),
        "every fetch answered"
    );
    println!("\n| one hot key, 1 task | checks/s (median, range of {ROUNDS}) |");
    println!("|---|---|");
    println!("| bare leased limiter | {} |", per_second(summary(bare)));
    println!(
        "| policy of the leased check | {} |",
        per_second(summary(one))
    );
    println!(
        "| policy of the leased check and an in-process token bucket | {} |",
        per_second(summary(two))
    );
}
