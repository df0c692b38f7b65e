//! Random schedules — clock moves (backwards too), keys, costs — and a driver that
//! runs one against a limiter and a plain reference model, comparing every answer.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::time::Duration;
use turnstile::{Decision, ManualClock, Quota, RateLimiter, Settlement};

/// Keys a schedule uses.
pub const KEYS: u32 = 4;

/// Ten years in nanoseconds.
pub const TEN_YEARS: u64 = 10 * 365 * 24 * 3600 * 1_000_000_000;

/// One step of a schedule: move the clock, then one request or a peek.
#[derive(Clone, Debug)]
pub enum Step {
    /// Clock forward by this many ns (saturating at `u64::MAX`), then acquire.
    Forward { by: u64, key: u32, cost: u32 },
    /// Clock back by this many ns (skew), then acquire.
    Back { by: u64, key: u32, cost: u32 },
    /// Clock forward, then peek.
    Peek { by: u64, key: u32 },
    /// Clock forward, then give `cost` back (as a policy whose later check refused).
    Refund { by: u64, key: u32, cost: u32 },
    /// Clock forward, then settle a request that took `estimate` at `actual`.
    Settle {
        by: u64,
        key: u32,
        estimate: u32,
        actual: u32,
    },
}

/// A plain single-threaded model of one algorithm, with the limiter's interface.
pub trait Model {
    /// The decision for `cost` on `key` at `now` (ns since the epoch).
    fn acquire(&mut self, key: u32, now: u64, cost: u32) -> Decision;
    /// What `key` has left at `now`.
    fn peek(&self, key: u32, now: u64) -> u32;
    /// `cost` given back to `key` at `now`.
    fn refund(&mut self, key: u32, now: u64, cost: u32);
    /// A request on `key` that took `estimate` settled at `actual`, at `now`. Only
    /// the models of schedules with settles ([`settling_case`]) need it.
    fn settle(&mut self, key: u32, now: u64, estimate: u32, actual: u32) -> Settlement {
        unreachable!("{key} {now} {estimate} {actual}: this model does not settle")
    }
}

/// A window algorithm's window for `quota`: capacity × refill interval, in ns.
/// (saturating at `u64::MAX`: such a window holds every reading).
pub fn window_ns(quota: Quota) -> u64 {
    u64::from(quota.capacity()).saturating_mul(interval_ns(quota))
}

pub fn interval_ns(quota: Quota) -> u64 {
    quota.refill_every().as_nanos() as u64
}

/// Small quotas, so that schedules cross many intervals and windows: capacity up to
/// `max_capacity`, intervals from a nanosecond to a millisecond.
pub fn small_quota(max_capacity: u32) -> impl Strategy<Value = Quota> {
    let interval = prop_oneof![1u64..=64, 65u64..=10_000, 10_001u64..=1_000_000];
    (1..=max_capacity, interval).prop_map(|(c, i)| Quota::new(c, Duration::from_nanos(i)).unwrap())
}

/// Quotas from the whole range — capacities up to `u32::MAX`, intervals from 1 ns to
/// `u64::MAX` ns — half of them small (as [`small_quota`]`(6)`), where schedules
/// cross many grid points.
pub fn any_quota() -> impl Strategy<Value = Quota> {
    let capacity = prop_oneof![1..=6u32, 1..=u32::MAX, Just(u32::MAX)];
    let interval = prop_oneof![
        1u64..=3,
        1u64..=1_000_000_000,
        1u64..=u64::MAX,
        Just(u64::MAX)
    ];
    let large =
        (capacity, interval).prop_map(|(c, i)| Quota::new(c, Duration::from_nanos(i)).unwrap());
    prop_oneof![small_quota(6), large]
}

/// Clock moves that land on, near and across grid points and window boundaries,
/// with rare long silences.
fn step_ns(quota: Quota) -> impl Strategy<Value = u64> {
    let interval = interval_ns(quota);
    let window = window_ns(quota);
    prop_oneof![
        6 => 0..interval.saturating_mul(3),
        2 => (0u64..4).prop_map(move |k| k.saturating_mul(interval)),
        1 => Just(interval - 1),
        1 => Just(1),
        2 => 0..window.saturating_mul(2),
        1 => (0u64..3).prop_map(move |k| k.saturating_mul(window)),
        1 => Just(window - 1),
        1 => 0..window.saturating_mul(1000),
    ]
}

