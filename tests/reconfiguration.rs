//! Reconfiguration, forgetting and clock skew against the semantics contract: first
//! the contract's edges by name, then one state-machine property test per algorithm
//! comparing every answer with the plain model of `common::keyed`.

mod common;

use common::keyed::{Arrival, Bucket, Counter, KeyModel, Keyed, Log, Resolver, Window};
use common::ms;
use common::schedule::TEN_YEARS;
use proptest::prelude::*;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;
use turnstile::{
    Decision, FixedWindow, Gcra, ManualClock, Quota, Settlement, SlidingLog, SlidingWindowCounter,
    TokenBucket,
};

fn quota(capacity: u32, every: Duration) -> Quota {
    Quota::new(capacity, every).unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Every limiter under test, as the generic tests drive it (`u64` keys). Named apart
/// from the limiters' own methods, which the tests by name call directly.
trait Limiter {
    /// `acquire`.
    fn decide(&self, key: u64, cost: u32) -> Decision;
    /// `peek`.
    fn available(&self, key: u64) -> u32;
    /// `refund`.
    fn give_back(&self, key: u64, cost: u32);
    /// `settle`.
    fn settle_at(&self, key: u64, estimate: u32, actual: u32) -> Settlement;
    /// `evict_idle`.
    fn forget_idle(&self) -> usize;
    /// Only for limiters built reconfigurable: `set_quota` when every key gets the
    /// same quota, `reconfigure` otherwise.
    fn switch_to(&self, to: Resolver);
}

/// A limiter built with `build_reconfigurable`.
trait Reconfigurable: Limiter + Send + Sync + 'static {
    fn set_quota(&self, quota: Quota);
    fn reconfigure_with(&self, quota_for: impl Fn(&u64) -> Quota + Send + Sync + 'static);
}

/// The one place that calls the limiters' own methods.
mod under_test {
    use super::{Decision, Limiter, Quota, Reconfigurable, Resolver, Settlement};
    use turnstile::{
        Gcra, ManualClock, PerKeyFixedWindow, PerKeySlidingLog, PerKeyTokenBucket,
        SlidingWindowCounter,
    };

    macro_rules! limiter {
        ($limiter:ty, $reconfigure:item) => {
            impl Limiter for $limiter {
                fn decide(&self, key: u64, cost: u32) -> Decision {
                    self.acquire(&key, cost)
                }
                fn available(&self, key: u64) -> u32 {
                    self.peek(&key)
                }
                fn give_back(&self, key: u64, cost: u32) {
                    self.refund(&key, cost)
                }
                fn settle_at(&self, key: u64, estimate: u32, actual: u32) -> Settlement {
                    self.settle(&key, estimate, actual)
                }
                fn forget_idle(&self) -> usize {
                    self.evict_idle()
                }
                $reconfigure
            }
        };
    }

    macro_rules! reconfigurable {
        ($limiter:ty) => {
            limiter!(
                $limiter,
                fn switch_to(&self, to: Resolver) {
                    if to.even == to.odd {
                        Reconfigurable::set_quota(self, to.even);
                    } else {
                        self.reconfigure_with(move |key| to.of(*key));
                    }
                }
            );

            impl Reconfigurable for $limiter {
                fn set_quota(&self, quota: Quota) {
                    <$limiter>::set_quota(self, quota)
                }
                fn reconfigure_with(
                    &self,
                    quota_for: impl Fn(&u64) -> Quota + Send + Sync + 'static,
                ) {
                    <$limiter>::reconfigure(self, quota_for)
                }
            }
        };
    }

    macro_rules! not_reconfigurable {
        ($limiter:ty) => {
            limiter!(
                $limiter,
                fn switch_to(&self, to: Resolver) {
                    unreachable!("{to:?}: built without reconfiguration")
                }
            );
        };
    }

    reconfigurable!(PerKeyTokenBucket<u64, ManualClock>);
    reconfigurable!(PerKeyFixedWindow<u64, ManualClock>);
    reconfigurable!(PerKeySlidingLog<u64, ManualClock>);
    not_reconfigurable!(SlidingWindowCounter<u64, ManualClock>);
    not_reconfigurable!(Gcra<u64, ManualClock>);
}

#[test]
fn setting_the_same_quota_changes_no_decision_even_for_a_lagging_reading() {
    // One token per second. Drained at 5 s; a core lagging at 0.5 s is denied; at 5.1 s
    // the next token is still 900 ms away — whether or not the quota was set again.
    let one_per_second = quota(1, secs(1));
    let clock = ManualClock::new();
    let reconfigured = TokenBucket::<u64>::builder(one_per_second)
        .clock(clock.clone())
        .build_reconfigurable();
    let twin = TokenBucket::<u64>::builder(one_per_second)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut decisions = (vec![], vec![]);
    for (at, set_quota) in [(ms(5000), true), (ms(500), false), (ms(5100), false)] {
        clock.set(at);
        decisions.0.push(reconfigured.acquire(&1, 1));
        decisions.1.push(twin.acquire(&1, 1));
        if set_quota {
            reconfigured.set_quota(one_per_second);
        }
    }
    assert_eq!(
        decisions.0, decisions.1,
        "reconfigured vs never reconfigured"
    );
    assert_eq!(
        decisions.1,
        [
            Decision::Allowed { remaining: 0 },
            Decision::Denied {
                remaining: 0,
                retry_after: ms(5500)
            },
            Decision::Denied {
                remaining: 0,
                retry_after: ms(900)
            },
        ]
    );
}

#[test]
fn a_key_moves_to_a_new_quota_no_earlier_than_its_own_latest_refill() {
    // Drained at 5 s, then the capacity doubles. A lagging reading (0.5 s) moves the
    // key as of 5 s, its latest refill: it keeps its 0 tokens on the grid index of
    // 5 s, so the next token still comes at 6 s.
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(1, secs(1)))
        .clock(clock.clone())
        .build_reconfigurable();
    clock.set(secs(5));
    assert!(limiter.try_acquire(&1));
    limiter.set_quota(quota(2, secs(1)));
    let mut decisions = vec![];
    for at in [ms(500), ms(5100), ms(6000)] {
        clock.set(at);
        decisions.push(limiter.acquire(&1, 1));
    }
    assert_eq!(
        decisions,
        [
            Decision::Denied {
                remaining: 0,
                retry_after: ms(5500)
            },
            Decision::Denied {
                remaining: 0,
                retry_after: ms(900)
            },
            Decision::Allowed { remaining: 0 },
        ]
    );
}

