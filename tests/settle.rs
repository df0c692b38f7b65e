//! Reserve, then settle: every keyed limiter decision for decision against its
//! algorithm's reference model extended with debt (acquires, refunds, settles below,
//! at and above the estimate, the clock forward and back), with forgetting after
//! every step; what a key in debt answers; and exact admission counts with settles
//! racing admissions on many threads.

mod common;

use common::keyed::{Arrival, Bucket, Counter, Keyed, Log, Window};
use common::ms;
use common::schedule::{agrees, agrees_sweeping, settling_case, small_quota};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{
    Decision, FixedWindow, Gcra, ManualClock, Quota, Settlement, SlidingLog, SlidingWindowCounter,
    TokenBucket,
};

/// Small quotas every algorithm holds.
fn quota() -> impl Strategy<Value = Quota> {
    small_quota(6).prop_filter("refused by the sliding window counter", |&q| {
        SlidingWindowCounter::<u32, _>::with_clock(q, ManualClock::new()).is_ok()
    })
}

proptest! {
    // Modest: each case is up to 120 steps, and CI's budget is tight.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_token_bucket_settles_as_the_model((quota, start, steps) in settling_case(quota(), true)) {
        let clock = ManualClock::new();
        let (lock_free, mutex_per_key, global_lock) = common::all_limiters(quota, &clock);
        agrees(&clock, &lock_free, &mut Keyed::<Bucket>::plain(quota), start, &steps)?;
        agrees(&clock, &mutex_per_key, &mut Keyed::<Bucket>::plain(quota), start, &steps)?;
        agrees(&clock, &global_lock, &mut Keyed::<Bucket>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_gcra_settles_as_the_model((quota, start, steps) in settling_case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Arrival>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_fixed_window_settles_as_the_model((quota, start, steps) in settling_case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = FixedWindow::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Window>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_sliding_window_counter_settles_as_the_model(
        (quota, start, steps) in settling_case(quota(), true)
    ) {
        let clock = ManualClock::new();
        let limiter = SlidingWindowCounter::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Counter>::plain(quota), start, &steps)?;
    }

    #[test]
    fn a_sliding_log_settles_as_the_model((quota, start, steps) in settling_case(quota(), true)) {
        let clock = ManualClock::new();
        let limiter = SlidingLog::<u32, _>::with_clock(quota, clock.clone()).unwrap();
        agrees(&clock, &limiter, &mut Keyed::<Log>::plain(quota), start, &steps)?;
    }

    /// Forgetting after every step (margin 0, the clock never going back) changes no
    /// settle and no decision: a key in debt carries information, and is kept. On
    /// both stores, for every algorithm.
    #[test]
    fn sweeping_after_every_step_forgets_no_debt((quota, start, steps) in settling_case(quota(), false)) {
        let clock = ManualClock::new();
        macro_rules! check {
            ($limiter:ty, $model:ty $(, $word_store:ident)?) => {{
                // Each limiter's epoch at zero, as the driver expects.
                clock.set(Duration::ZERO);
                let limiter = <$limiter>::builder(quota)
                    .clock(clock.clone())
                    .eviction_margin(Duration::ZERO)
                    $(.$word_store())?
                    .build()
                    .unwrap();
                let mut model = Keyed::<$model>::plain(quota);
                agrees_sweeping(&clock, &limiter, &mut model, start, &steps, || limiter.evict_idle())?;
            }};
        }
        check!(TokenBucket<u32>, Bucket);
        check!(TokenBucket<u32>, Bucket, word_store);
        check!(Gcra<u32>, Arrival);
        check!(FixedWindow<u32>, Window, word_store);
        check!(SlidingWindowCounter<u32>, Counter);
        check!(SlidingLog<u32>, Log);
    }
}

/// 10 per second: one token every 100 ms.
fn ten_per_second() -> Quota {
    Quota::new(10, ms(100)).unwrap()
}

#[test]
fn settling_above_the_estimate_drives_the_key_into_debt_and_retry_after_counts_it() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<String, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    // Estimated 2, used 15: 10 − 15 = 5 tokens owed.
    assert!(limiter.acquire("user", 2).is_allowed());
    let settled = limiter.settle("user", 2, 15);
    assert_eq!(
        settled,
        Settlement {
            refunded: 0,
            charged: 13,
            forgiven: 0
        }
    );
    assert_eq!(limiter.peek("user"), 0);
    // The debt (5 tokens) and the one asked for: 6 intervals.
    assert_eq!(
        limiter.acquire("user", 1),
        Decision::Denied {
            remaining: 0,
            retry_after: ms(600)
        }
    );
    clock.advance(ms(599));
    assert!(!limiter.acquire("user", 1).is_allowed());
    clock.advance(ms(1));
    assert!(limiter.acquire("user", 1).is_allowed());
}

#[test]
fn the_debt_cap_is_one_capacity_and_what_passes_it_is_forgiven() {
    let clock = ManualClock::new();
    let limiter = Gcra::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 10).is_allowed());
    // Empty; owes at most 10 more.
    assert_eq!(
        limiter.settle(&1, 10, 35),
        Settlement {
            refunded: 0,
            charged: 10,
            forgiven: 15
        }
    );
    assert_eq!(limiter.settle(&1, 0, 1).forgiven, 1);
    // 10 owed, then 1 to take: 11 intervals.
    assert_eq!(limiter.acquire(&1, 1).retry_after(), Some(ms(1100)));
}

