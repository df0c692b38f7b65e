//! Waiting instead of rejecting, in simulated time: tokio's clock is paused and the
//! limiter's `ManualClock` is advanced in step with it, a millisecond at a time, so
//! every assertion is about simulated time — none about the wall clock.

use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use turnstile::policy::{Check, Limit, Outcome, Policy};
use turnstile::wait::{Wait, until_ready};
use turnstile::{Decision, ManualClock, Quota, TokenBucket};

const STEP: Duration = Duration::from_millis(1);

/// Lets every other task run until it blocks.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Moves both clocks forward a step at a time until every task has finished; returns,
/// for each, the simulated time from the start at which it was seen finished.
async fn run_in_step<T>(clock: &ManualClock, tasks: Vec<JoinHandle<T>>) -> Vec<(Duration, T)> {
    let start = Instant::now();
    let mut finished_at = vec![None; tasks.len()];
    loop {
        settle().await;
        for (at, task) in finished_at.iter_mut().zip(&tasks) {
            if at.is_none() && task.is_finished() {
                *at = Some(start.elapsed());
            }
        }
        if finished_at.iter().all(Option::is_some) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "a waiter never finished"
        );
        // The limiter's clock first, so a waiter woken by tokio's reads the new time.
        clock.advance(STEP);
        tokio::time::advance(STEP).await;
    }
    let mut out = Vec::new();
    for (at, task) in finished_at.into_iter().zip(tasks) {
        out.push((at.unwrap(), task.await.unwrap()));
    }
    out
}

type Limiter = Arc<TokenBucket<u32, ManualClock>>;

/// A limiter of `capacity` tokens, one more every `interval`, drained for key 1.
fn drained(capacity: u32, interval: Duration, clock: &ManualClock) -> Limiter {
    let limiter = Arc::new(
        TokenBucket::with_clock(Quota::new(capacity, interval).unwrap(), clock.clone()).unwrap(),
    );
    assert!(limiter.acquire(&1, capacity).is_allowed());
    limiter
}

fn waiter(limiter: &Limiter, cost: u32, wait: Wait) -> JoinHandle<Result<Decision, Decision>> {
    let limiter = Arc::clone(limiter);
    tokio::spawn(async move { until_ready(&*limiter, &1, cost, &wait).await })
}

#[tokio::test(start_paused = true)]
async fn an_allowed_request_does_not_wait() {
    let clock = ManualClock::new();
    let limiter: Limiter =
        Arc::new(TokenBucket::with_clock(Quota::per_second(1).unwrap(), clock.clone()).unwrap());
    let task = waiter(&limiter, 1, Wait::up_to(Duration::from_secs(5)));
    let [(at, answer)] = run_in_step(&clock, vec![task]).await.try_into().unwrap();
    assert_eq!(at, Duration::ZERO);
    assert_eq!(answer, Ok(Decision::Allowed { remaining: 0 }));
}

#[tokio::test(start_paused = true)]
async fn a_denied_request_waits_exactly_its_retry_after_then_passes() {
    let clock = ManualClock::new();
    let limiter = drained(1, Duration::from_millis(600), &clock);
    let task = waiter(&limiter, 1, Wait::up_to(Duration::from_secs(1)));
    let [(at, answer)] = run_in_step(&clock, vec![task]).await.try_into().unwrap();
    assert_eq!(
        at,
        Duration::from_millis(600),
        "not a step earlier, not a step later"
    );
    assert_eq!(answer, Ok(Decision::Allowed { remaining: 0 }));
}