#[test]
fn a_move_at_a_lagging_reading_owes_at_most_the_lagged_intervals_in_new_tokens() {
    // 10 per 1 s; the key takes all 10 at 101.5 s, then the quota becomes 10 per
    // 10 s, moved by a reading that lags by `lag`, which crosses `j` of the old grid
    // points. The word cannot tell that lag from a charge, so the key may owe `j`
    // tokens (at most its capacity) more than a move on time leaves it: its next token
    // comes at most `min(j, 10)` new intervals later — and never earlier.
    let moved_at = |lag: Duration| {
        let clock = ManualClock::new();
        let limiter = TokenBucket::<u64>::builder(quota(10, secs(1)))
            .clock(clock.clone())
            .build_reconfigurable();
        clock.set(ms(101_500));
        assert!(limiter.acquire(&1, 10).is_allowed());
        clock.set(ms(101_500) - lag);
        limiter.set_quota(quota(10, secs(10)));
        // The move happens on the key's next request, at the lagging reading.
        let _ = limiter.acquire(&1, 0);
        clock.set(ms(101_500));
        match limiter.acquire(&1, 1) {
            Decision::Denied { retry_after, .. } => retry_after,
            allowed => panic!("a key drained on time was admitted after the move: {allowed:?}"),
        }
    };
    let on_time = moved_at(Duration::ZERO);
    for (lag, j) in [(ms(300), 0), (ms(501), 1), (ms(2_501), 3), (ms(15_500), 16)] {
        let late = moved_at(lag);
        assert!(late >= on_time, "lag {lag:?}: {late:?} < {on_time:?}");
        assert!(
            late <= on_time + secs(10) * j.min(10),
            "lag {lag:?}: {late:?} owes more than {j} new intervals beyond {on_time:?}"
        );
    }
}

#[test]
fn setting_the_same_quota_lets_no_fixed_window_admit_more_than_its_limit() {
    // 10 per 10 s window. Window [10 s, 20 s) is used up at 15 s; the quota is set
    // again; a core lagging at 5 s asks. That window still admits 10 in all.
    let ten_per_ten_seconds = quota(10, secs(1));
    let clock = ManualClock::new();
    let limiter = FixedWindow::<u64>::builder(ten_per_ten_seconds)
        .clock(clock.clone())
        .build_reconfigurable();
    clock.set(secs(15));
    assert!(limiter.acquire(&1, 10).is_allowed());
    limiter.set_quota(ten_per_ten_seconds);
    clock.set(secs(5));
    assert!(
        !limiter.try_acquire(&1),
        "the lagging reading sees the used window"
    );
    let mut admitted_in_window = 10;
    for tenth in 100..200 {
        clock.set(ms(tenth * 100));
        admitted_in_window += u32::from(limiter.try_acquire(&1));
    }
    assert_eq!(admitted_in_window, 10, "admitted in [10 s, 20 s)");
}

