//! Forgetting idle keys bounds memory and never changes a decision.

mod common;

use common::{Reference, ms};
use proptest::prelude::*;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::Duration;
use turnstile::{Decision, KeyStats, ManualClock, Overflow, Quota, RateLimiter, TokenBucket};

fn limiter(quota: Quota, clock: &ManualClock, margin: Duration) -> TokenBucket<u32, ManualClock> {
    TokenBucket::<u32>::builder(quota)
        .clock(clock.clone())
        .eviction_margin(margin)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Sweeping after every request never changes a decision, as long as no reading
    /// lags the newest one by the margin or more.
    #[test]
    fn sweeping_after_every_request_changes_no_decision(
        capacity in 1u32..=5,
        interval_us in 1u64..=500,
        margin_intervals in 0u64..=3,
        steps in prop::collection::vec((0u64..4_000, 0u64..100, 0u32..4, 0u32..=6), 1..200),
    ) {
        let quota = Quota::new(capacity, Duration::from_micros(interval_us)).unwrap();
        let interval = interval_us * 1000;
        let margin = margin_intervals * interval;
        let clock = ManualClock::new();
        let evicting = limiter(quota, &clock, Duration::from_nanos(margin));
        let mut reference = Reference::new(quota);
        let (mut newest, mut forgotten) = (0u64, 0usize);
        for (forward_us, lag_permille, key, cost) in steps {
            newest += forward_us * 1000 * interval_us / 100;
            // A reading behind the newest by less than the margin (skew, preemption).
            let lag = margin.saturating_sub(1) * lag_permille / 100;
            let now = newest - lag.min(newest);
            clock.set(Duration::from_nanos(now));
            let cost = cost.min(capacity + 1);
            prop_assert_eq!(evicting.acquire(&key, cost), reference.acquire(key, now, cost));
            prop_assert_eq!(evicting.peek(&key), reference.peek(key, now));
            clock.set(Duration::from_nanos(newest));
            forgotten += evicting.evict_idle();
        }
        // Not vacuous: across the cases, keys are forgotten (checked in aggregate below).
        prop_assert!(forgotten <= 200 * 4);
    }
}

#[test]
fn the_property_test_really_forgets_keys() {
    // The schedule shape of the property test, fixed: keys do get forgotten, and
    // decisions still match the reference.
    let quota = Quota::new(2, ms(1)).unwrap();
    let clock = ManualClock::new();
    let evicting = limiter(quota, &clock, Duration::ZERO);
    let mut reference = Reference::new(quota);
    let mut forgotten = 0;
    for step in 0..400u64 {
        let now = step * 700_000;
        clock.set(Duration::from_nanos(now));
        let key = (step % 3) as u32;
        assert_eq!(evicting.acquire(&key, 1), reference.acquire(key, now, 1));
        forgotten += evicting.evict_idle();
    }
    assert!(forgotten > 100, "only {forgotten} keys forgotten");
}

#[test]
fn a_reading_older_than_the_last_forgetting_counts_as_that_instant() {
    // Forgotten at 100 ms (margin 0). A core lagging at 5 ms then asks: its reading is
    // re-timed to 100 ms, so the fresh bucket is not drained by a reading from before
    // the forgetting and refilled again afterwards.
    let clock = ManualClock::new();
    let quota = Quota::new(2, ms(10)).unwrap();
    let limiter = limiter(quota, &clock, Duration::ZERO);
    let mut reference = Reference::new(quota);
    assert!(limiter.acquire(&1, 2).is_allowed());
    assert!(reference.acquire(1, 0, 2).is_allowed());
    clock.set(ms(100));
    assert_eq!(limiter.evict_idle(), 1);
    let watermark = 100_000_000;
    for reading in [5_000_000, watermark, watermark] {
        clock.set(Duration::from_nanos(reading));
        let expected = reference.acquire(1, reading.max(watermark), 2);
        assert_eq!(limiter.acquire(&1, 2), expected, "reading {reading}");
    }
}

