//! `RedisTokenBucket` makes the in-process `TokenBucket`'s decisions, decision by
//! decision, `retry_after` included; and the design notes' scenarios hold on Redis.

use crate::server::RedisServer;
use crate::{fresh_prefix, inspector, manager, runtime, server_time};
use ::redis::aio::ConnectionManager;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::{CheckError, FailurePolicy, RedisConfigError, RedisTokenBucket};
use turnstile::{Decision, ManualClock, Quota, TokenBucket};

/// One step of a schedule, times in nanoseconds.
#[derive(Clone, Debug)]
enum Step {
    /// Clock forward, then acquire.
    Forward { by: u64, key: u8, cost: u32 },
    /// Clock back (skew), then acquire.
    Back { by: u64, key: u8, cost: u32 },
    /// Clock forward, then peek.
    Peek { by: u64, key: u8 },
}

/// Quotas whose interval is whole microseconds: small capacities (schedules cross
/// many grid points) with intervals from 1 µs to 10 s, or any capacity up to
/// `u32::MAX` with intervals up to 1 ms (a full refill within the scripts' 2^52 µs).
fn quota() -> impl Strategy<Value = Quota> {
    let small = (1u32..=6, prop_oneof![1u64..=1000, 1000u64..=10_000_000]);
    let large = (1u32..=u32::MAX, 1u64..=1000);
    prop_oneof![3 => small, 1 => large].prop_map(|(capacity, interval_us)| {
        Quota::new(capacity, Duration::from_micros(interval_us)).expect("a valid quota")
    })
}

/// Clock moves on, near and across grid points, with rare long silences; in whole
/// microseconds when `aligned`, otherwise any nanosecond.
fn step_ns(interval: u64, aligned: bool) -> impl Strategy<Value = u64> {
    let unit = if aligned { 1000 } else { 1 };
    prop_oneof![
        6 => 0..interval * 3 / unit,
        2 => (0u64..4).prop_map(move |k| k * interval / unit),
        1 => Just((interval - unit) / unit),
        1 => 0..interval * 1000 / unit,
    ]
    .prop_map(move |n| n * unit)
}

fn schedule(quota: Quota, aligned: bool) -> impl Strategy<Value = Vec<Step>> {
    let interval = quota.refill_every().as_nanos() as u64;
    let cost = 0..=quota.capacity().saturating_add(1);
    let unit = if aligned { 1000 } else { 1 };
    let step = prop_oneof![
        8 => (step_ns(interval, aligned), 0u8..4, cost.clone())
            .prop_map(|(by, key, cost)| Step::Forward { by, key, cost }),
        1 => ((0..interval * 3 / unit).prop_map(move |n| n * unit), 0u8..4, cost)
            .prop_map(|(by, key, cost)| Step::Back { by, key, cost }),
        1 => (step_ns(interval, aligned), 0u8..4).prop_map(|(by, key)| Step::Peek { by, key }),
    ];
    prop::collection::vec(step, 1..80)
}

/// The in-process decision as Redis reports it: the same, except that Redis reads
/// the clock floored to the microsecond, which lengthens a wait to the microsecond.
fn at_micro_resolution(decision: Decision) -> Decision {
    match decision {
        Decision::Denied {
            remaining,
            retry_after,
        } => Decision::Denied {
            remaining,
            retry_after: Duration::from_nanos(retry_after.as_nanos().div_ceil(1000) as u64 * 1000),
        },
        other => other,
    }
}

/// Runs `steps` against both limiters on one manual clock; every answer must agree.
async fn agree(conn: ConnectionManager, quota: Quota, steps: &[Step]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let local = TokenBucket::<String, ManualClock>::with_clock(quota, clock.clone()).unwrap();
    let redis = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(fresh_prefix("tb-diff"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(conn)
        .expect("a valid limiter");
    let mut now = 0u64;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Forward { by, key, cost } | Step::Back { by, key, cost } => {
                now = if matches!(step, Step::Back { .. }) {
                    now.saturating_sub(by)
                } else {
                    now + by
                };
                clock.set(Duration::from_nanos(now));
                let key = format!("k{key}");
                let expected = at_micro_resolution(local.acquire(key.as_str(), cost));
                let got = redis.acquire(&key, cost).await;
                let SharedDecision::Decided(got) = got else {
                    return Err(TestCaseError::fail(format!(
                        "step {i}: no decision: {got:?}"
                    )));
                };
                prop_assert_eq!(got, expected, "step {} {:?} at {} ns", i, step, now);
            }
            Step::Peek { by, key } => {
                now += by;
                clock.set(Duration::from_nanos(now));
                let key = format!("k{key}");
                let got = redis
                    .peek(&key)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    local.peek(key.as_str()),
                    "step {} peek at {} ns",
                    i,
                    now
                );
            }
        }
    }
    prop_assert_eq!(redis.failures().errors + redis.failures().timeouts, 0);
    Ok(())
}

