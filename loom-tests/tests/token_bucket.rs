//! The token bucket's CAS protocol, model-checked: five behaviours, each also run
//! against a mutant — a plausible broken protocol — that loom must reject.
#![cfg(turnstile_loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::check;
use std::collections::HashMap;
use std::time::Duration;
use turnstile::loom_hooks::{
    TokenBucketRules, WordAlgorithm, acquire_word, direct_word, token_bucket_word,
};
use turnstile::{Clock, Decision, DirectTokenBucket, ManualClock, Quota, RateLimiter, TokenBucket};

const KEY: u64 = 7;
/// Refill interval of every model, in nanoseconds of the `ManualClock`.
const INTERVAL: u64 = 10;

fn quota(capacity: u32) -> Quota {
    Quota::new(capacity, Duration::from_nanos(INTERVAL)).unwrap()
}

/// One key's bucket behind some protocol: turnstile's, or a mutant.
trait Bucket: Send + Sync + 'static {
    fn acquire(&self, cost: u32) -> Decision;
    fn peek(&self) -> u32;
    /// The raw state word and its layout, once the model's threads have joined.
    fn word(&self) -> (u64, TokenBucketRules);
}

/// turnstile's real `TokenBucket`, on the loom-aware store.
struct Real(TokenBucket<u64, ManualClock>);

impl Real {
    fn new(capacity: u32, clock: &ManualClock) -> Self {
        Self(TokenBucket::with_clock(quota(capacity), clock.clone()).unwrap())
    }
}

impl Bucket for Real {
    fn acquire(&self, cost: u32) -> Decision {
        self.0.acquire(&KEY, cost)
    }
    fn peek(&self) -> u32 {
        self.0.peek(&KEY)
    }
    fn word(&self) -> (u64, TokenBucketRules) {
        let (word, rules) = token_bucket_word(&self.0, &KEY);
        (word.expect("the key was created"), rules)
    }
}

/// turnstile's real direct (unkeyed) token bucket: the same word protocol, no map.
struct Direct(DirectTokenBucket<ManualClock>);

impl Bucket for Direct {
    fn acquire(&self, cost: u32) -> Decision {
        self.0.acquire(cost)
    }
    fn peek(&self) -> u32 {
        self.0.peek()
    }
    fn word(&self) -> (u64, TokenBucketRules) {
        direct_word(&self.0)
    }
}

/// The same direct token bucket asked through `try_acquire`: its own verdict step
/// (`admit`, no division, no `Decision`) in its own compare-and-set loop. Costs other
/// than 1 (the models' setup) go through `acquire`.
struct DirectTry(DirectTokenBucket<ManualClock>);

impl Bucket for DirectTry {
    fn acquire(&self, cost: u32) -> Decision {
        if cost != 1 {
            return self.0.acquire(cost);
        }
        // The models count admissions only: the other fields are not read.
        match self.0.try_acquire() {
            true => Decision::Allowed { remaining: 0 },
            false => Decision::Denied {
                remaining: 0,
                retry_after: Duration::ZERO,
            },
        }
    }
    fn peek(&self) -> u32 {
        self.0.peek()
    }
    fn word(&self) -> (u64, TokenBucketRules) {
        direct_word(&self.0)
    }
}

fn direct(capacity: u32, clock: &ManualClock) -> Direct {
    Direct(DirectTokenBucket::with_clock(quota(capacity), clock.clone()).unwrap())
}

/// A mutant: one state word updated by a broken protocol instead of `acquire_word`.
struct Mutant {
    word: AtomicU64,
    rules: TokenBucketRules,
    clock: ManualClock,
    protocol: fn(&AtomicU64, &TokenBucketRules, u64, u32) -> Decision,
}

impl Mutant {
    fn new(
        capacity: u32,
        clock: &ManualClock,
        protocol: fn(&AtomicU64, &TokenBucketRules, u64, u32) -> Decision,
    ) -> Self {
        let rules = TokenBucketRules::new(&quota(capacity));
        let word = AtomicU64::new(rules.full());
        let clock = clock.clone();
        Self {
            word,
            rules,
            clock,
            protocol,
        }
    }
}

