//! Per-call latency under contention: p50, p99, p99.9 and max of each check, timed
//! with the TSC and recorded in HDR histograms, for every limiter at 2 and 4 threads
//! on the hot-key, uniform and churn patterns. Writes `latency.csv` to the output
//! directory (see `common::out_dir`).
//!
//! Beside the maximum, how much of that slowest call the thread spent preempted —
//! runnable, waiting in the run queue for a CPU — as a lower and an upper bound (the
//! kernel's schedstat account, read between windows of calls). On a machine with
//! fewer cores than busy threads a maximum of a few milliseconds is mostly that wait,
//! whatever the limiter.

mod common;

use common::{
    Contender, FLOORS, LIMITERS, Mix, Pattern, Visit, applies, chosen, full_mode, named, out_dir,
    prepopulate, with_contender,
};
use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// Latency histogram in nanoseconds, 3 significant figures, up to 10 s.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid histogram bounds")
}

/// The calls of a thread are timed in windows of at most this many, and the
/// scheduler's account of the thread is read between windows (outside every timed
/// call).
const WINDOW: u64 = 1024;

/// A call slower than this (ns) ends its window, so that the account read next
/// covers little besides it.
const SLOW_CALL: u64 = 100_000;

/// What one run measured: every call's latency, and what the scheduler says of the
/// slowest call.
struct Measured {
    hist: Histogram<u64>,
    slowest: Slowest,
}

/// The slowest call of a run, and how much of it the thread spent runnable but
/// waiting for a CPU (preempted), as bounds: the account is read just before the
/// window's first call and just before its end is timed, so the `waited` ns it shows
/// cover the call (at most `waited` of it) and lie within the timed `window` (at least
/// `waited - (window - call)` of it). Up to the TSC's and the kernel's clocks agreeing
/// (their rates differ by well under 0.1 %). `None` where the kernel keeps no account
/// (not Linux, no schedstat).
#[derive(Clone, Copy, Default)]
struct Slowest {
    call: u64,
    preempted: Option<(u64, u64)>,
}

impl Slowest {
    fn consider(&mut self, call: u64, window: u64, waited: Option<u64>) {
        if call > self.call {
            let outside = window.saturating_sub(call);
            *self = Slowest {
                call,
                preempted: waited.map(|waited| (waited.saturating_sub(outside), waited.min(call))),
            };
        }
    }
}

/// The calling thread's nanoseconds spent runnable but waiting for a CPU, from
/// `/proc/thread-self/schedstat` (its second field), read without reopening.
struct RunQueueWait {
    file: Option<std::fs::File>,
}

impl RunQueueWait {
    /// Opened on the thread it accounts for (`thread-self` names the opener).
    fn open() -> Self {
        Self {
            file: std::fs::File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    fn read(&self) -> Option<u64> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt as _;
            let mut buf = [0u8; 96];
            let len = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
            let text = std::str::from_utf8(&buf[..len]).ok()?;
            text.split_whitespace().nth(1)?.parse().ok()
        }
        #[cfg(not(unix))]
        None
    }
}

