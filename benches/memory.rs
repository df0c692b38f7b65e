//! Memory per key: heap bytes (every allocation made while inserting, through a
//! counting global allocator) and resident set growth, after 1,000,000 `u64` keys
//! and 1,000,000 IPv4-string keys, for each limiter. Each case runs in its own child
//! process so RSS is not polluted by the one before. Writes `memory.csv`. The count is
//! per thread, and a limiter's sweeper thread grows its index (allocating the larger
//! table and freeing the outgrown one), so turnstile's limiters are built here with
//! `manual_eviction()`: the inserting thread grows the same tables (2²¹ slots at 1M
//! keys either way), and the count sees them.
//!
//! Then key churn: 10,000,000 distinct keys streamed through, each seen once, with a
//! simulated clock advancing 10 µs per key, under the churn quota (10 tokens, one per
//! millisecond). turnstile forgets idle keys on its own; governor never does. Writes
//! `churn_memory.csv` with the peak number of keys, the peak heap and the growth of
//! the peak resident set. The heap is counted per thread (allocation-counter), so
//! where turnstile's sweeper thread frees what the streaming thread allocated, only
//! the resident set tells the process's peak.
//!
//! Last, the pause a sweep costs: `evict_idle()` over 1,000,000 keys, once when none
//! can be forgotten and once when all can. Writes `sweep.csv`.

mod common;

use common::{Mix, Pattern, full_mode, out_dir};
use governor::DefaultKeyedRateLimiter;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{
    FixedWindow, Gcra, ManualClock, Quota, RateLimiter, SlidingLog, SlidingWindowCounter,
    TokenBucket,
};

const KEYS: usize = 1_000_000;
const STREAM_KEYS: u64 = 10_000_000;
const STREAM_STEP: Duration = Duration::from_micros(10);
/// `turnstile-capped`'s `max_keys`: about twice the stream's active keys (a key is
/// active for its margin of 1 s, 100,000 keys at 10 µs each).
const STREAM_CAP: usize = 250_000;
const LIMITERS: [&str; 10] = [
    "turnstile",
    "turnstile-words",
    "turnstile-presized",
    "mutex-per-key",
    "global-lock",
    "governor",
    "gcra",
    "fixed-window",
    "sliding-window",
    "sliding-log",
];
const KEY_TYPES: [&str; 2] = ["u64", "ipv4-string"];

/// Resident set size of this process in bytes (Linux `VmRSS`).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Peak resident set size of this process in bytes (Linux `VmHWM`).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Inserts every key with one check, inside the allocation counter; returns the live
/// heap bytes and the RSS growth, with the limiter still alive.
fn measure<K, L>(keys: &[K], make: impl FnOnce() -> L, check: impl Fn(&L, &K)) -> (i64, u64) {
    let rss_before = rss_bytes();
    let mut limiter = None;
    let info = allocation_counter::measure(|| {
        let built = make();
        for key in keys {
            check(&built, key);
        }
        limiter = Some(built);
    });
    let rss_after = rss_bytes();
    drop(limiter);
    (info.bytes_current, rss_after.saturating_sub(rss_before))
}

/// One request per key through any of turnstile's limiters.
fn admit<K: Hash + Eq + Clone, L: RateLimiter<K>>(limiter: &L, key: &K) {
    let _ = limiter.acquire(key, 1);
}

