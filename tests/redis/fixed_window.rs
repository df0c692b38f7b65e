//! `RedisFixedWindow` agrees with a plain reference model, decision by decision and
//! settle by settle (debt included).

use crate::server::RedisServer;
use crate::{fresh_prefix, inspector, manager, runtime, server_time};
use ::redis::aio::ConnectionManager;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::HashMap;
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::{FailurePolicy, RedisFixedWindow};
use turnstile::{Decision, ManualClock, Settlement};

/// The fixed window as plainly as possible: per key, the start of the window it
/// counts and the count, times in microseconds since the epoch. A request is allowed
/// iff the count plus its cost is at most the limit (so a cost of 0 is refused to a
/// key counting past it). A settle may count up to twice the limit (a debt of one
/// limit); what a window counts past the limit is the next window's starting count.
/// A settle below the estimate gives nothing back, whatever was counted: the model
/// does not know which window counted the estimate, and neither does the script.
struct Reference {
    limit: u64,
    window: u64,
    keys: HashMap<u8, (u64, u64)>,
}

impl Reference {
    /// The key's window start and count at `now`: the current window, or the one the
    /// key counted when `now` is older than that.
    fn counted(&self, key: u8, now: u64) -> (u64, u64) {
        let current = now / self.window * self.window;
        match self.keys.get(&key) {
            Some(&(start, count)) if start >= current => (start, count),
            Some(&(start, count)) if start + self.window == current && count > self.limit => {
                (current, count - self.limit)
            }
            _ => (current, 0),
        }
    }

    fn acquire(&mut self, key: u8, now: u64, cost: u32) -> Decision {
        let (start, count) = self.counted(key, now);
        let remaining = self.limit.saturating_sub(count) as u32;
        let cost = u64::from(cost);
        if cost > self.limit {
            Decision::ExceedsCapacity {
                remaining,
                capacity: self.limit as u32,
            }
        } else if count + cost > self.limit {
            // The next window starts with the debt, if any; the one after, empty.
            let carried = count.saturating_sub(self.limit);
            let windows = if carried + cost <= self.limit { 1 } else { 2 };
            Decision::Denied {
                remaining,
                retry_after: Duration::from_micros(start + windows * self.window - now),
            }
        } else {
            if cost > 0 {
                self.keys.insert(key, (start, count + cost));
            }
            Decision::Allowed {
                remaining: (self.limit - count - cost) as u32,
            }
        }
    }

    fn peek(&self, key: u8, now: u64) -> u32 {
        self.limit.saturating_sub(self.counted(key, now).1) as u32
    }

