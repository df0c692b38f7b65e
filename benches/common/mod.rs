//! What every benchmark binary shares: the contenders, the key patterns, the quotas
//! and the settings read from the environment.
#![allow(dead_code)]

pub mod direct;

use governor::DefaultKeyedRateLimiter;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use rayon::prelude::*;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::{
    Clock, FixedWindow, Gcra, QuantaClock, Quota, RateLimiter, RecentClock, SlidingLog,
    SlidingWindowCounter, TokenBucket,
};

/// Anything that answers "may `key` pass now?".
pub trait Contender: Send + Sync {
    fn check(&self, key: u64) -> bool;
}

/// One of turnstile's limiters, through the trait every one of them implements.
pub struct Ours<L>(pub L);

impl<L: RateLimiter<u64> + Send + Sync> Contender for Ours<L> {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.try_acquire(&key)
    }
}

impl Contender for DefaultKeyedRateLimiter<u64> {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// The words of the floors: a papaya map from keys to words, the default store's map
/// with its settings (incremental resize, 8 slots a step; removed entries handed to
/// reclamation 1,024 at a time, as `src/store/papaya/mod.rs` does: seize's default of 32
/// puts a `membarrier` system call after every 32 removals).
pub struct Words(papaya::HashMap<u64, AtomicU64, foldhash::fast::RandomState>);

impl Words {
    fn with_capacity(keys: usize) -> Self {
        Self(
            papaya::HashMap::builder()
                .collector(seize::Collector::new().batch_size(1024))
                .hasher(Default::default())
                .capacity(keys)
                .resize_mode(papaya::ResizeMode::Incremental(8))
                .build(),
        )
    }
}

/// How far behind the newest key a floor removes one under churn: the floor's map
/// stays about this large, as a limiter that forgets idle keys does.
const REMOVED_BEHIND: u64 = 100_000;

/// The floor under every keyed limiter: a clock reading, a lock-free lookup in the
/// default store's map (papaya), and one compare-and-set on the value found. No rate
/// limiting logic at all. Under churn it is papaya's bare insert-and-remove: each new
/// key inserted, and the key [`REMOVED_BEHIND`] before it removed.
pub struct FloorStack {
    clock: QuantaClock,
    words: Words,
    /// Under churn only: on every other pattern the floor keeps every key it is sent,
    /// as `turnstile-manual` and the rivals do. Removing behind on zipf, whose 1M keys
    /// are all sent before measuring, had left the floor's map about a tenth of them,
    /// the hottest made afresh, side by side, by the first checks: a floor with fewer
    /// cache misses than any map of every key (results/ANALYSIS.md, "The floor").
    removes_behind: bool,
}

impl FloorStack {
    /// One compare-and-set on `word`.
    #[inline]
    fn step(word: &AtomicU64, now: u64) -> bool {
        let current = word.load(Ordering::Relaxed);
        word.compare_exchange(
            current,
            current.wrapping_add(now | 1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_ok()
    }
}

impl Contender for FloorStack {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let now = self.clock.now();
        let words = self.words.0.pin();
        if let Some(word) = words.get(&key) {
            return Self::step(word, now);
        }
        // A new key: inserted with a ready word, as the store inserts; under churn the
        // one far behind it removed, as forgetting does.
        let word = words.get_or_insert(key, AtomicU64::new(0));
        let done = Self::step(word, now);
        if let Some(behind) = key
            .checked_sub(REMOVED_BEHIND)
            .filter(|_| self.removes_behind)
        {
            words.remove(&behind);
        }
        done
    }
}

/// The contention floor alone: one compare-and-set on a pre-resolved word per key
/// (the same words, so the same sharing between threads, as the key pattern).
pub struct FloorCas {
    words: Vec<AtomicU64>,
}

impl Contender for FloorCas {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let word = &self.words[key as usize % self.words.len()];
        let current = word.load(Ordering::Relaxed);
        word.compare_exchange(current, current + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// The floor's first part alone: one reading of the default clock.
pub struct FloorClock(QuantaClock);

impl Contender for FloorClock {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.now() & 1 == key & 1
    }
}

/// The floor's second part alone: a lock-free lookup in a map built like turnstile's
/// (every key stored beforehand), and a load of the word found.
pub struct FloorLookup(Words);

impl Contender for FloorLookup {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0
            .0
            .pin()
            .get(&key)
            .is_some_and(|word| word.load(Ordering::Relaxed) == 0)
    }
}

/// What `turnstile-presized` is sized for: more keys than a churn sample brings.
pub const PRESIZED_KEYS: usize = 1 << 20;

/// Which contenders run, in table order.
pub const LIMITERS: [&str; 6] = [
    "turnstile",
    "turnstile-words",
    "turnstile-recent",
    "mutex-per-key",
    "global-lock",
    "governor",
];
pub const FLOORS: [&str; 4] = ["floor-stack", "floor-cas", "floor-clock", "floor-lookup"];
/// With the `metrics` feature: turnstile named, its decisions counted by the
/// Prometheus exporter's recorder (installed for the whole process the first time).
#[cfg(feature = "metrics")]
pub const RECORDED: &[&str] = &["turnstile-prometheus"];
#[cfg(not(feature = "metrics"))]
pub const RECORDED: &[&str] = &[];

/// Nearly everything allowed, or nearly everything denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    Allowed,
    Denied,
}

impl Mix {
    pub fn name(self) -> &'static str {
        match self {
            Mix::Allowed => "allowed",
            Mix::Denied => "denied",
        }
    }