impl Bucket for Mutant {
    fn acquire(&self, cost: u32) -> Decision {
        (self.protocol)(&self.word, &self.rules, self.clock.now(), cost)
    }
    fn peek(&self) -> u32 {
        WordAlgorithm::available(
            &self.rules,
            self.word.load(Ordering::Relaxed),
            self.clock.now(),
        )
    }
    fn word(&self) -> (u64, TokenBucketRules) {
        (self.word.load(Ordering::Relaxed), self.rules)
    }
}

/// Runs `f` on a new loom thread; its result is returned by `join`.
fn spawn<B: Bucket, T: Send + 'static>(
    bucket: &Arc<B>,
    f: impl FnOnce(&B) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let bucket = bucket.clone();
    thread::spawn(move || f(&bucket))
}

fn allowed(decision: Decision) -> u32 {
    u32::from(decision.is_allowed())
}

// ---------------------------------------------------------------------------
// Model 1: take/take with the clock frozen — exactly `capacity` succeed.

fn frozen_clock_admits_exactly_capacity<B: Bucket>(make: fn(&ManualClock) -> B) {
    let bucket = Arc::new(make(&ManualClock::new()));
    let others = [
        spawn(&bucket, |b| allowed(b.acquire(1))),
        spawn(&bucket, |b| allowed(b.acquire(1))),
    ];
    let mine = allowed(bucket.acquire(1));
    let total = mine + others.map(|h| h.join().unwrap()).iter().sum::<u32>();
    assert_eq!(total, 2, "frozen clock: {total} allowed with capacity 2");
}

fn real_with_key(capacity: u32, clock: &ManualClock) -> Real {
    let real = Real::new(capacity, clock);
    // A cost of 0 creates the key without taking anything, so this model checks the
    // CAS loop alone; model 4 checks creation.
    assert!(real.acquire(0).is_allowed());
    real
}

#[test]
fn model_1_frozen_clock_admits_exactly_capacity() {
    check("1 take/take, frozen clock", Some(4), || {
        frozen_clock_admits_exactly_capacity(|clock| real_with_key(2, clock))
    });
}

/// Mutant 1: check, then store — two threads read the same tokens and both take.
fn check_then_store(word: &AtomicU64, rules: &TokenBucketRules, now: u64, cost: u32) -> Decision {
    let current = word.load(Ordering::Relaxed);
    let (new, decision) = WordAlgorithm::acquire(rules, current, now, cost);
    if new != current {
        word.store(new, Ordering::Relaxed);
    }
    decision
}

#[test]
#[should_panic(expected = "frozen clock:")]
fn mutant_1_check_then_store_is_rejected() {
    check("1 mutant: check then store", Some(4), || {
        frozen_clock_admits_exactly_capacity(|clock| Mutant::new(2, clock, check_then_store))
    });
}

// ---------------------------------------------------------------------------
// Model 2: takes racing with refill — at most the intervals elapsed, none lost.

fn refill_race_loses_and_invents_nothing<B: Bucket>(make: fn(&ManualClock) -> B) {
    let clock = ManualClock::new();
    // Capacity 3, drained at 0: the cap never discards a refill in two intervals.
    let bucket = Arc::new(make(&clock));
    assert!(bucket.acquire(3).is_allowed());
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || {
            clock.advance(Duration::from_nanos(INTERVAL));
            clock.advance(Duration::from_nanos(INTERVAL));
        })
    };
    let takers = [
        spawn(&bucket, |b| allowed(b.acquire(1))),
        spawn(&bucket, |b| allowed(b.acquire(1))),
    ];
    ticker.join().unwrap();
    let taken: u32 = takers.map(|h| h.join().unwrap()).iter().sum();
    assert!(
        taken <= 2,
        "refill race: {taken} allowed with 2 intervals elapsed"
    );
    assert_eq!(
        taken + bucket.peek(),
        2,
        "refill race: tokens taken + left != tokens refilled"
    );
    // Full again no later than the last grid point (2) plus the capacity (3).
    let (word, _) = bucket.word();
    assert!(word <= 5, "refill race: invalid final word {word:#x}");
}

