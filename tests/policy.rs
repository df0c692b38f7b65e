//! Policies: all or nothing against a reference that checks every limit first and
//! takes only when all allow; the answer's wait and reported check; what happens
//! without a key; and refunds under concurrency.

mod common;

use common::{Reference, ms};
use proptest::prelude::*;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use turnstile::policy::{
    Binding, Check, Limit, MissingKey, Outcome, Policy, PolicyError, SharedFuture, SharedLimiter,
};
use turnstile::{
    Decision, ManualClock, Overflow, Quota, Settlement, SharedDecision, SharedError, TokenBucket,
};

/// A request: who sends it, and from where.
#[derive(Clone, Copy, Debug)]
struct Request {
    user: u32,
    ip: u32,
}

type Limiter = Arc<TokenBucket<u32, ManualClock>>;

fn limiter(quota: Quota, clock: &ManualClock) -> Limiter {
    Arc::new(TokenBucket::with_clock(quota, clock.clone()).unwrap())
}

fn by_user(r: &Request) -> Option<u32> {
    Some(r.user)
}

fn by_ip(r: &Request) -> Option<u32> {
    Some(r.ip)
}

/// One check of the property test: its quota and cost, and whether it keys on the
/// user or the IP.
#[derive(Clone, Copy, Debug)]
struct CheckSpec {
    quota: Quota,
    cost: u32,
    per_user: bool,
}

fn check_spec() -> impl Strategy<Value = CheckSpec> {
    (1u32..=5, 1u64..=1000, any::<bool>(), any::<u32>()).prop_map(
        |(capacity, interval_ms, per_user, cost)| CheckSpec {
            quota: Quota::new(capacity, ms(interval_ms)).unwrap(),
            cost: 1 + cost % capacity,
            per_user,
        },
    )
}

/// The reference: asks every check without taking (a reference model's denial changes
/// nothing), and takes from every one only when all allow. Returns the expected
/// outcome and reported check.
fn reference_acquire(
    specs: &[CheckSpec],
    models: &mut [Reference],
    request: Request,
    now: u64,
) -> (Outcome, Option<Binding>, Vec<usize>) {
    let key = |spec: &CheckSpec| {
        if spec.per_user {
            request.user
        } else {
            request.ip
        }
    };
    let mut denials = Vec::new();
    for (i, (spec, model)) in specs.iter().zip(models.iter_mut()).enumerate() {
        if model.peek(key(spec), now) < spec.cost {
            denials.push((i, model.acquire(key(spec), now, spec.cost)));
        }
    }
    if denials.is_empty() {
        let mut tightest: Option<Binding> = None;
        for (i, (spec, model)) in specs.iter().zip(models.iter_mut()).enumerate() {
            let decision = model.acquire(key(spec), now, spec.cost);
            if tightest.is_none_or(|b| decision.remaining() < b.decision.remaining()) {
                tightest = Some(Binding { check: i, decision });
            }
        }
        return (Outcome::Allowed, tightest, Vec::new());
    }
    // The longest wait; the first such check on a tie.
    let mut longest = denials[0];
    for &(i, decision) in &denials[1..] {
        if decision.retry_after() > longest.1.retry_after() {
            longest = (i, decision);
        }
    }
    let retry_after = longest.1.retry_after().unwrap();
    let binding = Binding {
        check: longest.0,
        decision: longest.1,
    };
    let refused = denials.iter().map(|&(i, _)| i).collect();
    (Outcome::Denied { retry_after }, Some(binding), refused)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Decision for decision, and key state for key state after every request, a
    /// policy equals the reference that checks all first and takes only when all allow.
    #[test]
    fn a_policy_is_all_or_nothing_like_checking_all_first(
        specs in prop::collection::vec(check_spec(), 1..=3),
        requests in prop::collection::vec((0u64..1500, 0u32..3, 0u32..3), 1..60),
    ) {
        let clock = ManualClock::new();
        let limiters: Vec<Limiter> = specs.iter().map(|s| limiter(s.quota, &clock)).collect();
        let mut builder = Policy::builder();
        for (i, (spec, limiter)) in specs.iter().zip(&limiters).enumerate() {
            let extractor = if spec.per_user { by_user } else { by_ip };
            let check = Check::new(format!("c{i}"), limiter.clone(), Limit::steady(spec.quota), extractor);
            builder = builder.check(check.cost(spec.cost));
        }
        let policy: Policy<Request> = builder.build().unwrap();
        let mut models: Vec<Reference> = specs.iter().map(|s| Reference::new(s.quota)).collect();

        let mut now = 0;
        for (advance_ms, user, ip) in requests {
            now += advance_ms * 1_000_000;
            clock.set(Duration::from_nanos(now));
            let request = Request { user, ip };
            let verdict = policy.acquire(&request);
            let (outcome, binding, refused) = reference_acquire(&specs, &mut models, request, now);
            prop_assert_eq!(verdict.outcome(), outcome);
            prop_assert_eq!(verdict.binding(), binding);
            prop_assert_eq!(verdict.refused().collect::<Vec<_>>(), refused);
            for ((limiter, model), key) in limiters.iter().zip(&models).flat_map(|p| (0..3).map(move |k| (p, k))) {
                prop_assert_eq!(limiter.peek(&key), model.peek(key, now), "tokens of key {}", key);
            }
        }
    }
}

