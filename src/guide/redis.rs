//! Limits shared by many servers (feature `redis`): why, which limiter, how to set
//! one up, and what was measured.
//!
//! The reference — time, units and the quotas Redis can hold, expiry, keys and Redis
//! Cluster, Sentinel, failures and the circuit breaker, TLS, foreign data, why the
//! async limiters are not a `RateLimiter` — is [`crate::redis`], with an example; the
//! leases' exact bound is [`crate::redis::lease`].
//!
//! ```toml
//! turnstile-ratelimit = { version = "0.2", features = ["redis"] }
//! ```
//!
//! # Why
//! Five app servers with an in-process limiter each let a client make five times its
//! quota. With the state in one Redis and each check one atomic Lua script
//! (`EVALSHA`), the five admit the quota once between them. [`RedisTokenBucket`] makes
//! the in-process [`TokenBucket`](crate::TokenBucket)'s decisions, decision for
//! decision, on Redis's clock; [`RedisFixedWindow`] is the classic counter.
//!
//! # Which limiter
//! | you need | use |
//! |---|---|
//! | one shared limit, each check decided by Redis | [`RedisTokenBucket`] (or [`RedisFixedWindow`]) |
//! | the same limit at in-process speed for hot keys, at the price of a bounded over-admission | [`RedisLeasedTokenBucket`](crate::redis::lease::RedisLeasedTokenBucket) |
//! | threads without a tokio runtime | the blocking twins ([`BlockingRedisLimiter`](crate::redis::BlockingRedisLimiter)), from `build_blocking` |
//! | Redis Cluster, Sentinel, TLS | features `redis-cluster`, `redis-sentinel`, `redis-tls` |
//! | a Redis limit beside in-process ones on one request | [`Check::shared`](crate::policy::Check::shared) in a policy ([`policies`](super::policies), [`http`](super::http#one-limit-for-the-whole-fleet)) |
//!
//! **Open or closed.** There is no default [`FailurePolicy`] for when Redis does not
//! answer (the rules: [`crate::redis`], failures): `Open` risks overloading what the
//! limit protects, `Closed` an outage of your own making. Open suits a limit that
//! guards fairness; closed one that guards a resource that must not be overrun.
//!
//! # Leases: global limits at local speed
//! A check that is a round trip caps a process at tens of thousands of checks per
//! second and lets every Redis hiccup touch every request. [`RedisLeasedTokenBucket`](crate::redis::lease::RedisLeasedTokenBucket)
//! takes tokens from the same Redis bucket in batches and serves them from one atomic
//! word per key: no lock, no round trip. A leased and a plain limiter on one prefix
//! share one bucket. Leased tokens leave the bucket when fetched and each is served
//! once, so over any span all processes together admit at most what the one bucket
//! admits in it plus what the leases held at its start — at most `processes ×
//! max_lease` per key; from a moment nothing is held, never more than the bucket. During an outage a
//! process serves the tokens it holds, then the failure policy answers. Tested exactly
//! across five limiters on connections of their own (`tests/redis/lease.rs`); the
//! lease word is model-checked (`loom-tests/tests/lease.rs`).
//!
//! # Reserve, then settle
//! When a request's cost is known only after it ran — tokens an LLM call used, bytes
//! sent — take an estimate when admitting it and settle at the actual cost once it is
//! known. A Redis settle is one script call on the key's own state: a cost below the
//! estimate gives the difference back on a token bucket (a fixed window gives nothing
//! back: it cannot tell which window counted the estimate, so for refunds on settle,
//! use the token bucket); a cost above it is charged even beyond what the key has
//! left, and the key owes it, denied — even a cost of zero — until refill has repaid
//! the debt (each denial's `retry_after` counts it). A debt is capped at one
//! capacity; what the cap turns away is reported as
//! [`Settlement::forgiven`](crate::Settlement::forgiven). A settle is applied as
//! given: settle only what an allowed acquire that Redis decided took (a fallback
//! that allowed took nothing: `settle(key, 0, actual)`). A settle that does not reach
//! Redis is an error, counted in the limiter's failures: a lost charge is an
//! admission nobody paid for. The rules, the fixed window's debt, expiry and the
//! leased limiter's part are in [`crate::redis`](crate::redis#reserve-then-settle).
//!
//! ```no_run
//! use turnstile::Quota;
//! use turnstile::redis::{FailurePolicy, RedisTokenBucket};
//!
//! # async fn call_the_model(_prompt: &str) -> u32 { 0 }
//! # async fn example(prompt: &str) -> Result<(), Box<dyn std::error::Error>> {
//! // 10,000 tokens a minute per user, shared by every server.
//! let tokens = RedisTokenBucket::builder(Quota::per_minute(10_000)?, FailurePolicy::Closed)
//!     .prefix("llm:tokens:")
//!     .connect("redis://127.0.0.1/")?;
//! let estimate = 500;
//! if tokens.acquire("alice", estimate).await.is_allowed() {
//!     let used = call_the_model(prompt).await;
//!     // Gives back what was not used, or charges the rest: alice may now owe.
//!     if let Err(error) = tokens.settle("alice", estimate, used).await {
//!         // Not settled: log it (it is counted in `tokens.failures()`).
//!         eprintln!("unsettled: {error}");
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What was measured
//! All on the shared 2-core VM against a local `redis-server` 7.0.15; the tables,
//! commands and caveats are in `results/redis.md`, under the section each point names.
//!
//! - **A check is a round trip**: its cost is the network's and the server's, orders
//!   of magnitude above an in-process check; concurrent checks on one connection are
//!   pipelined ("Results").
//! - **Leased**: a hot key is answered from the held lease at in-process speed, not a
//!   round trip ("Leased tokens").
//! - **Recovery**: with `connect(url)` (which never waits for Redis, so an application
//!   starts while Redis is down), checks are decided again at the connection's and
//!   the breaker's next attempts (each at most 50 ms away by default) after a
//!   restarted Redis answers, where the `redis` crate's default `ConnectionManager`
//!   backs off exponentially (`benches/redis_outage.rs`, "Outages").
//! - **During an outage** the circuit breaker answers a check without I/O instead of
//!   waiting for the timeout, while one probe per back-off finds out whether Redis is
//!   back ("Outages").
//! - **Sentinel**: the time from a promotion to the first decided check ("Sentinel
//!   failover").
//!
//! `results/ANALYSIS.md` ("Redis") sums them up.
//!
//! # Running it
//! `cargo run --example redis --features redis` runs against a local `redis-server`.
//! The tests start real `redis-server` processes themselves (`tests/redis/`): a single
//! server, five limiters on one Redis admitting exactly the capacity
//! (`five_servers.rs`), three cluster masters with one killed mid-run, a master, a
//! replica and three sentinels with a failover, a TLS port with a throwaway
//! certificate.
//!
//! [`RedisTokenBucket`]: crate::redis::RedisTokenBucket
//! [`RedisFixedWindow`]: crate::redis::RedisFixedWindow
//! [`RedisLeasedTokenBucket`]: crate::redis::lease::RedisLeasedTokenBucket
//! [`FailurePolicy`]: crate::redis::FailurePolicy