#[test]
fn setting_the_same_quota_lets_no_sliding_window_hold_more_than_its_limit() {
    // 10 per sliding 10 s. All 10 taken at 15 s; the quota is set again; a core
    // lagging at 5 s asks; then one request every 500 ms from 15 s to 30 s.
    let ten_per_ten_seconds = quota(10, secs(1));
    let clock = ManualClock::new();
    let limiter = SlidingLog::<u64>::builder(ten_per_ten_seconds)
        .clock(clock.clone())
        .build_reconfigurable();
    clock.set(secs(15));
    assert!(limiter.acquire(&1, 10).is_allowed());
    let mut admitted = vec![(ms(15_000), 10)];
    limiter.set_quota(ten_per_ten_seconds);
    clock.set(secs(5));
    assert!(!limiter.try_acquire(&1), "the lagging reading sees the 10");
    for half in 30..60 {
        let at = ms(half * 500);
        clock.set(at);
        if limiter.try_acquire(&1) {
            admitted.push((at, 1));
        }
    }
    // Not vacuous: once the 10 leave at 25 s, requests get through again.
    assert!(admitted.len() > 1, "{admitted:?}");
    for &(end, _) in &admitted {
        let in_window: u32 = admitted
            .iter()
            .filter(|&&(at, _)| at <= end && end - at < secs(10))
            .map(|&(_, cost)| cost)
            .sum();
        assert!(
            in_window <= 10,
            "{in_window} admitted in the 10 s ending at {end:?}"
        );
    }
}

/// A key that has its whole allowance carries no information: it moves to a new quota
/// as a brand-new key — exactly as if it had been forgotten first.
fn a_full_key_moves_as_a_forgotten_one_would<L: Reconfigurable>(
    build: impl Fn(Quota, ManualClock) -> L,
) {
    let clock = ManualClock::new();
    let (kept, forgotten) = (
        build(quota(2, ms(10)), clock.clone()),
        build(quota(2, ms(10)), clock.clone()),
    );
    assert!(kept.decide(1, 0).is_allowed() && forgotten.decide(1, 0).is_allowed());
    clock.set(ms(5));
    assert_eq!(forgotten.forget_idle(), 1, "the untouched key is forgotten");
    kept.set_quota(quota(4, ms(10)));
    forgotten.set_quota(quota(4, ms(10)));
    let kept = (kept.available(1), kept.decide(1, 4));
    let forgotten = (forgotten.available(1), forgotten.decide(1, 4));
    assert_eq!(kept, forgotten, "kept vs forgotten");
    assert_eq!(forgotten, (4, Decision::Allowed { remaining: 0 }));
}

#[test]
fn a_full_token_bucket_key_moves_as_a_forgotten_one_would() {
    a_full_key_moves_as_a_forgotten_one_would(|q, clock| {
        TokenBucket::<u64>::builder(q)
            .clock(clock)
            .eviction_margin(Duration::ZERO)
            .manual_eviction()
            .build_reconfigurable()
    });
}

#[test]
fn a_full_fixed_window_key_moves_as_a_forgotten_one_would() {
    a_full_key_moves_as_a_forgotten_one_would(|q, clock| {
        FixedWindow::<u64>::builder(q)
            .clock(clock)
            .eviction_margin(Duration::ZERO)
            .manual_eviction()
            .build_reconfigurable()
    });
}

#[test]
fn a_full_sliding_log_key_moves_as_a_forgotten_one_would() {
    a_full_key_moves_as_a_forgotten_one_would(|q, clock| {
        SlidingLog::<u64>::builder(q)
            .clock(clock)
            .eviction_margin(Duration::ZERO)
            .manual_eviction()
            .build_reconfigurable()
    });
}