/// A per-user check and a per-IP one, as `turnstile::policy`'s example uses them.
fn policy_with(clock: &ManualClock, user: Quota, ip: Quota) -> (Policy<Request>, Limiter, Limiter) {
    let users = limiter(user, clock);
    let ips = limiter(ip, clock);
    let policy = Policy::builder()
        .check(Check::new(
            "per-user",
            users.clone(),
            Limit::steady(user),
            by_user,
        ))
        .check(Check::new("per-ip", ips.clone(), Limit::steady(ip), by_ip))
        .build()
        .unwrap();
    (policy, users, ips)
}

#[test]
fn a_later_denial_gives_back_what_earlier_checks_took() {
    let clock = ManualClock::new();
    let per_second = |n| Quota::new(n, Duration::from_secs(1)).unwrap();
    let (policy, users, ips) = policy_with(&clock, per_second(5), per_second(2));
    let alice = Request { user: 1, ip: 9 };
    assert!(policy.acquire(&alice).is_allowed());
    assert!(policy.acquire(&alice).is_allowed());
    let verdict = policy.acquire(&alice);
    assert_eq!(
        verdict.outcome(),
        Outcome::Denied {
            retry_after: Duration::from_secs(1)
        }
    );
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [1]);
    assert_eq!(users.peek(&1), 3, "the per-user token is given back");
    assert_eq!(ips.peek(&9), 0);
}

#[test]
fn the_wait_is_the_longest_of_all_denying_checks_even_past_the_first_denial() {
    // The per-user check denies with 1 s to wait; the per-IP one, asked anyway, with
    // 10 s. Reporting 1 s would send the client back into the per-IP denial.
    let clock = ManualClock::new();
    let user = Quota::new(1, Duration::from_secs(1)).unwrap();
    let ip = Quota::new(1, Duration::from_secs(10)).unwrap();
    let (policy, _, _) = policy_with(&clock, user, ip);
    assert!(policy.acquire(&Request { user: 1, ip: 9 }).is_allowed());
    let verdict = policy.acquire(&Request { user: 1, ip: 9 });
    assert_eq!(verdict.retry_after(), Some(Duration::from_secs(10)));
    assert_eq!(verdict.binding().map(|b| b.check), Some(1));
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [0, 1]);
    clock.advance(Duration::from_secs(10));
    assert!(policy.acquire(&Request { user: 1, ip: 9 }).is_allowed());
}

#[test]
fn an_allowed_request_reports_the_check_with_the_fewest_units_left() {
    let clock = ManualClock::new();
    let (policy, _, _) = policy_with(
        &clock,
        Quota::per_minute(100).unwrap(),
        Quota::per_minute(3).unwrap(),
    );
    let verdict = policy.acquire(&Request { user: 1, ip: 9 });
    assert_eq!(
        verdict.binding(),
        Some(Binding {
            check: 1,
            decision: Decision::Allowed { remaining: 2 }
        })
    );
    assert_eq!(verdict.remaining(), Some(2));
}

fn optional_user(r: &Option<u32>) -> Option<u32> {
    *r
}

