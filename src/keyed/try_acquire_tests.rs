//! A keyed limiter's `try_acquire` takes its own hot path (the algorithm asked only
//! whether, [`Rules::admit`](crate::algorithm::Rules::admit)) and falls back
//! to `acquire`'s slow path for everything else: checked here against
//! `acquire(key, 1).is_allowed()` on twin limiters — built alike on one manual clock,
//! driven by the same script, one answering by `try_acquire`, the other by `acquire` —
//! for every algorithm, per-key quotas, `set_quota` in the middle of a script,
//! forgetting, a clock that steps back, and the key cap with either overflow policy.

use super::KeyedLimiter;
use crate::algorithm::Algorithm;
use crate::builder::Builder;
use crate::fixed_window::FixedWindowRules;
use crate::gcra::GcraRules;
use crate::sliding_log::SlidingLogRules;
use crate::sliding_window::SlidingWindowRules;
use crate::token_bucket::TokenBucketRules;
use crate::{Clock, ManualClock, Overflow, Quota};
use proptest::prelude::*;
use std::time::Duration;

/// The keys a script asks for: few, so that the key cap (2) is met and keys return.
const KEYS: u64 = 4;

/// One step of a script, taken on both twins alike.
#[derive(Clone, Debug)]
enum Step {
    /// The clock moves on `advance_ms`, then a request for one unit for `key`.
    Ask { key: u64, advance_ms: u64 },
    /// A sweep: every key forgettable now is forgotten (margin 0).
    Sweep,
    /// The clock steps back `back_ms` (not below zero): a lagging reading, as a
    /// thread that read the clock before a sweep and asks after it.
    Lag { back_ms: u64 },
    /// Every key gets `quota` from now on (limiters with per-key quotas only; the
    /// others skip it).
    SetQuota(Quota),
}

/// How the twins are built: their quota, and their key cap if any.
#[derive(Clone, Debug)]
struct Setup {
    quota: Quota,
    cap: Option<(usize, Overflow)>,
}

fn any_quota() -> impl Strategy<Value = Quota> {
    (1..=4u32, 1..=1_000u64)
        .prop_map(|(capacity, ms)| Quota::new(capacity, Duration::from_millis(ms)).unwrap())
}

fn any_setup() -> impl Strategy<Value = Setup> {
    let cap = prop_oneof![
        2 => Just(None),
        1 => Just(Some((2, Overflow::Deny))),
        1 => any_quota().prop_map(|quota| Some((2, Overflow::Shared(quota)))),
    ];
    (any_quota(), cap).prop_map(|(quota, cap)| Setup { quota, cap })
}

/// Mostly requests, half of them at the same instant as the one before (so keys
/// drain), with sweeps and reconfigurations among them.
fn any_script() -> impl Strategy<Value = Vec<Step>> {
    let advance_ms = prop_oneof![1 => Just(0u64), 1 => 0..=1_500u64];
    let step = prop_oneof![
        12 => (0..KEYS, advance_ms).prop_map(|(key, advance_ms)| Step::Ask { key, advance_ms }),
        1 => Just(Step::Sweep),
        1 => any_quota().prop_map(Step::SetQuota),
        1 => (0..=1_500u64).prop_map(|back_ms| Step::Lag { back_ms }),
    ];
    proptest::collection::vec(step, 1..60)
}

/// A builder for one twin: `setup` on `clock`, sweeps only when a script asks.
fn builder<A: Algorithm<u64>>(
    setup: &Setup,
    clock: &ManualClock,
) -> Builder<KeyedLimiter<A, u64>, ManualClock> {
    let builder = KeyedLimiter::<A, u64>::builder(setup.quota)
        .clock(clock.clone())
        .eviction_margin(Duration::ZERO)
        .manual_eviction();
    match setup.cap {
        Some((max_keys, overflow)) => builder.max_keys(max_keys, overflow),
        None => builder,
    }
}

/// The twins from `make`, driven by `script`: every request answered alike, and
/// afterwards every key's allowance and the key counts alike. `set_quota`
/// reconfigures a twin (a no-op for limiters without per-key quotas). Returns the
/// answers, for the tests that check them too.
fn twins_agree<A: Algorithm<u64>>(
    make: impl Fn(&ManualClock) -> KeyedLimiter<A, u64, ManualClock>,
    set_quota: impl Fn(&KeyedLimiter<A, u64, ManualClock>, Quota),
    script: &[Step],
) -> Vec<bool> {
    let clock = ManualClock::new();
    let (quick, full) = (make(&clock), make(&clock));
    let mut answers = Vec::new();
    for (i, step) in script.iter().enumerate() {
        match *step {
            Step::Ask { key, advance_ms } => {
                clock.advance(Duration::from_millis(advance_ms));
                let answer = quick.try_acquire(&key);
                assert_eq!(
                    answer,
                    full.acquire(&key, 1).is_allowed(),
                    "step {i}: {step:?} in {script:?}"
                );
                answers.push(answer);
            }
            Step::Sweep => assert_eq!(quick.evict_idle(), full.evict_idle(), "step {i}"),
            Step::Lag { back_ms } => {
                let now = Clock::now(&clock);
                clock.set(Duration::from_nanos(
                    now.saturating_sub(back_ms * 1_000_000),
                ));
            }
            Step::SetQuota(quota) => {
                set_quota(&quick, quota);
                set_quota(&full, quota);
            }
        }
        for key in 0..KEYS {
            assert_eq!(
                quick.peek(&key),
                full.peek(&key),
                "key {key} after step {i}"
            );
        }
        assert_eq!(quick.stats(), full.stats(), "after step {i}");
    }
    answers
}