#[test]
fn a_throttled_key_is_never_forgotten() {
    let clock = ManualClock::new();
    let limiter = limiter(Quota::new(3, ms(100)).unwrap(), &clock, Duration::ZERO);
    assert!(limiter.acquire(&1, 3).is_allowed());
    for _ in 0..10 {
        assert_eq!(limiter.evict_idle(), 0);
        assert!(!limiter.try_acquire(&1));
    }
    clock.advance(ms(100));
    assert_eq!(limiter.evict_idle(), 0, "one token back is not full");
    clock.advance(ms(200));
    assert_eq!(limiter.evict_idle(), 1, "full again: forgotten");
    assert_eq!(limiter.len(), 0);
    assert_eq!(limiter.acquire(&1, 3), Decision::Allowed { remaining: 0 });
}

#[test]
fn the_margin_keeps_a_key_until_it_has_been_full_that_long() {
    let clock = ManualClock::new();
    let limiter = limiter(Quota::new(1, ms(10)).unwrap(), &clock, ms(50));
    assert!(limiter.try_acquire(&1));
    clock.set(ms(59)); // full since 10 ms, for 49 ms
    assert_eq!(limiter.evict_idle(), 0);
    clock.set(ms(60)); // full for 50 ms
    assert_eq!(limiter.evict_idle(), 1);
}

/// Threads take from and touch (cost 0) many keys while another thread sweeps without
/// pause. A key is full — so forgettable — until its first take, so takes race with
/// the sweeper retiring the very word they are updating. With the clock frozen, each
/// key admits exactly its capacity: forgetting a full key and creating it again never
/// adds a token, and no take lands on a forgotten word.
#[test]
fn continuous_sweeping_under_load_admits_exactly_capacity_per_key() {
    const KEYS: u32 = 2048;
    const CAPACITY: u32 = 2;
    for round in 0..3 {
        let clock = ManualClock::new();
        let limiter = limiter(
            Quota::new(CAPACITY, ms(10)).unwrap(),
            &clock,
            Duration::ZERO,
        );
        // Every key is created full and forgotten (by automatic sweeps as the map
        // doubles, the rest by an explicit pass): forgetting runs in this test. The
        // sweeper thread may forget a key between its insertion and the request's use
        // of it; the request then creates it again, so a key can be forgotten twice.
        for key in 0..KEYS {
            assert!(limiter.acquire(&key, 0).is_allowed());
        }
        limiter.evict_idle();
        assert_eq!(limiter.len(), 0, "every key forgotten");
        assert!(limiter.stats().evicted >= u64::from(KEYS));
        let allowed: Vec<AtomicU32> = (0..KEYS).map(|_| AtomicU32::new(0)).collect();
        let done = AtomicBool::new(false);
        let barrier = Barrier::new(4);
        thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                while !done.load(Ordering::Acquire) {
                    limiter.evict_idle();
                }
            });
            let takers: Vec<_> = (0..3u32)
                .map(|t| {
                    let (limiter, allowed, barrier) = (&limiter, &allowed, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        for i in 0..KEYS * 8 {
                            let key = i.wrapping_mul(2_654_435_761).wrapping_add(t * 977) % KEYS;
                            if i % 4 != 0 {
                                assert!(limiter.acquire(&key, 0).is_allowed());
                            } else if limiter.try_acquire(&key) {
                                allowed[key as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // Finish every key, so each has been offered more than its capacity.
                        for key in 0..KEYS {
                            for _ in 0..CAPACITY {
                                if limiter.try_acquire(&key) {
                                    allowed[key as usize].fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    })
                })
                .collect();
            for taker in takers {
                taker.join().unwrap();
            }
            done.store(true, Ordering::Release);
        });
        for (key, count) in allowed.iter().enumerate() {
            assert_eq!(
                count.load(Ordering::Relaxed),
                CAPACITY,
                "round {round}, key {key}"
            );
        }
    }
}

/// Distinct keys streamed through with time advancing, each seen once: automatic
/// sweeping forgets every key but the active set, on the limiter's own thread. How
/// large the map grows meanwhile depends on that thread keeping up — no request waits
/// for it (a thread starved of CPU lets the map grow; `max_keys` is the hard bound,
/// tested below) — so what is checked is what the sweeps leave. (The heap itself is
/// measured in benches/memory.rs.)
#[test]
fn streaming_distinct_keys_forgets_all_but_the_active_set() {
    const KEYS: u32 = 200_000;
    const STEP_NS: u64 = 1_000;
    let interval = ms(1);
    let margin = ms(1);
    let run = |evicting: bool| {
        let clock = ManualClock::new();
        let mut builder = TokenBucket::<u32>::builder(Quota::new(1, interval).unwrap())
            .clock(clock.clone())
            .eviction_margin(margin);
        if !evicting {
            builder = builder.manual_eviction();
        }
        let limiter = builder.build().unwrap();
        for key in 0..KEYS {
            assert!(limiter.try_acquire(&key));
            clock.advance(Duration::from_nanos(STEP_NS));
        }
        let streamed = limiter.len();
        if evicting {
            // The thread was asked for sweeps along the way: it forgets keys on its
            // own (a hang detector, not a timing assertion).
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while limiter.stats().evicted == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the thread never swept"
                );
                std::thread::yield_now();
            }
        }
        // Wait for a sweep the thread may be running, then sweep once more: what is
        // left is what no sweep can forget.
        limiter.evict_idle();
        (streamed, limiter.len(), limiter.stats())
    };
    // A key is active from its request until its bucket is full again (the next grid
    // point, within one interval) plus the margin: at most this many keys at a time.
    let active = ((interval + margin).as_nanos() as u64 / STEP_NS + 1) as usize;
    let (_, left, stats) = run(true);
    assert!(left <= active, "{left} keys left; active set {active}");
    assert_eq!(stats.keys, left);
    assert!(
        stats.evicted >= u64::from(KEYS) - active as u64,
        "all but the active keys forgotten: {stats:?}"
    );
    let (kept_all, _, _) = run(false);
    assert_eq!(kept_all, KEYS as usize, "without sweeps, every key stays");
}