    /// Allowed: the largest burst there is (`u32::MAX`, one more a second), so no key
    /// runs dry within a benchmark. Denied: one token an hour, taken during setup.
    /// Churn (allowed: every key is new): 10 tokens, one more per millisecond — a
    /// quota under which an attacker's one-off keys become forgettable again, so
    /// limiters that forget keys do so during the run.
    pub fn quota(self, pattern: Pattern) -> (u32, Duration) {
        match (self, pattern) {
            (Mix::Allowed, Pattern::Churn) => (10, Duration::from_millis(1)),
            (Mix::Allowed, _) => (u32::MAX, Duration::from_secs(1)),
            (Mix::Denied, _) => (1, Duration::from_secs(3600)),
        }
    }
}

/// Something to do with a contender of a concrete type, so the hot loop is
/// monomorphised for each (no `dyn` call inside a measurement).
pub trait Visit {
    type Output;
    /// `make` builds a fresh contender each time it is called.
    fn visit<T: Contender + 'static>(
        self,
        make: impl Fn() -> T + Send + Sync + 'static,
    ) -> Self::Output;
}

/// Calls `visitor` with a maker for the contender called `name`, under the quota of
/// `mix` and `pattern`, sized for the pattern's key space.
pub fn with_contender<V: Visit>(name: &str, mix: Mix, pattern: Pattern, visitor: V) -> V::Output {
    let expected_keys = pattern.key_space();
    let (capacity, every) = mix.quota(pattern);
    let quota = Quota::new(capacity, every).expect("benchmark quotas are valid");
    match name {
        "turnstile" => visitor.visit(move || {
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(expected_keys)
                    .build()
                    .unwrap(),
            )
        }),
        "turnstile-recent" => visitor.visit(move || {
            let clock = RecentClock::new(Duration::from_millis(1)).expect("upkeep thread");
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .clock(clock)
                    .expected_keys(expected_keys)
                    .build()
                    .unwrap(),
            )
        }),
        // Named, with no recorder installed unless one was before (the instructions
        // benchmark runs each contender in a process of its own): the cost of the
        // `metrics` feature and a name alone.
        #[cfg(feature = "metrics")]
        "turnstile-named" => visitor.visit(move || {
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(expected_keys)
                    .name("bench")
                    .build()
                    .unwrap(),
            )
        }),
        #[cfg(feature = "metrics")]
        "turnstile-prometheus" => {
            static INSTALLED: std::sync::Once = std::sync::Once::new();
            INSTALLED.call_once(|| {
                metrics_exporter_prometheus::PrometheusBuilder::new()
                    .install_recorder()
                    .expect("no other recorder in a benchmark");
            });
            visitor.visit(move || {
                Ours(
                    TokenBucket::<u64>::builder(quota)
                        .expected_keys(expected_keys)
                        .name("bench")
                        .build()
                        .unwrap(),
                )
            })
        }
        // The opt-in word store, beside the default (papaya).
        "turnstile-words" => visitor.visit(move || {
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(expected_keys)
                    .word_store()
                    .build()
                    .unwrap(),
            )
        }),
        // Presized for a million keys whatever the pattern: churn's "with
        // `expected_keys`" (the plain "turnstile" is sized to the pattern's key space,
        // which churn does not have). Runs only where named.
        "turnstile-presized" => visitor.visit(move || {
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(PRESIZED_KEYS)
                    .build()
                    .unwrap(),
            )
        }),
        // No sweeper thread: what automatic sweeps cost, beside "turnstile".
        "turnstile-manual" => visitor.visit(move || {
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(expected_keys)
                    .manual_eviction()
                    .build()
                    .unwrap(),
            )
        }),
        "mutex-per-key" => visitor.visit(move || {
            Ours(
                MutexPerKey::<u64>::builder(quota)
                    .expected_keys(expected_keys)
                    .build(),
            )
        }),
        "global-lock" => visitor.visit(move || {
            Ours(
                GlobalLock::<u64>::builder(quota)
                    .expected_keys(expected_keys)
                    .build(),
            )
        }),
        "governor" => visitor.visit(move || {
            let quota = governor::Quota::with_period(every)
                .expect("non-zero period")
                .allow_burst(NonZeroU32::new(capacity).expect("non-zero burst"));
            DefaultKeyedRateLimiter::<u64>::keyed(quota)
        }),
        "floor-stack" => visitor.visit(move || FloorStack {
            clock: QuantaClock::new(),
            words: Words::with_capacity(expected_keys),
            removes_behind: pattern == Pattern::Churn,
        }),
        // papaya's bare insertion of a new key (and the clock and the CAS around
        // it), nothing removed behind: what issue 45 compares a new key with. Runs
        // only where named.
        "floor-insert" => visitor.visit(move || FloorStack {
            clock: QuantaClock::new(),
            words: Words::with_capacity(expected_keys),
            removes_behind: false,
        }),
        "floor-clock" => visitor.visit(move || FloorClock(QuantaClock::new())),
        "floor-lookup" => visitor.visit(move || {
            let words = Words::with_capacity(expected_keys);
            for key in 0..expected_keys as u64 {
                words.0.pin().insert(key, AtomicU64::new(0));
            }
            FloorLookup(words)
        }),
        "floor-cas" => visitor.visit(move || FloorCas {
            words: (0..expected_keys.max(1))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }),
        other => panic!("unknown contender {other}"),
    }
}

