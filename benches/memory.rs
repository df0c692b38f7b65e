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
//! millisecond), from 1 and from 2 request threads. With N threads, thread t checks
//! keys t, t + N, t + 2N, …; the threads start together (a barrier) and share one
//! clock, each advancing it 10 µs per key it checks, so the clock moves 10 µs per key
//! overall and about 100,000 keys carry information at any moment (the eviction
//! margin is 1 s) whatever N is. turnstile forgets idle keys on its own; governor never
//! does. Each run is its own child process. Writes `churn_memory.csv`, one row per
//! limiter and thread count: the peak number of keys (`len()` sampled by each thread
//! every 1,024 of its keys), the keys held at the end of the stream, the growth of the
//! peak resident set (`VmHWM` at the end minus `VmRSS` before the limiter was built),
//! the stream's wall time (from the threads' release to the last one's end) and, with
//! one request thread only, the heap. The heap is counted per thread
//! (allocation-counter): with one request thread the counter sees what that thread
//! allocated and freed, the limiter's construction included, but not what turnstile's
//! sweeper thread freed; with several request threads no one thread's count is the
//! process's, so the heap columns are left out (`-`) and only the resident set tells
//! the process's peak.
//!
//! One stream by hand, printed as its CSV row (the heading and a readable line go to
//! stderr, the line with the keys turnstile forgot and the requests it answered at
//! its cap, the process's CPU time and its sweeper thread's): `memory --stream LIMITER [THREADS]` — LIMITER one of `turnstile`,
//! `turnstile-words`, `turnstile-capped` (`max_keys(250_000)`) and `governor`, THREADS
//! the request threads (default 1). For example `cargo bench --bench memory --
//! --stream turnstile 2`, or the built executable itself
//! (`target/release/deps/memory-*`), which repeats faster. The figures are noisy: run
//! each several times, interleaved, and quote medians.
//!
//! Last, the pause a sweep costs: `evict_idle()` over 1,000,000 keys, once when none
//! can be forgotten and once when all can. Writes `sweep.csv`. `memory --sweep` runs
//! that part alone (for a profiler).

mod common;