#[test]
fn settling_below_the_estimate_reports_what_the_key_got_back() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 4).is_allowed());
    assert_eq!(
        limiter.settle(&1, 4, 1),
        Settlement {
            refunded: 3,
            charged: 0,
            forgiven: 0
        }
    );
    assert_eq!(limiter.peek(&1), 9);
    // A refund is capped at what the key is short of full: a full bucket has nothing
    // to give back.
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.settle(&1, 4, 0), Settlement::default());
    // A key with no state is full: nothing to give back, nothing created.
    assert_eq!(limiter.settle(&2, 5, 0), Settlement::default());
    assert_eq!(limiter.len(), 1);
}

/// The review's case: a settle's refund on a fixed window would go to the window
/// being counted, which need not be the one that counted the estimate. Limit 10 a
/// 1 s window: 10 estimated at 0.999 s, 10 admitted in window 1, then the estimate
/// settled at 0: giving 10 back to window 1 would let 10 more in there, 20 in one
/// window. Nothing is given back.
#[test]
fn a_fixed_window_gives_nothing_back_on_settle() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    clock.advance(ms(999));
    assert!(limiter.acquire(&1, 10).is_allowed());
    clock.advance(ms(1));
    for _ in 0..10 {
        assert!(limiter.acquire(&1, 1).is_allowed());
    }
    assert_eq!(limiter.settle(&1, 10, 0), Settlement::default());
    assert_eq!(limiter.peek(&1), 0);
    assert_eq!(limiter.acquire(&1, 1).retry_after(), Some(ms(1_000)));
    // Within one window too: nothing back (the state cannot tell the two apart).
    clock.advance(Duration::from_secs(1));
    assert!(limiter.acquire(&1, 4).is_allowed());
    assert_eq!(limiter.settle(&1, 4, 1), Settlement::default());
    assert_eq!(limiter.peek(&1), 6);
    // A charge is counted as ever.
    assert_eq!(limiter.settle(&1, 1, 3).charged, 2);
    assert_eq!(limiter.peek(&1), 4);
}

/// The sliding log's analogue: its refund drops the oldest entries still in the
/// window, which are a later request's when the estimate's have left it. 10
/// estimated at 0, 10 admitted at 1 s (the estimate's entries just gone), then the
/// estimate settled at 0 at 1.1 s: dropping the later request's 10 entries would let
/// 10 more in within its window. Nothing is given back.
#[test]
fn a_sliding_log_gives_nothing_back_on_settle() {
    let clock = ManualClock::new();
    let limiter = SlidingLog::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 10).is_allowed());
    clock.advance(Duration::from_secs(1));
    assert!(limiter.acquire(&1, 10).is_allowed());
    clock.advance(ms(100));
    assert_eq!(limiter.settle(&1, 10, 0), Settlement::default());
    assert_eq!(limiter.peek(&1), 0);
    assert_eq!(limiter.acquire(&1, 1).retry_after(), Some(ms(900)));
}

/// The sliding window counter gives nothing back on settle either, and charges as
/// ever.
#[test]
fn a_sliding_window_counter_gives_nothing_back_on_settle() {
    let clock = ManualClock::new();
    let limiter =
        SlidingWindowCounter::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 5).is_allowed());
    assert_eq!(limiter.settle(&1, 5, 2), Settlement::default());
    assert_eq!(limiter.peek(&1), 5);
    assert_eq!(limiter.settle(&1, 2, 4).charged, 2);
    assert_eq!(limiter.peek(&1), 3);
}