/// Where a schedule's clock starts: mostly at the epoch; sometimes ten years in, or
/// a few windows before the end of the clock's range.
pub fn start(quota: Quota) -> impl Strategy<Value = u64> {
    let window = window_ns(quota);
    prop_oneof![
        8 => Just(0),
        1 => Just(TEN_YEARS),
        1 => (0..window.saturating_mul(20)).prop_map(|before| u64::MAX - before),
    ]
}

/// A schedule for `quota`; with `backwards`, some steps move the clock back.
pub fn schedule(quota: Quota, backwards: bool) -> impl Strategy<Value = Vec<Step>> {
    let cost = 0..=quota.capacity().saturating_add(1);
    let forward = (step_ns(quota), 0..KEYS, cost.clone())
        .prop_map(|(by, key, cost)| Step::Forward { by, key, cost });
    let peek = (step_ns(quota), 0..KEYS).prop_map(|(by, key)| Step::Peek { by, key });
    let refund = (step_ns(quota), 0..KEYS, 0..=quota.capacity())
        .prop_map(|(by, key, cost)| Step::Refund { by, key, cost });
    let step = if backwards {
        let most = interval_ns(quota)
            .saturating_mul(3)
            .saturating_add(window_ns(quota));
        let back =
            (0..most, 0..KEYS, cost).prop_map(|(by, key, cost)| Step::Back { by, key, cost });
        prop_oneof![8 => forward, 1 => back, 1 => peek, 1 => refund].boxed()
    } else {
        prop_oneof![8 => forward, 1 => peek, 1 => refund].boxed()
    };
    prop::collection::vec(step, 1..200)
}

/// A schedule for `quota` that also settles: acquires (most of them with the
/// settle of what they took to follow, at another actual cost: below, at, and above
/// the estimate, up to beyond the debt cap), peeks, refunds, and the clock forward
/// (with `backwards`) back.
pub fn settling_schedule(quota: Quota, backwards: bool) -> impl Strategy<Value = Vec<Step>> {
    let capacity = quota.capacity();
    let cost = 0..=capacity.saturating_add(1);
    let actual = prop_oneof![
        3 => 0..=capacity,
        2 => 0..=capacity.saturating_mul(3).max(capacity),
        1 => Just(u32::MAX),
    ];
    let by = || step_ns(quota);
    let most = interval_ns(quota)
        .saturating_mul(3)
        .saturating_add(window_ns(quota));
    let back = (0..most, 0..KEYS, cost.clone()).prop_map(move |(by, key, cost)| match backwards {
        true => Step::Back { by, key, cost },
        false => Step::Forward { by, key, cost },
    });
    let step = prop_oneof![
        5 => (by(), 0..KEYS, cost)
            .prop_map(|(by, key, cost)| Step::Forward { by, key, cost }),
        4 => (by(), 0..KEYS, 0..=capacity, actual)
            .prop_map(|(by, key, estimate, actual)| Step::Settle { by, key, estimate, actual }),
        1 => back,
        1 => (by(), 0..KEYS).prop_map(|(by, key)| Step::Peek { by, key }),
        1 => (by(), 0..KEYS, 0..=capacity).prop_map(|(by, key, cost)| Step::Refund { by, key, cost }),
    ];
    prop::collection::vec(step, 1..120)
}

/// A quota (from `quota`), a start and a settling schedule for it.
pub fn settling_case(
    quota: impl Strategy<Value = Quota>,
    backwards: bool,
) -> impl Strategy<Value = (Quota, u64, Vec<Step>)> {
    quota.prop_flat_map(move |q| (Just(q), start(q), settling_schedule(q, backwards)))
}

/// A quota (from `quota`), a start and a schedule for it.
pub fn case(
    quota: impl Strategy<Value = Quota>,
    backwards: bool,
) -> impl Strategy<Value = (Quota, u64, Vec<Step>)> {
    quota.prop_flat_map(move |q| (Just(q), start(q), schedule(q, backwards)))
}