/// The model the property tests below hold the limiters to gives the answers the
/// statements above spell out.
#[test]
fn the_model_answers_as_the_statements_above() {
    const MS: u64 = 1_000_000;
    let denied = |ms_left: u64| Decision::Denied {
        remaining: 0,
        retry_after: ms(ms_left),
    };
    // The token bucket, one per second: the same quota set again; a doubled capacity.
    let one_per_second = Resolver::every(quota(1, secs(1)));
    for (to, last) in [
        (one_per_second, denied(900)),
        (Resolver::every(quota(2, secs(1))), denied(900)),
    ] {
        let mut model = Keyed::<Bucket>::new(one_per_second, Duration::ZERO);
        assert!(model.acquire(1, 5000 * MS, 1).is_allowed());
        model.reconfigure(to);
        assert_eq!(model.acquire(1, 500 * MS, 1), denied(5500), "{to:?}");
        assert_eq!(model.acquire(1, 5100 * MS, 1), last, "{to:?}");
        assert!(model.acquire(1, 6000 * MS, 1).is_allowed(), "{to:?}");
    }
    // The fixed window and the sliding log, 10 per 10 s, the same quota set again.
    let ten_per_ten_seconds = Resolver::every(quota(10, secs(1)));
    let mut window = Keyed::<Window>::new(ten_per_ten_seconds, Duration::ZERO);
    let mut log = Keyed::<Log>::new(ten_per_ten_seconds, Duration::ZERO);
    assert!(window.acquire(1, 15_000 * MS, 10).is_allowed());
    assert!(log.acquire(1, 15_000 * MS, 10).is_allowed());
    window.reconfigure(ten_per_ten_seconds);
    log.reconfigure(ten_per_ten_seconds);
    assert_eq!(window.acquire(1, 5000 * MS, 1), denied(15_000));
    assert_eq!(log.acquire(1, 5000 * MS, 1), denied(20_000));
    assert_eq!(window.acquire(1, 19_999 * MS, 1), denied(1));
    assert_eq!(log.acquire(1, 24_999 * MS, 1), denied(1));
    assert!(log.acquire(1, 25_000 * MS, 10).is_allowed());
    // A full key moves as a brand-new one.
    let mut model = Keyed::<Bucket>::new(Resolver::every(quota(2, ms(10))), Duration::ZERO);
    assert!(model.acquire(1, 0, 0).is_allowed());
    model.reconfigure(Resolver::every(quota(4, ms(10))));
    assert_eq!(model.peek(1, 5 * MS), 4);
}

/// A resolver panics while a known key moves to its new quota. The panic reaches the
/// caller; afterwards, with a working resolver, the key answers every operation. (The
/// operations run on a thread of their own, so that a key stuck for ever fails the
/// test instead of hanging it: the timeout detects a hang, it measures nothing.)
fn a_panicking_resolver_reaches_the_caller_and_leaves_the_key_usable<L: Reconfigurable>(
    build: impl FnOnce(Quota, ManualClock) -> L,
) {
    let limiter = Arc::new(build(quota(2, ms(10)), ManualClock::new()));
    assert!(limiter.decide(1, 1).is_allowed());
    limiter.reconfigure_with(|_| panic!("a resolver that panics"));
    let request = catch_unwind(AssertUnwindSafe(|| limiter.decide(1, 1)));
    assert!(request.is_err(), "the resolver's panic reaches the caller");
    let (answer, answered) = mpsc::channel();
    let after = Arc::clone(&limiter);
    thread::spawn(move || {
        after.set_quota(quota(3, ms(10)));
        let decision = after.decide(1, 1);
        let left = after.available(1);
        after.give_back(1, 1);
        after.reconfigure_with(|_| quota(4, ms(10)));
        let _ = answer.send((decision, left, after.decide(1, 1), after.available(1)));
    });
    let answers = answered.recv_timeout(secs(10));
    assert!(
        answers.is_ok(),
        "acquire, peek and refund on the key never returned"
    );
}

#[test]
fn a_panicking_resolver_leaves_a_token_bucket_key_usable() {
    a_panicking_resolver_reaches_the_caller_and_leaves_the_key_usable(|q, c| {
        TokenBucket::<u64>::builder(q)
            .clock(c)
            .build_reconfigurable()
    });
}

#[test]
fn a_panicking_resolver_leaves_a_fixed_window_key_usable() {
    a_panicking_resolver_reaches_the_caller_and_leaves_the_key_usable(|q, c| {
        FixedWindow::<u64>::builder(q)
            .clock(c)
            .build_reconfigurable()
    });
}

