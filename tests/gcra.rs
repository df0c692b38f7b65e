//! Gcra agrees, decision by decision, with a plain GCRA model and with a token bucket
//! refilled continuously; the stated differences from the grid `TokenBucket` hold
//! over random schedules and by name; and its edges hold by name.

mod common;

use common::keyed::{Arrival, Keyed};
use common::ms;
use common::schedule::{
    self, Model, Step, TEN_YEARS, agrees, case, interval_ns, schedule, small_quota, wait,
};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use turnstile::{Decision, Gcra, ManualClock, Quota, QuotaError, TokenBucket};

/// A token bucket refilled continuously: per key, its tokens (in nanoseconds of
/// refill, so fractions are exact) and when they were counted. A new key is full;
/// time adds one token per interval, capped at the capacity; an admitted request
/// takes its cost. For non-decreasing readings.
struct Continuous {
    capacity: u128,
    interval: u128,
    /// The limiter's last instant (`2^63 − 3 − capacity × interval − debt refill`,
    /// as GCRA documents, the debt refill one capacity's unless both refills would
    /// pass 2^62 ns): later readings count as it, and a wait past it never ends.
    end: u128,
    buckets: HashMap<u32, (u128, u128)>,
}

impl Continuous {
    fn new(quota: Quota) -> Self {
        let capacity = u128::from(quota.capacity());
        let interval = quota.refill_every().as_nanos();
        Self {
            capacity,
            interval,
            end: {
                let full = capacity * interval;
                let debt_refill =
                    capacity.min((1u128 << 62).saturating_sub(full) / interval) * interval;
                ((1u128 << 63) - 3).saturating_sub(full + debt_refill)
            },
            buckets: HashMap::new(),
        }
    }

    fn refilled(&self, key: u32, now: u128) -> u128 {
        let full = self.capacity * self.interval;
        match self.buckets.get(&key) {
            Some(&(tokens, at)) => (tokens + (now - at)).min(full),
            None => full,
        }
    }
}

impl Model for Continuous {
    fn acquire(&mut self, key: u32, now: u64, cost: u32) -> Decision {
        let now = u128::from(now).min(self.end);
        let tokens = self.refilled(key, now);
        let remaining = (tokens / self.interval) as u32;
        let needed = u128::from(cost) * self.interval;
        let decision = if u128::from(cost) > self.capacity {
            Decision::ExceedsCapacity {
                remaining,
                capacity: self.capacity as u32,
            }
        } else if needed > tokens {
            let ready = now + (needed - tokens);
            Decision::Denied {
                remaining,
                retry_after: if ready > self.end {
                    Duration::MAX
                } else {
                    wait(needed - tokens)
                },
            }
        } else {
            self.buckets.insert(key, (tokens - needed, now));
            return Decision::Allowed {
                remaining: remaining - cost,
            };
        };
        self.buckets.insert(key, (tokens, now));
        decision
    }

    fn peek(&self, key: u32, now: u64) -> u32 {
        (self.refilled(key, u128::from(now).min(self.end)) / self.interval) as u32
    }

    /// `cost` tokens back into a known bucket, up to full.
    fn refund(&mut self, key: u32, now: u64, cost: u32) {
        let now = u128::from(now).min(self.end);
        if self.buckets.contains_key(&key) {
            let full = self.capacity * self.interval;
            let tokens = (self.refilled(key, now) + u128::from(cost) * self.interval).min(full);
            self.buckets.insert(key, (tokens, now));
        }
    }
}

/// Small quotas GCRA holds (all of them: their full refill is far below 2^62 ns).
fn quota() -> impl Strategy<Value = Quota> {
    small_quota(6)
}