fn differential(aligned: bool, cases: u32) {
    let server = RedisServer::start();
    let rt = runtime();
    let conn = rt.block_on(manager(&server));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = quota().prop_flat_map(move |quota| (Just(quota), schedule(quota, aligned)));
    let result = runner.run(&strategy, |(quota, steps)| {
        rt.block_on(agree(conn.clone(), quota, &steps))
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[test]
fn redis_and_in_process_agree_decision_by_decision_on_microsecond_times() {
    differential(true, 48);
}

#[test]
fn on_nanosecond_times_redis_decides_the_same_and_rounds_waits_up_to_the_microsecond() {
    differential(false, 24);
}

fn client_clock_limiter(
    conn: ConnectionManager,
    quota: Quota,
    clock: &ManualClock,
) -> RedisTokenBucket {
    RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(fresh_prefix("tb"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(conn)
        .expect("a valid limiter")
}

async fn decided(
    outcome: impl std::future::Future<Output = SharedDecision<CheckError>>,
) -> Decision {
    match outcome.await {
        SharedDecision::Decided(decision) => decision,
        fallback => panic!("no decision: {fallback:?}"),
    }
}

#[tokio::test]
async fn the_design_notes_example_keeps_the_unfinished_part_of_an_interval() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::new(1, Duration::from_secs(1)).unwrap();
    let limiter = client_clock_limiter(manager(&server).await, quota, &clock);
    let mut allowed = Vec::new();
    for ms in [0, 1500, 2000, 2999, 3000] {
        clock.set(Duration::from_millis(ms));
        allowed.push(decided(limiter.acquire("alice", 1)).await.is_allowed());
    }
    assert_eq!(allowed, [true, true, true, false, true]);
}

#[tokio::test]
async fn denials_change_nothing_and_wait_exactly() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::new(4, Duration::from_millis(250)).unwrap();
    let limiter = client_clock_limiter(manager(&server).await, quota, &clock);
    clock.set(Duration::from_millis(100));
    assert_eq!(
        decided(limiter.acquire("k", 4)).await,
        Decision::Allowed { remaining: 0 }
    );
    // 3 more tokens arrive at 250, 500 and 750 ms: 650 ms from now.
    let denied = decided(limiter.acquire("k", 3)).await;
    assert_eq!(
        denied,
        Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_millis(650)
        }
    );
    // Retrying while denied is not counted against the key.
    for _ in 0..10 {
        assert!(!decided(limiter.acquire("k", 3)).await.is_allowed());
    }
    clock.set(Duration::from_millis(750) - Duration::from_micros(1));
    assert!(!decided(limiter.acquire("k", 3)).await.is_allowed());
    clock.set(Duration::from_millis(750));
    assert_eq!(
        decided(limiter.acquire("k", 3)).await,
        Decision::Allowed { remaining: 0 }
    );
}

#[tokio::test]
async fn a_time_older_than_the_last_refill_sees_the_tokens_still_to_come_as_missing() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::new(4, Duration::from_secs(1)).unwrap();
    let limiter = client_clock_limiter(manager(&server).await, quota, &clock);
    // At 5 s, 3 of 4 taken: 1 left, full again at 8 s.
    clock.set(Duration::from_secs(5));
    assert!(decided(limiter.acquire("k", 3)).await.is_allowed());
    // Another server's clock reads 4.5 s: the token that arrives at 5 s is missing.
    clock.set(Duration::from_millis(4500));
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
    assert_eq!(
        decided(limiter.acquire("k", 1)).await,
        Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_millis(500)
        }
    );
    // Far behind, the wait is longer by exactly the lag.
    clock.set(Duration::from_secs(3));
    assert_eq!(
        decided(limiter.acquire("k", 1)).await,
        Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_secs(2)
        }
    );
    clock.set(Duration::from_secs(5));
    assert_eq!(
        decided(limiter.acquire("k", 1)).await,
        Decision::Allowed { remaining: 0 }
    );
}

