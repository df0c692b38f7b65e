//! Every token bucket implementation agrees, decision by decision, with the plain
//! reference model; and the design notes' scenarios hold by name.

mod common;

use common::keyed::{Bucket, Keyed};
use common::schedule::{any_quota, case, lagging_readings_admit_no_more};
use common::{Reference, all_limiters, ms};
use proptest::prelude::*;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{Decision, ManualClock, Quota, RateLimiter, TokenBucket};

/// One step of a schedule: move the clock, then one request.
#[derive(Clone, Debug)]
enum Step {
    /// Clock forward by this many ns, then acquire.
    Forward { by: u64, key: u32, cost: u32 },
    /// Clock back by this many ns (skew), then acquire.
    Back { by: u64, key: u32, cost: u32 },
    /// Clock forward, then peek.
    Peek { by: u64, key: u32 },
    /// Clock forward, then give tokens back.
    Refund { by: u64, key: u32, cost: u32 },
}

/// Small quotas, whose schedules cross many grid points, and quotas from the whole
/// range: every capacity beside every interval.
fn quota() -> impl Strategy<Value = Quota> {
    let small = (1u32..=6, 1u64..=1000).prop_map(|(capacity, interval_us)| {
        Quota::new(capacity, Duration::from_micros(interval_us)).unwrap()
    });
    prop_oneof![small, any_quota()]
}

/// Clock moves that land on, near and across grid points, with rare long silences.
fn step_ns(interval: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..interval.saturating_mul(3),
        2 => (0u64..4).prop_map(move |k| k.saturating_mul(interval)),
        1 => Just(interval - 1),
        1 => 0..interval.saturating_mul(1000),
        1 => Just(u64::MAX / 2),
    ]
}

fn schedule(quota: Quota) -> impl Strategy<Value = Vec<Step>> {
    let interval = quota.refill_every().as_nanos() as u64;
    let cost = 0..=quota.capacity().saturating_add(1);
    let step = prop_oneof![
        8 => (step_ns(interval), 0u32..4, cost.clone())
            .prop_map(|(by, key, cost)| Step::Forward { by, key, cost }),
        1 => (0..interval.saturating_mul(3), 0u32..4, cost)
            .prop_map(|(by, key, cost)| Step::Back { by, key, cost }),
        1 => (step_ns(interval), 0u32..4).prop_map(|(by, key)| Step::Peek { by, key }),
        1 => (step_ns(interval), 0u32..4, 0..=quota.capacity())
            .prop_map(|(by, key, cost)| Step::Refund { by, key, cost }),
    ];
    prop::collection::vec(step, 1..200)
}