    fn settle(&mut self, key: u8, now: u64, estimate: u32, actual: u32) -> Settlement {
        let (start, count) = self.counted(key, now);
        let (estimate, actual) = (u64::from(estimate), u64::from(actual));
        let mut settled = Settlement::default();
        if actual > estimate {
            let extra = actual - estimate;
            let charged = extra.min((2 * self.limit).saturating_sub(count));
            settled.charged = charged as u32;
            settled.forgiven = (extra - charged) as u32;
            if charged > 0 {
                self.keys.insert(key, (start, count + charged));
            }
        }
        settled
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// Clock forward by this many µs, then acquire.
    Forward { by: u64, key: u8, cost: u32 },
    /// Clock back by this many µs, then acquire.
    Back { by: u64, key: u8, cost: u32 },
    /// Clock forward, then peek.
    Peek { by: u64, key: u8 },
    /// Clock forward, then settle a reservation of `estimate` at `actual`.
    Settle {
        by: u64,
        key: u8,
        estimate: u32,
        actual: u32,
    },
}

fn schedule(limit: u32, window: u64) -> impl Strategy<Value = Vec<Step>> {
    let by = prop_oneof![
        6 => 0..window * 2,
        2 => (0u64..3).prop_map(move |k| k * window),
        1 => Just(window - 1),
        1 => 0..window * 100,
    ];
    let cost = 0..=limit + 1;
    let step = prop_oneof![
        8 => (by.clone(), 0u8..3, cost.clone())
            .prop_map(|(by, key, cost)| Step::Forward { by, key, cost }),
        1 => (0..window * 2, 0u8..3, cost).prop_map(|(by, key, cost)| Step::Back { by, key, cost }),
        1 => (by.clone(), 0u8..3).prop_map(|(by, key)| Step::Peek { by, key }),
        2 => (by, 0u8..3, 0..=limit + 1, 0..=3 * limit)
            .prop_map(|(by, key, estimate, actual)| Step::Settle { by, key, estimate, actual }),
    ];
    prop::collection::vec(step, 1..80)
}

async fn agree(
    conn: ConnectionManager,
    limit: u32,
    window: u64,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let redis =
        RedisFixedWindow::builder(limit, Duration::from_micros(window), FailurePolicy::Closed)
            .prefix(fresh_prefix("fw-diff"))
            .timeout(Duration::from_secs(5))
            .client_clock(clock.clone())
            .expire_idle_keys(false)
            .build(conn)
            .expect("a valid limiter");
    let mut reference = Reference {
        limit: limit.into(),
        window,
        keys: HashMap::new(),
    };
    let mut now = 0u64;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Forward { by, key, cost } | Step::Back { by, key, cost } => {
                now = if matches!(step, Step::Back { .. }) {
                    now.saturating_sub(by)
                } else {
                    now + by
                };
                clock.set(Duration::from_micros(now));
                let expected = reference.acquire(key, now, cost);
                let got = redis.acquire([key], cost).await;
                let SharedDecision::Decided(got) = got else {
                    return Err(TestCaseError::fail(format!(
                        "step {i}: no decision: {got:?}"
                    )));
                };
                prop_assert_eq!(got, expected, "step {} {:?} at {} µs", i, step, now);
            }
            Step::Peek { by, key } => {
                now += by;
                clock.set(Duration::from_micros(now));
                let got = redis
                    .peek([key])
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    reference.peek(key, now),
                    "step {} peek at {} µs",
                    i,
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
                let got = redis
                    .settle([key], estimate, actual)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    reference.settle(key, now, estimate, actual),
                    "step {} {:?} at {} µs",
                    i,
                    step,
                    now
                );
            }
        }
    }
    Ok(())
}