/// A key in debt has less than nothing: a cost of 0 is refused until the debt is
/// repaid (one interval before a cost of 1 would pass, for a bucket), on every
/// algorithm. Counting only failures with an estimate of 0 so refuses a client
/// once it owes: after its capacity in failures and the one that put it in debt.
#[test]
fn a_cost_of_zero_is_refused_while_the_key_owes() {
    let clock = ManualClock::new();
    let quota = ten_per_second();
    let limiters: Vec<(&str, Box<dyn turnstile::DynRateLimiter<u32>>, Duration)> = vec![
        (
            "token bucket",
            Box::new(TokenBucket::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
            ms(100),
        ),
        (
            "gcra",
            Box::new(Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
            ms(100),
        ),
        (
            "mutex per key",
            Box::new(MutexPerKey::with_clock(quota, clock.clone())),
            ms(100),
        ),
        (
            "global lock",
            Box::new(GlobalLock::with_clock(quota, clock.clone())),
            ms(100),
        ),
        // Window 0 counts 11: the next window starts at 1, room for 0 at once.
        (
            "fixed window",
            Box::new(FixedWindow::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
            Duration::from_secs(1),
        ),
        // The entry charged last leaves one window after it.
        (
            "sliding log",
            Box::new(SlidingLog::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
            Duration::from_secs(1),
        ),
        // Window 0 counts 11: at 100 ms into window 1 it weighs 11 × 9/10 = 9.9.
        (
            "sliding window counter",
            Box::new(SlidingWindowCounter::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
            ms(1_100),
        ),
    ];
    for (name, limiter, repaid) in &limiters {
        let mut failures = 0;
        while limiter.acquire(&0, 0).is_allowed() {
            failures += 1;
            assert!(failures <= 11, "{name}");
            limiter.settle(&0, 0, 1);
        }
        assert_eq!(failures, 11, "{name}: the capacity, and the one into debt");
        assert_eq!(
            limiter.acquire(&0, 0),
            Decision::Denied {
                remaining: 0,
                retry_after: *repaid
            },
            "{name}"
        );
    }
    // On a bucket, a cost of 0 waits one interval less than a cost of 1.
    let bucket = TokenBucket::<u32, _>::with_clock(quota, clock.clone()).unwrap();
    bucket.settle(&0, 0, 15);
    assert_eq!(bucket.acquire(&0, 0).retry_after(), Some(ms(500)));
    assert_eq!(bucket.acquire(&0, 1).retry_after(), Some(ms(600)));
    clock.advance(ms(500));
    assert_eq!(bucket.acquire(&0, 0), Decision::Allowed { remaining: 0 });
}

#[test]
fn settling_at_the_estimate_changes_nothing() {
    let clock = ManualClock::new();
    let limiter = SlidingLog::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 3).is_allowed());
    assert_eq!(limiter.settle(&1, 3, 3), Settlement::default());
    assert_eq!(limiter.peek(&1), 7);
}

#[test]
fn a_charge_on_a_key_with_no_state_creates_it_and_charges_from_full() {
    // Counting only failures: an estimate of 0 at the request, 1 for a failure.
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    for _ in 0..25 {
        limiter.settle(&7, 0, 1);
    }
    // 10 taken, 10 owed, 5 forgiven.
    assert_eq!(limiter.peek(&7), 0);
    assert_eq!(limiter.acquire(&7, 1).retry_after(), Some(ms(1100)));
    assert_eq!(limiter.len(), 1);
}

/// At the key cap a new key has no state to owe in: its charge is forgiven, the
/// settlement says so, and it counts as an overflow; a key the store holds is
/// charged as ever.
#[test]
fn at_the_key_cap_a_charge_on_a_new_key_is_reported_forgiven() {
    let limiter = TokenBucket::<u8>::builder(ten_per_second())
        .clock(ManualClock::new())
        .manual_eviction()
        .max_keys(1, turnstile::Overflow::Deny)
        .build()
        .unwrap();
    assert!(limiter.acquire(&1, 1).is_allowed());
    assert_eq!(limiter.stats().overflowed, 0);
    assert_eq!(
        limiter.settle(&2, 0, 4),
        Settlement {
            refunded: 0,
            charged: 0,
            forgiven: 4
        }
    );
    assert_eq!(limiter.stats().overflowed, 1);
    // A refund on a key it does not hold stores nothing, at the cap or not.
    assert_eq!(limiter.settle(&2, 4, 0), Settlement::default());
    assert_eq!(limiter.stats().overflowed, 1);
    assert_eq!(limiter.settle(&1, 1, 5).charged, 4);
    assert_eq!(limiter.stats().overflowed, 1);
    assert_eq!(limiter.peek(&1), 5);
}

#[test]
fn a_key_in_debt_is_never_forgotten_until_it_has_repaid() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u8>::builder(ten_per_second())
        .clock(clock.clone())
        .eviction_margin(Duration::ZERO)
        .build()
        .unwrap();
    assert!(limiter.acquire(&1, 10).is_allowed());
    limiter.settle(&1, 10, 20);
    // Full again only after 2 s: the debt, then the capacity.
    clock.advance(ms(1_999));
    assert_eq!(limiter.evict_idle(), 0);
    assert_eq!(limiter.peek(&1), 9);
    clock.advance(ms(1));
    assert_eq!(limiter.evict_idle(), 1);
    assert_eq!(limiter.peek(&1), 10);
}

#[test]
fn a_fixed_windows_debt_carries_into_the_next_window() {
    let clock = ManualClock::new();
    // 10 per 1 s window.
    let limiter = FixedWindow::<u8, _>::with_clock(ten_per_second(), clock.clone()).unwrap();
    assert!(limiter.acquire(&1, 10).is_allowed());
    assert_eq!(limiter.settle(&1, 10, 14).charged, 4);
    clock.advance(ms(500));
    // 7 more need the window after next (4 owed + 7 > 10); 6 fit in the next.
    assert_eq!(limiter.acquire(&1, 7).retry_after(), Some(ms(1_500)));
    assert_eq!(limiter.acquire(&1, 6).retry_after(), Some(ms(500)));
    clock.advance(ms(500));
    assert_eq!(limiter.peek(&1), 6);
}

#[test]
fn the_baselines_settle_as_the_lock_free_bucket() {
    let clock = ManualClock::new();
    let (lock_free, mutex_per_key, global_lock) = common::all_limiters(ten_per_second(), &clock);
    let run = |limiter: &dyn turnstile::DynRateLimiter<u32>| {
        vec![
            limiter.settle(&1, 0, 4),
            limiter.settle(&1, 3, 1),
            limiter.settle(&2, 0, 30),
            limiter.settle(&3, 5, 0),
            // What each key has left, in one value.
            Settlement {
                refunded: limiter.peek(&1),
                charged: limiter.peek(&2),
                forgiven: limiter.peek(&3),
            },
        ]
    };
    let expected = run(&lock_free);
    assert_eq!(
        expected[2],
        Settlement {
            refunded: 0,
            charged: 20,
            forgiven: 10
        }
    );
    assert_eq!(run(&mutex_per_key), expected);
    assert_eq!(run(&global_lock), expected);
}

/// Threads that each acquire an estimate and settle it above, on one key, on a frozen
/// clock: every settle's extra is charged or reported forgiven, and the tokens the key
/// admitted plus what it was charged are exactly its capacity plus what it owes at the
/// end (read off the wait of one more token), never more than its capacity and its
/// debt cap. For the algorithms whose wait tells the debt (a token bucket, GCRA);
/// the windows are held to the bound.
#[test]
fn racing_settles_charge_every_token_exactly_once() {
    const CAPACITY: u32 = 1_000;
    let clock = ManualClock::new();
    let quota = Quota::new(CAPACITY, ms(1)).unwrap();
    let limiters: Vec<(&str, Box<dyn turnstile::DynRateLimiter<u32>>)> = vec![
        (
            "token bucket",
            Box::new(TokenBucket::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
        ),
        (
            "gcra",
            Box::new(Gcra::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
        ),
        (
            "mutex per key",
            Box::new(MutexPerKey::with_clock(quota, clock.clone())),
        ),
        (
            "global lock",
            Box::new(GlobalLock::with_clock(quota, clock.clone())),
        ),
        (
            "fixed window",
            Box::new(FixedWindow::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
        ),
        (
            "sliding log",
            Box::new(SlidingLog::<u32, _>::with_clock(quota, clock.clone()).unwrap()),
        ),
    ];
    for (name, limiter) in &limiters {
        let (admitted, charged, settles) =
            (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        thread::scope(|s| {
            for extra in [3, 7, 40, 41] {
                let (limiter, admitted, charged, settles) =
                    (limiter, &admitted, &charged, &settles);
                s.spawn(move || {
                    for _ in 0..400 {
                        if limiter.acquire(&0, 2).is_allowed() {
                            admitted.fetch_add(2, Ordering::Relaxed);
                            let settled = limiter.settle(&0, 2, 2 + extra);
                            assert_eq!(settled.charged + settled.forgiven, extra, "{name}");
                            assert_eq!(settled.refunded, 0, "{name}");
                            charged.fetch_add(settled.charged.into(), Ordering::Relaxed);
                            settles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = admitted.load(Ordering::Relaxed) + charged.load(Ordering::Relaxed);
        assert!(taken <= 2 * u64::from(CAPACITY), "{name}: {taken}");
        assert!(settles.load(Ordering::Relaxed) > 0, "{name}");
        // Too little left for another estimate: what is left, or a debt.
        let left = limiter.peek(&0);
        assert!(left < 2, "{name}: {left}");
        if ["token bucket", "gcra", "mutex per key", "global lock"].contains(name) {
            // Owing, a token waits one interval per token owed, and one for itself.
            let owed = match limiter.acquire(&0, 1).retry_after() {
                Some(wait) => wait.as_millis() as u64 - 1,
                None => 0,
            };
            let owed = if left == 0 { owed } else { 0 };
            assert_eq!(
                taken + u64::from(left),
                u64::from(CAPACITY) + owed,
                "{name}"
            );
        }
    }
}