fn keyless_policy(missing: MissingKey<u32>, users: &Limiter, ips: &Limiter) -> Policy<Option<u32>> {
    let quota = Quota::per_minute(2).unwrap();
    Policy::builder()
        .check(
            Check::new(
                "per-user",
                users.clone(),
                Limit::steady(quota),
                optional_user,
            )
            .on_missing_key(missing),
        )
        .check(Check::new(
            "per-ip",
            ips.clone(),
            Limit::steady(quota),
            |_: &Option<u32>| Some(0u32),
        ))
        .build()
        .unwrap()
}

#[test]
fn a_missing_key_is_rejected_skipped_or_shared_as_configured() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(2).unwrap();
    let (users, ips) = (limiter(quota, &clock), limiter(quota, &clock));

    let reject = keyless_policy(MissingKey::Reject, &users, &ips);
    let verdict = reject.acquire(&None);
    assert_eq!(verdict.outcome(), Outcome::MissingKey);
    assert_eq!(verdict.binding(), None);
    assert_eq!(
        ips.peek(&0),
        2,
        "a rejected request takes nothing, and later checks are not asked"
    );

    let skip = keyless_policy(MissingKey::Skip, &users, &ips);
    assert!(skip.acquire(&None).is_allowed());
    assert_eq!(ips.peek(&0), 1, "only the per-IP check applies");
    assert_eq!(users.len(), 0);

    let shared = keyless_policy(MissingKey::Shared(u32::MAX), &users, &ips);
    assert!(shared.acquire(&None).is_allowed());
    assert_eq!(users.peek(&u32::MAX), 1, "keyless requests share one key");
}

#[test]
fn a_cost_beyond_the_keys_capacity_ends_the_evaluation_and_gives_back() {
    // The check advertises 10 but its limiter holds 2 (as a per-key quota could).
    let clock = ManualClock::new();
    let ips = limiter(Quota::per_minute(5).unwrap(), &clock);
    let users = limiter(Quota::per_minute(2).unwrap(), &clock);
    let policy: Policy<Request> = Policy::builder()
        .check(Check::new(
            "per-ip",
            ips.clone(),
            Limit::steady(Quota::per_minute(5).unwrap()),
            by_ip,
        ))
        .check(
            Check::new(
                "per-user",
                users,
                Limit::steady(Quota::per_minute(10).unwrap()),
                by_user,
            )
            .cost(3),
        )
        .build()
        .unwrap();
    let verdict = policy.acquire(&Request { user: 1, ip: 9 });
    assert_eq!(verdict.outcome(), Outcome::ExceedsCapacity);
    assert_eq!(verdict.retry_after(), None);
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [1]);
    assert_eq!(ips.peek(&9), 5, "the per-IP token is given back");
}

#[test]
fn a_full_key_table_is_an_overflow_with_a_hint_not_a_denial() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(5).unwrap();
    let users = Arc::new(
        TokenBucket::<u32>::builder(quota)
            .clock(clock.clone())
            .max_keys(1, Overflow::Deny)
            .manual_eviction()
            .build()
            .unwrap(),
    );
    let policy: Policy<Request> = Policy::builder()
        .check(Check::new("per-user", users, Limit::steady(quota), by_user))
        .build()
        .unwrap();
    assert!(policy.acquire(&Request { user: 1, ip: 0 }).is_allowed());
    let verdict = policy.acquire(&Request { user: 2, ip: 0 });
    assert!(
        matches!(verdict.outcome(), Outcome::Overflow { .. }),
        "{verdict:?}"
    );
    // The wait is a hint, never the exact `retry_after` a denial promises.
    assert_eq!(verdict.retry_after(), None);
    assert!(verdict.retry_hint().is_some());
}

/// A store of its own behind the shared-check contract, answering at once: an
/// in-process token bucket.
struct Store(Limiter);

impl SharedLimiter for Store {
    fn acquire<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, SharedDecision> {
        let key = u32::from(key[0]);
        Box::pin(async move { SharedDecision::Decided(self.0.acquire(&key, cost)) })
    }

    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, ()> {
        let key = u32::from(key[0]);
        Box::pin(async move { self.0.refund(&key, cost) })
    }

    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
        let key = u32::from(key[0]);
        Box::pin(async move { Ok(self.0.settle(&key, estimate, actual)) })
    }

    fn fails_open(&self) -> bool {
        false
    }
}