fn case<K: Hash + Eq + Clone + Send + Sync + 'static>(limiter: &str, keys: &[K]) -> (i64, u64) {
    let (capacity, every) = Mix::Allowed.quota(Pattern::Uniform);
    let quota = Quota::new(capacity, every).expect("valid quota");
    // The other algorithms under a quota each of them holds (see `with_algorithm`).
    let small = Quota::new(500, Duration::from_micros(2)).expect("valid quota");
    match limiter {
        "gcra" => measure(
            keys,
            || {
                Gcra::<K>::builder(small)
                    .manual_eviction()
                    .build()
                    .expect("fits")
            },
            admit,
        ),
        "fixed-window" => measure(
            keys,
            || FixedWindow::<K>::builder(small).manual_eviction().build(),
            admit,
        ),
        "sliding-window" => measure(
            keys,
            || {
                SlidingWindowCounter::<K>::builder(small)
                    .manual_eviction()
                    .build()
                    .expect("fits")
            },
            admit,
        ),
        "sliding-log" => measure(keys, || SlidingLog::<K>::new(small), admit),
        "turnstile" => measure(
            keys,
            || TokenBucket::<K>::builder(quota).manual_eviction().build(),
            admit,
        ),
        // The opt-in word store: keys and words side by side, no allocation per key.
        "turnstile-words" => measure(
            keys,
            || {
                TokenBucket::<K>::builder(quota)
                    .manual_eviction()
                    .word_store()
                    .build()
            },
            admit,
        ),
        // Told how many keys to expect, the map sizes its table once instead of growing
        // it by doubling; governor has no such setting.
        "turnstile-presized" => measure(
            keys,
            || {
                TokenBucket::<K>::builder(quota)
                    .expected_keys(keys.len())
                    .build()
            },
            admit,
        ),
        "mutex-per-key" => measure(
            keys,
            || MutexPerKey::<K>::new(quota),
            |l, k| {
                let _ = l.acquire(k, 1);
            },
        ),
        "global-lock" => measure(
            keys,
            || GlobalLock::<K>::new(quota),
            |l, k| {
                let _ = l.acquire(k, 1);
            },
        ),
        "governor" => {
            let quota = governor::Quota::with_period(every)
                .expect("non-zero period")
                .allow_burst(NonZeroU32::new(capacity).expect("non-zero"));
            measure(
                keys,
                || DefaultKeyedRateLimiter::<K>::keyed(quota),
                |l, k| {
                    let _ = l.check_key(k);
                },
            )
        }
        other => panic!("unknown limiter {other}"),
    }
}

/// Streams `STREAM_KEYS` distinct keys through `limiter`, one check each, the clock
/// advancing `STREAM_STEP` per key. Returns the peak key count (sampled every 1024
/// keys), the peak heap and the heap at the end.
fn stream(limiter: &str) -> (usize, u64, i64, u64) {
    let rss_before = rss_bytes();
    let (capacity, every) = Mix::Allowed.quota(Pattern::Churn);
    let mut peak_keys = 0;
    let info = match limiter {
        "turnstile" | "turnstile-words" | "turnstile-capped" => {
            let clock = ManualClock::new();
            let quota = Quota::new(capacity, every).expect("valid quota");
            allocation_counter::measure(|| {
                let builder = TokenBucket::<u64>::builder(quota).clock(clock.clone());
                let limiter = match limiter {
                    "turnstile" => builder.build(),
                    "turnstile-words" => builder.word_store().build(),
                    // The hard bound: at the cap, new keys are answered by the
                    // overflow policy, never stored, never waited on.
                    _ => builder
                        .max_keys(STREAM_CAP, turnstile::Overflow::Deny)
                        .build(),
                };
                for key in 0..STREAM_KEYS {
                    limiter.try_acquire(&key);
                    clock.advance(STREAM_STEP);
                    if key % 1024 == 0 {
                        peak_keys = peak_keys.max(limiter.len());
                    }
                }
                std::mem::forget(limiter); // keep its heap counted as live at the end
            })
        }
        "governor" => {
            let clock = governor::clock::FakeRelativeClock::default();
            let quota = governor::Quota::with_period(every)
                .expect("non-zero period")
                .allow_burst(NonZeroU32::new(capacity).expect("non-zero"));
            allocation_counter::measure(|| {
                let limiter = governor::RateLimiter::dashmap_with_clock(quota, clock.clone());
                for key in 0..STREAM_KEYS {
                    let _ = limiter.check_key(&key);
                    clock.advance(STREAM_STEP);
                    if key % 1024 == 0 {
                        peak_keys = peak_keys.max(limiter.len());
                    }
                }
                std::mem::forget(limiter);
            })
        }
        other => panic!("unknown limiter {other}"),
    };
    let peak_rss = peak_rss_bytes().saturating_sub(rss_before);
    (peak_keys, info.bytes_max, info.bytes_current, peak_rss)
}

