//! Per-call latency under contention: p50, p99, p99.9 and max of each check, timed
//! with the TSC and recorded in HDR histograms, for every limiter at 2 and 4 threads
//! on the hot-key, uniform and churn patterns. Writes `latency.csv` to the output
//! directory (see `common::out_dir`).

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

/// `threads` threads check keys of `pattern` for `run_for`, each call timed alone.
fn measure<T: Contender>(
    contender: &T,
    pattern: Pattern,
    threads: usize,
    run_for: Duration,
) -> Histogram<u64> {
    let barrier = Barrier::new(threads);
    let clock = quanta::Clock::new();
    let per_thread: Vec<Histogram<u64>> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, clock) = (&barrier, &clock);
                s.spawn(move || {
                    let keys = pattern.keys(t);
                    let mask = keys.len() - 1;
                    let churn_base = Pattern::churn_base(t);
                    let mut hist = histogram();
                    barrier.wait();
                    let deadline = Instant::now() + run_for;
                    let mut i = 0u64;
                    while i % 1024 != 0 || Instant::now() < deadline {
                        let key = if pattern == Pattern::Churn {
                            churn_base + i
                        } else {
                            keys[i as usize & mask]
                        };
                        let start = clock.raw();
                        black_box(contender.check(black_box(key)));
                        let end = clock.raw();
                        hist.record(clock.delta_as_nanos(start, end).max(1))
                            .expect("within bounds");
                        i += 1;
                    }
                    hist
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("latency thread"))
            .collect()
    });
    let mut merged = histogram();
    for hist in &per_thread {
        merged.add(hist).expect("same bounds");
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
            let hist = measure(&contender, self.pattern, threads, self.run_for);
            let row = format!(
                "{},{},{},{},{},{},{},{}",
                self.name,
                self.pattern.name(),
                threads,
                hist.len(),
                hist.value_at_quantile(0.5),
                hist.value_at_quantile(0.99),
                hist.value_at_quantile(0.999),
                hist.max()
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
    let mut csv = String::from("limiter,pattern,threads,calls,p50_ns,p99_ns,p999_ns,max_ns\n");
    println!("{}", csv.trim_end());
    for pattern in [Pattern::Hot, Pattern::Uniform, Pattern::Churn] {
        if !chosen("TURNSTILE_BENCH_PATTERNS", pattern.name()) {
            continue;
        }
        // The floors, and `turnstile-manual` (no sweeper thread), only when named.
        let extra = FLOORS
            .into_iter()
            .chain(["turnstile-manual"])
            .filter(|&name| named("TURNSTILE_BENCH_LIMITERS", name));
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
