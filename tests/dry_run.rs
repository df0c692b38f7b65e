//! Dry run: checks that are asked and counted but never refuse. Against a reference
//! that decides each check first, then takes from the enforced checks when every
//! enforced check allows and from the dry-run ones when every check allows; and the
//! rules a policy with dry-run checks must follow.

mod common;

use common::{Reference, ms};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use turnstile::policy::{Binding, Check, Limit, MissingKey, Outcome, Policy, PolicyError};
use turnstile::{Decision, ManualClock, Quota, TokenBucket};

type Limiter = Arc<TokenBucket<u32, ManualClock>>;

fn limiter(quota: Quota, clock: &ManualClock) -> Limiter {
    Arc::new(TokenBucket::with_clock(quota, clock.clone()).unwrap())
}

/// A request: who sends it, and from where.
#[derive(Clone, Copy, Debug)]
struct Request {
    user: u32,
    ip: u32,
}

fn by_user(r: &Request) -> Option<u32> {
    Some(r.user)
}

fn by_ip(r: &Request) -> Option<u32> {
    Some(r.ip)
}

/// One check of the property test.
#[derive(Clone, Copy, Debug)]
struct CheckSpec {
    quota: Quota,
    cost: u32,
    per_user: bool,
    dry_run: bool,
}

fn check_spec() -> impl Strategy<Value = CheckSpec> {
    (
        1u32..=4,
        1u64..=1000,
        any::<bool>(),
        any::<u32>(),
        any::<bool>(),
    )
        .prop_map(
            |(capacity, interval_ms, per_user, cost, dry_run)| CheckSpec {
                quota: Quota::new(capacity, ms(interval_ms)).unwrap(),
                cost: 1 + cost % capacity,
                per_user,
                dry_run,
            },
        )
}

/// What a set of checks decides: the outcome, the reported check, the refusing checks.
type View = (Outcome, Option<Binding>, Vec<usize>);

/// The verdict of the checks in `decisions` for which `counts` holds: allowed with the
/// fewest units left if none denied, else denied with the longest wait (the first
/// such check on a tie, as the policy documents).
fn view(decisions: &[Decision], counts: impl Fn(usize) -> bool) -> View {
    let considered = || (0..decisions.len()).filter(|&i| counts(i));
    let refused: Vec<usize> = considered()
        .filter(|&i| !decisions[i].is_allowed())
        .collect();
    if refused.is_empty() {
        let tightest = considered().fold(None::<Binding>, |best, i| match best {
            Some(b) if b.decision.remaining() <= decisions[i].remaining() => Some(b),
            _ => Some(Binding {
                check: i,
                decision: decisions[i],
            }),
        });
        return (Outcome::Allowed, tightest, refused);
    }
    let longest = refused[1..].iter().fold(refused[0], |best, &i| {
        if decisions[i].retry_after() > decisions[best].retry_after() {
            i
        } else {
            best
        }
    });
    let retry_after = decisions[longest].retry_after().unwrap();
    let binding = Binding {
        check: longest,
        decision: decisions[longest],
    };
    (Outcome::Denied { retry_after }, Some(binding), refused)
}