#[test]
fn a_panicking_resolver_leaves_a_sliding_log_key_usable() {
    a_panicking_resolver_reaches_the_caller_and_leaves_the_key_usable(|q, c| {
        SlidingLog::<u64>::builder(q)
            .clock(c)
            .build_reconfigurable()
    });
}

/// A key type whose copies panic while `ARMED` is set: the map copies a key only when
/// it replaces the key's entry, in the middle of a move. Borrowed as `u64`, so that
/// storing it makes it from a `u64` and copies nothing.
mod fragile {
    use std::borrow::Borrow;
    use std::hash::{Hash, Hasher};
    use std::sync::atomic::{AtomicBool, Ordering};

    pub static ARMED: AtomicBool = AtomicBool::new(false);

    #[derive(Debug, PartialEq, Eq)]
    pub struct Fragile(pub u64);

    impl Hash for Fragile {
        fn hash<H: Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }

    impl Borrow<u64> for Fragile {
        fn borrow(&self) -> &u64 {
            &self.0
        }
    }

    impl From<u64> for Fragile {
        fn from(key: u64) -> Self {
            Fragile(key)
        }
    }

    impl Clone for Fragile {
        fn clone(&self) -> Self {
            assert!(
                !ARMED.load(Ordering::SeqCst),
                "a key that panics when copied"
            );
            Fragile(self.0)
        }
    }
}

/// Moving a key to a new quota copies no key: papaya replaces the entry through the
/// owned key the mover makes from the borrowed one (here `From<u64>`), in one
/// compare-and-set, so a key type whose `Clone` panics moves like any other and takes
/// what it had left to the new quota. (A panic between the freeze and the swap — a
/// key's `Eq` inside the map — thaws the key on the way out: `ThawUnlessMoved` in
/// `src/per_key.rs`.)
#[test]
fn a_move_copies_no_key() {
    use fragile::{ARMED, Fragile};
    use std::sync::atomic::Ordering;
    let limiter = TokenBucket::<Fragile>::builder(quota(2, ms(10)))
        .clock(ManualClock::new())
        .build_reconfigurable();
    assert!(limiter.acquire(&1u64, 1).is_allowed());
    limiter.set_quota(quota(3, ms(10)));
    ARMED.store(true, Ordering::SeqCst);
    let moved = catch_unwind(AssertUnwindSafe(|| limiter.acquire(&1u64, 1)));
    ARMED.store(false, Ordering::SeqCst);
    let decision = moved.expect("the move copied the key");
    // One of two taken before the move; what the key had left (one) carries over to
    // the larger capacity whole, and the request after the move takes it, the clock
    // standing still: none left.
    assert!(decision.is_allowed(), "{decision:?}");
    assert_eq!(limiter.peek(&1u64), 0);
    assert!(!limiter.acquire(&1u64, 1).is_allowed());
}

/// One step of a state-machine run. Quotas are indices into the run's [`Setup`], and
/// clock moves are measured in its intervals and windows, so that a failing run
/// shrinks step by step whatever its quotas.
#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire {
        key: u64,
        cost: u32,
    },
    Peek {
        key: u64,
    },
    Refund {
        key: u64,
        cost: u32,
    },
    /// A request that took `estimate` settled at `actual`: below, at, or above (into
    /// debt, up to past the debt cap).
    Settle {
        key: u64,
        estimate: u32,
        actual: u32,
    },
    /// `set_quota(quotas[i])`.
    SetQuota(usize),
    /// `reconfigure`: even keys get `quotas[even]`, odd keys `quotas[odd]`.
    ByParity {
        even: usize,
        odd: usize,
    },
    /// The current quotas once more (a quota set again, unchanged).
    Again,
    EvictIdle,
    Forward(Span),
    /// Back by the span, saturating at zero: past earlier readings too.
    Back(Span),
}

/// A stretch of time, in the terms of a run's quotas.
#[derive(Clone, Copy, Debug)]
enum Span {
    /// Thousandths of `quotas[quota]`'s refill interval.
    Intervals {
        quota: usize,
        thousandths: u64,
    },
    /// Thousandths of `quotas[quota]`'s window (capacity × interval).
    Windows {
        quota: usize,
        thousandths: u64,
    },
    /// One nanosecond less than `quotas[quota]`'s window.
    JustUnderAWindow {
        quota: usize,
    },
    OneNanosecond,
    /// As far as the clock goes.
    Forever,
}

/// What a run starts from: the limiter's quota (the first) and others to reconfigure
/// to, the eviction margin, and the clock's first reading.
#[derive(Clone, Debug)]
struct Setup {
    quotas: [Quota; 3],
    margin: Span,
    start: Start,
}