/// No reconfiguration: the limiter has one quota for good.
fn fixed<A: Algorithm<u64>>(_: &KeyedLimiter<A, u64, ManualClock>, _: Quota) {}

/// Even keys get `even`, odd keys the setup's quota.
fn per_key(setup: &Setup, even: Quota) -> impl Fn(&u64) -> Quota + Send + Sync + 'static {
    let odd = setup.quota;
    move |key| if key % 2 == 0 { even } else { odd }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every algorithm with one quota, with or without a key cap.
    #[test]
    fn try_acquire_answers_as_acquire_one(setup in any_setup(), script in any_script()) {
        twins_agree(|clock| builder::<TokenBucketRules>(&setup, clock).build().unwrap(), fixed, &script);
        twins_agree(|clock| builder::<FixedWindowRules>(&setup, clock).build().unwrap(), fixed, &script);
        twins_agree(|clock| builder::<SlidingLogRules>(&setup, clock).build().unwrap(), fixed, &script);
        // Every quota here fits the GCRA's and the sliding window counter's words.
        twins_agree(
            |clock| builder::<GcraRules>(&setup, clock).build().unwrap(),
            fixed,
            &script,
        );
        twins_agree(
            |clock| builder::<SlidingWindowRules>(&setup, clock).build().unwrap(),
            fixed,
            &script,
        );
    }

    /// The reconfigurable algorithms with per-key quotas, reconfigured by the script.
    #[test]
    fn try_acquire_answers_as_acquire_one_under_per_key_quotas(
        setup in any_setup(), even in any_quota(), script in any_script(),
    ) {
        twins_agree(
            |clock| builder::<TokenBucketRules>(&setup, clock).build_per_key(per_key(&setup, even)),
            KeyedLimiter::set_quota,
            &script,
        );
        twins_agree(
            |clock| builder::<FixedWindowRules>(&setup, clock).build_per_key(per_key(&setup, even)),
            KeyedLimiter::set_quota,
            &script,
        );
        twins_agree(
            |clock| builder::<SlidingLogRules>(&setup, clock).build_per_key(per_key(&setup, even)),
            KeyedLimiter::set_quota,
            &script,
        );
    }
}

fn ask(key: u64, advance_ms: u64) -> Step {
    Step::Ask { key, advance_ms }
}

/// A bucket of 2 refilled every 100 ms, reconfigured to 1 in the middle, then swept:
/// the answers themselves, not only the twins' agreement.
#[test]
fn a_scripted_token_bucket_answers_as_its_quota_says() {
    let setup = Setup {
        quota: Quota::new(2, Duration::from_millis(100)).unwrap(),
        cap: None,
    };
    let script = [
        ask(1, 0),
        ask(1, 0),
        ask(1, 0),   // drained
        ask(1, 100), // one refilled, taken
        ask(1, 0),
        Step::SetQuota(Quota::new(1, Duration::from_millis(100)).unwrap()),
        ask(1, 0),   // moved with nothing left: denied
        ask(1, 100), // one refilled under the new quota
        ask(1, 0),
        Step::Sweep, // not full: kept
        ask(1, 1_000),
        ask(2, 0),
    ];
    let answers = twins_agree(
        |clock| builder::<TokenBucketRules>(&setup, clock).build_reconfigurable(),
        KeyedLimiter::set_quota,
        &script,
    );
    assert_eq!(
        answers,
        [
            true, true, false, true, false, false, true, false, true, true
        ]
    );
}

/// At a cap of 2 keys, a third key is refused (Deny) or served from the shared
/// allowance of 1 (Shared) by `try_acquire` as by `acquire`; a sweep makes room.
#[test]
fn a_new_key_at_the_cap_is_answered_by_the_overflow_policy() {
    let quota = Quota::new(1, Duration::from_millis(100)).unwrap();
    let script = [
        ask(0, 0),
        ask(1, 0),
        ask(2, 0), // over the cap
        ask(3, 0), // over the cap
        ask(2, 100),
        Step::Sweep, // 0 and 1 full again: forgotten
        ask(2, 0),
    ];
    let deny = Setup {
        quota,
        cap: Some((2, Overflow::Deny)),
    };
    let answers = twins_agree(
        |clock| builder::<TokenBucketRules>(&deny, clock).build().unwrap(),
        fixed,
        &script,
    );
    assert_eq!(answers, [true, true, false, false, false, true]);
    let shared = Setup {
        quota,
        cap: Some((2, Overflow::Shared(quota))),
    };
    let answers = twins_agree(
        |clock| builder::<TokenBucketRules>(&shared, clock).build().unwrap(),
        fixed,
        &script,
    );
    // The shared allowance of 1: key 2 takes it, key 3 finds it spent, and 100 ms
    // later key 2 takes its refill.
    assert_eq!(answers, [true, true, true, false, true, true]);
}