/// A quota and a schedule with a non-decreasing clock, from the epoch or ten years in.
fn forward_case() -> impl Strategy<Value = (Quota, u64, Vec<Step>)> {
    quota().prop_flat_map(|q| {
        (
            Just(q),
            prop_oneof![Just(0), Just(TEN_YEARS)],
            schedule(q, false),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Forgetting keys after every step (margin 0, clock never going back) changes no
    /// decision: the limiter still answers exactly as the model, which never forgets.
    #[test]
    fn sweeping_after_every_request_changes_no_decision(
        (quota, start, steps) in case(small_quota(6), false)
    ) {
        let clock = ManualClock::new();
        let limiter = Gcra::<u32>::builder(quota)
            .clock(clock.clone())
            .eviction_margin(Duration::ZERO)
            .build().unwrap();
        let mut model = Keyed::<Arrival>::plain(quota);
        schedule::agrees_sweeping(&clock, &limiter, &mut model, start, &steps, || limiter.evict_idle())?;
    }

    #[test]
    fn matches_the_reference_model((quota, start, steps) in case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Arrival>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_lagging_reading_admits_no_more_than_the_latest_one(
        (quota, start, steps) in case(quota(), true)
    ) {
        schedule::lagging_readings_admit_no_more(&mut Keyed::<Arrival>::plain(quota), start, &steps)?;
    }

    /// The requirement: the same decisions as a token bucket with continuous
    /// refill and the same quota — admissions, remaining and retry_after.
    #[test]
    fn decides_as_a_continuously_refilled_token_bucket((quota, start, steps) in forward_case()) {
        let clock = ManualClock::new();
        let limiter = Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Continuous::new(quota), start, &steps)?;
    }

    /// The stated relation to the grid TokenBucket: fed the same history (every
    /// request GCRA admits, and only those), the bucket holds GCRA's whole tokens or
    /// one more, and admits everything GCRA admits.
    #[test]
    fn from_the_same_history_the_grid_bucket_holds_gcras_tokens_or_one_more(
        (quota, start, steps) in forward_case()
    ) {
        let clock = ManualClock::new();
        let gcra = Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        let bucket = TokenBucket::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        let mut now = start;
        for (i, step) in steps.iter().enumerate() {
            let (by, key, cost) = match *step {
                Step::Forward { by, key, cost } => (by, key, cost),
                // Refunds are checked against the reference model; here they are peeks.
                Step::Peek { by, key }
                | Step::Refund { by, key, .. }
                | Step::Settle { by, key, .. } => (by, key, 0),
                Step::Back { .. } => unreachable!("a non-decreasing clock"),
            };
            now += by;
            clock.set(Duration::from_nanos(now));
            let (whole, held) = (gcra.peek(&key), bucket.peek(&key));
            prop_assert!(held == whole || held == whole + 1, "step {}: bucket {}, GCRA {}", i, held, whole);
            if gcra.acquire(&key, cost).is_allowed() {
                prop_assert!(bucket.acquire(&key, cost).is_allowed(), "step {}: {:?}", i, step);
            }
        }
    }

    /// The stated span bounds, each limiter on its own: in any [a, b], GCRA admits at
    /// most capacity + ⌊(b − a) / interval⌋; the grid bucket at most capacity plus the
    /// grid points in (a, b], one more at most.
    #[test]
    fn any_span_admits_at_most_the_capacity_plus_what_refills_in_it(
        (quota, start, steps) in forward_case()
    ) {
        let (capacity, interval) = (u64::from(quota.capacity()), interval_ns(quota));
        let clock = ManualClock::new();
        let gcra = Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        let bucket = TokenBucket::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        let (mut now, mut by_gcra, mut by_bucket) = (start, vec![], vec![]);
        for step in &steps {
            if let Step::Forward { by, cost, .. } = *step {
                now += by;
                clock.set(Duration::from_nanos(now));
                if gcra.acquire(&0, cost).is_allowed() {
                    by_gcra.push((now, u64::from(cost)));
                }
                if bucket.acquire(&0, cost).is_allowed() {
                    by_bucket.push((now, u64::from(cost)));
                }
            } else if let Step::Peek { by, .. } = *step {
                now += by;
            }
        }
        let spans = |admitted: &[(u64, u64)], bound: &dyn Fn(u64, u64) -> u64| {
            for (i, &(a, _)) in admitted.iter().enumerate() {
                let mut total = 0;
                for &(b, cost) in &admitted[i..] {
                    total += cost;
                    if total > bound(a, b) {
                        return Err(format!("{total} admitted in [{a}, {b}]"));
                    }
                }
            }
            Ok(())
        };
        let continuous = |a: u64, b: u64| capacity + (b - a) / interval;
        let grid = |a: u64, b: u64| capacity + b / interval - a / interval;
        prop_assert_eq!(spans(&by_gcra, &continuous), Ok(()));
        prop_assert_eq!(spans(&by_bucket, &grid), Ok(()));
    }
}

#[test]
fn the_grid_bucket_admits_one_more_across_a_grid_point() {
    // 3 per 300 ms, one token per 100 ms. Both drain at 99 ms; at 100 ms the grid
    // adds a token, while GCRA's next token comes 100 ms after the drain.
    let clock = ManualClock::new();
    let quota = Quota::new(3, ms(100)).unwrap();
    let gcra = Gcra::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let bucket = TokenBucket::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    clock.set(ms(99));
    assert!(gcra.acquire(&1, 3).is_allowed() && bucket.acquire(&1, 3).is_allowed());
    clock.set(ms(100));
    assert_eq!(bucket.acquire(&1, 1), Decision::Allowed { remaining: 0 });
    assert_eq!(
        gcra.acquire(&1, 1),
        Decision::Denied {
            remaining: 0,
            retry_after: ms(99)
        }
    );
}

#[test]
fn once_a_decision_differs_the_admission_counts_drift_apart() {
    // Capacity 1, one per 100 ms; a client retries every 99 ms. The grid bucket
    // admits every retry that lands in a new interval (all but one of the first 100);
    // GCRA wants 100 ms since the last admission, so admits every second one.
    let clock = ManualClock::new();
    let quota = Quota::new(1, ms(100)).unwrap();
    let gcra = Gcra::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let bucket = TokenBucket::<u64, _>::with_clock(quota, clock.clone()).unwrap();
    let (mut by_gcra, mut by_bucket) = (0, 0);
    for k in 0..100 {
        clock.set(ms(99 * k));
        by_gcra += u32::from(gcra.try_acquire(&1));
        by_bucket += u32::from(bucket.try_acquire(&1));
    }
    assert_eq!((by_gcra, by_bucket), (50, 99));
}

#[test]
fn retry_after_is_exact_and_tokens_accrue_from_the_drain() {
    let clock = ManualClock::new();
    let limiter =
        Gcra::<u64, _>::with_clock(Quota::per_second(10).unwrap(), clock.clone()).unwrap();
    clock.set(ms(1234));
    assert!(limiter.acquire(&1, 10).is_allowed());
    let wait = limiter.acquire(&1, 3).retry_after().unwrap();
    assert_eq!(wait, ms(300));
    clock.set(ms(1234) + wait - Duration::from_nanos(1));
    assert!(!limiter.acquire(&1, 3).is_allowed(), "1 ns early");
    clock.set(ms(1234) + wait);
    assert_eq!(limiter.acquire(&1, 3), Decision::Allowed { remaining: 0 });
}

#[test]
fn a_retrying_client_is_not_locked_out() {
    let clock = ManualClock::new();
    let limiter =
        Gcra::<u64, _>::with_clock(Quota::new(1, ms(100)).unwrap(), clock.clone()).unwrap();
    assert!(limiter.try_acquire(&1));
    for tick in 1..100 {
        clock.set(Duration::from_micros(tick * 999));
        assert!(!limiter.try_acquire(&1), "retry {tick}");
    }
    clock.set(ms(100));
    assert!(limiter.try_acquire(&1));
}

#[test]
fn a_cost_above_the_capacity_is_never_satisfiable_and_zero_costs_take_nothing() {
    let limiter =
        Gcra::<u64, _>::with_clock(Quota::new(5, ms(10)).unwrap(), ManualClock::new()).unwrap();
    assert!(limiter.acquire(&1, 2).is_allowed());
    assert_eq!(
        limiter.acquire(&1, 6),
        Decision::ExceedsCapacity {
            remaining: 3,
            capacity: 5
        }
    );
    assert_eq!(limiter.acquire(&1, 0), Decision::Allowed { remaining: 3 });
    assert_eq!(limiter.peek(&1), 3);
}

#[test]
fn a_lagging_reading_owes_more_and_waits_longer_by_exactly_the_lag() {
    let clock = ManualClock::new();
    let limiter =
        Gcra::<u64, _>::with_clock(Quota::new(2, ms(100)).unwrap(), clock.clone()).unwrap();
    clock.set(ms(1000));
    assert!(limiter.acquire(&1, 2).is_allowed());
    clock.set(ms(1050));
    assert_eq!(limiter.acquire(&1, 1).retry_after(), Some(ms(50)));
    clock.set(ms(950)); // another core, 100 ms behind
    assert_eq!(limiter.acquire(&1, 1).retry_after(), Some(ms(150)));
    assert_eq!(limiter.peek(&1), 0);
}

#[test]
fn long_idle_keys_are_full_and_the_clocks_end_is_safe() {
    let clock = ManualClock::new();
    let limiter =
        Gcra::<u64, _>::with_clock(Quota::per_minute(100).unwrap(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 100).is_allowed());
    clock.set(Duration::from_nanos(TEN_YEARS));
    assert_eq!(limiter.peek(&1), 100);
    assert!(limiter.acquire(&1, 100).is_allowed());
    // Past the limiter's end (one minute before u64::MAX ns) time stands still: the
    // key is full there, drains, and gains nothing more — no overflow, no panic, and
    // a denial there waits forever.
    clock.set(Duration::from_nanos(u64::MAX));
    assert_eq!(limiter.acquire(&1, 100), Decision::Allowed { remaining: 0 });
    assert_eq!(limiter.acquire(&1, 1).retry_after(), Some(Duration::MAX));
    assert_eq!(limiter.peek(&1), 0);
}

#[test]
fn a_full_refill_longer_than_146_years_is_refused_at_construction() {
    const YEAR: u64 = 365 * 24 * 3600;
    for refused in [
        Quota::new(u32::MAX, Duration::from_secs(10)).unwrap(),
        Quota::new(1, Duration::from_secs(150 * YEAR)).unwrap(),
    ] {
        assert!(matches!(
            Gcra::<u64>::new(refused).err(),
            Some(QuotaError::Unsupported {
                algorithm: "Gcra",
                ..
            })
        ));
    }
    assert!(Gcra::<u64>::new(Quota::per_hour(1_000_000).unwrap()).is_ok());
    assert!(Gcra::<u64>::new(Quota::new(1, Duration::from_secs(140 * YEAR)).unwrap()).is_ok());
}

#[test]
fn builder_and_accessors() {
    let limiter: Gcra<String, ManualClock> = Gcra::builder(Quota::per_second(3).unwrap())
        .clock(ManualClock::new())
        .expected_keys(100)
        .build()
        .unwrap();
    assert!(limiter.is_empty());
    assert!(limiter.try_acquire("alice"));
    assert_eq!(limiter.peek("alice"), 2);
    assert_eq!(limiter.peek("bob"), 3);
    assert_eq!((limiter.len(), limiter.quota().capacity()), (1, 3));
}