#[derive(Clone, Copy, Debug)]
enum Start {
    AtTheEpoch,
    TenYearsIn,
    /// This far (a span) before the clock's last instant.
    NearTheEnd(Span),
}

impl Setup {
    fn interval(&self, quota: usize) -> u64 {
        self.quotas[quota].refill_every().as_nanos() as u64
    }

    fn window(&self, quota: usize) -> u64 {
        u64::from(self.quotas[quota].capacity()) * self.interval(quota)
    }

    fn nanos(&self, span: Span) -> u64 {
        match span {
            Span::Intervals { quota, thousandths } => self.interval(quota) * thousandths / 1000,
            Span::Windows { quota, thousandths } => self.window(quota) * thousandths / 1000,
            Span::JustUnderAWindow { quota } => self.window(quota) - 1,
            Span::OneNanosecond => 1,
            Span::Forever => u64::MAX,
        }
    }

    fn margin(&self) -> Duration {
        Duration::from_nanos(self.nanos(self.margin))
    }

    fn start(&self) -> u64 {
        match self.start {
            Start::AtTheEpoch => 0,
            Start::TenYearsIn => TEN_YEARS,
            Start::NearTheEnd(before) => u64::MAX - self.nanos(before),
        }
    }
}

/// A small quota whose interval is `base` scaled by one of a few ratios (equal
/// included), so that runs cross the grids and windows of all of them.
fn related_quota(base: u64) -> impl Strategy<Value = Quota> {
    let ratios = prop::sample::select(vec![(1, 1), (1, 2), (2, 1), (2, 3), (3, 2), (1, 4)]);
    (1u32..=5, ratios).prop_map(move |(capacity, (num, den))| {
        let interval = Duration::from_nanos((base * num / den).max(1));
        quota(capacity, interval)
    })
}

/// Quotas are picked from three.
fn which() -> impl Strategy<Value = usize> {
    0..3usize
}

fn span() -> impl Strategy<Value = Span> {
    let intervals = |thousandths| {
        (which(), thousandths)
            .prop_map(|(quota, thousandths)| Span::Intervals { quota, thousandths })
    };
    let windows = |thousandths| {
        (which(), thousandths).prop_map(|(quota, thousandths)| Span::Windows { quota, thousandths })
    };
    prop_oneof![
        6 => intervals((0u64..3000).boxed()),
        2 => intervals((0u64..4).prop_map(|k| k * 1000).boxed()),
        1 => Just(Span::OneNanosecond),
        2 => windows((0u64..2000).boxed()),
        1 => windows((0u64..3).prop_map(|k| k * 1000).boxed()),
        1 => which().prop_map(|quota| Span::JustUnderAWindow { quota }),
        1 => windows((0u64..1_000_000).boxed()),
    ]
}

/// A setup whose first quota `accepts` (the algorithm can be built with it).
fn setup(accepts: fn(Quota) -> bool) -> impl Strategy<Value = Setup> {
    let base = prop_oneof![4u64..=64, 65u64..=10_000, 10_001u64..=1_000_000];
    let quotas = base
        .prop_flat_map(|base| {
            [
                related_quota(base),
                related_quota(base),
                related_quota(base),
            ]
        })
        .prop_filter("refused by the algorithm", move |quotas| accepts(quotas[0]));
    let margin = prop_oneof![
        Just(Span::Intervals {
            quota: 0,
            thousandths: 0
        }),
        (0u64..4).prop_map(|k| Span::Intervals {
            quota: 0,
            thousandths: k * 1000
        }),
        (which(), 0u64..=2000)
            .prop_map(|(quota, thousandths)| Span::Windows { quota, thousandths }),
    ];
    let start = prop_oneof![
        8 => Just(Start::AtTheEpoch),
        1 => Just(Start::TenYearsIn),
        1 => (which(), 0u64..20_000)
            .prop_map(|(quota, thousandths)| Start::NearTheEnd(Span::Windows { quota, thousandths })),
    ];
    (quotas, margin, start).prop_map(|(quotas, margin, start)| Setup {
        quotas,
        margin,
        start,
    })
}

/// Keys a run uses.
const KEYS: u64 = 4;

