//! Distributed limits in action: three "app servers" (three limiters, three
//! connections) share one Redis and so one limit of 5 per second per user; then the
//! fixed window and the blocking API.
//!
//! Needs a Redis to talk to (`redis-server` in another terminal will do):
//!
//! ```sh
//! cargo run --example redis --features redis                 # redis://127.0.0.1:6379/
//! REDIS_URL=redis://host:port/ cargo run --example redis --features redis
//! ```

use std::time::Duration;
use turnstile::Quota;
use turnstile::SharedDecision;
use turnstile::redis::{FailurePolicy, RedisFixedWindow, RedisTokenBucket};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = redis::Client::open(url.as_str())?;
    let quota = Quota::per_second(5)?;
    // A fresh prefix per run, so that earlier runs do not count.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_micros();
    let prefix = format!("example:{run}:");

    // Each "server" connects the way turnstile recommends: at once, without waiting for
    // Redis, reconnecting by itself.
    let mut servers = Vec::new();
    for _ in 0..3 {
        let limiter = RedisTokenBucket::builder(quota, FailurePolicy::Open)
            .prefix(&prefix)
            .timeout(Duration::from_millis(50))
            .connect(url.as_str())?;
        servers.push(limiter);
    }
    if let Some(error) = servers[0].peek("alice").await.err() {
        eprintln!("cannot reach Redis at {url}: {error}\nstart one with `redis-server`");
        std::process::exit(1);
    }

    println!("3 app servers, one limit of 5 per second for alice:");
    for request in 0..8 {
        let server = &servers[request % 3];
        match server.acquire("alice", 1).await {
            SharedDecision::Decided(decision) if decision.is_allowed() => println!(
                "  request {request} via server {}: allowed, {} left",
                request % 3,
                decision.remaining()
            ),
            SharedDecision::Decided(decision) => println!(
                "  request {request} via server {}: 429, retry after {:?}",
                request % 3,
                decision.retry_after().unwrap_or_default()
            ),
            SharedDecision::Fallback { allowed, error } => {
                println!(
                    "  request {request}: Redis gave no decision ({error}); allowed: {allowed}"
                )
            }
        }
    }

    let window = RedisFixedWindow::builder(2, Duration::from_secs(1), FailurePolicy::Closed)
        .prefix(&prefix)
        .connect_client(client.clone())?;
    let admitted: Vec<bool> = [
        window.try_acquire("bob").await,
        window.try_acquire("bob").await,
        window.try_acquire("bob").await,
    ]
    .into();
    println!("fixed window of 2 per second for bob: {admitted:?}");

    // The blocking API owns its runtime: make it and use it off the async threads.
    let blocking_prefix = prefix.clone();
    let blocking_client = client.clone();
    let peeked = tokio::task::spawn_blocking(move || {
        let limiter = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
            .prefix(blocking_prefix)
            .build_blocking(blocking_client)?;
        limiter
            .peek("alice")
            .map_err(Box::<dyn std::error::Error + Send + Sync>::from)
    })
    .await?
    .map_err(|error| error.to_string())?;
    println!("blocking peek: alice has {peeked} tokens");

    let failures = servers[0].failures();
    println!("server 0 failures: {failures:?}");
    Ok(())
}