/// The reference: decides every check without taking; then an enforced check takes
/// if every enforced check allowed (the request is served), a dry-run check if every
/// check allowed (the request would have been). Returns the enforced view and the
/// view with every check enforced.
fn reference_acquire(
    specs: &[CheckSpec],
    models: &mut [Reference],
    request: Request,
    now: u64,
) -> (View, View) {
    let key = |spec: &CheckSpec| {
        if spec.per_user {
            request.user
        } else {
            request.ip
        }
    };
    let decisions: Vec<Decision> = specs
        .iter()
        .zip(models.iter_mut())
        .map(|(spec, model)| {
            let available = model.peek(key(spec), now);
            if available < spec.cost {
                model.acquire(key(spec), now, spec.cost) // a denial: changes nothing
            } else {
                Decision::Allowed {
                    remaining: available - spec.cost,
                }
            }
        })
        .collect();
    let enforced = view(&decisions, |i| !specs[i].dry_run);
    let all = view(&decisions, |_| true);
    let served = enforced.0 == Outcome::Allowed;
    let would_be = all.0 == Outcome::Allowed;
    for (spec, model) in specs.iter().zip(models.iter_mut()) {
        if (spec.dry_run && would_be) || (!spec.dry_run && served) {
            assert!(model.acquire(key(spec), now, spec.cost).is_allowed());
        }
    }
    (enforced, all)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Decision for decision and key for key, a policy with dry-run checks equals the
    /// reference: the enforced checks alone decide, `if_enforced` is the verdict of
    /// all the checks, and each check keeps its take only when its world serves the
    /// request.
    #[test]
    fn dry_run_checks_never_refuse_and_hold_what_they_would_if_enforced(
        specs in prop::collection::vec(check_spec(), 1..=4),
        requests in prop::collection::vec((0u64..1500, 0u32..3, 0u32..3), 1..60),
    ) {
        let clock = ManualClock::new();
        let limiters: Vec<Limiter> = specs.iter().map(|s| limiter(s.quota, &clock)).collect();
        let mut builder = Policy::builder();
        for (i, (spec, limiter)) in specs.iter().zip(&limiters).enumerate() {
            let extractor = if spec.per_user { by_user } else { by_ip };
            let mut check = Check::new(format!("c{i}"), limiter.clone(), Limit::steady(spec.quota), extractor)
                .cost(spec.cost);
            if spec.dry_run {
                check = check.dry_run();
            }
            builder = builder.check(check);
        }
        let policy: Policy<Request> = builder.build().unwrap();
        let mut models: Vec<Reference> = specs.iter().map(|s| Reference::new(s.quota)).collect();

        let mut now = 0;
        for (advance_ms, user, ip) in requests {
            now += advance_ms * 1_000_000;
            clock.set(Duration::from_nanos(now));
            let request = Request { user, ip };
            let verdict = policy.acquire(&request);
            let (enforced, all) = reference_acquire(&specs, &mut models, request, now);
            prop_assert_eq!(verdict.outcome(), enforced.0);
            prop_assert_eq!(verdict.binding(), enforced.1);
            prop_assert_eq!(verdict.refused().collect::<Vec<_>>(), enforced.2.clone());
            let if_enforced = verdict.if_enforced();
            prop_assert_eq!(if_enforced.outcome(), all.0);
            prop_assert_eq!(if_enforced.binding(), all.1);
            prop_assert_eq!(if_enforced.refused().collect::<Vec<_>>(), all.2.clone());
            let dry_refusals: Vec<usize> = all.2.iter().copied().filter(|&i| specs[i].dry_run).collect();
            prop_assert_eq!(verdict.refused_in_dry_run().collect::<Vec<_>>(), dry_refusals);
            for (limiter, model) in limiters.iter().zip(&models) {
                for key in 0..3 {
                    prop_assert_eq!(limiter.peek(&key), model.peek(key, now), "tokens of key {}", key);
                }
            }
        }
    }
}

#[test]
fn a_whole_policy_in_dry_run_refuses_nothing_and_reports_what_it_would() {
    let clock = ManualClock::new();
    let quota = Quota::new(2, ms(100)).unwrap();
    let (users, ips) = (limiter(quota, &clock), limiter(quota, &clock));
    let policy: Policy<Request> = Policy::builder()
        .check(Check::new(
            "per-user",
            users.clone(),
            Limit::steady(quota),
            by_user,
        ))
        .check(Check::new(
            "per-ip",
            ips.clone(),
            Limit::steady(quota),
            by_ip,
        ))
        .dry_run()
        .build()
        .unwrap();
    assert!(policy.is_dry_run(0) && policy.is_dry_run(1));
    // Two users behind one IP: the IP's allowance runs out first.
    let alice = Request { user: 1, ip: 9 };
    let bob = Request { user: 2, ip: 9 };
    for request in [alice, bob] {
        let verdict = policy.acquire(&request);
        assert!(verdict.is_allowed() && verdict.if_enforced().is_allowed());
    }
    let verdict = policy.acquire(&alice);
    assert!(verdict.is_allowed(), "a dry run refuses nothing");
    assert_eq!(verdict.refused().count(), 0);
    assert_eq!(verdict.binding(), None, "no enforced check reports");
    assert_eq!(
        verdict.if_enforced().outcome(),
        Outcome::Denied {
            retry_after: ms(100)
        }
    );
    assert_eq!(verdict.refused_in_dry_run().collect::<Vec<_>>(), [1]);
    // The request the dry run would have refused took nothing: alice's token is back.
    assert_eq!((users.peek(&1), ips.peek(&9)), (1, 0));
}