/// Steps of a run: requests of every cost from 0 to above the largest capacity (5),
/// peeks, refunds, sweeps and clock moves; with `reconfiguring`, reconfigurations
/// among the setup's quotas — every key alike or by key parity, the current quotas
/// included.
fn ops(reconfiguring: bool) -> impl Strategy<Value = Vec<Op>> {
    let key = 0..KEYS;
    let acquire = (key.clone(), 0u32..=6).prop_map(|(key, cost)| Op::Acquire { key, cost });
    let peek = key.clone().prop_map(|key| Op::Peek { key });
    let refund = (key.clone(), 0u32..=5).prop_map(|(key, cost)| Op::Refund { key, cost });
    let settle = (key, 0u32..=5, prop_oneof![0u32..=12, Just(u32::MAX)]).prop_map(
        |(key, estimate, actual)| Op::Settle {
            key,
            estimate,
            actual,
        },
    );
    let back = prop_oneof![
        4 => span(),
        1 => (which(), 0u64..20_000).prop_map(|(quota, thousandths)| Span::Windows { quota, thousandths }),
        1 => Just(Span::Forever),
    ];
    let op = if reconfiguring {
        prop_oneof![
            10 => acquire,
            2 => peek,
            2 => refund,
            3 => settle.clone(),
            1 => which().prop_map(Op::SetQuota),
            1 => (which(), which()).prop_map(|(even, odd)| Op::ByParity { even, odd }),
            1 => Just(Op::Again),
            2 => Just(Op::EvictIdle),
            6 => span().prop_map(Op::Forward),
            2 => back.prop_map(Op::Back),
        ]
        .boxed()
    } else {
        prop_oneof![
            10 => acquire,
            2 => peek,
            2 => refund,
            3 => settle,
            2 => Just(Op::EvictIdle),
            6 => span().prop_map(Op::Forward),
            2 => back.prop_map(Op::Back),
        ]
        .boxed()
    };
    prop::collection::vec(op, 1..120)
}

/// Runs `ops` against the limiter `build` makes (on a clock at zero, so its epoch is
/// zero) and the model; they must agree on every decision and every peek, and what
/// the limiter admitted must respect the algorithm's limit.
fn agrees<L: Limiter, S: KeyModel>(
    setup: &Setup,
    ops: &[Op],
    build: impl FnOnce(Quota, ManualClock, Duration) -> L,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let limiter = build(setup.quotas[0], clock.clone(), setup.margin());
    let mut model = Keyed::<S>::new(Resolver::every(setup.quotas[0]), setup.margin());
    let mut now = setup.start();
    clock.set(Duration::from_nanos(now));
    for (i, &op) in ops.iter().enumerate() {
        match op {
            Op::Acquire { key, cost } => {
                let expected = model.acquire(key, now, cost);
                let decision = limiter.decide(key, cost);
                prop_assert_eq!(decision, expected, "op {} at {}: {:?}", i, now, op);
            }
            Op::Peek { key } => {
                let expected = model.peek(key, now);
                prop_assert_eq!(
                    limiter.available(key),
                    expected,
                    "op {} at {}: {:?}",
                    i,
                    now,
                    op
                );
            }
            Op::Refund { key, cost } => {
                limiter.give_back(key, cost);
                model.refund(key, now, cost);
            }
            Op::Settle {
                key,
                estimate,
                actual,
            } => {
                let expected = model.settle(key, now, estimate, actual);
                let settled = limiter.settle_at(key, estimate, actual);
                prop_assert_eq!(settled, expected, "op {} at {}: {:?}", i, now, op);
            }
            Op::SetQuota(_) | Op::ByParity { .. } | Op::Again => {
                let to = match op {
                    Op::SetQuota(i) => Resolver::every(setup.quotas[i]),
                    Op::ByParity { even, odd } => Resolver {
                        even: setup.quotas[even],
                        odd: setup.quotas[odd],
                    },
                    _ => model.resolver(),
                };
                limiter.switch_to(to);
                model.reconfigure(to);
            }
            Op::EvictIdle => {
                limiter.forget_idle();
                model.evict_idle(now);
            }
            Op::Forward(span) => {
                now = now.saturating_add(setup.nanos(span));
                clock.set(Duration::from_nanos(now));
            }
            Op::Back(span) => {
                now = now.saturating_sub(setup.nanos(span));
                clock.set(Duration::from_nanos(now));
            }
        }
    }
    prop_assert_eq!(model.check_limits(), Ok(()));
    Ok(())
}

fn any_quota(_: Quota) -> bool {
    true
}

