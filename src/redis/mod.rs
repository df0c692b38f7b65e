//! Limits shared by many servers: the token bucket and the fixed window with their
//! state in Redis, one atomic Lua script per check (feature `redis`).
//!
//! Each check is one `EVALSHA` of a script that reads, decides and writes atomically,
//! so any number of servers share one limit. This module is the reference; why, which
//! limiter to choose and what was measured are in
//! [`guide::redis`](crate::guide::redis).
//!
//! ```no_run
//! use std::time::Duration;
//! use turnstile::Quota;
//! use turnstile::SharedDecision;
//! use turnstile::redis::{FailurePolicy, RedisTokenBucket};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // Returns at once, even while Redis is down; reconnects by itself.
//! let limiter = RedisTokenBucket::builder(Quota::per_minute(100)?, FailurePolicy::Open)
//!     .prefix("api:per-user:")
//!     .timeout(Duration::from_millis(20))
//!     .connect("redis://127.0.0.1/")?;
//!
//! match limiter.acquire("alice", 1).await {
//!     SharedDecision::Decided(decision) if decision.is_allowed() => { /* serve */ }
//!     SharedDecision::Decided(decision) => { /* 429, Retry-After: decision.retry_after() */ }
//!     SharedDecision::Fallback { allowed, error } => { /* Redis down: `allowed` by policy; log `error` */ }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! | type | algorithm | API |
//! |---|---|---|
//! | [`RedisTokenBucket`] | [`TokenBucket`](crate::TokenBucket)'s semantics, exactly | async (tokio) |
//! | [`RedisFixedWindow`] | the classic counter per calendar window | async (tokio) |
//! | [`RedisLeasedTokenBucket`](lease::RedisLeasedTokenBucket) | [`RedisTokenBucket`]'s bucket, its tokens leased in batches and served in process ([`lease`]) | async (tokio) |
//! | [`BlockingRedisTokenBucket`], [`BlockingRedisFixedWindow`] | the same | blocking, own runtime |
//!
//! The token bucket and the fixed window are one type, [`RedisLimiter`], generic over
//! its script ([`TokenBucketScript`], [`FixedWindowScript`]) as
//! [`KeyedLimiter`](crate::KeyedLimiter) is over its algorithm; the names above are its
//! aliases, and [`BlockingRedisLimiter`] is its blocking twin.
//!
//! # Time
//! By default the script reads Redis's own clock (`TIME`), so app servers whose clocks
//! disagree still share one consistent limit. The scripts count in **microseconds**,
//! `TIME`'s resolution, and the refill grid (or the windows) start at the **Unix
//! epoch**: a point every app server agrees on without talking to the others, and one
//! that lines a daily quota up with UTC midnight. A `TIME` older than a key's last
//! refill (the server's clock stepped back, a failover to a replica whose clock is
//! behind) sees the bucket as of its own grid point, as in-process: the tokens that
//! arrive between the two are still missing, so it admits less, never more (the
//! fixed window counts such a time as no time elapsed, as in-process). So a refill
//! time far in the future — written while a server's clock ran ahead, or by hand —
//! holds the key back until `TIME` reaches it, as one far-future reading does to an
//! in-process bucket: the price of never admitting more on a lagging clock.
//!
//! For tests, [`RedisTokenBucketBuilder::client_clock`] takes the time from a
//! [`Clock`](crate::Clock) instead, in microseconds since the limiter was built;
//! under a [`ManualClock`](crate::ManualClock) the Redis limiter then makes exactly the
//! in-process limiter's decisions (with times in whole microseconds; otherwise the
//! reading is floored to the microsecond, which decides identically and can only
//! lengthen a `retry_after`, never shorten it). Settles follow the same rules as in
//! process; what the tests check against is reference models of those rules
//! (`tests/redis/settle.rs`, `tests/redis/fixed_window.rs`), not the in-process
//! limiters.
//!
//! # Units and limits
//! Lua's numbers are doubles, exact for integers below 2^53. In microseconds that is
//! 285 years, where nanoseconds would be 104 days, hence the unit. So:
//! - a refill interval (or window) must be a **whole number of microseconds**; others
//!   are refused at construction with [`RedisConfigError::IntervalNotWholeMicros`], which
//!   names the interval rounded up (`Quota::per_second(3)` has 333,333,334 ns; use
//!   `Quota::new(3, Duration::from_micros(333_334))`). Nothing is rounded silently;
//! - capacity × interval (the time to refill an empty bucket) and the window must be
//!   at most 2^52 µs, about 142 years, so each span a script adds to a time (twice
//!   it, at most: a debt's) is at most 2^53;
//! - a script's numbers are exact while the latest time it stores or sums stays
//!   below 2^53 µs after 1970 (the year 2255): that is now plus how far ahead the
//!   key's state reaches — a window's end, a bucket's refill time, and for a key in
//!   debt ([reserve, then settle](#reserve-then-settle)) up to now + capacity ×
//!   interval for a bucket, now + two windows for a fixed window. So server time is
//!   exact until 2255 less that span: for spans of days, 2255; for a bucket whose
//!   full refill is the longest accepted (2^52 µs, 142 years) and that owes, 2112; a
//!   fixed window over 2^51 µs (71 years) in debt reaches past 2^53 at once. A
//!   client clock's readings saturate 2^52 µs (142 years) after the limiter's epoch;
//! - numbers the script writes are formatted as integers by hand, and the grid point
//!   is `now - fmod(now, interval)`, exact, never `floor(now / interval)`, whose
//!   quotient is rounded first.
//!
//! So the Redis limiters refuse two kinds of quota that the in-process token bucket
//! and fixed window take: an interval finer than `TIME`'s microsecond (a grid point
//! between two microseconds: reading it exactly would take `⌊µs × 1000 / interval⌋`
//! in integers beyond 2^53, two-limb arithmetic in the script, which is not built;
//! every such interval has a whole-microsecond neighbour less than 1 µs longer,
//! which the error names), and a full refill beyond 2^52 µs (142 years), or
//! `Quota::new(u32::MAX, d)` for `d` above about 1 s. Every other quota is held, and
//! decided as in-process.
//!
//! # State and expiry
//! One Redis hash per key: tokens and last refill time for a bucket, window start and
//! count for a window. Every written key gets a `PEXPIRE` for the moment it stops
//! mattering, rounded up to the millisecond: the bucket full again, the window over
//! (for a key in debt, its debt repaid too: [reserve, then settle](#reserve-then-settle));
//! a check that finds a bucket full deletes it rather than writing it. A missing key
//! is a full bucket (or an empty window), so Redis forgets idle clients by itself and
//! nothing needs sweeping. Forgetting is exact with one caveat: a forgotten key no
//! longer remembers its last refill, so if Redis's clock later steps back past that
//! moment, the key is full at the earlier time, where a remembered key would still
//! miss the tokens of the span the clock stepped back.
//! Expiry runs on Redis's clock, so with a client clock that does not advance in real
//! time, turn it off ([`RedisTokenBucketBuilder::expire_idle_keys`]); the state is then
//! kept, full buckets included, exactly as in-process.
//!
//! Changing a quota under the same prefix is safe: stored tokens above a new capacity
//! are capped, and refill times are stored as times, not grid indices, so a new
//! interval reads them correctly.
//!
//! # Keys and Redis Cluster
//! A check touches exactly one key: the limiter's prefix followed by the key's bytes
//! (any bytes: spaces, braces, non-UTF-8, kilobytes). Both scripts declare it in
//! `KEYS`, so they run on Redis Cluster unchanged: build the limiter on a cluster
//! connection (`redis::cluster_async::ClusterConnection`, from the `redis` crate's
//! `cluster-async` feature; any `redis::aio::ConnectionLike + Clone` works), or, for
//! the blocking limiters, `build_blocking_cluster` (feature `redis-cluster`). The
//! client routes each `EVALSHA` to the key's slot and loads the script on every
//! primary on `NOSCRIPT`. Keys spread over the slots by their whole name; a hash tag
//! (`{...}`) in a **key** pins keys that share it to one slot when you want them
//! together, while a hash tag in the **prefix** would put every key of the limiter in
//! one slot, on one node: don't.
//!
//! Tested against three masters the tests start (`tests/redis/cluster.rs`): five
//! limiters on connections of their own admit exactly the capacity per key, with the
//! keys on every master; a master killed mid-run has its keys answered by the policy
//! while the others are decided, and, restarted with its data on disk (`appendonly`,
//! `appendfsync always`), every key admits exactly the rest of its capacity. What a
//! master forgets, a limit forgets: a master restarted without persistence, or a
//! replica promoted before it received the latest writes (Redis replicates
//! asynchronously), comes back with fuller buckets — Redis's durability is the
//! limit's. The circuit breaker is per limiter, not per node: on a cluster, one
//! master down would open it for keys on every master, so cluster limiters are
//! better built with [`CircuitBreaker::off`] (the tests do). The `redis` crate's
//! cluster client retries a request after an I/O timeout or a dropped connection, and
//! a script it ran twice takes twice: a check counted twice restricts, never admits
//! more. Give the cluster client a response timeout longer than the limiter's, so the
//! check gives up first.
//!
//! **Sentinel** (feature `redis-sentinel`):
//! [`SentinelConnection`](sentinel::SentinelConnection) asks the sentinels for the master, and asks again after an error that says the master is gone or
//! demoted, so checks follow a failover: the failure policy answers while it runs,
//! and checks are decided again once a replica is promoted (measured in
//! `results/redis.md`). Build with the builders' `connect_sentinel`, or
//! `build_blocking_sentinel` for the blocking limiters. What a failover can forget,
//! and the bound that follows, are in the [`sentinel`] module.
//!
//! # Failures
//! Each check waits at most its timeout (default [`DEFAULT_TIMEOUT`], 50 ms, set per
//! limiter; it covers connecting, sending, the script and the reply). When Redis does
//! not answer in time, or answers with an error, the limiter's [`FailurePolicy`]
//! answers: [`FailurePolicy::Open`] allows, [`FailurePolicy::Closed`] denies. There is
//! no default; the caller chooses. Checks return a
//! [`SharedDecision`](crate::SharedDecision):
//! [`Decided`](crate::SharedDecision::Decided) with Redis's exact
//! [`Decision`](crate::Decision), or [`Fallback`](crate::SharedDecision::Fallback)
//! with the policy's answer and the error. A fallback is not dressed up as a `Decision`: it knows no `remaining` and no `retry_after`, and
//! every `Decision` elsewhere in turnstile is exact. Each limiter counts its failures
//! ([`FailureCounts`]: timeouts, errors, allowed and denied by policy).
//!
//! A timed-out check may still run on Redis later (the request was sent), so it may
//! have taken its tokens: under `Closed` the client was denied anyway; under `Open`
//! it was allowed without being sure it was counted.
//!
//! **Connecting.** [`RedisTokenBucketBuilder::connect`] (and `connect_client`, and the
//! same on [`RedisFixedWindowBuilder`]) is the recommended connection: a
//! [`ConnectionManager`](::redis::aio::ConnectionManager) made without waiting for
//! Redis — an application starts while Redis is down, its checks answered by the
//! policy — whose replies time out at the check's timeout and which reconnects with at
//! most 50 ms between attempts while Redis is away ([`connection_config`]), letting a
//! setup error (wrong password or database, untrusted certificate) reach the checks
//! rather than retrying it forever. Checks are decided again a few tens of
//! milliseconds after Redis returns (measured in `results/redis.md`); the `redis`
//! crate's default manager backs off exponentially from 100 ms, hundreds of
//! milliseconds to seconds. Any `redis::aio::ConnectionLike + Clone` still works with
//! `build`; a `MultiplexedConnection` does not reconnect.
//!
//! **The circuit breaker** ([`CircuitBreaker`], on by default): after 3 consecutive
//! checks or peeks that got no answer (timeouts, connection and I/O errors), checks
//! are answered by the policy at once, without I/O
//! ([`CheckError::CircuitOpen`]), for a back-off of 10 ms that doubles per failed
//! probe up to 50 ms; after each back-off one check probes Redis, and the first
//! answer closes the breaker. An outage then costs a check well under a microsecond
//! instead of its timeout, and one probe per back-off pays the timeout. Error replies
//! mean Redis is up and do not count. [`RedisTokenBucket::circuit`] says where it
//! stands; [`FailureCounts`] counts short-circuited checks and trips. With a client
//! clock the back-off runs on that clock (tests move it with a `ManualClock`).
//!
//! **TLS** (cargo feature `redis-tls`): `connect("rediss://…")` verifies the server
//! against the system's roots; for a private CA, or a client certificate, build the
//! client with `redis::Client::build_with_tls` and pass it to `connect_client`.
//!
//! **Foreign data.** The prefix is the limiter's namespace. A key that holds anything
//! but the limiter's own state — another type, or a hash whose limiter fields are
//! incomplete or not integers in range — is replaced by a fresh one (a full bucket, an
//! empty window), by the check that finds it, with an expiry if expiry is on, and
//! counted ([`FailureCounts::replaced`]); a peek reads it as fresh and changes nothing.
//! Before, such a key made every check for it fall back, forever. A hash with none of
//! the limiter's fields is read as a missing key and the limiter's fields are added
//! beside the others. A program that keeps rewriting a limiter's keys can still reset
//! its limit: the prefix must be the limiter's alone.
//!
//! # Why not the `RateLimiter` trait
//! [`RateLimiter`](crate::RateLimiter) is synchronous and infallible: `acquire`
//! returns a `Decision`, `peek` a number, and both take keys by `Borrow` for an
//! in-memory map. A Redis check is a network round trip that can fail, so the async
//! limiters offer the same method names (`acquire`, `try_acquire`, `peek`) as
//! `async`-returning methods with honest types: a
//! [`SharedDecision`](crate::SharedDecision) for checks, a `Result` for `peek`.
//! Implementing the trait would mean blocking a thread inside async code and inventing
//! a `Decision` when Redis is down. Keys are bytes (`impl AsRef<[u8]>`),
//! since Redis keys are.
//!
//! What a [`Policy`](crate::policy::Policy) asks of them is
//! [`SharedLimiter`](crate::policy::SharedLimiter), which all three implement: an
//! async check answering a decision or a fallback, an answer without waiting when
//! there is one at hand (the leased limiter's held tokens), a refund — one script
//! call, atomic, capped at the capacity, for the plain limiters; the lease, for the
//! leased one — and a settle ([reserve, then settle](#reserve-then-settle)). So a per-user limit in Redis, a per-IP limit in process and a
//! fleet-wide leased limit sit in one policy, all or nothing (see
//! [shared checks](crate::policy#shared-checks)).
//!
//! # Reserve, then settle
//! A request whose cost is known only after it ran (tokens an LLM call used, bytes
//! sent) takes an estimate with an ordinary `acquire(key, estimate)`, then settles at
//! the actual cost with `settle(key, estimate, actual)` ([`RedisLimiter::settle`],
//! [`BlockingRedisLimiter::settle`], [`lease::RedisLeasedTokenBucket::settle`], and
//! [`SharedLimiter::settle`](crate::policy::SharedLimiter::settle) in a policy): one
//! `EVALSHA` of the check's own script, on the same key, so the same hash-tag and
//! Cluster rules hold (none when `actual == estimate`). Its
//! [`Settlement`](crate::Settlement) says what it did:
//!
//! - **Below the estimate** the token bucket gives the difference back, never past
//!   a full bucket: `refunded` is what was, exactly. **The fixed window gives nothing
//!   back** (`refunded: 0`): its stored count cannot tell which window counted the
//!   estimate, and giving it to a later window would admit more than the limit there
//!   (a limit of 10: 10 taken at the end of one window, 10 more in the next, then a
//!   refund of the first 10 would let 10 more into that next window). For refunds on
//!   settle, use the token bucket.
//! - **Above it** the difference is charged even beyond what the key has left: the key
//!   then owes it, and is denied — even a cost of zero: a key in debt has less than
//!   nothing — until refill has repaid the debt, each denial's `retry_after`
//!   counting the debt exactly. A token bucket's debt follows the same rules as the
//!   in-process token bucket's (the refill time `full_at` past now + capacity ×
//!   interval; no test compares the two), stored as an empty bucket refilled at a
//!   grid point still to come; a fixed window counts past its limit, and what it
//!   counts past the limit is carried into the next windows, each starting one limit
//!   lower, so the first window with room for a cost may lie several windows ahead.
//! - **A debt is capped at one capacity** (a limit, for the window): the most a key
//!   owes is repaid within one full refill, and a stored bucket's refill time stays
//!   within capacity × interval of now, which construction has checked is at most
//!   2^52 µs (see [units and limits](#units-and-limits)). What the cap turns away is
//!   `forgiven`, reported, never dropped silently.
//! - **The expiry covers the debt**: a key in debt expires only when its state stops
//!   mattering — its bucket full again, its window's carried count repaid — so Redis
//!   never forgets what a key owes.
//! - **A settle is applied as given.** Redis keeps no record of what an acquire took,
//!   so settle only what an allowed acquire that Redis decided took, and once: a
//!   [`SharedDecision::Fallback`](crate::SharedDecision::Fallback) that allowed took
//!   nothing, so charge its request as `settle(key, 0, actual)`. Only the difference
//!   between the estimate and the actual cost moves the state: an estimate above the
//!   capacity, which no acquire took, is not refused, and is settled as given.
//!
//! "Estimate 0, charge only what fails" (count only failed logins) works on the plain
//! limiters: each failure is `settle(key, 0, 1)`, and once the key owes, `acquire(key,
//! 0)` is denied until the debt is repaid. The leased limiter answers a cost of zero
//! in process, allowed (see [`lease::RedisLeasedTokenBucket::acquire`]): use a plain
//! limiter for that pattern.
//!
//! A settle that does not reach Redis is an `Err`: a lost charge is an admission not
//! paid for, so the failure policy, which answers checks, does not hide it. It is
//! counted in [`FailureCounts`] (`timeouts`, `errors`, `short_circuited`) and reported
//! by a named limiter as a failed refund or peek is. A timed-out settle may still run
//! in Redis.
//!
//! # Cost
//! A check is one network round trip: tens of microseconds to a Redis on the same
//! host, not nanoseconds (measured in `results/redis.md`). It also allocates (the key
//! with its prefix, the command buffer): the in-process promise of no allocation per
//! check does not carry over, and the network dominates either way. Concurrent checks
//! on one connection are pipelined.
//!
//! # Leases: global limits at local speed
//! [`RedisLeasedTokenBucket`](lease::RedisLeasedTokenBucket) takes tokens from the
//! same bucket (same script, fields and grid) in batches and serves them in process from one atomic word per key. When
//! to choose it: [the guide](crate::guide::redis#leases-global-limits-at-local-speed);
//! its exact bound, lease sizes, expiry and outages: the [`lease`] module.
//!
//! # Requirements
//! Redis 5 or later (scripts replicated by effects, which is what lets a writing
//! script read `TIME`; the only mode since Redis 7). Tested against Redis 7.0.