/// A store that is down, whose failure policy allows.
struct Down;

impl SharedLimiter for Down {
    fn acquire<'a>(&'a self, _: &'a [u8], _: u32) -> SharedFuture<'a, SharedDecision> {
        Box::pin(async {
            SharedDecision::Fallback {
                allowed: true,
                error: "store down".into(),
            }
        })
    }

    fn refund<'a>(&'a self, _: &'a [u8], _: u32) -> SharedFuture<'a, ()> {
        Box::pin(async {})
    }

    fn settle<'a>(
        &'a self,
        _: &'a [u8],
        _: u32,
        _: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
        Box::pin(async { Err("store down".into()) })
    }

    fn fails_open(&self) -> bool {
        true
    }
}

#[test]
fn shared_limiters_of_different_types_sit_in_one_collection_and_one_policy() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(2).unwrap();
    let store = limiter(quota, &clock);
    let limiters: Vec<Arc<dyn SharedLimiter>> =
        vec![Arc::new(Store(store.clone())), Arc::new(Down)];
    let mut builder = Policy::builder();
    for (name, limiter) in ["store", "down"].into_iter().zip(limiters) {
        let by_user = |r: &Request| Some(vec![u8::try_from(r.user).unwrap()]);
        builder = builder.check(Check::shared(name, limiter, Limit::steady(quota), by_user));
    }
    let policy: Policy<Request> = builder.build().unwrap();
    // Both checks answer at once, so one poll gives the verdict.
    let ask = |request: &Request| {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::pin!(policy.acquire_async(request)).poll(&mut context) {
            std::task::Poll::Ready(verdict) => verdict,
            std::task::Poll::Pending => panic!("both stores answer at once"),
        }
    };
    let alice = Request { user: 1, ip: 0 };
    for left in [1, 0] {
        let verdict = ask(&alice);
        assert!(verdict.is_allowed(), "{verdict:?}");
        assert_eq!(verdict.remaining(), Some(left));
        // The store that is down is answered by its failure policy.
        assert_eq!(verdict.fell_back().collect::<Vec<_>>(), [1]);
    }
    let verdict = ask(&alice);
    assert!(
        matches!(verdict.outcome(), Outcome::Denied { .. }),
        "{verdict:?}"
    );
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [0]);
    assert_eq!(store.peek(&1), 0);
}

#[test]
fn bad_policies_are_refused_when_built() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(5).unwrap();
    let users = limiter(quota, &clock);
    let build = |name: &str, cost: u32| {
        Policy::<Request>::builder()
            .check(Check::new(name, users.clone(), Limit::steady(quota), by_user).cost(cost))
            .build()
    };
    assert!(build("per-user", 5).is_ok());
    for name in [
        "",
        "per user",
        "quote\"",
        "ünïcode",
        "x".repeat(65).as_str(),
    ] {
        assert_eq!(
            build(name, 1).unwrap_err(),
            PolicyError::InvalidName { name: name.into() }
        );
    }
    assert_eq!(
        build("per-user", 6).unwrap_err(),
        PolicyError::CostExceedsCapacity {
            name: "per-user".into(),
            cost: 6,
            capacity: 5
        }
    );
    let twice = Policy::<Request>::builder()
        .check(Check::new(
            "a",
            users.clone(),
            Limit::steady(quota),
            by_user,
        ))
        .check(Check::new("a", users.clone(), Limit::steady(quota), by_ip))
        .build();
    assert_eq!(
        twice.unwrap_err(),
        PolicyError::DuplicateName { name: "a".into() }
    );
}