fn held_by_the_counter(quota: Quota) -> bool {
    SlidingWindowCounter::<u64, _>::with_clock(quota, ManualClock::new()).is_ok()
}

fn held_by_gcra(quota: Quota) -> bool {
    Gcra::<u64, _>::with_clock(quota, ManualClock::new()).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_token_bucket_decides_as_the_model_through_reconfiguration_forgetting_and_skew(
        setup in setup(any_quota), ops in ops(true)
    ) {
        agrees::<_, Bucket>(&setup, &ops, |quota, clock, margin| {
            TokenBucket::<u64>::builder(quota)
                .clock(clock)
                .eviction_margin(margin)
                .manual_eviction()
                .build_reconfigurable()
        })?;
    }

    #[test]
    fn the_fixed_window_decides_as_the_model_through_reconfiguration_forgetting_and_skew(
        setup in setup(any_quota), ops in ops(true)
    ) {
        agrees::<_, Window>(&setup, &ops, |quota, clock, margin| {
            FixedWindow::<u64>::builder(quota)
                .clock(clock)
                .eviction_margin(margin)
                .manual_eviction()
                .build_reconfigurable()
        })?;
    }

    #[test]
    fn the_sliding_log_decides_as_the_model_through_reconfiguration_forgetting_and_skew(
        setup in setup(any_quota), ops in ops(true)
    ) {
        agrees::<_, Log>(&setup, &ops, |quota, clock, margin| {
            SlidingLog::<u64>::builder(quota)
                .clock(clock)
                .eviction_margin(margin)
                .manual_eviction()
                .build_reconfigurable()
        })?;
    }

    #[test]
    fn the_sliding_window_counter_decides_as_the_model_through_forgetting_and_skew(
        setup in setup(held_by_the_counter), ops in ops(false)
    ) {
        agrees::<_, Counter>(&setup, &ops, |quota, clock, margin| {
            SlidingWindowCounter::<u64>::builder(quota)
                .clock(clock)
                .eviction_margin(margin)
                .manual_eviction()
                .build()
                .unwrap()
        })?;
    }

    #[test]
    fn gcra_decides_as_the_model_through_forgetting_and_skew(
        setup in setup(held_by_gcra), ops in ops(false)
    ) {
        agrees::<_, Arrival>(&setup, &ops, |quota, clock, margin| {
            Gcra::<u64>::builder(quota)
                .clock(clock)
                .eviction_margin(margin)
                .manual_eviction()
                .build()
                .unwrap()
        })?;
    }
}

/// Tokens a key has at 5 µs after taking 1 of 2 (one per µs) at 5 µs and moving to 20
/// per 100 ns at a reading of `mover` ns.
fn tokens_at_5us_after_a_move_at(mover: u64) -> usize {
    let ns = Duration::from_nanos;
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(quota(2, ns(1000)))
        .clock(clock.clone())
        .build_reconfigurable();
    clock.set(ns(5000));
    assert!(limiter.acquire(&1, 1).is_allowed());
    limiter.set_quota(quota(20, ns(100)));
    clock.set(ns(mover));
    let _ = limiter.peek(&1); // moves the key
    clock.set(ns(5000));
    (0..100).filter(|_| limiter.try_acquire(&1)).count()
}

/// The one inexact corner of a token bucket's move (per_key's docs): a mover whose
/// clock lags behind the key's latest request starts the new quota that early, and a
/// faster new quota refills over the lag — at most lag / new interval tokens more than
/// a move at the latest request's time, never beyond the new capacity.
#[test]
fn a_move_by_a_lagging_clock_gains_at_most_the_new_refill_over_the_lag() {
    // Moved at the key's latest request, or after it: exactly the 1 token left.
    assert_eq!(tokens_at_5us_after_a_move_at(5000), 1);
    assert_eq!(tokens_at_5us_after_a_move_at(5050), 1);
    for lag in [1, 99, 100, 250, 500, 999] {
        let extra = tokens_at_5us_after_a_move_at(5000 - lag) - 1;
        let bound = (lag as usize).div_ceil(100).min(19);
        assert!(extra <= bound, "lag {lag} ns: {extra} extra, bound {bound}");
    }
    // The lag is below (capacity + debt cap) × old interval (a settle may have stored
    // the word that far ahead of its reading): a reading before 2 µs reads the key as
    // of 2 µs, where nothing of its 2 was left, and nothing was owed.
    assert_eq!(
        tokens_at_5us_after_a_move_at(500),
        tokens_at_5us_after_a_move_at(2000)
    );
}
