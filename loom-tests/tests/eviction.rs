//! Forgetting idle keys, model-checked: a whole eviction cycle (`evict_idle`) forgets
//! a full key while two threads take from it. Exactly its capacity is admitted — and a
//! sweep that removes the key without retiring its word first is rejected (model 6).
//! Then the watermark: a request that meets a retired word (model 11; 11t in
//! `try_acquire`'s loop) or stores a forgotten key afresh without a lock (model 16 on
//! the ring, 16w on the word store: the insertion handshake of
//! `src/store/insertions.rs`) reads at least the sweep's instant; the sweeper
//! thread's handshake (model 12).
#![cfg(turnstile_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::check;
use std::time::Duration;
use turnstile::loom_hooks::sweep_without_retiring;
use turnstile::{ManualClock, Quota, TokenBucket};

const KEY: u64 = 3;

fn sweeping_never_grants_extra(sweep: fn(&TokenBucket<u64, ManualClock>)) {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u64>::builder(Quota::new(1, Duration::from_nanos(10)).unwrap())
        .clock(clock)
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build()
        .unwrap();
    // The key exists and is full (forgettable) with one token.
    assert!(limiter.acquire(&KEY, 0).is_allowed());
    let limiter = Arc::new(limiter);
    let takers = [0, 1].map(|_| {
        let limiter = limiter.clone();
        thread::spawn(move || u32::from(limiter.try_acquire(&KEY)))
    });
    sweep(&limiter);
    let allowed: u32 = takers.map(|t| t.join().unwrap()).iter().sum();
    assert_eq!(
        allowed, 1,
        "eviction: {allowed} allowed from a bucket holding 1 token"
    );
}

#[test]
fn model_6_sweeping_a_key_in_use_admits_exactly_capacity() {
    check("6 sweep racing two takes", Some(2), || {
        sweeping_never_grants_extra(|limiter| {
            limiter.evict_idle();
        })
    });
}

#[test]
#[should_panic(expected = "eviction:")]
fn mutant_6_removing_without_retiring_is_rejected() {
    check("6 mutant: remove without retiring", Some(2), || {
        sweeping_never_grants_extra(sweep_without_retiring)
    });
}

/// The retire protocol on a bare word, without the store's synchronization: a sweep
/// at 50 ns (margin 0) raises the watermark and retires a full bucket while a request
/// whose reading lags at 5 ns meets the word through `request` (the word protocol's
/// loop: `acquire_word`, or `admit_word` for `try_acquire`), which says whether it
/// found the word retired. If it did, the reading it then uses is at least the
/// watermark, so the fresh state it goes on to create starts no earlier than the
/// forgotten one was known to be full.
fn a_request_meeting_a_retired_word_sees_the_watermark(
    request: fn(
        &turnstile::loom_hooks::TokenBucketRules,
        &loom::sync::atomic::AtomicU64,
        u64,
    ) -> bool,
) {
    use loom::sync::atomic::AtomicU64;
    use turnstile::loom_hooks::{
        TokenBucketRules, Watermark, WordAlgorithm, retire_if_forgettable,
    };

    let rules = TokenBucketRules::new(&Quota::new(1, Duration::from_nanos(10)).unwrap());
    let word = Arc::new(AtomicU64::new(rules.fresh()));
    let watermark = Arc::new(Watermark::new());
    let sweeper = {
        let (word, watermark) = (word.clone(), watermark.clone());
        thread::spawn(move || {
            let at = watermark.begin(50);
            retire_if_forgettable(&rules, &word, at);
        })
    };
    if request(&rules, &word, watermark.reading(5)) {
        let reading = watermark.reading(5);
        assert_eq!(
            reading, 50,
            "watermark: a retired word's reader read {reading}"
        );
    }
    sweeper.join().unwrap();
}

/// Model 11's request by `acquire`'s loop: whether it found the word retired.
fn acquire_meets_retired(
    rules: &turnstile::loom_hooks::TokenBucketRules,
    word: &loom::sync::atomic::AtomicU64,
    reading: u64,
) -> bool {
    use turnstile::loom_hooks::{Blocked, acquire_word};
    matches!(acquire_word(rules, word, reading, 1), Err(Blocked::Retired))
}

/// Model 11t's request by `try_acquire`'s loop (`admit_word`, the step asked only
/// whether): whether it found the word retired.
fn admit_meets_retired(
    rules: &turnstile::loom_hooks::TokenBucketRules,
    word: &loom::sync::atomic::AtomicU64,
    reading: u64,
) -> bool {
    use turnstile::loom_hooks::{Blocked, admit_word};
    matches!(admit_word(rules, word, reading, 1), Err(Blocked::Retired))
}

#[test]
fn model_11_a_retired_word_publishes_the_watermark() {
    check("11 retired word and watermark", None, || {
        a_request_meeting_a_retired_word_sees_the_watermark(acquire_meets_retired)
    });
}

/// The mutant retires with Relaxed and takes no fence after raising the watermark:
/// either would order the raise before the retire on its own (the sweep's handshake
/// with insertions fences), so both go.
#[test]
#[should_panic(expected = "watermark:")]
fn mutant_11_retiring_unordered_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("11 mutant: unordered retire", None, || {
        with_mutant(Mutant::UnorderedRetire, || {
            a_request_meeting_a_retired_word_sees_the_watermark(acquire_meets_retired)
        })
    });
}

#[test]
fn model_11t_a_retired_word_publishes_the_watermark_to_admit() {
    check("11t retired word and watermark, admit", None, || {
        a_request_meeting_a_retired_word_sees_the_watermark(admit_meets_retired)
    });
}

