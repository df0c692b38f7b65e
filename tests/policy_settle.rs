//! Reserve, then settle, in a policy: each settled check settles its own share, at
//! its own estimate, and only what the request kept; the checks that are not settled
//! keep their estimate.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use turnstile::policy::{
    Check, Limit, MissingKey, Outcome, Policy, SharedFuture, SharedLimiter, Verdict,
};
use turnstile::{
    Decision, ManualClock, Quota, Settlement, SharedDecision, SharedError, TokenBucket,
};

/// A prompt: who sends it, and how long it is.
#[derive(Clone, Debug)]
struct Prompt {
    user: Option<u32>,
    text: String,
}

fn prompt(user: u32, bytes: usize) -> Prompt {
    Prompt {
        user: Some(user),
        text: "x".repeat(bytes),
    }
}

type Limiter = Arc<TokenBucket<u32, ManualClock>>;

fn limiter(quota: Quota, clock: &ManualClock) -> Limiter {
    Arc::new(TokenBucket::with_clock(quota, clock.clone()).unwrap())
}

fn by_user(p: &Prompt) -> Option<u32> {
    p.user
}

/// One token per byte of prompt: the estimate.
fn bytes(p: &Prompt) -> u32 {
    u32::try_from(p.text.len()).unwrap()
}

/// 100 tokens, one back a second.
fn tokens_quota() -> Quota {
    Quota::new(100, Duration::from_secs(1)).unwrap()
}

/// A tokens check estimated from the prompt and settled, beside a requests check
/// that is not.
fn tokens_and_requests(clock: &ManualClock) -> (Policy<Prompt>, Limiter, Limiter) {
    let tokens = limiter(tokens_quota(), clock);
    let requests = limiter(Quota::per_second(10).unwrap(), clock);
    let policy = Policy::builder()
        .check(
            Check::from_limiter("tokens", tokens.clone(), by_user)
                .cost_with(bytes)
                .settled(),
        )
        .check(Check::from_limiter("requests", requests.clone(), by_user))
        .build()
        .unwrap();
    (policy, tokens, requests)
}

/// The verdict or settlement of a future that answers at once.
fn now<T>(future: impl Future<Output = T>) -> T {
    let mut context = Context::from_waker(Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("every store here answers at once"),
    }
}

#[test]
fn a_settled_check_gives_back_what_was_unused_and_the_others_keep_their_estimate() {
    let clock = ManualClock::new();
    let (policy, tokens, requests) = tokens_and_requests(&clock);
    let request = prompt(1, 40);
    let verdict = policy.acquire(&request);
    assert!(verdict.is_allowed(), "{verdict:?}");
    assert_eq!(tokens.peek(&1), 60, "the estimate, 40, is taken");

    let settlement = policy.settle(&request, &verdict, 15);
    assert_eq!(
        settlement,
        Settlement {
            refunded: 25,
            charged: 0,
            forgiven: 0
        }
    );
    assert_eq!(tokens.peek(&1), 85);
    // The requests check is not settled: it keeps its 1.
    assert_eq!(requests.peek(&1), 9);
}

#[test]
fn a_request_that_cost_more_drives_its_key_into_debt_counted_by_the_next_wait() {
    let clock = ManualClock::new();
    let (policy, tokens, _) = tokens_and_requests(&clock);
    let request = prompt(1, 100);
    let verdict = policy.acquire(&request);
    assert!(verdict.is_allowed(), "{verdict:?}");
    assert_eq!(tokens.peek(&1), 0);

    // 500 used against 100 estimated: 400 more, of which the debt cap (one capacity,
    // the default) lets 100 be charged and forgives the rest.
    let settlement = policy.settle(&request, &verdict, 500);
    assert_eq!(
        settlement,
        Settlement {
            refunded: 0,
            charged: 100,
            forgiven: 300
        }
    );
    // The key owes 100: a one-token prompt waits for 101 refills of one second.
    let next = policy.acquire(&prompt(1, 1));
    assert_eq!(
        next.outcome(),
        Outcome::Denied {
            retry_after: Duration::from_secs(101)
        }
    );
    assert_eq!(next.refused().collect::<Vec<_>>(), [0]);
    clock.advance(Duration::from_secs(100));
    assert!(!policy.acquire(&prompt(1, 1)).is_allowed());
    clock.advance(Duration::from_secs(1));
    assert!(policy.acquire(&prompt(1, 1)).is_allowed());
}