/// Runs `steps` against the limiter and the reference; both must agree on every answer.
fn agrees_with_reference<L: RateLimiter<u32>>(
    quota: Quota,
    clock: &ManualClock,
    limiter: &L,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut reference = Reference::new(quota);
    let mut now = 0u64;
    clock.set(Duration::ZERO);
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Forward { by, key, cost } | Step::Back { by, key, cost } => {
                now = if matches!(step, Step::Back { .. }) {
                    now.saturating_sub(by)
                } else {
                    now.saturating_add(by)
                };
                clock.set(Duration::from_nanos(now));
                let expected = reference.acquire(key, now, cost);
                prop_assert_eq!(
                    limiter.acquire(&key, cost),
                    expected,
                    "step {}: {:?}",
                    i,
                    step
                );
            }
            Step::Peek { by, key } => {
                now = now.saturating_add(by);
                clock.set(Duration::from_nanos(now));
                prop_assert_eq!(limiter.peek(&key), reference.peek(key, now), "step {}", i);
            }
            Step::Refund { by, key, cost } => {
                now = now.saturating_add(by);
                clock.set(Duration::from_nanos(now));
                limiter.refund(&key, cost);
                reference.refund(key, now, cost);
                prop_assert_eq!(limiter.peek(&key), reference.peek(key, now), "step {}", i);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_implementation_matches_the_reference_model(
        (quota, steps) in quota().prop_flat_map(|q| (Just(q), schedule(q)))
    ) {
        let clock = ManualClock::new();
        let (bucket, per_key, global) = all_limiters(quota, &clock);
        agrees_with_reference(quota, &clock, &bucket, &steps)?;
        agrees_with_reference(quota, &clock, &per_key, &steps)?;
        agrees_with_reference(quota, &clock, &global, &steps)?;
    }

    /// A reading behind the key's latest (another core's clock) is never allowed
    /// what the latest reading would deny, and never sees more tokens; the model is
    /// the limiter, decision for decision (above).
    #[test]
    fn a_lagging_reading_admits_no_more_than_the_latest_one(
        (quota, start, steps) in case(any_quota(), true)
    ) {
        lagging_readings_admit_no_more(&mut Keyed::<Bucket>::plain(quota), start, &steps)?;
    }
}

/// Runs `scenario` on every implementation, each with a fresh clock at zero.
fn on_every_implementation(quota: Quota, scenario: impl Fn(&dyn Probe, &ManualClock)) {
    let clock = ManualClock::new();
    let (bucket, per_key, global) = all_limiters(quota, &clock);
    for limiter in [&bucket as &dyn Probe, &per_key, &global] {
        clock.set(Duration::ZERO);
        scenario(limiter, &clock);
    }
}

/// An object-safe view of `RateLimiter<String>`-style calls on `&str` keys, so one
/// scenario runs on every implementation.
trait Probe {
    fn ask(&self, key: &str, cost: u32) -> Decision;
    fn tokens(&self, key: &str) -> u32;
}

impl<L: RateLimiter<u32>> Probe for L {
    fn ask(&self, key: &str, cost: u32) -> Decision {
        self.acquire(&key_id(key), cost)
    }
    fn tokens(&self, key: &str) -> u32 {
        self.peek(&key_id(key))
    }
}

fn key_id(key: &str) -> u32 {
    key.bytes()
        .fold(0, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
}

#[test]
fn design_notes_example_on_every_implementation() {
    // Capacity 1, one token per 1000 ms: 0, 1500 and 2000 ms allowed; 2999 denied; 3000 allowed.
    on_every_implementation(Quota::new(1, ms(1000)).unwrap(), |limiter, clock| {
        let mut seen = vec![];
        for at in [0, 1500, 2000, 2999, 3000] {
            clock.set(ms(at));
            seen.push(limiter.ask("a", 1).is_allowed());
        }
        assert_eq!(seen, [true, true, true, false, true]);
    });
}

#[test]
fn a_new_key_starts_full_and_refills_on_the_shared_grid() {
    // Interval 1 s. Key "late" first arrives at 2.9 s, drains, and gets its next token
    // at the grid point 3 s — 100 ms later, not a full interval after its first request.
    on_every_implementation(Quota::new(2, ms(1000)).unwrap(), |limiter, clock| {
        clock.set(ms(2900));
        assert_eq!(limiter.tokens("late"), 2);
        assert!(limiter.ask("late", 2).is_allowed());
        let denied = limiter.ask("late", 1);
        assert_eq!(denied.retry_after(), Some(ms(100)));
        clock.set(ms(3000));
        assert!(limiter.ask("late", 1).is_allowed());
    });
}

#[test]
fn retry_after_is_exact_on_every_implementation() {
    on_every_implementation(Quota::new(5, ms(200)).unwrap(), |limiter, clock| {
        clock.set(ms(50));
        assert!(limiter.ask("k", 5).is_allowed());
        let wait = limiter.ask("k", 3).retry_after().unwrap();
        assert_eq!(wait, ms(550)); // tokens at 200, 400, 600 ms
        clock.set(ms(50) + wait - Duration::from_nanos(1));
        assert!(
            !limiter.ask("k", 3).is_allowed(),
            "1 ns early must still be denied"
        );
        clock.set(ms(50) + wait);
        assert_eq!(limiter.ask("k", 3), Decision::Allowed { remaining: 0 });
    });
}

#[test]
fn denied_requests_are_not_counted_so_a_retrying_client_gets_through() {
    on_every_implementation(Quota::new(1, ms(100)).unwrap(), |limiter, clock| {
        assert!(limiter.ask("c", 1).is_allowed());
        for tick in 1..100 {
            clock.set(Duration::from_micros(tick * 999)); // retries just under 100 ms
            assert!(!limiter.ask("c", 1).is_allowed());
        }
        clock.set(ms(100));
        assert!(limiter.ask("c", 1).is_allowed());
    });
}

#[test]
fn a_cost_above_capacity_is_never_satisfiable_and_takes_nothing() {
    on_every_implementation(Quota::new(3, ms(10)).unwrap(), |limiter, _| {
        let d = limiter.ask("big", 4);
        assert!(d.exceeds_capacity());
        assert_eq!(d.retry_after(), None);
        assert_eq!(limiter.tokens("big"), 3);
        assert!(limiter.ask("big", 3).is_allowed());
    });
}

#[test]
fn zero_cost_is_allowed_and_takes_nothing() {
    on_every_implementation(Quota::new(2, ms(10)).unwrap(), |limiter, _| {
        assert!(limiter.ask("z", 2).is_allowed());
        assert_eq!(limiter.ask("z", 0), Decision::Allowed { remaining: 0 });
    });
}

#[test]
fn long_idle_keys_are_simply_full() {
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
    on_every_implementation(Quota::new(4, ms(1)).unwrap(), |limiter, clock| {
        assert!(limiter.ask("idle", 4).is_allowed());
        clock.set(ten_years);
        assert_eq!(limiter.tokens("idle"), 4);
        assert!(limiter.ask("idle", 4).is_allowed());
        clock.set(Duration::from_nanos(u64::MAX - 1));
        assert_eq!(limiter.ask("idle", 4), Decision::Allowed { remaining: 0 });
        clock.set(Duration::MAX);
        // The next grid point after the clock's last instant: still exact, no overflow.
        let to_next_point = 1_000_000 - u64::MAX % 1_000_000;
        assert_eq!(
            limiter.ask("idle", 1).retry_after(),
            Some(Duration::from_nanos(to_next_point))
        );
    });
}

#[test]
fn borrowed_keys_work_on_string_and_integer_limiters() {
    let quota = Quota::per_second(1).unwrap();
    let by_name = TokenBucket::<String>::new(quota).unwrap();
    assert!(by_name.try_acquire("alice"));
    assert!(!by_name.try_acquire(&String::from("alice")));
    let by_id = MutexPerKey::<u64>::new(quota);
    assert!(by_id.try_acquire(&42));
    assert!(!by_id.try_acquire(&42));
    let shared = GlobalLock::<std::sync::Arc<str>>::new(quota);
    assert!(shared.try_acquire("carol"));
    assert!(!shared.try_acquire("carol"));
    assert_eq!(by_name.len(), 1);
}

#[test]
fn peek_neither_consumes_nor_creates() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u32, _>::with_clock(Quota::new(3, ms(10)).unwrap(), clock).unwrap();
    assert_eq!(limiter.peek(&1), 3);
    assert!(limiter.is_empty());
    assert!(limiter.try_acquire(&1));
    assert_eq!(limiter.peek(&1), 2);
    assert_eq!(limiter.peek(&1), 2);
    assert_eq!(limiter.len(), 1);
}