/// The time `evict_idle()` takes over `SWEEP_KEYS` keys of which none, then all, can
/// be forgotten (median of three passes each; nothing is forgotten by the first).
fn sweep_pauses() -> (Duration, Duration) {
    const SWEEP_KEYS: u64 = 1_000_000;
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_millis(1)).expect("valid quota");
    let limiter = TokenBucket::<u64>::builder(quota)
        .clock(clock.clone())
        .eviction_margin(Duration::ZERO)
        .manual_eviction()
        .build();
    for key in 0..SWEEP_KEYS {
        assert!(limiter.try_acquire(&key)); // 9 of 10 left: not forgettable yet
    }
    let mut none = Vec::new();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        assert_eq!(limiter.evict_idle(), 0);
        none.push(started.elapsed());
    }
    none.sort();
    clock.set(Duration::from_millis(10)); // every bucket full again
    let started = std::time::Instant::now();
    assert_eq!(limiter.evict_idle(), SWEEP_KEYS as usize);
    (none[1], started.elapsed())
}

/// The child: one limiter, one key type; prints `heap_bytes rss_bytes`.
fn child(limiter: &str, key_type: &str) {
    let (heap, rss) = match key_type {
        "u64" => case(limiter, &(0..KEYS as u64).collect::<Vec<_>>()),
        "ipv4-string" => {
            let keys: Vec<String> = (0..KEYS as u32)
                .map(|i| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255))
                .collect();
            case(limiter, &keys)
        }
        other => panic!("unknown key type {other}"),
    };
    println!("{heap} {rss}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        child(&args[pos + 1], &args[pos + 2]);
        return;
    }
    if let Some(pos) = args.iter().position(|a| a == "--stream") {
        let (peak_keys, peak_heap, end_heap, peak_rss) = stream(&args[pos + 1]);
        println!("{peak_keys} {peak_heap} {end_heap} {peak_rss}");
        return;
    }
    let _ = full_mode(); // same figures in both modes: the measurement is exact
    let exe = std::env::current_exe().expect("own path");
    let mut csv = String::from("limiter,key_type,keys,heap_bytes_per_key,rss_bytes_per_key\n");
    println!("{}", csv.trim_end());
    for key_type in KEY_TYPES {
        for limiter in LIMITERS {
            let output = Command::new(&exe)
                .args(["--child", limiter, key_type])
                .output()
                .expect("run child");
            let text = String::from_utf8_lossy(&output.stdout);
            let mut fields = text
                .split_whitespace()
                .map(|f| f.parse::<f64>().expect("number"));
            let (heap, rss) = (fields.next().expect("heap"), fields.next().expect("rss"));
            let row = format!(
                "{limiter},{key_type},{KEYS},{:.1},{:.1}",
                heap / KEYS as f64,
                rss / KEYS as f64
            );
            println!("{row}");
            csv.push_str(&row);
            csv.push('\n');
        }
    }
    let path = out_dir().join("memory.csv");
    std::fs::write(&path, csv).expect("write memory.csv");
    eprintln!("wrote {}", path.display());

    let mut csv = String::from(
        "limiter,keys_streamed,peak_keys,peak_heap_bytes,end_heap_bytes,peak_rss_growth_bytes\n",
    );
    println!("{}", csv.trim_end());
    for limiter in [
        "turnstile",
        "turnstile-capped",
        "turnstile-words",
        "governor",
    ] {
        let output = Command::new(&exe)
            .args(["--stream", limiter])
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&output.stdout);
        let fields: Vec<&str> = text.split_whitespace().collect();
        let row = format!("{limiter},{STREAM_KEYS},{}", fields.join(","));
        println!("{row}");
        csv.push_str(&row);
        csv.push('\n');
    }
    let path = out_dir().join("churn_memory.csv");
    std::fs::write(&path, csv).expect("write churn_memory.csv");
    eprintln!("wrote {}", path.display());

    let (none, all) = sweep_pauses();
    let csv = format!(
        "keys,forgettable,pause_ms\n1000000,none,{:.2}\n1000000,all,{:.2}\n",
        none.as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e3
    );
    print!("{csv}");
    let path = out_dir().join("sweep.csv");
    std::fs::write(&path, csv).expect("write sweep.csv");
    eprintln!("wrote {}", path.display());
}