#[test]
fn a_refused_request_settles_nothing() {
    let clock = ManualClock::new();
    let (policy, tokens, requests) = tokens_and_requests(&clock);
    // The requests check refuses the 11th request; the tokens it took go back.
    for _ in 0..10 {
        assert!(policy.acquire(&prompt(1, 1)).is_allowed());
    }
    let request = prompt(1, 5);
    let refused = policy.acquire(&request);
    assert!(!refused.is_allowed(), "{refused:?}");
    assert_eq!(tokens.peek(&1), 90);

    assert_eq!(policy.settle(&request, &refused, 80), Settlement::default());
    assert_eq!(tokens.peek(&1), 90);
    assert_eq!(requests.peek(&1), 0);
}

#[test]
fn an_estimate_above_the_capacity_is_refused_when_made() {
    let clock = ManualClock::new();
    let (policy, tokens, _) = tokens_and_requests(&clock);
    let verdict = policy.acquire(&prompt(1, 101));
    assert_eq!(verdict.outcome(), Outcome::ExceedsCapacity);
    assert_eq!(tokens.peek(&1), 100);
}

/// A login attempt, and whether it failed (known only once it was tried).
struct Login {
    user: u32,
}

#[test]
fn counting_only_failures_is_an_estimate_of_zero() {
    let clock = ManualClock::new();
    let failures = limiter(Quota::per_minute(3).unwrap(), &clock);
    let policy: Policy<Login> = Policy::builder()
        .check(
            Check::from_limiter("failed-logins", failures.clone(), |l: &Login| Some(l.user))
                .cost(0)
                .settled(),
        )
        .build()
        .unwrap();
    let login = Login { user: 1 };
    let attempt = |failed: bool| {
        let verdict = policy.acquire(&login);
        if verdict.is_allowed() {
            let _ = policy.settle(&login, &verdict, u32::from(failed));
        }
        verdict
    };
    // Successes cost nothing, however many.
    for _ in 0..10 {
        assert!(attempt(false).is_allowed());
    }
    assert_eq!(failures.peek(&1), 3);
    // Each failure is charged: three use the quota up, and the fourth is still tried
    // (the key has nothing left but owes nothing, and an estimate of 0 fits) and
    // charged into debt.
    for _ in 0..3 {
        assert!(attempt(true).is_allowed());
    }
    assert_eq!(failures.peek(&1), 0);
    let verdict = policy.acquire(&login);
    assert!(verdict.is_allowed());
    assert_eq!(
        policy.settle(&login, &verdict, 1),
        Settlement {
            refunded: 0,
            charged: 1,
            forgiven: 0
        }
    );
    // The key owes 1: it has less than nothing, so even an estimate of 0 is refused,
    // until the debt is repaid (one refill of 20 s). A request that costs something
    // waits for the debt and its own unit, 2 refills.
    assert_eq!(
        attempt(false).outcome(),
        Outcome::Denied {
            retry_after: Duration::from_secs(20)
        }
    );
    assert_eq!(
        failures.acquire(&1, 1),
        Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_secs(40)
        }
    );
    // Repaid: the next attempt is tried, and its failure owes again.
    clock.advance(Duration::from_secs(20));
    assert!(attempt(true).is_allowed());
    assert!(!attempt(false).is_allowed());
}

#[test]
fn an_estimate_of_one_settled_at_zero_for_successes_refuses_past_the_failures_quota() {
    let clock = ManualClock::new();
    let failures = limiter(Quota::per_minute(3).unwrap(), &clock);
    let policy: Policy<Login> = Policy::builder()
        .check(
            Check::from_limiter("failed-logins", failures.clone(), |l: &Login| Some(l.user))
                .settled(),
        )
        .build()
        .unwrap();
    let login = Login { user: 1 };
    let attempt = |failed: bool| {
        let verdict = policy.acquire(&login);
        if verdict.is_allowed() {
            let _ = policy.settle(&login, &verdict, u32::from(failed));
        }
        verdict
    };
    for _ in 0..10 {
        assert!(attempt(false).is_allowed());
    }
    for _ in 0..3 {
        assert!(attempt(true).is_allowed());
    }
    // The fourth attempt finds no unit to hold while it is tried, until one refills.
    let refused = attempt(false);
    assert_eq!(
        refused.outcome(),
        Outcome::Denied {
            retry_after: Duration::from_secs(20)
        }
    );
    assert_eq!(failures.peek(&1), 0);
    clock.advance(Duration::from_secs(20));
    assert!(attempt(false).is_allowed());
}