/// `threads` threads check keys of `pattern` for `run_for`, each call timed alone.
fn measure<T: Contender>(
    contender: &T,
    pattern: Pattern,
    threads: usize,
    run_for: Duration,
) -> Measured {
    let barrier = Barrier::new(threads);
    let clock = quanta::Clock::new();
    let per_thread: Vec<Measured> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, clock) = (&barrier, &clock);
                s.spawn(move || {
                    let keys = pattern.keys(t);
                    let mask = keys.len() - 1;
                    let churn_base = Pattern::churn_base(t);
                    let mut hist = histogram();
                    let mut slowest = Slowest::default();
                    let run_queue = RunQueueWait::open();
                    barrier.wait();
                    let deadline = Instant::now() + run_for;
                    let mut i = 0u64;
                    loop {
                        let (window_start, waited_before) = (clock.raw(), run_queue.read());
                        let mut window_slowest = 0;
                        for _ in 0..WINDOW {
                            let key = if pattern == Pattern::Churn {
                                churn_base + i
                            } else {
                                keys[i as usize & mask]
                            };
                            let start = clock.raw();
                            black_box(contender.check(black_box(key)));
                            let end = clock.raw();
                            let call = clock.delta_as_nanos(start, end).max(1);
                            hist.record(call).expect("within bounds");
                            window_slowest = window_slowest.max(call);
                            i += 1;
                            if call > SLOW_CALL {
                                break; // read the account now: a short window, a tight bound
                            }
                        }
                        // The account first, then the clock: the wait read lies inside
                        // the window timed.
                        let waited_after = run_queue.read();
                        let window = clock.delta_as_nanos(window_start, clock.raw());
                        let waited = waited_after
                            .zip(waited_before)
                            .map(|(after, before)| after.saturating_sub(before));
                        slowest.consider(window_slowest, window, waited);
                        if Instant::now() >= deadline {
                            break;
                        }
                    }
                    Measured { hist, slowest }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("latency thread"))
            .collect()
    });
    let mut merged = Measured {
        hist: histogram(),
        slowest: Slowest::default(),
    };
    for measured in &per_thread {
        merged.hist.add(&measured.hist).expect("same bounds");
        if measured.slowest.call > merged.slowest.call {
            merged.slowest = measured.slowest;
        }
    }
    merged
}

struct Run<'a> {
    name: &'a str,
    pattern: Pattern,
    run_for: Duration,
    csv: &'a mut String,
}

impl Visit for Run<'_> {
    type Output = ();

    fn visit<T: Contender + 'static>(self, make: impl Fn() -> T + Send + Sync + 'static) {
        for threads in [2, 4] {
            let contender = make();
            prepopulate(&contender, self.pattern);
            let Measured { hist, slowest } =
                measure(&contender, self.pattern, threads, self.run_for);
            let (at_least, at_most) = slowest.preempted.map_or_else(
                || ("-".to_string(), "-".to_string()),
                |(least, most)| (least.to_string(), most.to_string()),
            );
            let row = format!(
                "{},{},{},{},{},{},{},{},{},{}",
                self.name,
                self.pattern.name(),
                threads,
                hist.len(),
                hist.value_at_quantile(0.5),
                hist.value_at_quantile(0.99),
                hist.value_at_quantile(0.999),
                hist.max(),
                at_least,
                at_most
            );
            println!("{row}");
            writeln!(self.csv, "{row}").expect("write to string");
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported here.
    let run_for = if full_mode() {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(300)
    };
    let mut csv = String::from(
        "limiter,pattern,threads,calls,p50_ns,p99_ns,p999_ns,max_ns,max_preempted_at_least_ns,max_preempted_at_most_ns\n",
    );
    println!("{}", csv.trim_end());
    for pattern in [Pattern::Hot, Pattern::Uniform, Pattern::Churn] {
        if !chosen("TURNSTILE_BENCH_PATTERNS", pattern.name()) {
            continue;
        }
        // The floor under the keyed limiters always (the tail no check on the same
        // clock and map can beat); the other floors, and `turnstile-manual` (no
        // sweeper thread), only when named.
        let extra = FLOORS
            .into_iter()
            .chain(["turnstile-manual"])
            .filter(|&name| name == "floor-stack" || named("TURNSTILE_BENCH_LIMITERS", name));
        for name in LIMITERS.into_iter().chain(extra) {
            if !chosen("TURNSTILE_BENCH_LIMITERS", name) || !applies(name, pattern, Mix::Allowed) {
                continue;
            }
            // Churn runs 3 s in either mode: past a limiter's first margin (1 s), so
            // that its sweeps are in the figures, and over at least 2M distinct keys.
            let run_for = match pattern {
                Pattern::Churn => Duration::from_secs(3),
                _ => run_for,
            };
            let run = Run {
                name,
                pattern,
                run_for,
                csv: &mut csv,
            };
            with_contender(name, Mix::Allowed, pattern, run);
        }
    }
    let path = out_dir().join("latency.csv");
    std::fs::write(&path, csv).expect("write latency.csv");
    eprintln!("wrote {}", path.display());
}