use common::{Mix, Pattern, full_mode, out_dir};
use governor::DefaultKeyedRateLimiter;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};
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
/// The limiters streamed, in `churn_memory.csv`'s order.
const STREAM_LIMITERS: [&str; 4] = [
    "turnstile",
    "turnstile-capped",
    "turnstile-words",
    "governor",
];
/// The request threads each limiter is streamed from: one (the figures of earlier
/// runs) and two (both cores of the machine the results name).
const STREAM_THREADS: [usize; 2] = [1, 2];
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
            || {
                FixedWindow::<K>::builder(small)
                    .manual_eviction()
                    .build()
                    .unwrap()
            },
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
        "sliding-log" => measure(keys, || SlidingLog::<K>::new(small).unwrap(), admit),
        "turnstile" => measure(
            keys,
            || {
                TokenBucket::<K>::builder(quota)
                    .manual_eviction()
                    .build()
                    .unwrap()
            },
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
                    .unwrap()
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
                    .unwrap()
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

/// What one stream of new keys measured.
struct StreamRun {
    peak_keys: usize,
    /// Keys the limiter still held when the last request thread finished.
    end_keys: usize,
    /// Keys turnstile's limiter had forgotten by then, and requests it had answered
    /// at its `max_keys` cap (governor forgets none and has no cap).
    forgotten: Option<(u64, u64)>,
    /// The streaming thread's peak heap and its heap at the end, with one request
    /// thread only (the count is per thread).
    heap: Option<(u64, i64)>,
    /// Growth of the process's peak resident set.
    peak_rss: u64,
    /// From the request threads' release to the last one's end.
    wall: Duration,
}

impl StreamRun {
    /// Its `churn_memory.csv` row ([`STREAM_HEADER`]).
    fn row(&self, limiter: &str, threads: usize) -> String {
        let (peak_heap, end_heap) = self.heap.map_or_else(
            || ("-".to_string(), "-".to_string()),
            |(peak, end)| (peak.to_string(), end.to_string()),
        );
        format!(
            "{limiter},{threads},{STREAM_KEYS},{},{},{peak_heap},{end_heap},{},{:.3}",
            self.peak_keys,
            self.end_keys,
            self.peak_rss,
            self.wall.as_secs_f64()
        )
    }
}

/// The columns of `churn_memory.csv`.
const STREAM_HEADER: &str = "limiter,threads,keys_streamed,peak_keys,end_keys,peak_heap_bytes,\
                             end_heap_bytes,peak_rss_growth_bytes,stream_secs";

/// Streams `STREAM_KEYS` distinct keys through `limiter` from `threads` request
/// threads, one check each, the shared clock advancing `STREAM_STEP` per key.
fn stream(limiter: &str, threads: usize) -> StreamRun {
    let rss_before = rss_bytes();
    let (capacity, every) = Mix::Allowed.quota(Pattern::Churn);
    match limiter {
        "turnstile" | "turnstile-words" | "turnstile-capped" => {
            let clock = ManualClock::new();
            let quota = Quota::new(capacity, every).expect("valid quota");
            let make = || {
                let builder = TokenBucket::<u64>::builder(quota).clock(clock.clone());
                match limiter {
                    "turnstile" => builder.build(),
                    "turnstile-words" => builder.word_store().build(),
                    // The hard bound: at the cap, new keys are answered by the overflow
                    // policy, never stored, never waited on.
                    _ => builder
                        .max_keys(STREAM_CAP, turnstile::Overflow::Deny)
                        .build(),
                }
                .expect("the token bucket holds every quota")
            };
            stream_through(
                threads,
                rss_before,
                make,
                |limiter, key| {
                    limiter.try_acquire(&key);
                    clock.advance(STREAM_STEP);
                },
                |limiter| limiter.len(),
                |limiter| {
                    let stats = limiter.stats();
                    Some((stats.evicted, stats.overflowed))
                },
            )
        }
        "governor" => {
            let clock = governor::clock::FakeRelativeClock::default();
            let quota = governor::Quota::with_period(every)
                .expect("non-zero period")
                .allow_burst(NonZeroU32::new(capacity).expect("non-zero"));
            let make = || governor::RateLimiter::dashmap_with_clock(quota, clock.clone());
            stream_through(
                threads,
                rss_before,
                make,
                |limiter, key| {
                    let _ = limiter.check_key(&key);
                    clock.advance(STREAM_STEP);
                },
                |limiter| limiter.len(),
                |_| None,
            )
        }
        other => panic!("unknown limiter {other}"),
    }
}

/// Builds the limiter and streams the keys through it inside the allocation counter;
/// the limiter is never dropped, so its heap counts as live at the end.
fn stream_through<L: Sync>(
    threads: usize,
    rss_before: u64,
    make: impl FnOnce() -> L,
    check: impl Fn(&L, u64) + Sync,
    len: impl Fn(&L) -> usize + Sync,
    forgotten: impl Fn(&L) -> Option<(u64, u64)>,
) -> StreamRun {
    let mut streamed = None;
    let info = allocation_counter::measure(|| {
        let limiter = make();
        let (peak_keys, wall) = drive(threads, |key| check(&limiter, key), || len(&limiter));
        streamed = Some((peak_keys, len(&limiter), forgotten(&limiter), wall));
        std::mem::forget(limiter);
    });
    let peak_rss = peak_rss_bytes().saturating_sub(rss_before);
    let (peak_keys, end_keys, forgotten, wall) = streamed.expect("streamed");
    StreamRun {
        peak_keys,
        end_keys,
        forgotten,
        heap: (threads == 1).then_some((info.bytes_max, info.bytes_current)),
        peak_rss,
        wall,
    }
}

/// CPU time (user + system) of this process so far, exited threads included, and of
/// its thread named `turnstile-sweeper` where it has one (a limiter's sweeper thread,
/// still alive: the limiter is never dropped), from `/proc` in clock ticks of 10 ms.
fn cpu_secs() -> (f64, Option<f64>) {
    let ticks = |stat: &str| -> f64 {
        // The fields after the command name, which is in parentheses: utime and stime
        // are the 14th and 15th of the line.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        (field(11).unwrap_or(0.0) + field(12).unwrap_or(0.0)) / 100.0
    };
    let process = ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default());
    let sweeper = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            // The kernel keeps 15 bytes of a thread's name.
            "turnstile-sweeper".starts_with(comm.trim()) && !comm.trim().is_empty()
        })
        .map(|task| ticks(&std::fs::read_to_string(task.path().join("stat")).unwrap_or_default()))
        .reduce(|a, b| a + b);
    (process, sweeper)
}

