//! Reserve, then settle, on Redis: a settle below the estimate gives the difference
//! back (what was given back, exactly), above it charges even past what the key holds
//! and the key owes, refused until refill has repaid the debt, each denial's
//! `retry_after` counting it; the debt is capped at one capacity (the rest forgiven);
//! the key's expiry covers the debt; a settle that does not reach Redis is an error,
//! counted. One server per test; client clocks, so nothing waits.

use crate::server::RedisServer;
use crate::{fresh_prefix, inspector, manager, pttl, runtime};
use ::redis::aio::ConnectionManager;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::time::Duration;
use turnstile::policy::SharedLimiter;
use turnstile::redis::lease::RedisLeasedTokenBucket;
use turnstile::redis::{
    CheckError, CircuitBreaker, FailurePolicy, RedisFixedWindow, RedisTokenBucket,
};
use turnstile::{Decision, ManualClock, Quota, Settlement, SharedDecision};

fn refunded(refunded: u32) -> Settlement {
    Settlement {
        refunded,
        ..Settlement::default()
    }
}

fn charged(charged: u32, forgiven: u32) -> Settlement {
    Settlement {
        charged,
        forgiven,
        ..Settlement::default()
    }
}

fn denied(ms: u64) -> Decision {
    Decision::Denied {
        remaining: 0,
        retry_after: Duration::from_millis(ms),
    }
}

async fn decided(
    outcome: impl std::future::Future<Output = SharedDecision<CheckError>>,
) -> Decision {
    match outcome.await {
        SharedDecision::Decided(decision) => decision,
        fallback => panic!("no decision: {fallback:?}"),
    }
}

