//! Checks per second against a local Redis, for 1, 8 and 64 concurrent tokio tasks
//! sharing one limiter (one multiplexed connection: concurrent checks are pipelined),
//! next to the same limiter on a local Redis Cluster of three masters (one cluster
//! connection) and the in-process `TokenBucket`, all driven by the same harness.
//!
//! Starts its own `redis-server` on a free loopback port, with persistence off, and
//! its own cluster of three masters (`tests/redis/cluster_server.rs`), persistence off
//! as for the single node; skips with a message when there is no redis-server on
//! PATH.
//!
//! Run: `cargo bench --features redis --bench redis`

#[path = "../tests/redis/cluster_server.rs"]
mod cluster_server;
#[path = "../tests/redis/server.rs"]
mod server;

use ::redis::aio::ConnectionManager;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use server::RedisServer;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use turnstile::redis::{CircuitBreaker, FailurePolicy, RedisTokenBucket};
use turnstile::{Quota, TokenBucket};

const TASKS: [u64; 3] = [1, 8, 64];
/// Keys the checks cycle through, so that most are allowed and each writes.
const KEYS: usize = 1024;

/// Runs `iters` checks split over `tasks` tasks; the time, scaled to exactly `iters`.
async fn run<F, Fut>(tasks: u64, iters: u64, check: F) -> Duration
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let per_task = iters.div_ceil(tasks);
    let started = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let check = check.clone();
        set.spawn(async move {
            for i in 0..per_task {
                black_box(check(((task * per_task + i) as usize) % KEYS).await);
            }
        });
    }
    while let Some(result) = set.join_next().await {
        result.expect("a benchmark task finished");
    }
    started
        .elapsed()
        .mul_f64(iters as f64 / (per_task * tasks) as f64)
}

/// One Redis limiter (on any connection) at `tasks` concurrent tasks.
fn bench_redis<C>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    tasks: u64,
    limiter: &RedisTokenBucket<C>,
    keys: &Arc<Vec<String>>,
) where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let (limiter, names) = (limiter.clone(), Arc::clone(keys));
    group.bench_with_input(BenchmarkId::new(name, tasks), &tasks, |b, &tasks| {
        b.iter_custom(|iters| {
            let (limiter, names) = (limiter.clone(), Arc::clone(&names));
            runtime.block_on(run(tasks, iters, move |k| {
                let (limiter, names) = (limiter.clone(), Arc::clone(&names));
                async move { limiter.try_acquire(&names[k]).await }
            }))
        })
    });
}

fn checks_per_second(c: &mut Criterion) {
    if !RedisServer::available() {
        eprintln!(
            "benches/redis: no redis-server on PATH; skipping (apt-get install redis-server)"
        );
        return;
    }
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let conn = runtime
        .block_on(ConnectionManager::new(server.client()))
        .expect("connects to the benchmark's redis-server");
    // 10,000 tokens, one per 100 µs, over 1,024 keys: nearly every check is allowed.
    let quota = Quota::new(10_000, Duration::from_micros(100)).expect("a valid quota");
    let redis = RedisTokenBucket::builder(quota, FailurePolicy::Open)
        .prefix("bench:")
        .timeout(Duration::from_secs(1))
        .build(conn)
        .expect("a valid limiter");
    let cluster = cluster_server::Cluster::start_with(false);
    let cluster_conn = runtime.block_on(cluster.connection());
    let on_cluster = RedisTokenBucket::builder(quota, FailurePolicy::Open)
        .prefix("bench:")
        .timeout(Duration::from_secs(1))
        .circuit_breaker(CircuitBreaker::off())
        .build(cluster_conn)
        .expect("a valid limiter");
    let local = Arc::new(TokenBucket::<String>::new(quota).unwrap());
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|k| format!("user:{k}")).collect());

    let mut group = c.benchmark_group("redis_checks");
    group.throughput(Throughput::Elements(1));
    for tasks in TASKS {
        bench_redis(
            &mut group,
            &runtime,
            "redis_token_bucket",
            tasks,
            &redis,
            &keys,
        );
        let cluster_name = "redis_cluster_token_bucket";
        bench_redis(
            &mut group,
            &runtime,
            cluster_name,
            tasks,
            &on_cluster,
            &keys,
        );
        let (limiter, names) = (Arc::clone(&local), Arc::clone(&keys));
        group.bench_with_input(
            BenchmarkId::new("in_process_token_bucket", tasks),
            &tasks,
            |b, &tasks| {
                b.iter_custom(|iters| {
                    let (limiter, names) = (Arc::clone(&limiter), Arc::clone(&names));
                    runtime.block_on(run(tasks, iters, move |k| {
                        let allowed = limiter.try_acquire(names[k].as_str());
                        async move { allowed }
                    }))
                })
            },
        );
    }
    group.finish();
    for failures in [redis.failures(), on_cluster.failures()] {
        assert_eq!(
            failures,
            Default::default(),
            "every benchmarked check was decided"
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = checks_per_second
}
criterion_main!(benches);