/// Runs `check` on every key of the stream, thread t of `threads` taking keys t,
/// t + threads, …; each thread samples `len` every 1,024 of its keys. One thread runs
/// on the caller (so its allocation count sees the stream); more start together on
/// a barrier. Returns the peak sampled and the wall time from the threads' release
/// to the last one's end.
fn drive(
    threads: usize,
    check: impl Fn(u64) + Sync,
    len: impl Fn() -> usize + Sync,
) -> (usize, Duration) {
    let thread_keys = |t: usize| {
        let mut peak = 0;
        for (i, key) in (t as u64..STREAM_KEYS).step_by(threads).enumerate() {
            check(key);
            if i % 1024 == 0 {
                peak = peak.max(len());
            }
        }
        peak
    };
    if threads == 1 {
        let started = Instant::now();
        let peak = thread_keys(0);
        return (peak, started.elapsed());
    }
    let barrier = Barrier::new(threads);
    let runs: Vec<(usize, Instant, Instant)> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, thread_keys) = (&barrier, &thread_keys);
                s.spawn(move || {
                    barrier.wait();
                    let started = Instant::now();
                    let peak = thread_keys(t);
                    (peak, started, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("request thread"))
            .collect()
    });
    let peak = runs.iter().map(|r| r.0).max().unwrap_or(0);
    let started = runs.iter().map(|r| r.1).min().expect("a thread");
    let ended = runs.iter().map(|r| r.2).max().expect("a thread");
    (peak, ended - started)
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
        .build()
        .unwrap();
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

/// What `--stream` takes, on a malformed command line.
fn stream_usage() -> ! {
    eprintln!(
        "usage: memory --stream LIMITER [THREADS]\n  LIMITER: {}\n  THREADS: request \
         threads, 1 or more (default 1)",
        STREAM_LIMITERS.join(", ")
    );
    std::process::exit(2)
}

/// `--stream LIMITER [THREADS]`: one stream, its CSV row on stdout; the heading and
/// a readable line on stderr.
fn stream_by_hand(args: &[String]) {
    let Some(limiter) = args
        .first()
        .filter(|l| STREAM_LIMITERS.contains(&l.as_str()))
    else {
        stream_usage()
    };
    let threads = match args.get(1).map(|n| n.parse::<usize>()) {
        None => 1,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => stream_usage(),
    };
    let run = stream(limiter, threads);
    let (cpu, sweeper) = cpu_secs();
    eprintln!("{STREAM_HEADER}");
    println!("{}", run.row(limiter, threads));
    let secs = run.wall.as_secs_f64();
    let forgotten = run
        .forgotten
        .map(|(keys, overflowed)| format!(", {keys} forgotten, {overflowed} at the cap"))
        .unwrap_or_default();
    let sweeper = sweeper.map_or_else(
        || "no sweeper thread".to_string(),
        |secs| format!("the sweeper thread's {secs:.1} s"),
    );
    eprintln!(
        "{limiter}, {threads} thr: peak {} keys, {} at the end{forgotten}; peak RSS growth \
         {:.1} MB; {secs:.2} s ({:.2} M keys/s); CPU {cpu:.1} s, {sweeper}",
        run.peak_keys,
        run.end_keys,
        run.peak_rss as f64 / 1e6,
        STREAM_KEYS as f64 / secs / 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        child(&args[pos + 1], &args[pos + 2]);
        return;
    }
    if args.iter().any(|a| a == "--sweep") {
        // The sweep's pauses alone (a profiler's target): `memory --sweep`.
        let (none, all) = sweep_pauses();
        println!("1000000,none,{:.2}", none.as_secs_f64() * 1e3);
        println!("1000000,all,{:.2}", all.as_secs_f64() * 1e3);
        return;
    }
    if let Some(pos) = args.iter().position(|a| a == "--stream") {
        // `cargo bench` adds `--bench` to the arguments given after `--`.
        let rest: Vec<String> = args[pos + 1..]
            .iter()
            .filter(|a| *a != "--bench")
            .cloned()
            .collect();
        stream_by_hand(&rest);
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

    let mut csv = format!("{STREAM_HEADER}\n");
    println!("{STREAM_HEADER}");
    for limiter in STREAM_LIMITERS {
        for threads in STREAM_THREADS {
            let output = Command::new(&exe)
                .args(["--stream", limiter, &threads.to_string()])
                .output()
                .expect("run child");
            assert!(
                output.status.success(),
                "stream of {limiter} on {threads} threads failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let row = String::from_utf8_lossy(&output.stdout).trim().to_string();
            println!("{row}");
            csv.push_str(&row);
            csv.push('\n');
        }
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