#[test]
fn a_check_that_skipped_the_request_settles_nothing_and_a_shared_key_settles() {
    let clock = ManualClock::new();
    let build = |missing: MissingKey<u32>, tokens: &Limiter| -> Policy<Prompt> {
        Policy::builder()
            .check(
                Check::from_limiter("tokens", tokens.clone(), by_user)
                    .cost_with(bytes)
                    .settled()
                    .on_missing_key(missing),
            )
            .build()
            .unwrap()
    };
    let anonymous = Prompt {
        user: None,
        text: "x".repeat(10),
    };

    let tokens = limiter(tokens_quota(), &clock);
    let skipping = build(MissingKey::Skip, &tokens);
    let verdict = skipping.acquire(&anonymous);
    assert!(verdict.is_allowed());
    assert_eq!(
        skipping.settle(&anonymous, &verdict, 60),
        Settlement::default()
    );
    assert_eq!(tokens.peek(&0), 100);

    let sharing = build(MissingKey::Shared(0), &tokens);
    let verdict = sharing.acquire(&anonymous);
    assert_eq!(tokens.peek(&0), 90);
    assert_eq!(sharing.settle(&anonymous, &verdict, 60).charged, 50);
    assert_eq!(tokens.peek(&0), 40);
}

#[test]
fn a_dry_run_check_settles_only_when_the_request_would_have_gone_ahead() {
    let clock = ManualClock::new();
    let tokens = limiter(tokens_quota(), &clock);
    let requests = limiter(Quota::per_second(1).unwrap(), &clock);
    let policy: Policy<Prompt> = Policy::builder()
        .check(
            Check::from_limiter("tokens", tokens.clone(), by_user)
                .cost_with(bytes)
                .settled()
                .dry_run(),
        )
        .check(Check::from_limiter("requests", requests.clone(), by_user))
        .build()
        .unwrap();

    // Every check passed: the dry-run check's key holds what it would enforced.
    let request = prompt(1, 10);
    let verdict = policy.acquire(&request);
    assert!(verdict.if_enforced().is_allowed());
    assert_eq!(policy.settle(&request, &verdict, 30).charged, 20);
    assert_eq!(tokens.peek(&1), 70);

    // The enforced check refuses: nothing was kept, nothing is settled.
    let request = prompt(1, 10);
    let verdict = policy.acquire(&request);
    assert!(!verdict.is_allowed());
    assert_eq!(policy.settle(&request, &verdict, 30), Settlement::default());
    assert_eq!(tokens.peek(&1), 70);
}

#[test]
fn a_dry_run_check_that_would_have_refused_is_not_settled() {
    let clock = ManualClock::new();
    let tokens = limiter(tokens_quota(), &clock);
    let policy: Policy<Prompt> = Policy::builder()
        .check(
            Check::from_limiter("tokens", tokens.clone(), by_user)
                .cost_with(bytes)
                .settled()
                .dry_run(),
        )
        .build()
        .unwrap();
    let request = prompt(1, 100);
    let verdict = policy.acquire(&request);
    assert_eq!(
        policy.settle(&request, &verdict, 100),
        Settlement::default()
    );
    // The key is empty: the next request would be refused, and goes ahead anyway.
    let request = prompt(1, 10);
    let verdict = policy.acquire(&request);
    assert!(verdict.is_allowed());
    assert!(!verdict.if_enforced().is_allowed());
    assert_eq!(policy.settle(&request, &verdict, 0), Settlement::default());
    assert_eq!(tokens.peek(&1), 0);
}

#[test]
fn a_policy_says_whether_it_settles_and_shows_its_costs() {
    let clock = ManualClock::new();
    let (policy, _, _) = tokens_and_requests(&clock);
    assert!(policy.settles());
    assert_eq!(
        format!("{policy:?}"),
        "[tokens: cost per request of Limit { quota: Quota { capacity: 100, \
         refill_every: 1s }, regain: Steady }, settled, requests: cost 1 of Limit { \
         quota: Quota { capacity: 10, refill_every: 100ms }, regain: Steady }]"
    );
    let plain: Policy<Prompt> = Policy::builder()
        .check(Check::from_limiter(
            "requests",
            limiter(Quota::per_second(10).unwrap(), &clock),
            by_user,
        ))
        .build()
        .unwrap();
    assert!(!plain.settles());
}