/// A token bucket of 4 tokens, one each 100 ms, on `clock`.
fn bucket(conn: ConnectionManager, clock: &ManualClock) -> RedisTokenBucket {
    RedisTokenBucket::builder(
        Quota::new(4, Duration::from_millis(100)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(fresh_prefix("settle-tb"))
    .timeout(Duration::from_secs(5))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .build(conn)
    .unwrap()
}

/// The token bucket with debt as the design notes state it, on one number per key:
/// `full_at`, the grid index at which the bucket is full again. At grid index `g` it
/// has `capacity − (full_at − g)` tokens (capped at the capacity), less than nothing
/// when that is negative (a debt: it holds none, and is refused even a cost of 0); an
/// admission of `k` (0 included) stores `max(full_at, g) + k`; a settle gives back down to `g` at
/// the most, or charges up to `g + 2 × capacity` (a debt of one capacity). A clock
/// stepped back reads a smaller `g`: the same rules, with more still to come.
struct Model {
    capacity: u64,
    interval: u64,
    full_at: std::collections::HashMap<u8, u64>,
}

impl Model {
    fn held(&self, key: u8, g: u64) -> u64 {
        let full_at = self.full_at.get(&key).copied().unwrap_or(0);
        self.capacity.saturating_sub(full_at.saturating_sub(g))
    }

    fn acquire(&mut self, key: u8, now: u64, cost: u32) -> Decision {
        let g = now / self.interval;
        let held = self.held(key, g);
        let cost = u64::from(cost);
        let full_at = self.full_at.get(&key).copied().unwrap_or(0);
        if cost > self.capacity {
            Decision::ExceedsCapacity {
                remaining: held as u32,
                capacity: self.capacity as u32,
            }
        } else if full_at.saturating_sub(g) + cost <= self.capacity {
            // What the key has (capacity − (full_at − g), less than nothing in debt)
            // covers the cost: a cost of 0 is refused to a key that owes. Stored for
            // a cost of 0 too, as in process: a bucket full at `g` is full from `g`,
            // which a reading behind it (a clock stepped back) sees.
            self.full_at.insert(key, full_at.max(g) + cost);
            Decision::Allowed {
                remaining: (held - cost) as u32,
            }
        } else {
            // Holding `cost` at the grid index where `full_at − g′ = capacity − cost`.
            let ready = full_at + cost - self.capacity;
            Decision::Denied {
                remaining: held as u32,
                retry_after: Duration::from_micros(ready * self.interval - now),
            }
        }
    }

    fn settle(&mut self, key: u8, now: u64, estimate: u32, actual: u32) -> Settlement {
        let g = now / self.interval;
        let full_at = self.full_at.get(&key).copied().unwrap_or(0);
        let (estimate, actual) = (u64::from(estimate), u64::from(actual));
        let mut settled = Settlement::default();
        let new = if actual < estimate {
            let new = full_at
                .saturating_sub(estimate - actual)
                .max(g)
                .min(full_at);
            settled.refunded = (full_at - new) as u32;
            new
        } else {
            let from = full_at.max(g);
            let charged = (actual - estimate).min((g + 2 * self.capacity).saturating_sub(from));
            settled.charged = charged as u32;
            settled.forgiven = (actual - estimate - charged) as u32;
            if charged > 0 { from + charged } else { full_at }
        };
        self.full_at.insert(key, new);
        settled
    }
}

#[derive(Clone, Debug)]
enum Step {
    Acquire {
        by: u64,
        key: u8,
        cost: u32,
    },
    Settle {
        by: u64,
        key: u8,
        estimate: u32,
        actual: u32,
    },
    Peek {
        by: u64,
        key: u8,
    },
    /// The clock steps back by this many µs (a server's clock behind another's).
    Rewind {
        by: u64,
    },
}

async fn agree_with_the_model(
    conn: ConnectionManager,
    capacity: u32,
    interval: u64,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let redis = RedisTokenBucket::builder(
        Quota::new(capacity, Duration::from_micros(interval)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(fresh_prefix("settle-model"))
    .timeout(Duration::from_secs(5))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .build(conn)
    .unwrap();
    let mut model = Model {
        capacity: capacity.into(),
        interval,
        full_at: Default::default(),
    };
    let mut now = 0;
    let fail = |e: CheckError| TestCaseError::fail(e.to_string());
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Acquire { by, key, cost } => {
                now += by;
                clock.set(Duration::from_micros(now));
                let got = decided(redis.acquire([key], cost)).await;
                prop_assert_eq!(
                    got,
                    model.acquire(key, now, cost),
                    "step {} {:?} at {} µs",
                    i,
                    step,
                    now
                );
            }
            Step::Settle {
                by,
                key,
                estimate,
                actual,
            } => {
                now += by;
                clock.set(Duration::from_micros(now));
                let got = redis.settle([key], estimate, actual).await.map_err(fail)?;
                let expected = model.settle(key, now, estimate, actual);
                prop_assert_eq!(got, expected, "step {} {:?} at {} µs", i, step, now);
            }
            Step::Peek { by, key } => {
                now += by;
                clock.set(Duration::from_micros(now));
                let got = redis.peek([key]).await.map_err(fail)?;
                let expected = model.held(key, now / interval) as u32;
                prop_assert_eq!(got, expected, "step {} peek at {} µs", i, now);
            }
            Step::Rewind { by } => {
                now = now.saturating_sub(by);
            }
        }
    }
    Ok(())
}

#[test]
fn a_bucket_settles_and_owes_as_the_model_with_debt_decision_by_decision() {
    let server = RedisServer::start();
    let rt = runtime();
    let conn = rt.block_on(manager(&server));
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (1u32..=6, 1u64..=2000).prop_flat_map(|(capacity, interval)| {
        let by = prop_oneof![
            6 => 0..interval * 3,
            2 => (0u64..4).prop_map(move |k| k * interval),
            1 => 0..interval * 30,
        ];
        let step = prop_oneof![
            5 => (by.clone(), 0u8..3, 0..=capacity + 1)
                .prop_map(|(by, key, cost)| Step::Acquire { by, key, cost }),
            3 => (by.clone(), 0u8..3, 0..=capacity + 1, 0..=3 * capacity)
                .prop_map(|(by, key, estimate, actual)| Step::Settle { by, key, estimate, actual }),
            1 => (by, 0u8..3).prop_map(|(by, key)| Step::Peek { by, key }),
            1 => (0..interval * 5).prop_map(|by| Step::Rewind { by }),
        ];
        (
            Just(capacity),
            Just(interval),
            prop::collection::vec(step, 1..60),
        )
    });
    let result = runner.run(&strategy, |(capacity, interval, steps)| {
        rt.block_on(agree_with_the_model(
            conn.clone(),
            capacity,
            interval,
            &steps,
        ))
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[tokio::test]
async fn a_bucket_charged_past_empty_owes_and_denials_wait_out_the_debt_exactly() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = bucket(manager(&server).await, &clock);
    clock.set(Duration::from_millis(30));
    assert_eq!(
        decided(limiter.acquire("k", 2)).await,
        Decision::Allowed { remaining: 2 }
    );
    // Estimated 2, cost 7: 5 more, 2 of them held, 3 owed.
    assert_eq!(limiter.settle("k", 2, 7).await.unwrap(), charged(5, 0));
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
    // One token needs the 3 owed repaid and one more: 4 grid points (100, 200, 300,
    // 400 ms), 370 ms from 30 ms. Denials change nothing.
    for _ in 0..3 {
        assert_eq!(decided(limiter.acquire("k", 1)).await, denied(370));
    }
    assert_eq!(decided(limiter.acquire("k", 4)).await, denied(670));
    // A key in debt has less than nothing: even a cost of 0 waits until the 3 owed
    // are repaid (300 ms).
    assert_eq!(decided(limiter.acquire("k", 0)).await, denied(270));
    clock.set(Duration::from_millis(299));
    assert_eq!(decided(limiter.acquire("k", 0)).await, denied(1));
    clock.set(Duration::from_millis(300));
    assert_eq!(
        decided(limiter.acquire("k", 0)).await,
        Decision::Allowed { remaining: 0 }
    );
    clock.set(Duration::from_millis(399));
    assert_eq!(decided(limiter.acquire("k", 1)).await, denied(1));
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
    clock.set(Duration::from_millis(400));
    assert_eq!(
        decided(limiter.acquire("k", 1)).await,
        Decision::Allowed { remaining: 0 }
    );
    // Repaid: a full bucket again a capacity later.
    clock.set(Duration::from_millis(800));
    assert_eq!(limiter.peek("k").await.unwrap(), 4);
    assert_eq!(limiter.failures(), Default::default());
}

#[tokio::test]
async fn a_settle_below_the_estimate_gives_back_exactly_what_the_bucket_can_hold() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = bucket(manager(&server).await, &clock);
    assert!(decided(limiter.acquire("k", 4)).await.is_allowed());
    assert_eq!(limiter.settle("k", 4, 1).await.unwrap(), refunded(3));
    assert_eq!(limiter.peek("k").await.unwrap(), 3);
    // Only one token is missing: that is all that comes back.
    assert_eq!(limiter.settle("k", 4, 0).await.unwrap(), refunded(1));
    assert_eq!(limiter.peek("k").await.unwrap(), 4);
    // A settle at the estimate changes nothing.
    assert_eq!(
        limiter.settle("k", 3, 3).await.unwrap(),
        Settlement::default()
    );
    // A debt is given back first: refunds repay it, then fill the bucket.
    assert_eq!(limiter.settle("k", 0, 6).await.unwrap(), charged(6, 0));
    assert_eq!(decided(limiter.acquire("k", 1)).await, denied(300));
    assert_eq!(limiter.settle("k", 3, 0).await.unwrap(), refunded(3));
    assert_eq!(limiter.peek("k").await.unwrap(), 1);
    assert_eq!(limiter.settle("k", 100, 0).await.unwrap(), refunded(3));
    assert_eq!(limiter.peek("k").await.unwrap(), 4);
}

#[tokio::test]
async fn a_debt_is_capped_at_one_capacity_and_the_rest_is_forgiven() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = bucket(manager(&server).await, &clock);
    // 4 held, 4 more owed at the most: of 11, 8 are charged, 3 forgiven.
    assert_eq!(limiter.settle("k", 0, 11).await.unwrap(), charged(8, 3));
    // A debt at the cap forgives every further charge.
    assert_eq!(limiter.settle("k", 1, 3).await.unwrap(), charged(0, 2));
    // 8 tokens owed: the first is back in 5 intervals.
    assert_eq!(decided(limiter.acquire("k", 1)).await, denied(500));
    // Repaid in part, the key can owe again up to the cap.
    clock.set(Duration::from_millis(200));
    assert_eq!(limiter.settle("k", 0, 5).await.unwrap(), charged(2, 3));
    assert_eq!(decided(limiter.acquire("k", 4)).await, denied(800));
}

#[tokio::test]
async fn a_fixed_window_counts_past_its_limit_and_carries_the_debt_into_the_next_windows() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = RedisFixedWindow::builder(3, Duration::from_millis(100), FailurePolicy::Closed)
        .prefix(fresh_prefix("settle-fw"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    clock.set(Duration::from_millis(10));
    assert!(decided(limiter.acquire("k", 3)).await.is_allowed());
    // Counted 3 + 4 = 7 of 3: past the cap of 3 + 3, so 1 is forgiven.
    assert_eq!(limiter.settle("k", 3, 7).await.unwrap(), charged(3, 1));
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
    // 6 counted: the next window starts at 3, full; the one after at 0.
    assert_eq!(decided(limiter.acquire("k", 1)).await, denied(190));
    // Counting past the limit, even a cost of 0 waits: for the next window, where
    // the count is back at the limit.
    assert_eq!(decided(limiter.acquire("k", 0)).await, denied(90));
    clock.set(Duration::from_millis(100));
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
    assert_eq!(decided(limiter.acquire("k", 1)).await, denied(100));
    assert_eq!(
        decided(limiter.acquire("k", 0)).await,
        Decision::Allowed { remaining: 0 }
    );
    // A settle below its estimate gives nothing back, not even from the carried count.
    assert_eq!(
        limiter.settle("k", 2, 0).await.unwrap(),
        Settlement::default()
    );
    assert_eq!(decided(limiter.acquire("k", 2)).await, denied(100));
    clock.set(Duration::from_millis(200));
    assert_eq!(
        decided(limiter.acquire("k", 3)).await,
        Decision::Allowed { remaining: 0 }
    );
    assert_eq!(
        limiter.settle("k", 3, 0).await.unwrap(),
        Settlement::default()
    );
}

#[tokio::test]
async fn a_key_in_debt_expires_only_once_the_debt_is_repaid() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    // Expiry on, on a client clock standing at its epoch: the TTL each write sets is
    // exact, and PTTL reads it less the milliseconds since.
    let clock = ManualClock::new();
    let ttl_within = |ttl: i64, seconds: i64| {
        assert!(
            (seconds * 1000 - 1000..=seconds * 1000).contains(&ttl),
            "TTL {ttl} ms, expected just under {seconds} s"
        );
    };
    let prefix = fresh_prefix("settle-ttl-tb");
    let limiter = RedisTokenBucket::builder(
        Quota::new(2, Duration::from_secs(10)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(&prefix)
    .timeout(Duration::from_secs(5))
    .client_clock(clock.clone())
    .build(manager(&server).await)
    .unwrap();
    let key = format!("{prefix}k").into_bytes();
    assert!(limiter.acquire("k", 2).await.is_allowed());
    // Empty: full again in 20 s. Owing 2 more: in 40 s.
    ttl_within(pttl(&mut inspect, &key).await, 20);
    assert_eq!(limiter.settle("k", 2, 4).await.unwrap(), charged(2, 0));
    ttl_within(pttl(&mut inspect, &key).await, 40);
    // Repaid in part by a refund, the key is kept as long as what it still owes.
    assert_eq!(limiter.settle("k", 1, 0).await.unwrap(), refunded(1));
    ttl_within(pttl(&mut inspect, &key).await, 30);

    let prefix = fresh_prefix("settle-ttl-fw");
    let window = RedisFixedWindow::builder(2, Duration::from_secs(10), FailurePolicy::Closed)
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .build(manager(&server).await)
        .unwrap();
    let key = format!("{prefix}k").into_bytes();
    assert!(window.acquire("k", 2).await.is_allowed());
    ttl_within(pttl(&mut inspect, &key).await, 10);
    // 4 counted of 2 (the fifth forgiven): the next window starts full, the one after
    // empty, 20 s from now.
    assert_eq!(window.settle("k", 2, 5).await.unwrap(), charged(2, 1));
    ttl_within(pttl(&mut inspect, &key).await, 20);
    // A key charged from nothing (an estimate of 0) is kept as long as it owes.
    assert_eq!(window.settle("other", 0, 3).await.unwrap(), charged(3, 0));
    ttl_within(
        pttl(&mut inspect, &format!("{prefix}other").into_bytes()).await,
        20,
    );
}

#[test]
fn a_blocking_limiter_settles_as_the_async_one() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = RedisTokenBucket::builder(
        Quota::new(4, Duration::from_millis(100)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(fresh_prefix("settle-blocking"))
    .timeout(Duration::from_secs(5))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .build_blocking(server.client())
    .unwrap();
    assert!(limiter.acquire("k", 3).is_allowed());
    assert_eq!(limiter.settle("k", 3, 1).unwrap(), refunded(2));
    assert_eq!(limiter.settle("k", 1, 6).unwrap(), charged(5, 0));
    assert_eq!(limiter.acquire("k", 2).decision(), Some(denied(400)));
}

#[tokio::test]
async fn a_leased_settle_refunds_to_the_lease_and_charges_the_lease_before_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let prefix = fresh_prefix("settle-lease");
    // 100 a day: nothing refills within the test.
    let quota = Quota::new(100, Duration::from_secs(24 * 36)).unwrap();
    let leased = RedisLeasedTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(&prefix)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .refill_ahead(false)
        .max_lease(8)
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    // A plain check at the first sighting, then leases of 1, 2 and 4 (each fetch
    // within half a lifetime doubles the next): 3 held.
    for _ in 0..4 {
        assert!(leased.acquire("k", 1).await.is_allowed());
    }
    let held = leased.held("k");
    let in_redis = leased.peek("k").await.unwrap();
    assert_eq!(held, 3);
    // Below the estimate: back to the lease, not to Redis.
    assert_eq!(leased.settle("k", 2, 1).await.unwrap(), refunded(1));
    assert_eq!(leased.held("k"), held + 1);
    assert_eq!(leased.peek("k").await.unwrap(), in_redis);
    // Above it: the lease first, the rest charged in Redis.
    let extra = held + 1 + 3;
    assert_eq!(
        leased.settle("k", 0, extra).await.unwrap(),
        charged(extra, 0)
    );
    assert_eq!(leased.held("k"), 0);
    assert_eq!(leased.peek("k").await.unwrap(), in_redis - 3);
    // A charge the lease covers is no round trip: Redis's count does not move. (The
    // fetch this acquire makes is the fourth within half a lifetime: a lease of 8.)
    assert!(leased.acquire("k", 1).await.is_allowed());
    let held = leased.held("k");
    assert_eq!(held, 7);
    let in_redis = leased.peek("k").await.unwrap();
    assert_eq!(leased.settle("k", 0, held).await.unwrap(), charged(held, 0));
    assert_eq!(leased.held("k"), 0);
    assert_eq!(leased.peek("k").await.unwrap(), in_redis);
    // Every token leased is accounted for: the charges among those served.
    let counts = leased.counts();
    assert_eq!(counts.refunded, 1);
    assert_eq!(counts.expired, 0);
    // A key with no lease entry settles in Redis, through the SharedLimiter contract.
    assert!(leased.acquire("fresh", 5).await.is_allowed());
    assert!(leased.lease("fresh").is_none());
    let settled = SharedLimiter::settle(&leased, b"fresh", 5, 2)
        .await
        .unwrap();
    assert_eq!(settled, refunded(3));
    assert_eq!(leased.peek("fresh").await.unwrap(), 98);
    // Charged into debt in Redis, the key is denied there, its wait counting it.
    assert_eq!(
        SharedLimiter::settle(&leased, b"fresh", 0, 150)
            .await
            .unwrap(),
        charged(150, 0)
    );
    match leased.acquire("fresh", 1).await {
        SharedDecision::Decided(Decision::Denied { retry_after, .. }) => {
            // 98 held, 150 charged: 52 owed, and one more token: 53 intervals of 864 s
            // from the reading, a grid point.
            assert_eq!(retry_after, Duration::from_secs(53 * 864));
        }
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test]
async fn a_settle_that_does_not_reach_redis_is_an_error_and_counted() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = RedisTokenBucket::builder(
        Quota::new(4, Duration::from_millis(100)).unwrap(),
        FailurePolicy::Open,
    )
    .prefix(fresh_prefix("settle-down"))
    .timeout(Duration::from_millis(200))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .circuit_breaker(CircuitBreaker::off())
    .build(manager(&server).await)
    .unwrap();
    assert!(decided(limiter.acquire("k", 1)).await.is_allowed());
    server.kill();
    let error = limiter.settle("k", 1, 3).await.unwrap_err();
    assert!(error.is_unavailability(), "{error}");
    let failures = limiter.failures();
    assert_eq!(failures.errors + failures.timeouts, 1, "{failures:?}");
    // Not a check: the failure policy neither allows nor denies it.
    assert_eq!(failures.allowed + failures.denied, 0);
    // Through the policy contract, the same error, boxed; a refund as a charge.
    let shared = SharedLimiter::settle(&limiter, b"k", 3, 1).await;
    assert!(shared.is_err());
    let failures = limiter.failures();
    assert_eq!(failures.errors + failures.timeouts, 2, "{failures:?}");
    // Nothing to settle needs no Redis.
    assert_eq!(
        limiter.settle("k", 2, 2).await.unwrap(),
        Settlement::default()
    );
}

/// A lost settle is visible where a lost refund is: in the named limiter's Redis
/// failure metric, by cause.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_named_limiter_reports_a_lost_settle_as_a_redis_failure() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let mut server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let conn = manager(&server).await;
    let limiter = metrics::with_local_recorder(&recorder, || {
        RedisTokenBucket::builder(Quota::per_hour(10).unwrap(), FailurePolicy::Open)
            .prefix(fresh_prefix("settle-observe"))
            .timeout(Duration::from_millis(200))
            .client_clock(ManualClock::new())
            .circuit_breaker(CircuitBreaker::off())
            .name("settled")
            .build(conn)
            .unwrap()
    });
    assert_eq!(limiter.settle("k", 0, 2).await.unwrap(), charged(2, 0));
    server.kill();
    assert!(limiter.settle("k", 0, 2).await.is_err());
    let failures: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == "turnstile_redis_failures_total"
                && key
                    .labels()
                    .any(|l| l.key() == "limiter" && l.value() == "settled")
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            other => panic!("not a counter: {other:?}"),
        })
        .sum();
    assert_eq!(failures, 1);
    let counted = limiter.failures();
    assert_eq!(counted.errors + counted.timeouts, 1, "{counted:?}");
}

/// A connection that counts the commands it sends.
#[derive(Clone)]
struct Counting(
    ConnectionManager,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
);

impl Counting {
    fn sent(&self) -> usize {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl ::redis::aio::ConnectionLike for Counting {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, ::redis::Value> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<::redis::Value>> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

#[tokio::test]
async fn a_settle_is_one_round_trip_and_none_when_a_lease_covers_it() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let conn = Counting(manager(&server).await, Default::default());
    let plain = RedisTokenBucket::builder(
        Quota::new(4, Duration::from_millis(100)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(fresh_prefix("settle-trips"))
    .timeout(Duration::from_secs(5))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .build(conn.clone())
    .unwrap();
    // The first call loads the script (a NOSCRIPT, then the load and a retry).
    assert!(plain.acquire("k", 2).await.is_allowed());
    for (estimate, actual) in [(2, 1), (1, 6), (0, 100)] {
        let before = conn.sent();
        plain.settle("k", estimate, actual).await.unwrap();
        assert_eq!(conn.sent() - before, 1, "{estimate} → {actual}");
    }
    let before = conn.sent();
    plain.settle("k", 3, 3).await.unwrap();
    assert_eq!(conn.sent(), before, "nothing to settle");

    let leased = RedisLeasedTokenBucket::builder(
        Quota::new(100, Duration::from_secs(864)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(fresh_prefix("settle-trips-lease"))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .refill_ahead(false)
    .timeout(Duration::from_secs(5))
    .build(conn.clone())
    .unwrap();
    for _ in 0..4 {
        assert!(leased.acquire("k", 1).await.is_allowed());
    }
    let held = leased.held("k");
    assert!(held >= 2, "held {held}");
    let before = conn.sent();
    assert_eq!(leased.settle("k", 1, 2).await.unwrap(), charged(1, 0));
    assert_eq!(leased.settle("k", 2, 1).await.unwrap(), refunded(1));
    assert_eq!(conn.sent(), before, "the lease covered both");
    assert_eq!(
        leased.settle("k", 0, held + 1).await.unwrap(),
        charged(held + 1, 0)
    );
    assert_eq!(conn.sent() - before, 1, "the rest in one round trip");
}

/// A leased limiter of 100 tokens a day (nothing refills within a test), leases of
/// at most 8 living 1 s on `clock`.
fn leased_daily(conn: ConnectionManager, clock: &ManualClock) -> RedisLeasedTokenBucket {
    RedisLeasedTokenBucket::builder(
        Quota::new(100, Duration::from_secs(864)).unwrap(),
        FailurePolicy::Closed,
    )
    .prefix(fresh_prefix("settle-lease-back"))
    .client_clock(clock.clone())
    .expire_idle_keys(false)
    .refill_ahead(false)
    .max_lease(8)
    .lifetime(Duration::from_secs(1))
    .timeout(Duration::from_secs(5))
    .build(conn)
    .unwrap()
}

#[tokio::test]
async fn a_leased_refund_the_lease_cannot_take_goes_back_to_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let leased = leased_daily(manager(&server).await, &clock);
    // The first sighting's plain check, then leases of 2, 4 and 8 (each fetch within
    // half a lifetime doubles the next), each spent before the next: 7 held of the
    // last.
    for _ in 0..8 {
        assert!(leased.acquire("k", 1).await.is_allowed());
    }
    assert_eq!(leased.held("k"), 7);
    let in_redis = leased.peek("k").await.unwrap();
    let before = leased.counts();
    // Past max_lease: 1 fills the lease to 8, the other 4 go to Redis, in the same
    // settle.
    assert_eq!(leased.settle("k", 5, 0).await.unwrap(), refunded(5));
    assert_eq!(leased.held("k"), 8);
    assert_eq!(leased.peek("k").await.unwrap(), in_redis + 4);
    let after = leased.counts();
    assert_eq!(after.refunded - before.refunded, 1);
    assert_eq!(after.expired, before.expired, "nothing dropped");
    // The lease expired: all of it goes to Redis.
    clock.set(Duration::from_secs(2));
    assert_eq!(leased.held("k"), 0);
    assert_eq!(leased.settle("k", 3, 1).await.unwrap(), refunded(2));
    assert_eq!(leased.peek("k").await.unwrap(), in_redis + 6);
    let last = leased.counts();
    assert_eq!(last.refunded, after.refunded);
    assert_eq!(last.expired, after.expired);
}

#[tokio::test]
async fn a_leased_charge_in_redis_forgets_the_denial_this_process_remembered() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let leased = leased_daily(manager(&server).await, &clock);
    let interval = Duration::from_secs(864);
    // Emptied by the first sighting's plain check; the next request, with an entry
    // now, is denied by Redis: one token, one interval from the epoch's grid point.
    assert!(leased.acquire("k", 100).await.is_allowed());
    let first = decided(leased.acquire("k", 1)).await;
    assert_eq!(first.retry_after(), Some(interval));
    // Remembered: denied again without Redis.
    assert_eq!(decided(leased.acquire("k", 1)).await, first);
    assert_eq!(leased.counts().denied_locally, 1);
    // Charged 5 beyond the empty bucket (the lease holds none): Redis owes 5, and the
    // remembered denial, whose wait does not count them, is forgotten.
    assert_eq!(leased.settle("k", 0, 5).await.unwrap(), charged(5, 0));
    let owed = decided(leased.acquire("k", 1)).await;
    assert_eq!(owed.retry_after(), Some(interval * 6));
    assert_eq!(leased.counts().denied_locally, 1, "asked Redis");
    // That denial is remembered in turn.
    assert_eq!(decided(leased.acquire("k", 1)).await, owed);
    assert_eq!(leased.counts().denied_locally, 2);
}

/// The extremes of the arguments: nothing panics, nothing wraps, a debt stays at
/// its cap and the rest is forgiven, a refund stays within what the key can hold.
#[tokio::test]
async fn settles_at_the_extremes_of_u32_are_capped_and_reported() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let max = u32::MAX;
    let limiter = bucket(manager(&server).await, &clock);
    assert_eq!(
        limiter.settle("k", 0, max).await.unwrap(),
        charged(8, max - 8)
    );
    assert_eq!(decided(limiter.acquire("k", 0)).await, denied(400));
    assert_eq!(
        limiter.settle("k", max, max).await.unwrap(),
        Settlement::default()
    );
    assert_eq!(
        limiter.settle("k", max - 1, max).await.unwrap(),
        charged(0, 1)
    );
    // An estimate no acquire can have taken is settled as given: the refund is
    // what the key is short of full.
    assert_eq!(limiter.settle("k", max, 0).await.unwrap(), refunded(8));
    assert_eq!(limiter.peek("k").await.unwrap(), 4);
    assert_eq!(
        decided(limiter.acquire("k", max)).await,
        Decision::ExceedsCapacity {
            remaining: 4,
            capacity: 4
        }
    );

    let window = RedisFixedWindow::builder(3, Duration::from_millis(100), FailurePolicy::Closed)
        .prefix(fresh_prefix("settle-fw-max"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    assert_eq!(
        window.settle("k", 0, max).await.unwrap(),
        charged(6, max - 6)
    );
    assert_eq!(
        window.settle("k", max, 0).await.unwrap(),
        Settlement::default()
    );
    assert_eq!(window.peek("k").await.unwrap(), 0);

    let leased = leased_daily(manager(&server).await, &clock);
    assert_eq!(leased.settle("k", max, 0).await.unwrap(), refunded(0));
    assert_eq!(
        leased.settle("k", 0, max).await.unwrap(),
        charged(200, max - 200)
    );
    assert_eq!(leased.settle("k", max, 0).await.unwrap(), refunded(200));
    assert_eq!(leased.peek("k").await.unwrap(), 100);
}

/// A gate for one command: sent to Redis and run there at once, its reply held
/// back until released (`ran` is notified when it has run).
type Gate = Option<(
    std::sync::Arc<tokio::sync::Notify>,
    tokio::sync::oneshot::Receiver<()>,
)>;

/// A connection whose next command, when a gate is set, runs in Redis but answers
/// only when the gate is released: a reply still on its way.
#[derive(Clone)]
struct Gated(ConnectionManager, std::sync::Arc<std::sync::Mutex<Gate>>);

impl ::redis::aio::ConnectionLike for Gated {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, ::redis::Value> {
        let gate = self.1.lock().unwrap().take();
        let mut conn = self.0.clone();
        Box::pin(async move {
            let reply = conn.req_packed_command(cmd).await;
            if let Some((ran, release)) = gate {
                ran.notify_one();
                let _ = release.await;
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<::redis::Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// A fetch that Redis denied before a settle's charge, whose reply lands after the
/// charge: its denial does not count the debt, so it is not remembered, and the
/// next request asks Redis.
#[tokio::test]
async fn a_denial_decided_before_a_charge_is_not_remembered_after_it() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let gate = std::sync::Arc::new(std::sync::Mutex::new(None));
    let conn = Gated(manager(&server).await, std::sync::Arc::clone(&gate));
    let interval = Duration::from_secs(864);
    let leased =
        RedisLeasedTokenBucket::builder(Quota::new(100, interval).unwrap(), FailurePolicy::Closed)
            .prefix(fresh_prefix("settle-lease-race"))
            .client_clock(clock.clone())
            .expire_idle_keys(false)
            .refill_ahead(false)
            .timeout(Duration::from_secs(5))
            .build(conn)
            .unwrap();
    // The first sighting empties the bucket (and loads the script).
    assert!(leased.acquire("k", 100).await.is_allowed());
    let ran = std::sync::Arc::new(tokio::sync::Notify::new());
    let (release, held) = tokio::sync::oneshot::channel();
    *gate.lock().unwrap() = Some((std::sync::Arc::clone(&ran), held));
    let fetching = tokio::spawn({
        let leased = leased.clone();
        async move { leased.acquire("k", 1).await }
    });
    ran.notified().await;
    // Denied in Redis already; its reply is held back while the charge runs.
    assert_eq!(leased.settle("k", 0, 5).await.unwrap(), charged(5, 0));
    release.send(()).unwrap();
    let before = decided(async { fetching.await.unwrap() }).await;
    assert_eq!(
        before.retry_after(),
        Some(interval),
        "decided before the charge"
    );
    let after = decided(leased.acquire("k", 1)).await;
    assert_eq!(after.retry_after(), Some(interval * 6), "the debt counted");
    assert_eq!(leased.counts().denied_locally, 0);
}