#[test]
fn model_2_takes_racing_with_refill() {
    check("2 take racing with refill", Some(4), || {
        refill_race_loses_and_invents_nothing(|clock| Real::new(3, clock))
    });
}

/// The direct limiter runs the same word protocol with no map: models 1 and 2 hold for
/// it as they do for the keyed limiter (their mutants, being protocols on a bare word,
/// are the direct limiter's too).
#[test]
fn model_1d_a_direct_limiter_on_a_frozen_clock_admits_exactly_capacity() {
    check("1d direct take/take, frozen clock", Some(4), || {
        frozen_clock_admits_exactly_capacity(|clock| direct(2, clock))
    });
}

#[test]
fn model_2d_a_direct_limiter_racing_with_refill() {
    check("2d direct take racing with refill", Some(4), || {
        refill_race_loses_and_invents_nothing(|clock| direct(3, clock))
    });
}

/// `try_acquire`'s own loop: models 1 and 2 hold for it too.
#[test]
fn model_1t_try_acquire_on_a_frozen_clock_admits_exactly_capacity() {
    check("1t direct try_acquire, frozen clock", Some(4), || {
        frozen_clock_admits_exactly_capacity(|clock| {
            DirectTry(DirectTokenBucket::with_clock(quota(2), clock.clone()).unwrap())
        })
    });
}

#[test]
fn model_2t_try_acquire_racing_with_refill() {
    check("2t direct try_acquire racing with refill", Some(4), || {
        refill_race_loses_and_invents_nothing(|clock| {
            DirectTry(DirectTokenBucket::with_clock(quota(3), clock.clone()).unwrap())
        })
    });
}

#[test]
#[should_panic(expected = "frozen clock:")]
fn mutant_1t_try_acquire_retrying_a_stale_value_is_rejected() {
    use turnstile::loom_hooks::{Mutant as Broken, with_mutant};
    check(
        "1t mutant: try_acquire retries a stale value",
        Some(4),
        || {
            with_mutant(Broken::TryWithStaleValue, || {
                frozen_clock_admits_exactly_capacity(|clock| {
                    DirectTry(DirectTokenBucket::with_clock(quota(2), clock.clone()).unwrap())
                })
            })
        },
    );
}

/// Mutant 2: the refill written with a plain store before the take's CAS — it can
/// overwrite another thread's take and hand the same token out twice.
fn refill_by_store(word: &AtomicU64, rules: &TokenBucketRules, now: u64, cost: u32) -> Decision {
    let current = word.load(Ordering::Relaxed);
    let (refilled, _) = WordAlgorithm::acquire(rules, current, now, 0);
    word.store(refilled, Ordering::Relaxed);
    acquire_word(rules, word, now, cost).expect("no sweeper in this model")
}

#[test]
#[should_panic(expected = "refill race:")]
fn mutant_2_refill_by_plain_store_is_rejected() {
    check("2 mutant: refill by plain store", Some(4), || {
        refill_race_loses_and_invents_nothing(|clock| Mutant::new(3, clock, refill_by_store))
    });
}

// ---------------------------------------------------------------------------
// Model 3: weighted acquire racing with single takes — all or nothing.

fn weighted_takes_are_all_or_nothing<B: Bucket>(make: fn(&ManualClock) -> B) {
    let bucket = Arc::new(make(&ManualClock::new()));
    let heavy = spawn(&bucket, |b| 2 * allowed(b.acquire(2)));
    let light = spawn(&bucket, |b| allowed(b.acquire(1)) + allowed(b.acquire(1)));
    let taken = heavy.join().unwrap() + light.join().unwrap();
    assert_eq!(
        taken + bucket.peek(),
        3,
        "weighted: {taken} taken by allowed requests, {} left of 3",
        bucket.peek()
    );
}

#[test]
fn model_3_weighted_acquire_is_all_or_nothing() {
    check("3 weighted vs single takes", None, || {
        weighted_takes_are_all_or_nothing(|clock| real_with_key(3, clock))
    });
}