/// turnstile's algorithms, side by side on the uniform pattern.
pub const ALGORITHMS: [&str; 5] = [
    "token-bucket",
    "gcra",
    "fixed-window",
    "sliding-window",
    "sliding-log",
];

/// Calls `visitor` with a maker for the algorithm called `name`. Allowed: 500 per
/// millisecond per key (one token every 2 µs), which every algorithm holds — the
/// sliding window counter holds about √(window in ns) per window, and the sliding log
/// keeps a timestamp per admission still in the window — and which no key of the
/// uniform pattern exhausts. Denied: one an hour, taken during setup.
pub fn with_algorithm<V: Visit>(name: &str, mix: Mix, visitor: V) -> V::Output {
    let quota = match mix {
        Mix::Allowed => Quota::new(500, Duration::from_micros(2)),
        Mix::Denied => Quota::new(1, Duration::from_secs(3600)),
    }
    .expect("benchmark quotas are valid");
    let keys = Pattern::Uniform.key_space();
    match name {
        "token-bucket" => visitor.visit(move || {
            Ours(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(keys)
                    .build()
                    .unwrap(),
            )
        }),
        "gcra" => visitor.visit(move || {
            Ours(
                Gcra::<u64>::builder(quota)
                    .expected_keys(keys)
                    .build()
                    .expect("fits"),
            )
        }),
        "fixed-window" => visitor.visit(move || {
            Ours(
                FixedWindow::<u64>::builder(quota)
                    .expected_keys(keys)
                    .build()
                    .unwrap(),
            )
        }),
        "sliding-window" => visitor.visit(move || {
            let builder = SlidingWindowCounter::<u64>::builder(quota).expected_keys(keys);
            Ours(builder.build().expect("fits"))
        }),
        "sliding-log" => visitor.visit(move || {
            Ours(
                SlidingLog::<u64>::builder(quota)
                    .expected_keys(keys)
                    .build()
                    .unwrap(),
            )
        }),
        other => panic!("unknown algorithm {other}"),
    }
}

