//! Direct limiters: decision for decision against each algorithm's reference model
//! (one direct limiter per key of the schedule), exact admission counts under
//! contention, no allocation, and use as a policy check.

mod common;

use common::keyed::{Arrival, Bucket, Counter, Keyed, Window};
use common::ms;
use common::schedule::{agrees, case, settling_case, small_quota};
use proptest::prelude::*;
use std::borrow::Borrow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{
    Decision, DirectFixedWindow, DirectGcra, DirectSlidingWindowCounter, DirectTokenBucket, KeyRef,
    ManualClock, Quota, RateLimiter, Settlement, TokenBucket,
};

/// One direct limiter per key: the schedule driver's keys, each its own process-wide
/// limit.
struct OnePerKey<D>(Vec<D>);

impl<D> OnePerKey<D> {
    /// Four limiters (the schedule's keys), made by `make` with the clock at zero.
    fn new(make: impl Fn() -> D) -> Self {
        Self((0..common::schedule::KEYS).map(|_| make()).collect())
    }

    fn of<Q: ?Sized + KeyRef<u32>>(&self, key: &Q) -> &D {
        &self.0[key.to_key() as usize]
    }
}

impl<D: RateLimiter<()>> RateLimiter<u32> for OnePerKey<D> {
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        u32: Borrow<Q>,
        Q: ?Sized + KeyRef<u32>,
    {
        self.of(key).acquire(&(), cost)
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        u32: Borrow<Q>,
        Q: ?Sized + KeyRef<u32>,
    {
        self.of(key).peek(&())
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        u32: Borrow<Q>,
        Q: ?Sized + KeyRef<u32>,
    {
        self.of(key).refund(&(), cost)
    }

    fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> turnstile::Settlement
    where
        u32: Borrow<Q>,
        Q: ?Sized + KeyRef<u32>,
    {
        self.of(key).settle(&(), estimate, actual)
    }
}

/// Small quotas every algorithm holds.
fn quota() -> impl Strategy<Value = Quota> {
    small_quota(6).prop_filter("refused by the sliding window counter", |&q| {
        DirectSlidingWindowCounter::with_clock(q, ManualClock::new()).is_ok()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_direct_token_bucket_matches_the_reference_model((quota, start, steps) in case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = OnePerKey::new(|| DirectTokenBucket::with_clock(quota, clock.clone()).unwrap());
        agrees(&clock, &limiter, &mut Keyed::<Bucket>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_direct_gcra_matches_the_reference_model((quota, start, steps) in case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = OnePerKey::new(|| DirectGcra::with_clock(quota, clock.clone()).unwrap());
        agrees(&clock, &limiter, &mut Keyed::<Arrival>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_direct_fixed_window_matches_the_reference_model((quota, start, steps) in case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = OnePerKey::new(|| DirectFixedWindow::with_clock(quota, clock.clone()).unwrap());
        agrees(&clock, &limiter, &mut Keyed::<Window>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_direct_sliding_window_counter_matches_the_reference_model(
        (quota, start, steps) in case(quota(), true)
    ) {
        let clock = ManualClock::new();
        let limiter = OnePerKey::new(|| {
            DirectSlidingWindowCounter::with_clock(quota, clock.clone()).unwrap()
        });
        agrees(&clock, &limiter, &mut Keyed::<Counter>::plain(quota), start, &steps)?;
    }
}

proptest! {
    // Modest: the settling schedules are long, and CI's budget is tight.
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Settles below, at and above the estimate, interleaved with requests, refunds
    /// and the clock forward and back: every direct limiter as its algorithm's model
    /// with debt.
    #[test]
    fn every_direct_limiter_settles_as_the_model((quota, start, steps) in settling_case(quota(), true)) {
        // Each on a clock of its own at zero: the driver expects an epoch of zero.
        let clock = ManualClock::new();
        let bucket = OnePerKey::new(|| DirectTokenBucket::with_clock(quota, clock.clone()).unwrap());
        agrees(&clock, &bucket, &mut Keyed::<Bucket>::plain(quota), start, &steps)?;
        let clock = ManualClock::new();
        let gcra = OnePerKey::new(|| DirectGcra::with_clock(quota, clock.clone()).unwrap());
        agrees(&clock, &gcra, &mut Keyed::<Arrival>::plain(quota), start, &steps)?;
        let clock = ManualClock::new();
        let window = OnePerKey::new(|| DirectFixedWindow::with_clock(quota, clock.clone()).unwrap());
        agrees(&clock, &window, &mut Keyed::<Window>::plain(quota), start, &steps)?;
        let clock = ManualClock::new();
        let counter = OnePerKey::new(|| {
            DirectSlidingWindowCounter::with_clock(quota, clock.clone()).unwrap()
        });
        agrees(&clock, &counter, &mut Keyed::<Counter>::plain(quota), start, &steps)?;
    }
}

#[test]
fn a_direct_limiter_in_debt_refuses_until_its_refill_repays_it() {
    let clock = ManualClock::new();
    let limiter =
        DirectTokenBucket::with_clock(Quota::new(4, ms(10)).unwrap(), clock.clone()).unwrap();
    assert!(limiter.acquire(1).is_allowed());
    // Used 7: 3 left, 6 more charged, 3 owed.
    assert_eq!(
        limiter.settle(1, 7),
        Settlement {
            refunded: 0,
            charged: 6,
            forgiven: 0
        }
    );
    assert_eq!(limiter.peek(), 0);
    assert_eq!(limiter.acquire(2).retry_after(), Some(ms(50)));
    // Given back below the estimate: the debt first.
    assert_eq!(limiter.settle(3, 1).refunded, 2);
    assert_eq!(limiter.acquire(2).retry_after(), Some(ms(30)));
    // Capped: at most one capacity owed.
    assert_eq!(limiter.settle(0, 100).forgiven, 100 - 3);
    // A settle allocates nothing.
    let info = allocation_counter::measure(|| {
        for _ in 0..100 {
            std::hint::black_box(limiter.settle(1, 3));
            std::hint::black_box(limiter.settle(3, 1));
        }
    });
    assert_eq!(info.count_total, 0);
}

/// The review's case on a direct fixed window: limit 10 a 1 s window, 10 estimated
/// at 0.999 s, 10 admitted in window 1, then the estimate settled at 0: nothing is
/// given back (window 1 would otherwise admit 20), and the next request in window 1
/// is denied.
#[test]
fn a_direct_fixed_window_gives_nothing_back_on_settle() {
    let clock = ManualClock::new();
    let limiter =
        DirectFixedWindow::with_clock(Quota::new(10, ms(100)).unwrap(), clock.clone()).unwrap();
    clock.advance(ms(999));
    assert!(limiter.acquire(10).is_allowed());
    clock.advance(ms(1));
    for _ in 0..10 {
        assert!(limiter.acquire(1).is_allowed());
    }
    assert_eq!(limiter.settle(10, 0), Settlement::default());
    assert_eq!(limiter.acquire(1).retry_after(), Some(ms(1_000)));
    // A direct sliding window counter gives nothing back either.
    let counter =
        DirectSlidingWindowCounter::with_clock(Quota::new(10, ms(100)).unwrap(), clock).unwrap();
    assert!(counter.acquire(4).is_allowed());
    assert_eq!(counter.settle(4, 0), Settlement::default());
    assert_eq!(counter.peek(), 6);
}

#[test]
fn threads_racing_on_a_frozen_clock_admit_exactly_the_capacity() {
    const CAPACITY: u32 = 1_000;
    let clock = ManualClock::new();
    let limiter =
        DirectTokenBucket::with_clock(Quota::new(CAPACITY, ms(1)).unwrap(), clock).unwrap();
    let allowed = AtomicU32::new(0);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..CAPACITY {
                    if limiter.try_acquire() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(allowed.load(Ordering::Relaxed), CAPACITY);
    assert_eq!(limiter.peek(), 0);
}

#[test]
fn a_check_allocates_nothing() {
    let clock = ManualClock::new();
    let limiter =
        DirectTokenBucket::with_clock(Quota::new(10, ms(1)).unwrap(), clock.clone()).unwrap();
    let mut allowed = 0u32;
    let info = allocation_counter::measure(|| {
        for _ in 0..1_000 {
            clock.advance(ms(1) / 4);
            allowed += u32::from(limiter.try_acquire());
            std::hint::black_box(limiter.peek());
        }
    });
    assert!(allowed > 0 && allowed < 1_000, "{allowed}");
    assert_eq!(info.count_total, 0);
}

#[test]
fn a_direct_limiter_is_a_policy_check_for_every_request() {
    // A global cap of 3 in front of a per-user limit of 2: the cap is shared by all.
    let clock = ManualClock::new();
    let global = Quota::new(3, ms(100)).unwrap();
    let per_user = Quota::new(2, ms(100)).unwrap();
    let cap = Arc::new(DirectTokenBucket::with_clock(global, clock.clone()).unwrap());
    let users = Arc::new(TokenBucket::<u32, _>::with_clock(per_user, clock.clone()).unwrap());
    let policy: Policy<u32> = Policy::builder()
        .check(Check::new(
            "per-user",
            users,
            Limit::steady(per_user),
            |u: &u32| Some(*u),
        ))
        .check(Check::new(
            "global",
            cap.clone(),
            Limit::steady(global),
            |_: &u32| Some(()),
        ))
        .build()
        .unwrap();
    let verdicts: Vec<bool> = [1, 1, 2, 2, 3]
        .iter()
        .map(|u| policy.acquire(u).is_allowed())
        .collect();
    assert_eq!(verdicts, [true, true, true, false, false]);
    // The refused requests gave back what the per-user check took, and took nothing
    // from the cap.
    assert_eq!(cap.peek(), 0);
}