#[test]
fn an_enforced_refusal_gives_back_what_dry_run_checks_took() {
    let clock = ManualClock::new();
    let tight = Quota::new(1, ms(100)).unwrap();
    let loose = Quota::new(5, ms(100)).unwrap();
    let (users, trial) = (limiter(tight, &clock), limiter(loose, &clock));
    let policy: Policy<Request> = Policy::builder()
        .check(Check::new("trial", trial.clone(), Limit::steady(loose), by_ip).dry_run())
        .check(Check::new(
            "per-user",
            users.clone(),
            Limit::steady(tight),
            by_user,
        ))
        .build()
        .unwrap();
    let request = Request { user: 1, ip: 9 };
    assert!(policy.acquire(&request).is_allowed());
    assert_eq!(
        trial.peek(&9),
        4,
        "served: the dry-run check keeps its take"
    );
    let verdict = policy.acquire(&request);
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [1]);
    assert_eq!(
        trial.peek(&9),
        4,
        "refused: the dry-run check gives its take back"
    );
    assert_eq!(verdict.refused_in_dry_run().count(), 0);
}

#[test]
fn a_dry_run_check_that_can_never_pass_does_not_end_the_evaluation() {
    let clock = ManualClock::new();
    let quota = Quota::new(3, ms(100)).unwrap();
    let (strict, users) = (limiter(quota, &clock), limiter(quota, &clock));
    // Validated against the advertised capacity (10), the dry-run check's real
    // limiter holds 3: a cost of 5 can never pass it.
    let advertised = Limit::steady(Quota::new(10, ms(100)).unwrap());
    let policy: Policy<Request> = Policy::builder()
        .check(
            Check::new("strict", strict.clone(), advertised, by_ip)
                .cost(5)
                .dry_run(),
        )
        .check(Check::new(
            "per-user",
            users.clone(),
            Limit::steady(quota),
            by_user,
        ))
        .build()
        .unwrap();
    let verdict = policy.acquire(&Request { user: 1, ip: 9 });
    assert!(verdict.is_allowed());
    assert_eq!(verdict.if_enforced().outcome(), Outcome::ExceedsCapacity);
    // Enforced, the first check would have ended the evaluation: the second is not
    // among the refusing checks of that view.
    assert_eq!(verdict.if_enforced().refused().collect::<Vec<_>>(), [0]);
    assert_eq!(verdict.refused_in_dry_run().collect::<Vec<_>>(), [0]);
    assert_eq!(
        users.peek(&1),
        2,
        "the enforced check was asked and kept its take"
    );
}

#[test]
fn a_dry_run_check_without_a_key_is_reported_not_refused() {
    let clock = ManualClock::new();
    let quota = Quota::new(3, ms(100)).unwrap();
    let (tenants, users) = (limiter(quota, &clock), limiter(quota, &clock));
    let no_tenant = |_: &Request| None::<u32>;
    let policy: Policy<Request> = Policy::builder()
        .check(
            Check::new("per-tenant", tenants, Limit::steady(quota), no_tenant)
                .on_missing_key(MissingKey::Reject)
                .dry_run(),
        )
        .check(Check::new("per-user", users, Limit::steady(quota), by_user))
        .build()
        .unwrap();
    let verdict = policy.acquire(&Request { user: 1, ip: 9 });
    assert!(verdict.is_allowed());
    assert_eq!(verdict.if_enforced().outcome(), Outcome::MissingKey);
    assert_eq!(verdict.if_enforced().refused().collect::<Vec<_>>(), [0]);
    assert_eq!(verdict.refused_in_dry_run().collect::<Vec<_>>(), [0]);
}

#[test]
fn a_dry_run_check_may_not_share_an_enforced_checks_limiter() {
    let clock = ManualClock::new();
    let quota = Quota::new(3, ms(100)).unwrap();
    let shared = limiter(quota, &clock);
    let built: Result<Policy<Request>, _> = Policy::builder()
        .check(Check::new(
            "per-user",
            shared.clone(),
            Limit::steady(quota),
            by_user,
        ))
        .check(Check::new("trial", shared.clone(), Limit::steady(quota), by_ip).dry_run())
        .build();
    assert_eq!(
        built.unwrap_err(),
        PolicyError::DryRunSharesLimiter {
            name: "trial".into(),
            enforced: "per-user".into()
        }
    );
    // Two dry-run checks may share one, as may a whole policy in dry run: no enforced
    // allowance is at stake.
    let whole: Result<Policy<Request>, _> = Policy::builder()
        .check(Check::new(
            "per-user",
            shared.clone(),
            Limit::steady(quota),
            by_user,
        ))
        .check(Check::new("per-ip", shared, Limit::steady(quota), by_ip))
        .dry_run()
        .build();
    assert!(whole.is_ok());
}