#[test]
fn at_the_end_of_the_clock_the_overflow_hint_is_the_time_left() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u32>::builder(Quota::new(1, ms(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(ms(5))
        .max_keys(1, Overflow::Deny)
        .build()
        .unwrap();
    let end = Duration::from_nanos(u64::MAX);
    clock.set(end - ms(1));
    assert!(limiter.try_acquire(&1)); // drained: not forgettable
    // The cap sweep runs now and finds nothing; the next may run 5 ms later, past
    // the clock's end: the hint is the 1 ms left.
    assert_eq!(
        limiter.acquire(&2, 1),
        Decision::Overflow { retry_hint: ms(1) }
    );
}

#[test]
fn at_the_cap_new_keys_are_denied_and_counted_until_room_is_made() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u32>::builder(Quota::new(2, ms(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(ms(5))
        .max_keys(100, Overflow::Deny)
        .build()
        .unwrap();
    for key in 0..100 {
        assert!(limiter.acquire(&key, 2).is_allowed()); // drained: not forgettable
    }
    let refused = limiter.acquire(&100, 1);
    assert!(matches!(refused, Decision::Overflow { .. }), "{refused:?}");
    assert!(!limiter.try_acquire(&101));
    assert_eq!(
        limiter.stats(),
        KeyStats {
            keys: 100,
            evicted: 0,
            overflowed: 2
        }
    );
    // Existing keys are served as before.
    clock.advance(ms(10));
    assert!(limiter.try_acquire(&7));
    // Once buckets are full again for the margin, a new key at the cap asks the
    // sweeper for room and is answered at once; once swept, new keys are stored.
    clock.advance(ms(30));
    let asked = limiter.acquire(&100, 1);
    assert!(matches!(asked, Decision::Overflow { .. }), "{asked:?}");
    limiter.evict_idle(); // as the sweeper thread does, here without waiting for it
    assert!(limiter.try_acquire(&100));
    assert_eq!(limiter.stats().evicted, 100);
}

/// One thread inserting into two limiters in turn (a policy's two checks on every
/// new client): each limiter's insertions draw their own size samples and ask their
/// own thread, so both are swept (a counter shared by the two once starved one of
/// them of every sample). How large each map grows meanwhile depends on its thread
/// keeping up, which no request waits for; what is checked is that each thread
/// forgets keys on its own.
#[test]
fn limiters_sharing_a_thread_are_each_swept() {
    const KEYS: u32 = 100_000;
    const STEP_NS: u64 = 1_000;
    let interval = ms(1);
    let clock = ManualClock::new();
    let make = || {
        TokenBucket::<u32>::builder(Quota::new(1, interval).unwrap())
            .clock(clock.clone())
            .eviction_margin(Duration::ZERO)
            .build()
            .unwrap()
    };
    let (first, second) = (make(), make());
    for key in 0..KEYS {
        assert!(first.try_acquire(&key));
        assert!(second.try_acquire(&key));
        clock.advance(Duration::from_nanos(STEP_NS));
    }
    // A hang detector, not a timing assertion: each thread was asked, and sweeps.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for (name, limiter) in [("first", &first), ("second", &second)] {
        while limiter.stats().evicted == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the {name} limiter was never swept"
            );
            std::thread::yield_now();
        }
    }
}

/// A cap far below the size at which forgetting is due on its own (1,024 keys): the
/// request at the cap asks for room, and the thread makes it.
fn the_sweeper_thread_makes_room_at_the_cap(word_store: bool) {
    let clock = ManualClock::new();
    let builder = TokenBucket::<u32>::builder(Quota::new(1, ms(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(ms(5))
        .max_keys(10, Overflow::Deny);
    let limiter = if word_store {
        builder.word_store().build().unwrap()
    } else {
        builder.build().unwrap()
    };
    for key in 0..10 {
        assert!(limiter.try_acquire(&key));
    }
    clock.advance(ms(30)); // every bucket full again, for longer than the margin
    assert!(!limiter.try_acquire(&10), "at the cap: answered at once");
    // The thread sweeps on its own; a hang detector, not a timing assertion.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while limiter.len() == 10 {
        assert!(std::time::Instant::now() < deadline, "no sweep came");
        std::thread::yield_now();
    }
    assert!(limiter.try_acquire(&10));
}

#[test]
fn the_sweeper_thread_makes_room_at_the_cap_with_no_call_from_the_user() {
    the_sweeper_thread_makes_room_at_the_cap(false);
}

#[test]
fn on_the_word_store_the_sweeper_thread_makes_room_at_the_cap() {
    the_sweeper_thread_makes_room_at_the_cap(true);
}

/// A key whose `Hash` panics on the limiter's sweeper thread (and only there), once
/// `ARMED` is set: it ends the thread at its first drain.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PanicsOnTheSweeper(u32);

static ARMED: AtomicBool = AtomicBool::new(false);

impl std::hash::Hash for PanicsOnTheSweeper {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        if ARMED.load(Ordering::Relaxed) && thread::current().name() == Some("turnstile-sweeper") {
            panic!("a key's Hash panicking on the sweeper thread (this test's own)");
        }
        self.0.hash(state);
    }
}

/// With its sweeper thread ended by a panic in a key's `Hash`, a limiter at its cap
/// still makes room: the request at the cap that finds no thread to ask does the
/// thread's work itself, and new keys are stored again.
#[test]
fn at_the_cap_with_the_thread_gone_a_request_makes_room() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<PanicsOnTheSweeper>::builder(Quota::new(1, ms(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(ms(5))
        .max_keys(10, Overflow::Deny)
        .build()
        .unwrap();
    for key in 0..10 {
        assert!(limiter.try_acquire(&PanicsOnTheSweeper(key)));
    }
    ARMED.store(true, Ordering::Relaxed);
    // Every bucket full again, for longer than the margin; each round moves the clock
    // past the period between two asks for room (the margin). A hang detector, not a
    // timing assertion: the thread ends at its first drain, and the request after
    // that makes the room.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut next = 100;
    loop {
        clock.advance(ms(30));
        if limiter.try_acquire(&PanicsOnTheSweeper(next)) {
            break;
        }
        next += 1;
        assert!(
            std::time::Instant::now() < deadline,
            "no room was ever made"
        );
        thread::yield_now();
    }
    assert!(
        limiter.len() <= 10,
        "{} keys held at a cap of 10",
        limiter.len()
    );
    assert!(limiter.stats().evicted > 0, "room made by forgetting");
}

#[test]
fn a_manual_limiter_at_the_cap_makes_room_only_when_told() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u32>::builder(Quota::new(1, ms(10)).unwrap())
        .clock(clock.clone())
        .eviction_margin(ms(5))
        .max_keys(10, Overflow::Deny)
        .manual_eviction()
        .build()
        .unwrap();
    for key in 0..10 {
        assert!(limiter.try_acquire(&key));
    }
    clock.advance(ms(30));
    for _ in 0..3 {
        assert!(!limiter.try_acquire(&10), "no request sweeps");
    }
    assert_eq!(limiter.evict_idle(), 10);
    assert!(limiter.try_acquire(&10));
}

#[test]
fn at_the_cap_new_keys_share_one_overflow_allowance() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::<u32>::builder(Quota::new(1, ms(10)).unwrap())
        .clock(clock.clone())
        .max_keys(10, Overflow::Shared(Quota::new(3, ms(100)).unwrap()))
        .build()
        .unwrap();
    for key in 0..10 {
        assert!(limiter.try_acquire(&key));
    }
    let shared: Vec<bool> = (1000..1005).map(|key| limiter.try_acquire(&key)).collect();
    assert_eq!(shared, [true, true, true, false, false]);
    assert_eq!(limiter.len(), 10);
    assert_eq!(limiter.stats().overflowed, 5);
}

/// A limiter that forgets after every step and a twin that never forgets answer every
/// request alike, for each algorithm — and keys do get forgotten along the way.
fn forgetting_twins_agree<L: RateLimiter<u32>>(
    name: &str,
    make: impl Fn(&ManualClock) -> L,
    forget: impl Fn(&L) -> usize,
) {
    let clock = ManualClock::new();
    let (forgetting, twin) = (make(&clock), make(&clock));
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    let (mut now, mut forgotten) = (0, 0);
    for step in 0..3_000 {
        now += next(4_000_000); // up to 4 ms: windows are 3 ms, refills 1 ms
        clock.set(Duration::from_nanos(now));
        let (key, cost) = (next(5) as u32, next(4) as u32);
        if next(8) == 0 {
            forgetting.refund(&key, cost);
            twin.refund(&key, cost);
        } else {
            assert_eq!(
                forgetting.acquire(&key, cost),
                twin.acquire(&key, cost),
                "{name}, step {step}"
            );
        }
        assert_eq!(
            forgetting.peek(&key),
            twin.peek(&key),
            "{name}, step {step}"
        );
        forgotten += forget(&forgetting);
    }
    assert!(forgotten > 100, "{name}: only {forgotten} keys forgotten");
}

#[test]
fn forgetting_changes_no_decision_for_any_algorithm() {
    use turnstile::{FixedWindow, Gcra, SlidingLog, SlidingWindowCounter};
    let quota = Quota::new(3, ms(1)).unwrap();
    let margin = Duration::ZERO;
    forgetting_twins_agree(
        "TokenBucket",
        |clock| {
            TokenBucket::<u32>::builder(quota)
                .clock(clock.clone())
                .eviction_margin(margin)
                .build()
                .unwrap()
        },
        |l| l.evict_idle(),
    );
    forgetting_twins_agree(
        "FixedWindow",
        |clock| {
            FixedWindow::<u32>::builder(quota)
                .clock(clock.clone())
                .eviction_margin(margin)
                .build()
                .unwrap()
        },
        |l| l.evict_idle(),
    );
    forgetting_twins_agree(
        "SlidingWindowCounter",
        |clock| {
            let builder = SlidingWindowCounter::<u32>::builder(quota).clock(clock.clone());
            builder.eviction_margin(margin).build().unwrap()
        },
        |l| l.evict_idle(),
    );
    forgetting_twins_agree(
        "SlidingLog",
        |clock| {
            SlidingLog::<u32>::builder(quota)
                .clock(clock.clone())
                .eviction_margin(margin)
                .build()
                .unwrap()
        },
        |l| l.evict_idle(),
    );
    forgetting_twins_agree(
        "Gcra",
        |clock| {
            Gcra::<u32>::builder(quota)
                .clock(clock.clone())
                .eviction_margin(margin)
                .build()
                .unwrap()
        },
        |l| l.evict_idle(),
    );
}

// The background sweeper is a std thread: not part of loom builds.
#[cfg(not(turnstile_loom))]
#[test]
fn a_background_sweeper_forgets_keys_without_any_request_and_stops_when_dropped() {
    let clock = ManualClock::new();
    let limiter = std::sync::Arc::new(
        TokenBucket::<u32>::builder(Quota::new(1, ms(10)).unwrap())
            .clock(clock.clone())
            .eviction_margin(Duration::ZERO)
            .manual_eviction()
            .build()
            .unwrap(),
    );
    for key in 0..100 {
        assert!(limiter.try_acquire(&key));
    }
    clock.set(ms(10)); // every bucket full again: all forgettable
    let sweeper = limiter.sweep_in_background(ms(1)).unwrap();
    // Wait (bounded) for the thread to do its work; no assertion on how long it took.
    for _ in 0..2_000 {
        if limiter.is_empty() {
            break;
        }
        thread::sleep(ms(1));
    }
    assert_eq!(limiter.stats().evicted, 100);
    drop(sweeper); // joins the thread
    for key in 0..10 {
        assert!(limiter.try_acquire(&key));
    }
    clock.set(ms(20));
    thread::sleep(ms(20));
    assert_eq!(limiter.len(), 10, "a dropped sweeper sweeps no more");
}

#[cfg(not(turnstile_loom))]
#[test]
fn a_background_sweeper_does_not_keep_its_limiter_alive() {
    let limiter =
        std::sync::Arc::new(TokenBucket::<u32>::new(Quota::per_second(1).unwrap()).unwrap());
    let weak = std::sync::Arc::downgrade(&limiter);
    let sweeper = limiter.sweep_in_background(ms(1)).unwrap();
    thread::sleep(ms(5)); // let it sweep a few times
    drop(limiter);
    // A sweep in progress holds a strong reference for its duration only.
    for _ in 0..1_000 {
        if weak.upgrade().is_none() {
            break;
        }
        thread::sleep(ms(1));
    }
    assert!(
        weak.upgrade().is_none(),
        "the limiter is freed while its sweeper runs"
    );
    drop(sweeper);
}

/// A key whose `Eq` panics while its first request is being inserted (after the
/// insertion registered with the sweeps, before it published): the panic reaches the
/// caller, the registration is let go on the way out, so a sweep afterwards does not
/// wait for it forever, and the key works on its next request.
#[test]
fn a_key_panicking_mid_insertion_holds_up_no_sweep() {
    use std::hash::{Hash, Hasher};
    use std::sync::atomic::{AtomicBool, Ordering};
    static ARMED: AtomicBool = AtomicBool::new(false);
    static COMPARED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[derive(Clone, Debug)]
    struct Touchy(u64);
    impl Hash for Touchy {
        fn hash<H: Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }
    impl PartialEq for Touchy {
        fn eq(&self, other: &Self) -> bool {
            // SeqCst: a test's switch and count; ordering is not under test. The
            // request's first comparison is its lookup's; the second, its insertion's.
            if ARMED.load(Ordering::SeqCst) && COMPARED.fetch_add(1, Ordering::SeqCst) == 1 {
                panic!("a key that panics when compared inside the insertion");
            }
            self.0 == other.0
        }
    }
    impl Eq for Touchy {}

    /// One hash for every key, so that the new key's insertion compares it with the
    /// stored one.
    #[derive(Clone, Default)]
    struct OneHash;
    struct OneHasher;
    impl Hasher for OneHasher {
        fn finish(&self) -> u64 {
            0x9e37_79b9_7f4a_7c15
        }
        fn write(&mut self, _: &[u8]) {}
    }
    impl std::hash::BuildHasher for OneHash {
        type Hasher = OneHasher;
        fn build_hasher(&self) -> OneHasher {
            OneHasher
        }
    }

    let clock = ManualClock::new();
    let limiter = TokenBucket::<Touchy>::builder(Quota::new(1, ms(1)).unwrap())
        .clock(clock.clone())
        .hasher(OneHash)
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build()
        .unwrap();
    assert!(limiter.try_acquire(&Touchy(1)));
    ARMED.store(true, Ordering::SeqCst);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        limiter.try_acquire(&Touchy(2))
    }));
    ARMED.store(false, Ordering::SeqCst);
    assert!(panicked.is_err(), "the key's panic reaches the caller");
    assert_eq!(
        COMPARED.load(Ordering::SeqCst),
        2,
        "it panicked in the insertion"
    );
    // On another thread, so that a sweep stuck on the insertion fails the test
    // (a hang detector, not a timing assertion).
    clock.advance(ms(10));
    let limiter = std::sync::Arc::new(limiter);
    let (done, swept) = std::sync::mpsc::channel();
    let sweeping = std::sync::Arc::clone(&limiter);
    // Not joined: a sweep stuck for ever must not keep the test from failing.
    std::thread::spawn(move || {
        let _ = done.send(sweeping.evict_idle());
    });
    let forgotten = swept
        .recv_timeout(Duration::from_secs(30))
        .expect("the sweep waited for an insertion that had panicked");
    assert_eq!(forgotten, 1, "the full key 1 is forgotten");
    assert!(
        limiter.try_acquire(&Touchy(2)),
        "the key works after the panic"
    );
}