#[tokio::test]
async fn a_million_a_second_and_the_largest_burst_are_held_exactly() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let conn = manager(&server).await;
    let million = client_clock_limiter(conn.clone(), Quota::per_second(1_000_000).unwrap(), &clock);
    assert_eq!(
        decided(million.acquire("api", 1_000_000)).await,
        Decision::Allowed { remaining: 0 }
    );
    clock.set(Duration::from_millis(1));
    assert_eq!(million.peek("api").await.unwrap(), 1_000);
    let largest = Quota::new(u32::MAX, Duration::from_micros(1)).unwrap();
    let bytes = client_clock_limiter(conn, largest, &clock);
    assert!(decided(bytes.acquire("link", u32::MAX)).await.is_allowed());
    assert_eq!(
        decided(bytes.acquire("link", 2)).await.retry_after(),
        Some(Duration::from_micros(2))
    );
    // Finer than TIME's microsecond: refused, naming the interval to use instead.
    let nanosecond = Quota::new(u32::MAX, Duration::from_nanos(1)).unwrap();
    let refused = RedisTokenBucket::builder(nanosecond, FailurePolicy::Closed)
        .build(manager(&server).await)
        .err();
    assert!(
        matches!(refused, Some(RedisConfigError::IntervalNotWholeMicros { rounded_up, .. })
            if rounded_up == Duration::from_micros(1)),
        "{refused:?}"
    );
}

#[tokio::test]
async fn server_time_puts_the_refill_grid_on_the_unix_epoch() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let interval = Duration::from_secs(3600);
    let quota = Quota::new(3, interval).unwrap();
    let limiter = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(fresh_prefix("tb-server"))
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let before = server_time(&mut inspect).await;
    assert!(decided(limiter.acquire("k", 3)).await.is_allowed());
    let denied = decided(limiter.acquire("k", 1)).await;
    let after = server_time(&mut inspect).await;
    let interval_us = interval.as_micros() as u64;
    // The token comes at the next whole hour since 1970, whenever the scripts ran
    // (unless an hour began meanwhile, once in a blue moon: then nothing to check).
    let next = |t: u64| (t / interval_us + 1) * interval_us;
    if next(before) == next(after) {
        let wait = denied.retry_after().expect("denied").as_micros() as u64;
        assert!(
            (next(after) - after..=next(before) - before).contains(&wait),
            "{wait} µs, server time {before}..{after}"
        );
    }
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let limiter = RedisTokenBucket::builder(Quota::per_second(10).unwrap(), FailurePolicy::Closed)
        .prefix(fresh_prefix("tb-noscript"))
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    assert!(decided(limiter.acquire("k", 1)).await.is_allowed());
    let () = ::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut inspect)
        .await
        .unwrap();
    // The script as src/redis/engine.rs composes it: the fields, the preamble, the body.
    let text = format!(
        "local FIELDS = {{'t', 'r'}}\n{}{}",
        include_str!("../../src/redis/preamble.lua"),
        include_str!("../../src/redis/token_bucket.lua")
    );
    let sha = ::redis::Script::new(&text).get_hash().to_owned();
    let mut exists = ::redis::cmd("SCRIPT");
    exists.arg("EXISTS").arg(&sha);
    let loaded: Vec<bool> = exists.query_async(&mut inspect).await.unwrap();
    assert_eq!(loaded, [false]);
    // EVALSHA answers NOSCRIPT; the limiter loads the script and runs it.
    let _ = decided(limiter.acquire("k", 1)).await;
    assert_eq!(limiter.failures(), Default::default());
    let loaded: Vec<bool> = exists.query_async(&mut inspect).await.unwrap();
    assert_eq!(loaded, [true]);
}

#[tokio::test]
async fn a_new_quota_under_the_same_prefix_reads_the_stored_state_sensibly() {
    let server = RedisServer::start();
    let conn = manager(&server).await;
    let clock = ManualClock::new();
    let prefix = fresh_prefix("tb-requota");
    let limiter = |capacity, interval| {
        RedisTokenBucket::builder(
            Quota::new(capacity, interval).unwrap(),
            FailurePolicy::Closed,
        )
        .prefix(&prefix)
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(conn.clone())
        .unwrap()
    };
    // All three epochs at 0.
    let seconds = limiter(5, Duration::from_secs(1));
    let hours = limiter(5, Duration::from_secs(3600));
    let smaller = limiter(2, Duration::from_secs(1));

    clock.set(Duration::from_secs(7201));
    assert!(decided(seconds.acquire("k", 3)).await.is_allowed());
    // The stored refill is a time (7201 s), not a grid index (7201, which an hourly
    // grid would read as 300 days ahead), and the hourly grid reads it as its own
    // last point, 7200 s.
    clock.set(Duration::from_secs(7202));
    assert_eq!(
        decided(hours.acquire("k", 2)).await,
        Decision::Allowed { remaining: 0 }
    );
    clock.set(Duration::from_secs(3 * 3600));
    assert_eq!(
        decided(hours.acquire("k", 1)).await,
        Decision::Allowed { remaining: 0 }
    );

    // A lower capacity caps what a key holds.
    assert!(decided(seconds.acquire("other", 1)).await.is_allowed());
    assert_eq!(smaller.peek("other").await.unwrap(), 2);
    assert_eq!(
        decided(smaller.acquire("other", 2)).await,
        Decision::Allowed { remaining: 0 }
    );
}
