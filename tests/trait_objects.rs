//! Limiters of different algorithms held as trait objects (`DynRateLimiter`), one
//! collection and one policy, and the one rule for building them: every algorithm's
//! constructors return a `Result`.

use std::sync::Arc;
use std::time::Duration;
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{
    Decision, DirectFixedWindow, DirectGcra, DirectSlidingWindowCounter, DirectTokenBucket,
    DynRateLimiter, FixedWindow, Gcra, ManualClock, Quota, QuotaError, SlidingLog,
    SlidingWindowCounter, TokenBucket,
};

type Mixed = Vec<Box<dyn DynRateLimiter<String, str>>>;

/// A token bucket and a GCRA (and the other three), each boxed, on one clock.
fn mixed(quota: Quota, clock: &ManualClock) -> Mixed {
    vec![
        Box::new(TokenBucket::<String, _>::with_clock(quota, clock.clone()).unwrap()),
        Box::new(Gcra::<String, _>::with_clock(quota, clock.clone()).unwrap()),
        Box::new(FixedWindow::<String, _>::with_clock(quota, clock.clone()).unwrap()),
        Box::new(SlidingWindowCounter::<String, _>::with_clock(quota, clock.clone()).unwrap()),
        Box::new(SlidingLog::<String, _>::with_clock(quota, clock.clone()).unwrap()),
    ]
}

#[test]
fn a_token_bucket_and_a_gcra_in_one_vec_each_decide_as_their_own_type() {
    let quota = Quota::new(2, Duration::from_secs(1)).unwrap();
    let clock = ManualClock::new();
    let boxed = mixed(quota, &clock);
    // The same limiters through their own types, on the same clock, asked alike.
    let bucket = TokenBucket::<String, _>::with_clock(quota, clock.clone()).unwrap();
    let gcra = Gcra::<String, _>::with_clock(quota, clock.clone()).unwrap();

    for limiter in &boxed {
        assert_eq!(
            limiter.acquire("alice", 1),
            Decision::Allowed { remaining: 1 }
        );
        assert!(limiter.try_acquire("alice"));
        assert_eq!(limiter.peek("alice"), 0);
        assert!(!limiter.acquire("alice", 1).is_allowed());
        assert!(limiter.try_acquire("bob"), "keys are independent");
    }
    let _ = bucket.acquire("alice", 2);
    let _ = gcra.acquire("alice", 2);
    clock.set(Duration::from_millis(1_500));
    assert_eq!(boxed[0].acquire("alice", 1), bucket.acquire("alice", 1));
    assert_eq!(boxed[1].acquire("alice", 1), gcra.acquire("alice", 1));
}

#[test]
fn a_refund_through_the_trait_object_gives_back_to_the_same_key() {
    let quota = Quota::new(3, Duration::from_secs(60)).unwrap();
    let clock = ManualClock::new();
    for limiter in mixed(quota, &clock) {
        assert!(limiter.acquire("alice", 3).is_allowed());
        limiter.refund("alice", 2);
        assert_eq!(limiter.peek("alice"), 2);
        assert_eq!(limiter.peek("bob"), 3, "an unknown key is full");
    }
}

#[test]
fn limiters_of_owned_keys_are_objects_of_their_key_type_too() {
    let quota = Quota::per_second(1).unwrap();
    let limiters: Vec<Arc<dyn DynRateLimiter<u64>>> = vec![
        Arc::new(TokenBucket::<u64>::new(quota).unwrap()),
        Arc::new(Gcra::<u64>::new(quota).unwrap()),
    ];
    for limiter in &limiters {
        assert!(limiter.try_acquire(&7));
        assert!(!limiter.try_acquire(&7));
    }
    // A direct limiter is a limiter of the unit key.
    let direct: Box<dyn DynRateLimiter<()>> = Box::new(DirectGcra::new(quota).unwrap());
    assert!(direct.try_acquire(&()));
    assert!(!direct.try_acquire(&()));
}

#[test]
fn a_policy_check_holds_a_limiter_chosen_at_run_time() {
    let quota = Quota::new(1, Duration::from_secs(60)).unwrap();
    let clock = ManualClock::new();
    for use_gcra in [false, true] {
        let limiter: Arc<dyn DynRateLimiter<String, str>> = if use_gcra {
            Arc::new(Gcra::<String, _>::with_clock(quota, clock.clone()).unwrap())
        } else {
            Arc::new(TokenBucket::<String, _>::with_clock(quota, clock.clone()).unwrap())
        };
        let by_user = |request: &(String, u32)| Some(request.0.clone());
        let policy: Policy<(String, u32)> = Policy::builder()
            .check(Check::new(
                "per-user",
                limiter,
                Limit::steady(quota),
                move |request: &(String, u32)| by_user(request),
            ))
            .build()
            .unwrap();
        let alice = ("alice".to_owned(), 0);
        assert!(policy.acquire(&alice).is_allowed(), "gcra: {use_gcra}");
        assert!(!policy.acquire(&alice).is_allowed(), "gcra: {use_gcra}");
        assert!(policy.acquire(&("bob".to_owned(), 0)).is_allowed());
    }
}

#[test]
fn trait_objects_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + ?Sized>() {}
    shared::<dyn DynRateLimiter<String, str>>();
    shared::<Box<dyn DynRateLimiter<u64>>>();
}

/// Every algorithm, keyed and direct, built by the one rule: a `Result`, which the
/// algorithms that hold every quota never refuse.
#[test]
fn every_constructor_returns_a_result_and_three_algorithms_never_refuse() {
    // The widest quota there is: the largest capacity, the longest refill interval.
    let widest = Quota::new(u32::MAX, Duration::from_nanos(u64::MAX)).unwrap();
    let clock = ManualClock::new;
    let refused = |built: Result<(), QuotaError>| match built {
        Ok(()) => false,
        Err(QuotaError::Unsupported { .. }) => true,
        Err(other) => panic!("not the documented refusal: {other}"),
    };
    let keyed_tb = TokenBucket::<u64>::new(widest).map(drop);
    let keyed_fw = FixedWindow::<u64>::builder(widest).build().map(drop);
    let keyed_log = SlidingLog::<u64, _>::with_clock(widest, clock()).map(drop);
    let direct_tb = DirectTokenBucket::new(widest).map(drop);
    let direct_fw = DirectFixedWindow::with_clock(widest, clock()).map(drop);
    for built in [keyed_tb, keyed_fw, keyed_log, direct_tb, direct_fw] {
        assert!(!refused(built));
    }
    let keyed_gcra = Gcra::<u64>::new(widest).map(drop);
    let keyed_swc = SlidingWindowCounter::<u64>::builder(widest)
        .build()
        .map(drop);
    let direct_gcra = DirectGcra::with_clock(widest, clock()).map(drop);
    let direct_swc = DirectSlidingWindowCounter::new(widest).map(drop);
    for built in [keyed_gcra, keyed_swc, direct_gcra, direct_swc] {
        assert!(refused(built));
    }
}