/// The mutant returns from `admit_word` on a retired word without its Acquire fence:
/// the sweeper's Release then pairs with nothing on this side.
#[test]
#[should_panic(expected = "watermark:")]
fn mutant_11t_admitting_without_the_fence_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("11t mutant: admit without the fence", None, || {
        with_mutant(Mutant::AdmitWithoutFence, || {
            a_request_meeting_a_retired_word_sees_the_watermark(admit_meets_retired)
        })
    });
}

/// The sweeper thread's handshake, with no lock: a request for a sweep made while the
/// thread is busy or not yet parked is not lost — the thread takes it and sweeps, and
/// a stop then ends it.
fn a_sweep_request_is_never_lost() {
    use loom::sync::atomic::{AtomicU32, Ordering};
    use turnstile::loom_hooks::SweepSignal;

    let signal = Arc::new(SweepSignal::new());
    let swept = Arc::new(AtomicU32::new(0));
    let thread = {
        let (signal, swept) = (signal.clone(), swept.clone());
        thread::spawn(move || {
            while signal.wait() {
                // SeqCst: a plain counter the model reads; ordering is not under test.
                swept.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    signal.set_waiter(thread.thread().clone());
    signal.request();
    // The request is seen: wait for the sweep it asked for, then stop the thread.
    while swept.load(Ordering::SeqCst) == 0 {
        thread::yield_now();
    }
    signal.stop();
    thread.join().unwrap();
}

#[test]
fn model_12_a_sweep_request_is_never_lost() {
    check(
        "12 sweep request handshake",
        Some(3),
        a_sweep_request_is_never_lost,
    );
}

#[test]
#[should_panic(expected = "Model exceeded maximum number of branches")]
fn mutant_12_waking_before_asking_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("12 mutant: wake first", Some(3), || {
        with_mutant(Mutant::WakeFirst, a_sweep_request_is_never_lost)
    });
}

/// A new key's first request is applied before its state is published, with no lock:
/// it registers its insertion, then reads the watermark, and a sweep waits for the
/// insertions registered before it raised the watermark before it retires anything. A
/// request whose reading lags at 5 ns misses the key; meanwhile another request
/// stores it (at 5 ns: one token taken, full again at 10 ns) and a sweep at 50 ns
/// forgets it. If the lagging request then stores the key afresh, its reading must be
/// the sweep's watermark: a fresh word dated 5 ns would refill at 10 ns, so a request
/// at 20 ns, after all of them, would find a token the key, forgotten full at 50 ns
/// and taken from since, cannot have. At most two of the three requests are allowed.
/// On the ring, or on the word store (`word_store`).
fn a_new_key_reads_the_watermark_once_registered(word_store: bool) {
    let clock = ManualClock::new();
    let builder = TokenBucket::<u64>::builder(Quota::new(1, Duration::from_nanos(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(Duration::ZERO)
        .manual_eviction();
    let limiter = if word_store {
        builder.word_store().build().unwrap()
    } else {
        builder.build().unwrap()
    };
    clock.set(Duration::from_nanos(5));
    let limiter = Arc::new(limiter);
    let other = {
        let limiter = limiter.clone();
        thread::spawn(move || u32::from(limiter.try_acquire(&KEY)))
    };
    let sweeper = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(50));
            limiter.evict_idle();
        })
    };
    let lagging = u32::from(limiter.try_acquire(&KEY));
    let other = other.join().unwrap();
    sweeper.join().unwrap();
    clock.set(Duration::from_nanos(20));
    let last = u32::from(limiter.try_acquire(&KEY));
    let allowed = lagging + other + last;
    assert!(
        allowed <= 2,
        "new key: {allowed} of 3 allowed from a bucket of 1 refilled once"
    );
}

/// The ring at bound 2 (the whole cycle: about 30 s on the 2-core VM; bound 3 runs
/// for tens of minutes). On the ring a reading taken before registering is harmless
/// within that bound: a rotation between the look and the registration sends the
/// insertion back to look again (model 19), so the early-reading mutant is rejected on
/// the word store, whose insertions have no such check, at bound 3.
#[test]
fn model_16_a_new_key_reads_the_watermark_once_registered() {
    check("16 new key and watermark", Some(2), || {
        a_new_key_reads_the_watermark_once_registered(false)
    });
}

#[test]
#[should_panic(expected = "new key:")]
fn mutant_16_a_sweep_that_does_not_wait_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("16 mutant: sweep without waiting", Some(2), || {
        with_mutant(Mutant::SweepWithoutWaiting, || {
            a_new_key_reads_the_watermark_once_registered(false)
        })
    });
}

#[test]
fn model_16w_a_new_key_reads_the_watermark_once_registered_in_the_word_store() {
    check("16w new key and watermark, word store", Some(3), || {
        a_new_key_reads_the_watermark_once_registered(true)
    });
}

#[test]
#[should_panic(expected = "new key:")]
fn mutant_16w_reading_before_registering_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("16w mutant: reading before registering", Some(3), || {
        with_mutant(Mutant::EarlyReading, || {
            a_new_key_reads_the_watermark_once_registered(true)
        })
    });
}

#[test]
#[should_panic(expected = "new key:")]
fn mutant_16w_a_sweep_that_does_not_wait_is_rejected() {
    use turnstile::loom_hooks::{Mutant, with_mutant};
    check("16w mutant: sweep without waiting", Some(3), || {
        with_mutant(Mutant::SweepWithoutWaiting, || {
            a_new_key_reads_the_watermark_once_registered(true)
        })
    });
}