#[test]
fn redis_fixed_window_agrees_with_the_reference_model() {
    let server = RedisServer::start();
    let rt = runtime();
    let conn = rt.block_on(manager(&server));
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (1u32..=5, prop_oneof![1u64..=1000, 1000u64..=10_000_000])
        .prop_flat_map(|(limit, window)| (Just(limit), Just(window), schedule(limit, window)));
    let result = runner.run(&strategy, |(limit, window, steps)| {
        rt.block_on(agree(conn.clone(), limit, window, &steps))
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[tokio::test]
async fn windows_start_over_at_their_end_and_denials_wait_exactly_until_then() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = RedisFixedWindow::builder(3, Duration::from_secs(1), FailurePolicy::Closed)
        .prefix(fresh_prefix("fw"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    let decide = |cost| {
        let limiter = limiter.clone();
        async move {
            match limiter.acquire("k", cost).await {
                SharedDecision::Decided(decision) => decision,
                other => panic!("{other:?}"),
            }
        }
    };
    clock.set(Duration::from_millis(400));
    assert_eq!(decide(2).await, Decision::Allowed { remaining: 1 });
    assert_eq!(
        decide(2).await,
        Decision::Denied {
            remaining: 1,
            retry_after: Duration::from_millis(600)
        }
    );
    assert_eq!(decide(1).await, Decision::Allowed { remaining: 0 });
    assert_eq!(
        decide(4).await,
        Decision::ExceedsCapacity {
            remaining: 0,
            capacity: 3
        }
    );
    clock.set(Duration::from_millis(1000) - Duration::from_micros(1));
    assert!(!decide(1).await.is_allowed());
    // The boundary: the whole limit again, the classic fixed window's double burst.
    clock.set(Duration::from_millis(1000));
    assert_eq!(decide(3).await, Decision::Allowed { remaining: 0 });
}

#[tokio::test]
async fn server_time_windows_start_at_the_unix_epoch() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let window = Duration::from_secs(3600);
    let limiter = RedisFixedWindow::builder(1, window, FailurePolicy::Closed)
        .prefix(fresh_prefix("fw-server"))
        .timeout(Duration::from_secs(5))
        .build(manager(&server).await)
        .unwrap();
    let before = server_time(&mut inspect).await;
    assert!(limiter.try_acquire("k").await);
    let denied = limiter.acquire("k", 1).await;
    let after = server_time(&mut inspect).await;
    let window_us = window.as_micros() as u64;
    let end = |t: u64| (t / window_us + 1) * window_us;
    if end(before) == end(after) {
        let wait = denied.retry_after().expect("denied").as_micros() as u64;
        assert!((end(after) - after..=end(before) - before).contains(&wait));
    }
}

/// The review's case for "a fixed window gives nothing back on settle": a reservation
/// of the whole limit taken at the end of one window and settled at 0 in the next,
/// after that window admitted its own limit. Giving the 10 back to the window being
/// counted would let 10 more through it: 20 in one window.
#[tokio::test]
async fn a_settle_below_the_estimate_gives_nothing_back_to_a_later_window() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = RedisFixedWindow::builder(10, Duration::from_secs(1), FailurePolicy::Closed)
        .prefix(fresh_prefix("fw-settle-late"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    let decide = |cost| {
        let limiter = limiter.clone();
        async move {
            match limiter.acquire("k", cost).await {
                SharedDecision::Decided(decision) => decision,
                other => panic!("{other:?}"),
            }
        }
    };
    clock.set(Duration::from_millis(999));
    assert_eq!(decide(10).await, Decision::Allowed { remaining: 0 });
    clock.set(Duration::from_millis(1000));
    for left in (0..10).rev() {
        assert_eq!(decide(1).await, Decision::Allowed { remaining: left });
    }
    clock.set(Duration::from_millis(1500));
    assert_eq!(
        limiter.settle("k", 10, 0).await.unwrap(),
        Settlement::default()
    );
    // Nothing came back: the window has admitted its 10 and admits no more.
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
    assert_eq!(
        decide(1).await,
        Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_millis(500)
        }
    );
    // Within one window, too: a settle gives nothing back (a policy's refund does).
    clock.set(Duration::from_millis(2000));
    assert_eq!(decide(4).await, Decision::Allowed { remaining: 6 });
    assert_eq!(
        limiter.settle("k", 4, 1).await.unwrap(),
        Settlement::default()
    );
    assert_eq!(limiter.peek("k").await.unwrap(), 6);
}

/// A cost of 0 is allowed unless the key counts past its limit: then it waits for
/// the first window where the count is back within the limit.
#[tokio::test]
async fn a_cost_of_zero_is_refused_while_the_window_counts_past_its_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = RedisFixedWindow::builder(3, Duration::from_secs(1), FailurePolicy::Closed)
        .prefix(fresh_prefix("fw-zero"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    let decide = |cost| {
        let limiter = limiter.clone();
        async move {
            match limiter.acquire("k", cost).await {
                SharedDecision::Decided(decision) => decision,
                other => panic!("{other:?}"),
            }
        }
    };
    clock.set(Duration::from_millis(200));
    // Counted to the limit, not past it: a cost of 0 is still allowed.
    assert_eq!(decide(3).await, Decision::Allowed { remaining: 0 });
    assert_eq!(decide(0).await, Decision::Allowed { remaining: 0 });
    // "Estimate 0, charge what fails": two charges put the key 2 past its limit.
    for _ in 0..2 {
        assert_eq!(
            limiter.settle("k", 0, 1).await.unwrap(),
            Settlement {
                charged: 1,
                ..Settlement::default()
            }
        );
    }
    let refused = Decision::Denied {
        remaining: 0,
        retry_after: Duration::from_millis(800),
    };
    assert_eq!(decide(0).await, refused);
    // The next window starts at 2 counted: within the limit, a cost of 0 passes, and
    // one more.
    clock.set(Duration::from_millis(1000));
    assert_eq!(decide(0).await, Decision::Allowed { remaining: 1 });
    assert_eq!(decide(1).await, Decision::Allowed { remaining: 0 });
}