/// Mutant 3: a CAS loop that retries with the new word it computed from a stale value,
/// instead of recomputing from the value it found.
fn stale_retry(word: &AtomicU64, rules: &TokenBucketRules, now: u64, cost: u32) -> Decision {
    let mut current = word.load(Ordering::Relaxed);
    let (new, decision) = WordAlgorithm::acquire(rules, current, now, cost);
    if new == current {
        return decision;
    }
    loop {
        match word.compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}

#[test]
#[should_panic(expected = "weighted:")]
fn mutant_3_stale_retry_is_rejected() {
    check("3 mutant: stale retry", None, || {
        weighted_takes_are_all_or_nothing(|clock| Mutant::new(3, clock, stale_retry))
    });
}

// ---------------------------------------------------------------------------
// Model 4: the first request for a new key from three threads — one state, one token.

trait Limiter: Send + Sync + 'static {
    fn take(&self, cost: u32) -> Decision;
}

impl Limiter for TokenBucket<u64, ManualClock> {
    fn take(&self, cost: u32) -> Decision {
        RateLimiter::acquire(self, &KEY, cost)
    }
}

fn first_requests_create_one_bucket<L: Limiter>(limiter: L) {
    let limiter = Arc::new(limiter);
    let others = [0, 1].map(|_| {
        let limiter = limiter.clone();
        thread::spawn(move || allowed(limiter.take(1)))
    });
    let total = allowed(limiter.take(1)) + others.map(|h| h.join().unwrap()).iter().sum::<u32>();
    assert_eq!(total, 1, "first request: {total} allowed with capacity 1");
}

#[test]
fn model_4_first_request_creates_exactly_one_state() {
    check("4 first request from three threads", Some(4), || {
        let limiter = TokenBucket::<u64, _>::with_clock(quota(1), ManualClock::new()).unwrap();
        first_requests_create_one_bucket(limiter);
    });
}

/// Mutant 4: per-key state created by a lookup, then a separate insert — two threads
/// can both miss, both insert a full bucket, and both be allowed.
struct GetThenInsert {
    words: Mutex<HashMap<u64, Arc<AtomicU64>>>,
    rules: TokenBucketRules,
}

impl Limiter for GetThenInsert {
    fn take(&self, cost: u32) -> Decision {
        let found = self.words.lock().unwrap().get(&KEY).cloned();
        let word = found.unwrap_or_else(|| {
            let fresh = Arc::new(AtomicU64::new(self.rules.full()));
            self.words.lock().unwrap().insert(KEY, fresh.clone());
            fresh
        });
        acquire_word(&self.rules, &word, 0, cost).expect("no sweeper in this model")
    }
}

#[test]
#[should_panic(expected = "first request:")]
fn mutant_4_get_then_insert_is_rejected() {
    check("4 mutant: get then insert", Some(4), || {
        first_requests_create_one_bucket(GetThenInsert {
            words: Mutex::new(HashMap::new()),
            rules: TokenBucketRules::new(&quota(1)),
        });
    });
}

// ---------------------------------------------------------------------------
// Model 5: readings that go backwards between threads — no underflow, limit holds.

fn skewed_readings_never_over_admit<B: Bucket>(make: fn(&ManualClock) -> B) {
    let clock = ManualClock::new();
    let bucket = Arc::new(make(&clock));
    assert!(bucket.acquire(3).is_allowed()); // drained at 0; capacity 3 never binds
    let late = {
        let (bucket, clock) = (bucket.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(2 * INTERVAL));
            let first = allowed(bucket.acquire(1));
            clock.set(Duration::from_nanos(2 * INTERVAL));
            first + allowed(bucket.acquire(1))
        })
    };
    let behind = {
        let (bucket, clock) = (bucket.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(INTERVAL)); // a core whose clock lags
            allowed(bucket.acquire(1))
        })
    };
    let taken = late.join().unwrap() + behind.join().unwrap();
    assert!(taken <= 2, "skew: {taken} allowed, 2 intervals elapsed");
    clock.set(Duration::from_nanos(2 * INTERVAL));
    assert_eq!(
        taken + bucket.peek(),
        2,
        "skew: tokens taken + left != tokens refilled"
    );
}

