//! What a Redis outage costs a limiter, against a real `redis-server` this binary
//! starts, kills and restarts itself (skips when there is none on PATH). Three
//! connections side by side in one run:
//!
//! - `connect`: `RedisTokenBucketBuilder::connect`, the way turnstile recommends (lazy
//!   connection manager retrying every 10–50 ms, circuit breaker on);
//! - `connect, no breaker`: the same connection, `CircuitBreaker::off()`;
//! - `redis defaults`: `ConnectionManager::new(client)` with the `redis` crate's default
//!   settings (what the README showed before), breaker on.
//!
//! For each: **recovery** — Redis killed, checks every millisecond for 2 s, Redis
//! restarted; the time from the restarted server answering `PING` to the first check
//! Redis decides (median and range of 5 rounds); and **latency during an outage** —
//! 200 checks, one after another, while Redis is killed, and while it is stopped
//! (SIGSTOP: connections open, nothing answered), median and p99 per check.
//!
//! Run: `cargo bench --features redis --bench redis_outage`

#[path = "../tests/redis/server.rs"]
mod server;

use server::RedisServer;
use std::time::{Duration, Instant};
use turnstile::Quota;
use turnstile::redis::{CircuitBreaker, FailurePolicy, RedisTokenBucket};

const ROUNDS: usize = 5;
const TIMEOUT: Duration = Duration::from_millis(50);
/// How long Redis stays down in each recovery round.
const OUTAGE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy)]
enum Setup {
    Connect,
    ConnectNoBreaker,
    RedisDefaults,
}

impl Setup {
    const ALL: [Setup; 3] = [
        Setup::Connect,
        Setup::ConnectNoBreaker,
        Setup::RedisDefaults,
    ];

    fn name(self) -> &'static str {
        match self {
            Setup::Connect => "connect",
            Setup::ConnectNoBreaker => "connect, no breaker",
            Setup::RedisDefaults => "redis defaults",
        }
    }

    async fn limiter(
        self,
        server: &RedisServer,
    ) -> RedisTokenBucket<redis::aio::ConnectionManager> {
        let builder = RedisTokenBucket::builder(
            Quota::new(500, Duration::from_micros(1)).unwrap(),
            FailurePolicy::Open,
        )
        .prefix("bench:outage:")
        .timeout(TIMEOUT);
        match self {
            Setup::Connect => builder.connect(server.url()).unwrap(),
            Setup::ConnectNoBreaker => builder
                .circuit_breaker(CircuitBreaker::off())
                .connect(server.url())
                .unwrap(),
            Setup::RedisDefaults => {
                let conn = redis::aio::ConnectionManager::new(server.client())
                    .await
                    .unwrap();
                builder.build(conn).unwrap()
            }
        }
    }
}

/// Median, minimum and maximum.
fn summary(mut values: Vec<Duration>) -> (Duration, Duration, Duration) {
    values.sort();
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// The time from Redis answering again to the limiter's first decided check.
async fn recovery(
    limiter: &RedisTokenBucket<redis::aio::ConnectionManager>,
    server: &mut RedisServer,
) -> Duration {
    while limiter.acquire("k", 1).await.decision().is_none() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.kill();
    let outage = Instant::now();
    while outage.elapsed() < OUTAGE {
        let _ = limiter.acquire("k", 1).await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.restart(); // returns once the server answers PING
    let up = Instant::now();
    loop {
        if limiter.acquire("k", 1).await.decision().is_some() {
            return up.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "no recovery in 30 s"
        );
    }
}

/// Per-check latency of 200 checks while Redis does not answer: median and p99.
async fn outage_latency(
    limiter: &RedisTokenBucket<redis::aio::ConnectionManager>,
) -> (Duration, Duration) {
    let mut took = Vec::with_capacity(200);
    for _ in 0..200 {
        let started = Instant::now();
        let _ = limiter.acquire("k", 1).await;
        took.push(started.elapsed());
    }
    took.sort();
    (took[took.len() / 2], took[took.len() * 99 / 100])
}

fn main() {
    if !RedisServer::available() {
        eprintln!("benches/redis_outage: no redis-server on PATH; skipping");
        return;
    }
    // `cargo bench` passes --bench; nothing else to parse.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!("| connection | recovery after restart: median (min–max of {ROUNDS}) | killed: median, p99 per check | stopped: median, p99 per check |");
        println!("|---|---|---|---|");
        for setup in Setup::ALL {
            let mut server = RedisServer::start();
            let limiter = setup.limiter(&server).await;
            let mut recoveries = Vec::new();
            for _ in 0..ROUNDS {
                recoveries.push(recovery(&limiter, &mut server).await);
            }
            let (median, min, max) = summary(recoveries);
            server.kill();
            let killed = outage_latency(&limiter).await;
            server.restart();
            while limiter.acquire("k", 1).await.decision().is_none() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            server.pause();
            let stopped = outage_latency(&limiter).await;
            server.resume();
            println!(
                "| {} | {median:.1?} ({min:.1?}–{max:.1?}) | {:.1?}, {:.1?} | {:.1?}, {:.1?} |",
                setup.name(),
                killed.0,
                killed.1,
                stopped.0,
                stopped.1
            );
        }
    });
}