/// How keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Every request for one key.
    Hot,
    /// Uniform over 1,000 keys.
    Uniform,
    /// Zipf (exponent 1) over 1,000,000 keys.
    Zipf,
    /// Every request brings a never-seen key (rotating client ids).
    Churn,
}

impl Pattern {
    pub const ALL: [Pattern; 4] = [
        Pattern::Hot,
        Pattern::Uniform,
        Pattern::Zipf,
        Pattern::Churn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Hot => "hot",
            Pattern::Uniform => "uniform",
            Pattern::Zipf => "zipf",
            Pattern::Churn => "churn",
        }
    }

    /// Distinct keys the pattern draws from (churn: keys are made as it goes).
    pub fn key_space(self) -> usize {
        match self {
            Pattern::Hot => 1,
            Pattern::Uniform => 1_000,
            Pattern::Zipf => 1_000_000,
            Pattern::Churn => 0,
        }
    }

    /// A thread's precomputed key sequence (a power of two long, cycled), so no
    /// random number is drawn inside a measurement.
    pub fn keys(self, thread: usize) -> Vec<u64> {
        const LEN: usize = 1 << 16;
        let mut rng = SmallRng::seed_from_u64(0x5eed ^ thread as u64);
        match self {
            Pattern::Hot => vec![0; LEN],
            Pattern::Uniform => (0..LEN).map(|_| rng.random_range(0..1_000)).collect(),
            Pattern::Zipf => {
                let zipf = Zipf::new(1_000_000.0, 1.0).expect("valid zipf");
                (0..LEN).map(|_| zipf.sample(&mut rng) as u64 - 1).collect()
            }
            Pattern::Churn => Vec::new(),
        }
    }

    /// The first key of thread `thread`'s never-seen range (churn only).
    pub fn churn_base(thread: usize) -> u64 {
        (thread as u64 + 1) << 48
    }
}

/// Sends every key of the pattern's key space once (in parallel), so the map holds
/// them all before measuring; under `Mix::Denied` that also drains them.
pub fn prepopulate(contender: &dyn Contender, pattern: Pattern) {
    (0..pattern.key_space() as u64)
        .into_par_iter()
        .for_each(|key| {
            contender.check(key);
        });
}

/// A contender behind one dynamic call per sample; its hot loop is monomorphised.
pub trait Sampler: Sync {
    fn sample(&self, pattern: Pattern, keys: &[Vec<u64>], threads: usize, iters: u64) -> Duration;

    /// Called between rounds, untimed: frees what the round's samples left behind.
    fn settle(&self) {}
}