#[test]
fn model_5_backward_readings_keep_the_limit() {
    check("5 clock readings going backwards", Some(4), || {
        skewed_readings_never_over_admit(|clock| Real::new(3, clock))
    });
}

/// Mutant 5: the tokens a reading holds computed in wrapping arithmetic — a reading
/// far behind the word (more than the capacity's worth of grid points) wraps round
/// to a full bucket and takes tokens spoken for.
fn wrapping_tokens(word: &AtomicU64, rules: &TokenBucketRules, now: u64, cost: u32) -> Decision {
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let index = now / rules.interval();
        let capacity = rules.capacity();
        let tokens = (capacity + index).wrapping_sub(current).min(capacity);
        let cost = u64::from(cost);
        if cost > tokens {
            return WordAlgorithm::acquire(rules, current, now, cost as u32).1;
        }
        let new = current.max(index) + cost;
        let decision = Decision::Allowed {
            remaining: (tokens - cost) as u32,
        };
        match word.compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}

#[test]
#[should_panic(expected = "skew:")]
fn mutant_5_wrapping_tokens_is_rejected() {
    check("5 mutant: wrapping tokens", Some(4), || {
        skewed_readings_never_over_admit(|clock| Mutant::new(3, clock, wrapping_tokens))
    });
}

// ---------------------------------------------------------------------------
// Model 7: a refund racing with a take — nothing lost, never above capacity.

trait Refunding: Bucket {
    fn refund(&self, cost: u32);
}

impl Refunding for Real {
    fn refund(&self, cost: u32) {
        self.0.refund(&KEY, cost)
    }
}

/// A mutant whose refund reads, computes and stores instead of compare-and-setting.
struct StoreRefund(Mutant);

impl Bucket for StoreRefund {
    fn acquire(&self, cost: u32) -> Decision {
        self.0.acquire(cost)
    }
    fn peek(&self) -> u32 {
        self.0.peek()
    }
    fn word(&self) -> (u64, TokenBucketRules) {
        self.0.word()
    }
}

impl Refunding for StoreRefund {
    fn refund(&self, cost: u32) {
        let Mutant {
            word, rules, clock, ..
        } = &self.0;
        let current = word.load(Ordering::Relaxed);
        word.store(
            WordAlgorithm::refund(rules, current, clock.now(), cost),
            Ordering::Relaxed,
        );
    }
}

fn refund_racing_with_take<B: Refunding>(make: fn(&ManualClock) -> B) {
    let bucket = Arc::new(make(&ManualClock::new()));
    // A two-check policy took 2, then its second check refused: it gives them back.
    let undone = spawn(&bucket, |b| {
        if b.acquire(2).is_allowed() {
            b.refund(2);
        }
        b.peek()
    });
    let kept = spawn(&bucket, |b| allowed(b.acquire(1)));
    let seen = undone.join().unwrap();
    let kept = kept.join().unwrap();
    assert!(seen <= 3, "refund: {seen} tokens seen with capacity 3");
    let left = bucket.peek();
    assert_eq!(
        kept + left,
        3,
        "refund: {kept} kept + {left} left != capacity 3"
    );
}

#[test]
fn model_7_refund_racing_with_take() {
    check("7 refund racing with take", None, || {
        refund_racing_with_take(|clock| real_with_key(3, clock))
    });
}

#[test]
#[should_panic(expected = "refund:")]
fn mutant_7_refund_by_plain_store_is_rejected() {
    check("7 mutant: refund by plain store", None, || {
        refund_racing_with_take(|clock| StoreRefund(Mutant::new(3, clock, acquire_cas)))
    });
}

/// The correct CAS protocol, for mutants that break something else.
fn acquire_cas(word: &AtomicU64, rules: &TokenBucketRules, now: u64, cost: u32) -> Decision {
    acquire_word(rules, word, now, cost).expect("no sweeper in this model")
}