/// Runs `steps` from `start` against `limiter` (made with `clock` at zero, so its
/// epoch is zero) and `model`; both must agree on every answer.
pub fn agrees<L: RateLimiter<u32>, M: Model>(
    clock: &ManualClock,
    limiter: &L,
    model: &mut M,
    start: u64,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    agrees_sweeping(clock, limiter, model, start, steps, || 0).map(|_| ())
}

/// As [`agrees`], calling `sweep` (a limiter's `evict_idle`) after every step; returns
/// how many keys the sweeps forgot.
pub fn agrees_sweeping<L: RateLimiter<u32>, M: Model>(
    clock: &ManualClock,
    limiter: &L,
    model: &mut M,
    start: u64,
    steps: &[Step],
    sweep: impl Fn() -> usize,
) -> Result<usize, TestCaseError> {
    let mut forgotten = 0;
    let mut now = start;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Forward { by, key, cost } | Step::Back { by, key, cost } => {
                now = if matches!(step, Step::Back { .. }) {
                    now.saturating_sub(by)
                } else {
                    now.saturating_add(by)
                };
                clock.set(Duration::from_nanos(now));
                let expected = model.acquire(key, now, cost);
                prop_assert_eq!(
                    limiter.acquire(&key, cost),
                    expected,
                    "step {} at {}: {:?}",
                    i,
                    now,
                    step
                );
            }
            Step::Peek { by, key } => {
                now = now.saturating_add(by);
                clock.set(Duration::from_nanos(now));
                prop_assert_eq!(limiter.peek(&key), model.peek(key, now), "step {}", i);
            }
            Step::Refund { by, key, cost } => {
                now = now.saturating_add(by);
                clock.set(Duration::from_nanos(now));
                limiter.refund(&key, cost);
                model.refund(key, now, cost);
                prop_assert_eq!(limiter.peek(&key), model.peek(key, now), "step {}", i);
            }
            Step::Settle {
                by,
                key,
                estimate,
                actual,
            } => {
                now = now.saturating_add(by);
                clock.set(Duration::from_nanos(now));
                let expected = model.settle(key, now, estimate, actual);
                prop_assert_eq!(
                    limiter.settle(&key, estimate, actual),
                    expected,
                    "step {} at {}: {:?}",
                    i,
                    now,
                    step
                );
                prop_assert_eq!(limiter.peek(&key), model.peek(key, now), "step {}", i);
            }
        }
        forgotten += sweep();
    }
    Ok(forgotten)
}

/// `nanos` as a `Duration` (the waits of small quotas fit).
pub fn wait(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).expect("a wait within u64 ns"))
}

/// Runs `steps` on `model` and checks, at every acquire, that the decision at the
/// reading as given admits nothing the decision at the latest reading so far (the
/// clock as if it never went back) denies, both from the same state; the model then
/// takes the reading as given, as the limiter does.
pub fn lagging_readings_admit_no_more<M: Model + Clone>(
    model: &mut M,
    start: u64,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let (mut now, mut latest) = (start, start);
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Forward { by, key, cost } | Step::Back { by, key, cost } => {
                now = if matches!(step, Step::Back { .. }) {
                    now.saturating_sub(by)
                } else {
                    now.saturating_add(by)
                };
                latest = latest.max(now);
                let forward = model.clone().acquire(key, latest, cost);
                let given = model.acquire(key, now, cost);
                prop_assert!(
                    !given.is_allowed() || forward.is_allowed(),
                    "step {}: {:?} at {} but {:?} at {}",
                    i,
                    given,
                    now,
                    forward,
                    latest
                );
                // What the key had before this request, at each reading.
                let before = |d: Decision| d.remaining() + if d.is_allowed() { cost } else { 0 };
                prop_assert!(before(given) <= before(forward), "step {}", i);
            }
            Step::Peek { by, .. } => now = now.saturating_add(by),
            Step::Refund { by, key, cost } => {
                now = now.saturating_add(by);
                model.refund(key, now, cost);
            }
            Step::Settle {
                by,
                key,
                estimate,
                actual,
            } => {
                now = now.saturating_add(by);
                model.settle(key, now, estimate, actual);
            }
        }
        latest = latest.max(now);
    }
    Ok(())
}