#[tokio::test(start_paused = true)]
async fn a_wait_beyond_the_maximum_is_refused_at_once_without_sleeping() {
    let clock = ManualClock::new();
    let limiter = drained(1, Duration::from_millis(600), &clock);
    let task = waiter(&limiter, 1, Wait::up_to(Duration::from_millis(599)));
    let [(at, answer)] = run_in_step(&clock, vec![task]).await.try_into().unwrap();
    assert_eq!(at, Duration::ZERO);
    assert_eq!(
        answer,
        Err(Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_millis(600)
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_capacity_is_refused_at_once() {
    let clock = ManualClock::new();
    let limiter = drained(2, Duration::from_millis(10), &clock);
    let task = waiter(&limiter, 3, Wait::up_to(Duration::from_secs(60)));
    let [(at, answer)] = run_in_step(&clock, vec![task]).await.try_into().unwrap();
    assert_eq!(at, Duration::ZERO);
    assert!(answer.unwrap_err().exceeds_capacity());
}

#[tokio::test(start_paused = true)]
async fn waiters_for_one_token_take_turns_within_their_maximum() {
    // One token per 100 ms; three waiters wake together at 100 ms. One takes it, the
    // others sleep again for the next token: 200 ms. The third's maximum (250 ms)
    // does not reach the token after that (300 ms), so it is refused at 200 ms.
    let clock = ManualClock::new();
    let limiter = drained(1, Duration::from_millis(100), &clock);
    let tasks = vec![
        waiter(&limiter, 1, Wait::up_to(Duration::from_secs(1))),
        waiter(&limiter, 1, Wait::up_to(Duration::from_secs(1))),
        waiter(&limiter, 1, Wait::up_to(Duration::from_millis(250))),
    ];
    let mut results = run_in_step(&clock, tasks).await;
    let refused = results.iter().position(|(_, r)| r.is_err());
    let (refused_at, refusal) = results.remove(refused.expect("one waiter is refused"));
    assert_eq!(refused_at, Duration::from_millis(200));
    assert_eq!(
        refusal.unwrap_err().retry_after(),
        Some(Duration::from_millis(100))
    );
    let mut passed: Vec<_> = results.iter().map(|(at, r)| (*at, r.is_ok())).collect();
    passed.sort();
    assert_eq!(
        passed,
        [
            (Duration::from_millis(100), true),
            (Duration::from_millis(200), true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn jitter_spreads_waiters_and_only_ever_adds_delay() {
    // 20 waiters on 20 keys, each short of a token due at 500 ms, with up to 100 ms
    // of jitter: each passes in [500, 600] ms (the timer rounds up to the next step),
    // and they do not all wake together.
    let clock = ManualClock::new();
    let limiter = Arc::new(
        TokenBucket::<u32, _>::with_clock(
            Quota::new(1, Duration::from_millis(500)).unwrap(),
            clock.clone(),
        )
        .unwrap(),
    );
    let wait = Wait::up_to(Duration::from_secs(2)).jitter(Duration::from_millis(100));
    let tasks = (0..20u32)
        .map(|key| {
            assert!(limiter.try_acquire(&key));
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { until_ready(&*limiter, &key, 1, &wait).await })
        })
        .collect();
    let results = run_in_step(&clock, tasks).await;
    for (at, answer) in &results {
        assert!(answer.is_ok());
        assert!(
            Duration::from_millis(500) <= *at && *at <= Duration::from_millis(601),
            "woke at {at:?}"
        );
    }
    let first = results[0].0;
    assert!(
        results.iter().any(|(at, _)| *at != first),
        "all woke at {first:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_policy_waits_for_its_longest_denial_and_takes_all_or_nothing() {
    // Per-user: 1 per 300 ms; per-IP: 1 per 800 ms. Both drained, the policy waits
    // 800 ms — after 300 ms the per-user check alone would pass — and only then takes.
    let clock = ManualClock::new();
    let users = drained(1, Duration::from_millis(300), &clock);
    let ips = drained(1, Duration::from_millis(800), &clock);
    let policy: Arc<Policy<u32>> = Arc::new(
        Policy::builder()
            .check(Check::new(
                "per-user",
                users.clone(),
                Limit::steady(Quota::new(1, Duration::from_millis(300)).unwrap()),
                |k: &u32| Some(*k),
            ))
            .check(Check::new(
                "per-ip",
                ips.clone(),
                Limit::steady(Quota::new(1, Duration::from_millis(800)).unwrap()),
                |k: &u32| Some(*k),
            ))
            .build()
            .unwrap(),
    );
    let task = {
        let policy = Arc::clone(&policy);
        tokio::spawn(async move {
            policy
                .until_ready(&1, &Wait::up_to(Duration::from_secs(1)))
                .await
        })
    };
    let [(at, answer)] = run_in_step(&clock, vec![task]).await.try_into().unwrap();
    assert_eq!(at, Duration::from_millis(800));
    assert_eq!(answer.unwrap().outcome(), Outcome::Allowed);
    assert_eq!((users.peek(&1), ips.peek(&1)), (0, 0));
}