/// Threads hammer one user key two ways: through a policy whose per-IP check is
/// soon exhausted (so each of its requests takes from the user key and gives back),
/// and directly. With the clock frozen, tokens are conserved exactly: what was
/// admitted plus what is left is the capacity — a refund that gave back too much, or
/// twice, or not at all, breaks the sum. A watcher checks the key never exceeds its
/// capacity meanwhile.
#[test]
fn concurrent_refunds_never_push_a_key_above_its_capacity() {
    const CAPACITY: u32 = 400;
    let clock = ManualClock::new();
    let (policy, users, _) = policy_with(
        &clock,
        Quota::per_hour(CAPACITY).unwrap(),
        Quota::per_hour(20).unwrap(),
    );
    let admitted = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let request = Request { user: 1, ip: 9 };
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (policy, users, admitted) = (&policy, &users, &admitted);
                s.spawn(move || {
                    for i in 0..20_000 {
                        let allowed = if (i + t) % 3 == 0 {
                            users.try_acquire(&1)
                        } else {
                            policy.acquire(&request).is_allowed()
                        };
                        admitted.fetch_add(u64::from(allowed), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                assert!(users.peek(&1) <= CAPACITY);
            }
        });
        for worker in workers {
            worker.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let admitted = admitted.load(Ordering::Relaxed);
    assert_eq!(admitted + u64::from(users.peek(&1)), u64::from(CAPACITY));
    assert!(admitted >= 20, "the per-IP check admitted its 20");
}

/// With time moving, refunds meet refills: a key never holds more than its capacity
/// and never admits more than its capacity plus the tokens its grid has added.
#[test]
fn refunds_racing_refills_stay_within_the_quota() {
    const CAPACITY: u32 = 50;
    let clock = ManualClock::new();
    let interval = Duration::from_millis(1);
    let (policy, users, _) = policy_with(
        &clock,
        Quota::new(CAPACITY, interval).unwrap(),
        Quota::new(1, Duration::from_secs(1)).unwrap(),
    );
    let admitted = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let request = Request { user: 1, ip: 9 };
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let (policy, users, admitted) = (&policy, &users, &admitted);
                s.spawn(move || {
                    for i in 0..20_000 {
                        let allowed = if (i + t) % 2 == 0 {
                            users.try_acquire(&1)
                        } else {
                            policy.acquire(&request).is_allowed()
                        };
                        admitted.fetch_add(u64::from(allowed), Ordering::Relaxed);
                        assert!(users.peek(&1) <= CAPACITY);
                    }
                })
            })
            .collect();
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                clock.advance(Duration::from_micros(50));
                std::thread::yield_now();
            }
        });
        for worker in workers {
            worker.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let elapsed_intervals = clock_intervals(&clock, interval);
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        admitted <= u64::from(CAPACITY) + elapsed_intervals,
        "admitted {admitted} > {CAPACITY} + {elapsed_intervals} refills"
    );
}

fn clock_intervals(clock: &ManualClock, interval: Duration) -> u64 {
    use turnstile::Clock;
    clock.now() / interval.as_nanos() as u64
}

/// A check built from a limiter with one quota advertises that quota and how it
/// comes back, as one told the same limit by hand.
#[test]
fn a_check_from_its_limiter_advertises_the_limiters_quota() {
    use turnstile::policy::KnownLimit;
    use turnstile::{FixedWindow, Gcra, SlidingLog, SlidingWindowCounter};
    let quota = Quota::per_minute(10).unwrap();
    let steady = Limit::steady(quota);
    let windowed = Limit::windowed(quota);
    assert_eq!(TokenBucket::<u64>::new(quota).unwrap().limit(), steady);
    assert_eq!(Gcra::<u64>::new(quota).unwrap().limit(), steady);
    assert_eq!(FixedWindow::<u64>::new(quota).unwrap().limit(), windowed);
    assert_eq!(
        SlidingWindowCounter::<u64>::new(quota).unwrap().limit(),
        windowed
    );
    assert_eq!(SlidingLog::<u64>::new(quota).unwrap().limit(), windowed);
    assert_ne!(steady, windowed);
}

/// The limit read off the limiter is the one the policy holds its checks to: a cost
/// above the limiter's capacity is refused when the policy is built.
#[test]
fn a_check_from_its_limiter_is_held_to_the_limiters_capacity() {
    let users = Arc::new(TokenBucket::<u64>::new(Quota::per_minute(5).unwrap()).unwrap());
    let check =
        |cost| Check::from_limiter("per-user", users.clone(), |r: &u64| Some(*r)).cost(cost);
    assert!(Policy::<u64>::builder().check(check(5)).build().is_ok());
    assert_eq!(
        Policy::<u64>::builder()
            .check(check(6))
            .build()
            .unwrap_err(),
        PolicyError::CostExceedsCapacity {
            name: "per-user".into(),
            cost: 6,
            capacity: 5
        }
    );
}