impl<T: Contender> Sampler for T {
    fn sample(&self, pattern: Pattern, keys: &[Vec<u64>], threads: usize, iters: u64) -> Duration {
        run(self, pattern, keys, threads, iters)
    }
}

/// A contender built afresh for every sample: for churn, where each sample grows a
/// map from empty, as criterion's churn runs do. The grown contenders are dropped
/// together at the end of the round, not one by one after each sample: a map of
/// boxed states frees hundreds of thousands of small blocks, and glibc merges them on
/// the next large allocation (`malloc_consolidate`) — a cost that would otherwise
/// land, every round, on whichever contender comes next in the rotation's fixed
/// cyclic order. At the end of the round it lands on the next round's first
/// contender, a different one each round: medians set it aside, and with the rounds
/// a multiple of the contenders (benches/ratios.rs) each goes first, and pays it, as
/// often as every other, so a paired comparison of two rounds' rates meets it
/// equally often on either side.
pub struct FreshEach<T, F> {
    make: F,
    grown: std::sync::Mutex<Vec<T>>,
}

impl<T, F> FreshEach<T, F> {
    pub fn new(make: F) -> Self {
        Self {
            make,
            grown: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl<T: Contender, F: Fn() -> T + Sync> Sampler for FreshEach<T, F> {
    fn sample(&self, pattern: Pattern, keys: &[Vec<u64>], threads: usize, iters: u64) -> Duration {
        let contender = (self.make)();
        let took = run(&contender, pattern, keys, threads, iters);
        self.grown.lock().expect("not poisoned").push(contender);
        took
    }

    fn settle(&self) {
        self.grown.lock().expect("not poisoned").clear();
    }
}

/// Rounds and the length of one sample for interleaved medians: longer in full mode.
pub fn interleaving() -> (usize, Duration) {
    if full_mode() {
        (21, Duration::from_millis(100))
    } else {
        (7, Duration::from_millis(40))
    }
}

/// Interleaved rounds: each contender's aggregate checks per second at `threads`, one
/// rate per round, in round order, where every round runs every contender once for
/// about `sample`, in an order rotated round by round. On a shared machine whose
/// speed drifts, every contender meets the same drift, so their ratios hold where
/// back-to-back runs can land in different weather; and the same round's rates of
/// two contenders are a pair (what `compare`'s sign test counts).
pub fn interleaved_rounds(
    contenders: &[&dyn Sampler],
    pattern: Pattern,
    keys: &[Vec<u64>],
    threads: usize,
    (rounds, sample): (usize, Duration),
) -> Vec<Vec<f64>> {
    // Calibrate: iterations per thread for about one sample's time.
    let probe = 100_000;
    let iters: Vec<u64> = contenders
        .iter()
        .map(|c| {
            let took = c.sample(pattern, keys, threads, probe);
            (probe as f64 * sample.as_secs_f64() / took.as_secs_f64()).max(1_000.0) as u64
        })
        .collect();
    contenders.iter().for_each(|c| c.settle());
    let mut rates = vec![Vec::new(); contenders.len()];
    for round in 0..rounds {
        // Rotate who goes first, so no contender always follows the same one.
        for k in 0..contenders.len() {
            let i = (k + round) % contenders.len();
            let took = contenders[i].sample(pattern, keys, threads, iters[i]);
            rates[i].push((threads as u64 * iters[i]) as f64 / took.as_secs_f64());
        }
        contenders.iter().for_each(|c| c.settle());
    }
    rates
}

/// One CSV row of an interleaved benchmark: the median of a contender's rounds, how
/// many rounds, and every round's rate (space-separated, in round order).
pub fn interleaved_row(scenario: &str, limiter: &str, threads: usize, rates: &[f64]) -> String {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let rounds: Vec<String> = rates.iter().map(|rate| format!("{rate:.0}")).collect();
    format!(
        "{scenario},{limiter},{threads},{median:.0},{},{}",
        rates.len(),
        rounds.join(" ")
    )
}

/// The header of [`interleaved_row`]'s CSV.
pub const INTERLEAVED_HEADER: &str =
    "scenario,limiter,threads,median_ops_per_sec,rounds,round_ops_per_sec\n";

/// Runs `iters` checks on each of `threads` threads released together by a barrier;
/// returns the wall time from the first thread's start to the last one's end.
pub fn run<T: Contender + ?Sized>(
    contender: &T,
    pattern: Pattern,
    keys: &[Vec<u64>],
    threads: usize,
    iters: u64,
) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    if pattern == Pattern::Churn {
                        let base = Pattern::churn_base(t);
                        for i in 0..iters {
                            black_box(contender.check(base + i));
                        }
                    } else {
                        let keys = &keys[t];
                        let mask = keys.len() - 1;
                        for i in 0..iters as usize {
                            black_box(contender.check(keys[i & mask]));
                        }
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread"))
            .collect()
    });
    let start = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let end = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    end - start
}

/// Thread counts to run: `TURNSTILE_BENCH_THREADS` (e.g. "1,2,4,8"), else 1, 2, 4, 8
/// plus the machine's core count when it has more than 8.
pub fn thread_counts() -> Vec<usize> {
    if let Ok(list) = std::env::var("TURNSTILE_BENCH_THREADS") {
        return list
            .split(',')
            .map(|n| n.trim().parse().expect("thread count"))
            .collect();
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1, 2, 4, 8];
    if cores > 8 {
        counts.push(cores);
    }
    counts
}

/// `TURNSTILE_BENCH_MODE=full` measures longer; anything else is the quick mode.
pub fn full_mode() -> bool {
    std::env::var("TURNSTILE_BENCH_MODE").is_ok_and(|m| m == "full")
}

/// Criterion as the throughput-style benchmarks run it: quick (10 samples of 400 ms
/// after 150 ms of warm-up) or, in full mode, 30 samples of 3 s after 1 s; no plots;
/// command-line filters honoured.
pub fn criterion() -> criterion::Criterion {
    let (warm_up, measure, samples) = if full_mode() {
        (Duration::from_secs(1), Duration::from_secs(3), 30)
    } else {
        (Duration::from_millis(150), Duration::from_millis(400), 10)
    };
    criterion::Criterion::default()
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(samples)
        .without_plots()
        .configure_from_args()
}

/// Whether the comma-separated list in environment variable `var` names `name`.
pub fn named(var: &str, name: &str) -> bool {
    std::env::var(var).is_ok_and(|list| list.split(',').any(|n| n == name))
}

/// Whether `name` runs: `var` is unset, or names it. `TURNSTILE_BENCH_PATTERNS=churn`
/// and `TURNSTILE_BENCH_LIMITERS=turnstile,governor` narrow a run to what is being
/// compared.
pub fn chosen(var: &str, name: &str) -> bool {
    std::env::var(var).is_err() || named(var, name)
}

/// Where the non-criterion benchmarks write their CSV files.
pub fn out_dir() -> PathBuf {
    let dir = std::env::var_os("TURNSTILE_BENCH_OUT")
        .map_or_else(|| PathBuf::from("target/turnstile-bench"), PathBuf::from);
    std::fs::create_dir_all(&dir).expect("create benchmark output directory");
    dir
}

/// Whether a contender should run for this pattern and mix: churn only brings new
/// (full) keys, so it has no denied mix; the CAS floor has no map, so no churn; the
/// clock and lookup parts of the floor do not depend on the pattern or the mix, so
/// they run once, beside the uniform allowed table.
pub fn applies(name: &str, pattern: Pattern, mix: Mix) -> bool {
    match name {
        "floor-clock" | "floor-lookup" => pattern == Pattern::Uniform && mix == Mix::Allowed,
        _ => !(pattern == Pattern::Churn && (mix == Mix::Denied || name == "floor-cas")),
    }
}