/// A store of its own behind the shared-check contract, answering at once: an
/// in-process token bucket keyed by the key's first byte. With `settles` false, it
/// decides but its settlements never reach it.
struct Store {
    limiter: Limiter,
    settles: bool,
}

impl SharedLimiter for Store {
    fn acquire<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, SharedDecision> {
        let key = u32::from(key[0]);
        Box::pin(async move { SharedDecision::Decided(self.limiter.acquire(&key, cost)) })
    }

    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, ()> {
        let key = u32::from(key[0]);
        Box::pin(async move { self.limiter.refund(&key, cost) })
    }

    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
        let key = u32::from(key[0]);
        Box::pin(async move {
            if self.settles {
                Ok(self.limiter.settle(&key, estimate, actual))
            } else {
                Err("the store went down after it decided".into())
            }
        })
    }

    fn fails_open(&self) -> bool {
        false
    }
}

/// A store that is down, whose failure policy allows; asked to settle, it records
/// that it was.
#[derive(Default)]
struct Down {
    asked_to_settle: std::sync::atomic::AtomicBool,
}

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
        self.asked_to_settle
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Box::pin(async { Err("store down".into()) })
    }

    fn fails_open(&self) -> bool {
        true
    }
}

fn byte_key(p: &Prompt) -> Option<Vec<u8>> {
    p.user.map(|user| vec![u8::try_from(user).unwrap()])
}

/// A shared tokens check on `store`, a fallen-back one on `down`, and an in-process
/// tokens check: all three settled.
fn shared_policy(store: Store, down: Arc<Down>, local: &Limiter) -> Policy<Prompt> {
    let quota = tokens_quota();
    Policy::builder()
        .check(
            Check::shared("shared", Arc::new(store), Limit::steady(quota), byte_key)
                .cost_with(bytes)
                .settled(),
        )
        .check(
            Check::shared("down", down, Limit::steady(quota), byte_key)
                .cost_with(bytes)
                .settled(),
        )
        .check(
            Check::from_limiter("local", local.clone(), by_user)
                .cost_with(bytes)
                .settled(),
        )
        .build()
        .unwrap()
}

fn acquired(policy: &Policy<Prompt>, request: &Prompt) -> Verdict {
    let verdict = now(policy.acquire_async(request));
    assert!(verdict.is_allowed(), "{verdict:?}");
    assert_eq!(verdict.fell_back().collect::<Vec<_>>(), [1]);
    verdict
}

#[test]
fn shared_checks_settle_when_awaited_and_a_fallback_is_never_settled() {
    let clock = ManualClock::new();
    let (shared, local) = (
        limiter(tokens_quota(), &clock),
        limiter(tokens_quota(), &clock),
    );
    let down = Arc::new(Down::default());
    let store = Store {
        limiter: shared.clone(),
        settles: true,
    };
    let policy = shared_policy(store, down.clone(), &local);
    let request = prompt(1, 30);
    let verdict = acquired(&policy, &request);
    assert_eq!((shared.peek(&1), local.peek(&1)), (70, 70));

    // Without waiting, only the in-process check settles.
    assert_eq!(policy.settle(&request, &verdict, 10).refunded, 20);
    assert_eq!((shared.peek(&1), local.peek(&1)), (70, 90));

    let request = prompt(1, 30);
    let verdict = acquired(&policy, &request);
    let settled = now(policy.settle_async(&request, &verdict, 50)).unwrap();
    // Each of the two checks that decided charges its own 20; the fallback is not asked.
    assert_eq!(settled.charged, 40);
    assert_eq!((shared.peek(&1), local.peek(&1)), (20, 40));
    assert!(
        !down
            .asked_to_settle
            .load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn a_settlement_that_does_not_reach_its_store_is_an_error_and_the_others_settle() {
    let clock = ManualClock::new();
    let (shared, local) = (
        limiter(tokens_quota(), &clock),
        limiter(tokens_quota(), &clock),
    );
    let store = Store {
        limiter: shared.clone(),
        settles: false,
    };
    let policy = shared_policy(store, Arc::default(), &local);
    let request = prompt(1, 30);
    let verdict = acquired(&policy, &request);
    let error = now(policy.settle_async(&request, &verdict, 50)).unwrap_err();
    assert_eq!(error.to_string(), "the store went down after it decided");
    assert_eq!((shared.peek(&1), local.peek(&1)), (70, 50));
}