mod blocking;
mod breaker;
mod config;
mod connect;
mod engine;
mod failure;
mod fixed_window;
pub mod lease;
mod limiter;
#[cfg(feature = "redis-sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-sentinel")))]
pub mod sentinel;
mod shared;
mod token_bucket;

pub use blocking::{BlockingRedisFixedWindow, BlockingRedisLimiter, BlockingRedisTokenBucket};
pub use breaker::{CircuitBreaker, CircuitState};
pub use config::{DEFAULT_TIMEOUT, RedisConfigError};
pub use connect::{MAX_RECONNECT_DELAY, connection_config};
pub use failure::{CheckError, FailureCounts, FailurePolicy};
pub use fixed_window::{FixedWindowScript, RedisFixedWindow, RedisFixedWindowBuilder};
pub use limiter::{LimiterScript, RedisLimiter, RedisLimiterBuilder};
pub use token_bucket::{RedisTokenBucket, RedisTokenBucketBuilder, TokenBucketScript};

/// The scripts' replies, checked for both algorithms: above the engine that reads
/// them and the algorithms that make them.
#[cfg(test)]
mod tests {
    use super::engine::ScriptedAlgorithm;
    use super::{fixed_window, token_bucket};
    use crate::Decision;

    /// Found by the `redis_reply` fuzz target: an acquire reply allowing a cost of 0
    /// with 277,938,167 left, of a capacity of 1, was passed on as the decision.
    #[test]
    fn a_decision_no_script_can_give_is_refused() {
        use std::time::Duration;
        let bucket =
            token_bucket::algorithm(&crate::Quota::new(8, Duration::from_millis(1)).unwrap())
                .unwrap();
        let window = fixed_window::algorithm(8, Duration::from_secs(1)).unwrap();
        // Token bucket replies {status, tokens, ahead, missing}; fixed window
        // replies {status, remaining, wait}; the wait fields only on a denial.
        type Reply = fn(i64, i64, u32) -> Vec<i64>;
        let cases: [(&ScriptedAlgorithm, Reply); 2] = [
            (&bucket, |status, left, cost| match status {
                1 => vec![1, left, 0, i64::from(cost) - left],
                _ => vec![status, left, 0, 0],
            }),
            (&window, |status, left, _| match status {
                1 => vec![1, left, 1000],
                _ => vec![status, left, 0],
            }),
        ];
        for (algorithm, reply) in cases {
            let decision =
                |status, left, cost| algorithm.decision(&reply(status, left, cost), cost);
            // What the scripts give.
            assert_eq!(decision(0, 8, 0), Some(Decision::Allowed { remaining: 8 }));
            assert_eq!(decision(0, 5, 3), Some(Decision::Allowed { remaining: 5 }));
            assert!(matches!(
                decision(1, 2, 3),
                Some(Decision::Denied { remaining: 2, .. })
            ));
            assert!(matches!(
                decision(2, 8, 9),
                Some(Decision::ExceedsCapacity { capacity: 8, .. })
            ));
            // What they cannot: more left than the capacity less the cost, a denial
            // with enough left (or of nothing), a cost that fits told it does not, an
            // allowance above the capacity.
            for (status, left, cost) in [
                (0, 9, 0),
                (0, 277_938_167, 0),
                (0, 6, 3),
                (0, 0, 9),
                (1, 3, 3),
                (1, 1, 0),
                (1, 0, 9),
                (2, 8, 8),
            ] {
                assert_eq!(
                    decision(status, left, cost),
                    None,
                    "{:?} for {cost} taken as a decision",
                    reply(status, left, cost)
                );
            }
        }
        // A cost of 0 is denied to a key in debt, with nothing left: the window
        // counting past its limit; the bucket's reading 3 grid points (of 1 ms)
        // behind a refill point 2.5 ms ahead where it holds 1, so it owes 2 and has
        // nothing one grid point before that refill point, 1.5 ms from now.
        assert!(matches!(
            window.decision(&[1, 0, 1000], 0),
            Some(Decision::Denied { remaining: 0, .. })
        ));
        assert_eq!(
            bucket.decision(&[1, 0, 2500, -1], 0),
            Some(Decision::Denied {
                remaining: 0,
                retry_after: Duration::from_micros(1500)
            })
        );
        assert_eq!(window.decision(&[1, 1, 1000], 0), None);
    }
}
