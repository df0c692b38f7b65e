//! A soak run: hours (or seconds) of mixed traffic against the keyed limiters, every
//! admission of every tracked key counted against the bound its algorithm documents,
//! resident memory sampled throughout; with `--redis`, a Redis token bucket that fails
//! closed, against a `redis-server` this binary kills (SIGKILL) and restarts, and
//! freezes (SIGSTOP), again and again.
//!
//! Not a test and not a criterion benchmark: CI only builds it. Run:
//!
//! ```text
//! cargo bench --bench soak -- --duration 20s
//! cargo bench --bench soak --features redis -- --duration 32m --redis
//! ```
//!
//! It writes `results/soak.md` and `results/soak.csv` and exits non-zero if any
//! tracked key was admitted beyond its bound, memory grew, or the fail-closed Redis
//! limiter decided or admitted without Redis. `--mutant` shows that the checks can
//! fail: every refund is sent twice and tallied once, as if the limiters invented
//! tokens, and each kill of Redis also deletes its files, so it restarts empty; the
//! run exits 0 only if over-admissions are then found on every limiter (and on Redis,
//! with `--redis`). It writes to a temporary directory unless `--out` is given.
//!
//! # The in-process part
//! Three worker threads send requests in *phases*: a phase is [`OPS_PER_PHASE`]
//! requests per thread, all at one reading of a [`ManualClock`]; between phases, with
//! every worker parked at a barrier, one of them tallies the phase's admissions and
//! moves the clock on (0 to 4 ms, now and then 1.5–4 s, so idle keys fill and are
//! forgotten). Because every request of a phase sees the same instant, each tracked
//! key's bound is exact, not a guess across clock skew. Seven limiters: token bucket,
//! GCRA and fixed window on papaya and on the word store (the word store's token
//! bucket capped with `max_keys`, overflow denied), and a reconfigurable token bucket
//! (papaya) whose first [`RECONFIGURED`] keys change quota every
//! [`RECONFIGURE_EVERY`] phases. Keys: a handful of hot ones, zipf over 100,000, and
//! churn (a new key every time, untracked: memory must stay bounded anyway, by
//! forgetting). One admission in ten is refunded at once.
//!
//! # The bound
//! For each tracked key the tally keeps the most the key could still admit given
//! every admission and refund counted so far (see [`Bound`]): the token bucket's
//! tokens refilled on the limiter's grid and capped at the capacity (so admissions in
//! any span are at most `capacity` plus the grid points in it, plus refunds), GCRA's
//! earliest possible theoretical arrival time (at most `capacity + ⌊span /
//! interval⌋`), the fixed window's count in the calendar window (at most `limit` in
//! each window: stricter than the 2× across a boundary). A phase whose admissions
//! exceed it is an over-admission of that many tokens. Refunds are credited before
//! the phase's admissions; each follows its own admission in the same phase, so a
//! refund is never cut by the cap and the bound is exact for this traffic: it never
//! accuses a correct limiter and misses no token too many. Forgetting needs no
//! allowance: a key is forgotten only when full (crate docs, `evict`), and a full key
//! is what the bound assumes of a key it has not seen. Two limiters forget with an
//! eviction margin of 0, so a key is forgotten the moment it is full, not a second
//! after: a sweep that forgot a key a token short would show there.
//!
//! The run passes when no tracked key went over its bound and memory stayed bounded:
//! the peak resident memory of the run's second half at most 1.25 times that of its
//! first half. Not covered here: clock readings that lag (every request of a phase
//! reads the same instant; the loom models and `tests/` cover lagging readings).
//!
//! # The Redis part
//! A `redis-server` on a free port with `--appendonly yes --appendfsync always` in a
//! fresh directory, so an admission Redis answered survives a SIGKILL. One task checks
//! four keys in turn on real time; the bound per key is the same upper model on
//! Redis's grid (Unix epoch, whole intervals): a check is decided with the key
//! refilled up to its reply, and the key is carried on refilled only up to the check's
//! send (the script ran in between), so no grid point is counted twice. A fifth key, on
//! a bucket of 5 refilled one token per 10 s, is asked every round and so is always
//! drained when an outage begins: a server that came back without its state would give
//! it 5 fresh tokens. Each cycle freezes the server for 3 s (SIGSTOP) and later kills it
//! (SIGKILL), restarting it 2 s later; a check sent and answered wholly while the server
//! was confirmed frozen or dead (the process seen stopped, or reaped) must not be a
//! decision, and the fail-closed limiter must admit nothing without Redis.

#[cfg(feature = "redis")]
#[path = "../tests/redis/server.rs"]
mod server;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use turnstile::{
    Clock, FixedWindow, Gcra, KeyStats, ManualClock, Overflow, PerKeyTokenBucket, Quota,
    RateLimiter, TokenBucket,
};

/// Worker threads: two cores here, so a third one measures preemption too.
const WORKERS: usize = 3;
/// Requests per worker per phase (one clock reading).
const OPS_PER_PHASE: usize = 2_000;
/// Hot keys: `0..HOT_KEYS`, a third of the traffic.
const HOT_KEYS: u64 = 8;
/// Zipf keys: `HOT_KEYS..HOT_KEYS + ZIPF_KEYS`, half of the traffic.
const ZIPF_KEYS: u64 = 100_000;
/// Tracked keys per limiter: the hot and the zipf ones (their key is their slot).
const TRACKED: usize = (HOT_KEYS + ZIPF_KEYS) as usize;
/// Churn keys start here, one new key per request, never tracked.
const CHURN_BASE: u64 = 1 << 40;
/// On the reconfigurable limiter, keys below this change quota at each
/// reconfiguration; the others keep the first quota of [`ROTATION`].
const RECONFIGURED: u64 = 256;
/// Phases between reconfigurations.
const RECONFIGURE_EVERY: u64 = 500;
/// The word store's token bucket holds at most about this many keys.
const KEY_CAP: usize = 150_000;
/// The reconfigurable limiter's quotas: (capacity, refill interval in ns). A key
/// below [`RECONFIGURED`] gets `ROTATION[(key + configuration) % 3]`.
const ROTATION: [(u32, u64); 3] = [(20, 10_000_000), (5, 2_000_000), (50, 25_000_000)];
/// The other limiters' quotas.
const TOKEN_BUCKET: (u32, u64) = ROTATION[0];
const GCRA: (u32, u64) = (10, 7_000_000);
/// Limit 50 in windows of 50 × 1 ms.
const FIXED_WINDOW: (u32, u64) = (50, 1_000_000);

fn quota((capacity, nanos): (u32, u64)) -> Quota {
    Quota::new(capacity, Duration::from_nanos(nanos)).expect("a valid quota")
}

/// The quota of `key` on the reconfigurable limiter under `configuration`.
fn rotation(key: u64, configuration: u64) -> (u32, u64) {
    if key < RECONFIGURED {
        ROTATION[((key + configuration) % 3) as usize]
    } else {
        ROTATION[0]
    }
}

/// Which bound a limiter's keys are held to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    TokenBucket,
    Gcra,
    FixedWindow,
    /// A token bucket whose keys' quotas follow [`rotation`].
    Reconfigured,
}

/// What the soak asks of a limiter, whatever its type.
trait Soaked: Send + Sync {
    fn acquire(&self, key: u64, cost: u32) -> bool;
    fn refund(&self, key: u64, cost: u32);
    fn stats(&self) -> KeyStats;
    /// Moves to `configuration` of [`rotation`] (the reconfigurable limiter only).
    fn reconfigure(&self, _configuration: u64) {}
}

macro_rules! soaked {
    ($ty:ty) => {
        impl Soaked for $ty {
            fn acquire(&self, key: u64, cost: u32) -> bool {
                RateLimiter::acquire(self, &key, cost).is_allowed()
            }
            fn refund(&self, key: u64, cost: u32) {
                RateLimiter::refund(self, &key, cost)
            }
            fn stats(&self) -> KeyStats {
                <$ty>::stats(self)
            }
        }
    };
}

soaked!(TokenBucket<u64, ManualClock>);
soaked!(Gcra<u64, ManualClock>);
soaked!(FixedWindow<u64, ManualClock>);

impl Soaked for PerKeyTokenBucket<u64, ManualClock> {
    fn acquire(&self, key: u64, cost: u32) -> bool {
        RateLimiter::acquire(self, &key, cost).is_allowed()
    }
    fn refund(&self, key: u64, cost: u32) {
        RateLimiter::refund(self, &key, cost)
    }
    fn stats(&self) -> KeyStats {
        PerKeyTokenBucket::stats(self)
    }
    fn reconfigure(&self, configuration: u64) {
        PerKeyTokenBucket::reconfigure(self, move |key| quota(rotation(*key, configuration)));
    }
}

/// One limiter under soak.
struct Subject {
    name: &'static str,
    store: &'static str,
    kind: Kind,
    limiter: Box<dyn Soaked>,
}

/// The seven limiters, all on `clock` (at zero: every epoch is zero).
fn subjects(clock: &ManualClock) -> Vec<Subject> {
    let tb = |words: bool, cap: bool| {
        let mut builder = TokenBucket::<u64, _>::builder(quota(TOKEN_BUCKET)).clock(clock.clone());
        if !words {
            builder = builder.eviction_margin(Duration::ZERO);
        }
        if words {
            builder = builder.word_store();
        }
        if cap {
            builder = builder.max_keys(KEY_CAP, Overflow::Deny);
        }
        Box::new(builder.build().expect("holds every quota")) as Box<dyn Soaked>
    };
    let gcra = |words: bool| {
        let mut builder = Gcra::<u64, _>::builder(quota(GCRA)).clock(clock.clone());
        if words {
            builder = builder.word_store().eviction_margin(Duration::ZERO);
        }
        Box::new(builder.build().expect("a GCRA quota")) as Box<dyn Soaked>
    };
    let fw = |words: bool| {
        let mut builder = FixedWindow::<u64, _>::builder(quota(FIXED_WINDOW)).clock(clock.clone());
        if words {
            builder = builder.word_store();
        }
        Box::new(builder.build().expect("holds every quota")) as Box<dyn Soaked>
    };
    let reconfigured: PerKeyTokenBucket<u64, ManualClock> =
        TokenBucket::<u64, _>::builder(quota(ROTATION[0]))
            .clock(clock.clone())
            .build_reconfigurable();
    Soaked::reconfigure(&reconfigured, 0);
    let subject = |name, store, kind, limiter| Subject {
        name,
        store,
        kind,
        limiter,
    };
    vec![
        subject(
            "token bucket (margin 0)",
            "papaya",
            Kind::TokenBucket,
            tb(false, false),
        ),
        subject(
            "token bucket (max_keys 150k, deny)",
            "words",
            Kind::TokenBucket,
            tb(true, true),
        ),
        subject("gcra", "papaya", Kind::Gcra, gcra(false)),
        subject("gcra (margin 0)", "words", Kind::Gcra, gcra(true)),
        subject("fixed window", "papaya", Kind::FixedWindow, fw(false)),
        subject("fixed window", "words", Kind::FixedWindow, fw(true)),
        subject(
            "token bucket, reconfigured",
            "papaya",
            Kind::Reconfigured,
            Box::new(reconfigured),
        ),
    ]
}

/// What the tally knows of one tracked key: the most it could still admit.
///
/// - token bucket: `level` is an upper bound on its tokens, `mark` the grid index it
///   was refilled to, `quota` its [`ROTATION`] index (reconfigured keys);
/// - GCRA: `mark` a lower bound on its theoretical arrival time (ns since the epoch);
/// - fixed window: `level` a lower bound on its count in window `mark`.
#[derive(Clone, Copy)]
struct Bound {
    level: i64,
    mark: u64,
    quota: u8,
    touched: bool,
}

/// One tracked key's admissions and refunds in one phase.
#[derive(Clone, Copy, Default)]
struct Tally {
    taken: u32,
    given: u32,
    /// Requests (any outcome): a reconfigured key moves at its first, even a denied one.
    asked: u32,
}

/// A request a worker records for the tally: limiter and slot, tokens taken and
/// given back.
#[derive(Clone, Copy)]
struct Event {
    at: u32,
    taken: u16,
    given: u16,
}

/// An over-admission, exactly as found.
struct Finding {
    limiter: usize,
    key: u64,
    at_ns: u64,
    taken: u32,
    given: u32,
    allowed: i64,
}

/// Every tracked key's bound, and what went over it.
struct Ledger {
    bounds: Vec<Bound>,
    tallies: Vec<Tally>,
    touched: Vec<u32>,
    kinds: Vec<Kind>,
    /// Per limiter: the largest over-admission found, and the phases with one.
    worst: Vec<i64>,
    violations: Vec<u64>,
    keys_touched: Vec<u64>,
    findings: Vec<Finding>,
}

impl Ledger {
    fn new(kinds: Vec<Kind>) -> Self {
        let mut bounds = Vec::with_capacity(kinds.len() * TRACKED);
        for kind in &kinds {
            let fresh = match kind {
                Kind::TokenBucket | Kind::Reconfigured => TOKEN_BUCKET.0 as i64,
                Kind::Gcra | Kind::FixedWindow => 0,
            };
            // Written out, not zeroed: the ledger's pages are resident from the first
            // sample on, so the memory curve shows the limiters, not the ledger.
            bounds.extend(std::iter::repeat_n(
                Bound {
                    level: fresh,
                    mark: 0,
                    quota: 0,
                    touched: false,
                },
                TRACKED,
            ));
        }
        let n = kinds.len();
        Self {
            tallies: vec![Tally::default(); bounds.len()],
            bounds,
            touched: Vec::new(),
            kinds,
            worst: vec![0; n],
            violations: vec![0; n],
            keys_touched: vec![0; n],
            findings: Vec::new(),
        }
    }

    fn record(&mut self, event: Event) {
        let tally = &mut self.tallies[event.at as usize];
        if tally.asked == 0 {
            self.touched.push(event.at);
        }
        tally.asked += 1;
        tally.taken += u32::from(event.taken);
        tally.given += u32::from(event.given);
    }

    /// Settles the phase that ran at `now` (ns since the epoch) under reconfiguration
    /// `configuration`.
    fn settle(&mut self, now: u64, configuration: u64) {
        for at in std::mem::take(&mut self.touched) {
            let at = at as usize;
            let tally = std::mem::take(&mut self.tallies[at]);
            let limiter = at / TRACKED;
            let key = (at % TRACKED) as u64;
            let bound = &mut self.bounds[at];
            if !bound.touched {
                bound.touched = true;
                self.keys_touched[limiter] += 1;
            }
            let (over, allowed) = match self.kinds[limiter] {
                Kind::TokenBucket => token_bucket(bound, TOKEN_BUCKET, None, tally, now),
                Kind::Reconfigured => {
                    // The ROTATION index `rotation` gives the key.
                    let current = if key < RECONFIGURED {
                        ((key + configuration) % 3) as u8
                    } else {
                        0
                    };
                    token_bucket(bound, ROTATION[0], Some(current), tally, now)
                }
                Kind::Gcra => gcra(bound, GCRA, tally, now),
                Kind::FixedWindow => fixed_window(bound, FIXED_WINDOW, tally, now),
            };
            if over > 0 {
                self.worst[limiter] = self.worst[limiter].max(over);
                self.violations[limiter] += 1;
                if self.findings.len() < 20 {
                    self.findings.push(Finding {
                        limiter,
                        key,
                        at_ns: now,
                        taken: tally.taken,
                        given: tally.given,
                        allowed,
                    });
                }
            }
        }
    }
}

/// A token bucket key's phase: refilled on its grid to `now`, moved to quota
/// `current` of [`ROTATION`] if that is not its own (keeping at most what it had, or
/// starting afresh if it may have been full: `crate::per_key`), then the phase's
/// refunds credited and its admissions taken. Returns the over-admission (0 if none)
/// and what the bound allowed.
fn token_bucket(
    bound: &mut Bound,
    fixed: (u32, u64),
    current: Option<u8>,
    tally: Tally,
    now: u64,
) -> (i64, i64) {
    let (capacity, interval) = match current {
        Some(_) => ROTATION[bound.quota as usize],
        None => fixed,
    };
    let grid = now / interval;
    bound.level = (bound.level + (grid - bound.mark) as i64).min(i64::from(capacity));
    bound.mark = grid;
    let mut capacity = capacity;
    if let Some(current) = current.filter(|&q| q != bound.quota) {
        let (new_capacity, new_interval) = ROTATION[current as usize];
        bound.level = if bound.level == i64::from(capacity) {
            i64::from(new_capacity)
        } else {
            bound.level.min(i64::from(new_capacity))
        };
        bound.mark = now / new_interval;
        bound.quota = current;
        capacity = new_capacity;
    }
    let allowed = bound.level + i64::from(tally.given);
    let left = allowed - i64::from(tally.taken);
    bound.level = left.clamp(0, i64::from(capacity));
    ((-left).max(0), allowed)
}

/// A GCRA key's phase: the earliest its theoretical arrival time can be, moved by the
/// phase's net admissions; admissions are over the bound when that time passes
/// `now + capacity × interval`.
fn gcra(bound: &mut Bound, (capacity, interval): (u32, u64), tally: Tally, now: u64) -> (i64, i64) {
    let interval = i128::from(interval);
    let start = i128::from(bound.mark.max(now));
    let tat = start + (i128::from(tally.taken) - i128::from(tally.given)) * interval;
    let limit = i128::from(now) + i128::from(capacity) * interval;
    let allowed = ((limit - start) / interval + i128::from(tally.given)) as i64;
    let over = if tat > limit {
        bound.mark = limit as u64;
        (((tat - limit) + interval - 1) / interval) as i64
    } else {
        bound.mark = tat.max(0) as u64;
        0
    };
    (over, allowed)
}

/// A fixed window key's phase: the count in its calendar window (reset when the
/// window changes), over the bound past the limit.
fn fixed_window(bound: &mut Bound, (limit, per): (u32, u64), tally: Tally, now: u64) -> (i64, i64) {
    let window = now / (u64::from(limit) * per);
    if window != bound.mark {
        bound.mark = window;
        bound.level = 0;
    }
    let allowed = i64::from(limit) - bound.level + i64::from(tally.given);
    let count = bound.level + i64::from(tally.taken) - i64::from(tally.given);
    bound.level = count.clamp(0, i64::from(limit));
    ((count - i64::from(limit)).max(0), allowed)
}

/// The command line: `--duration 30s|32m|1h`, `--redis`, `--out DIR`, `--mutant`.
struct Args {
    duration: Duration,
    redis: bool,
    /// The check's own mutant: every refund is sent twice but tallied once, so the
    /// limiters hold tokens the tally never gave them, as a limiter that invents
    /// tokens would. The run must then report over-admissions (and exit non-zero).
    mutant: bool,
    out: std::path::PathBuf,
    /// The arguments as given, for the report.
    given: Vec<String>,
}

fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?.max(1));
    let number: u64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

fn args() -> Args {
    let mut args = Args {
        duration: Duration::from_secs(20),
        redis: false,
        mutant: false,
        out: std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results"),
        given: Vec::new(),
    };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        match arg.as_str() {
            // What `cargo bench` passes to every bench binary.
            "--bench" => continue,
            "--duration" => {
                let value = given.next().unwrap_or_default();
                args.duration = parse_duration(&value).unwrap_or_else(|| {
                    eprintln!("soak: --duration takes 30s, 32m or 1h, not {value:?}");
                    std::process::exit(2)
                });
                args.given.extend([arg, value]);
            }
            "--mutant" => {
                args.mutant = true;
                args.given.push(arg);
            }
            "--redis" => {
                args.redis = true;
                args.given.push(arg);
            }
            "--out" => {
                let value = given.next().unwrap_or_default();
                args.out = value.clone().into();
                args.given.extend([arg, value]);
            }
            other => {
                eprintln!(
                    "soak: unknown argument {other:?} (--duration, --redis, --out, --mutant)"
                );
                std::process::exit(2)
            }
        }
    }
    if args.mutant && !args.given.iter().any(|arg| arg == "--out") {
        args.out = std::env::temp_dir().join("turnstile-soak-mutant");
    }
    args
}

/// This process's resident memory, in KiB (`VmRSS`).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One row of the memory curve.
struct Sample {
    seconds: f64,
    rss_kib: u64,
    checks: u64,
    admitted: u64,
    simulated_s: f64,
    keys_held: usize,
    evicted: u64,
    redis_checks: u64,
    redis_state: &'static str,
}

/// Redis's state as the chaos thread last set it (0 without `--redis`).
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // set by the Redis part
const UP: u8 = 0;
const STOPPED: u8 = 1;
const DOWN: u8 = 2;

fn state_name(state: u8) -> &'static str {
    match state {
        STOPPED => "stopped",
        DOWN => "killed",
        _ => "up",
    }
}

/// What the in-process workers and the Redis part share with the sampler.
#[derive(Default)]
struct Live {
    redis_checks: AtomicU64,
    redis_state: std::sync::atomic::AtomicU8,
    /// Odd while the server is confirmed frozen (seen stopped) or dead (reaped);
    /// each confirmed outage adds two.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis part's
    outage: AtomicU64,
}

/// What every worker shares.
struct Shared {
    subjects: Vec<Subject>,
    clock: ManualClock,
    barrier: Barrier,
    inboxes: Vec<Mutex<Vec<Event>>>,
    stop: AtomicBool,
    checks: AtomicU64,
    admitted: AtomicU64,
    churned: AtomicU64,
    /// Between phases, the one worker the barrier elects settles the phase.
    between: Mutex<Between>,
    live: Arc<Live>,
    /// `--mutant`: refunds sent twice, tallied once.
    mutant: bool,
}

/// The tally's side of the phases.
struct Between {
    ledger: Ledger,
    rng: SmallRng,
    phases: u64,
    configuration: u64,
    started: Instant,
    deadline: Duration,
    next_sample: Duration,
    sample_every: Duration,
    samples: Vec<Sample>,
}

/// Per limiter: checks, admitted, refunded.
type Counts = Vec<[u64; 3]>;

fn worker(shared: &Shared, index: usize) -> Counts {
    let mut rng = SmallRng::seed_from_u64(0x50a6 + index as u64);
    let zipf = Zipf::new(ZIPF_KEYS as f64, 1.0).expect("a valid zipf");
    let mut counts = vec![[0u64; 3]; shared.subjects.len()];
    let mut events = Vec::with_capacity(OPS_PER_PHASE);
    let mut churn = (index as u64) << 36;
    loop {
        let mut admitted = 0;
        for _ in 0..OPS_PER_PHASE {
            let which = rng.random_range(0..shared.subjects.len());
            let subject = &shared.subjects[which];
            let class = rng.random_range(0..100);
            let (key, tracked) = if class < 30 {
                (rng.random_range(0..HOT_KEYS), true)
            } else if class < 80 {
                (HOT_KEYS + zipf.sample(&mut rng) as u64 - 1, true)
            } else {
                churn += 1;
                (CHURN_BASE + churn, false)
            };
            let cost = if rng.random_ratio(1, 10) { 2 } else { 1 };
            let allowed = subject.limiter.acquire(key, cost);
            let refunded = allowed && rng.random_ratio(1, 10);
            if refunded {
                subject.limiter.refund(key, cost);
                if shared.mutant {
                    subject.limiter.refund(key, cost);
                }
            }
            let count = &mut counts[which];
            count[0] += 1;
            count[1] += u64::from(allowed);
            count[2] += u64::from(refunded);
            admitted += u64::from(allowed);
            // Denials matter to the bound only where they move a key to a new quota.
            if tracked && (allowed || subject.kind == Kind::Reconfigured) {
                events.push(Event {
                    at: (which * TRACKED) as u32 + key as u32,
                    taken: if allowed { cost as u16 } else { 0 },
                    given: if refunded { cost as u16 } else { 0 },
                });
            }
        }
        shared.inboxes[index]
            .lock()
            .expect("no worker panicked")
            .append(&mut events);
        // Relaxed: counters for the report, read after the barrier or the joins.
        shared
            .checks
            .fetch_add(OPS_PER_PHASE as u64, Ordering::Relaxed);
        shared.admitted.fetch_add(admitted, Ordering::Relaxed);
        if shared.barrier.wait().is_leader() {
            between_phases(shared);
        }
        shared.barrier.wait();
        // Relaxed: set before the barrier every worker has just passed.
        if shared.stop.load(Ordering::Relaxed) {
            // Churn keys issued by this worker, for the report.
            shared
                .churned
                .fetch_add(churn - ((index as u64) << 36), Ordering::Relaxed);
            return counts;
        }
    }
}

/// Every worker is parked: tally the phase, sample, move the clock, maybe reconfigure.
fn between_phases(shared: &Shared) {
    let mut between = shared.between.lock().expect("no worker panicked");
    let between = &mut *between;
    for inbox in &shared.inboxes {
        let mut inbox = inbox.lock().expect("no worker panicked");
        for event in inbox.drain(..) {
            between.ledger.record(event);
        }
    }
    let now = shared.clock.now();
    between.ledger.settle(now, between.configuration);
    between.phases += 1;
    let elapsed = between.started.elapsed();
    if elapsed >= between.next_sample {
        between.next_sample += between.sample_every;
        between.samples.push(sample(shared, elapsed, now));
    }
    if elapsed >= between.deadline {
        // Relaxed: read after the barrier that follows.
        shared.stop.store(true, Ordering::Relaxed);
        return;
    }
    let step = match between.rng.random_range(0..1000) {
        // Long idle: everything fills, and sweeps can forget it (margin 1 s).
        0..10 => between.rng.random_range(1_500_000_000..4_000_000_000),
        10..100 => 0,
        _ => between.rng.random_range(0..4_000_000),
    };
    shared.clock.advance(Duration::from_nanos(step));
    if between.phases.is_multiple_of(RECONFIGURE_EVERY) {
        between.configuration += 1;
        for subject in &shared.subjects {
            subject.limiter.reconfigure(between.configuration);
        }
    }
}

fn sample(shared: &Shared, elapsed: Duration, now: u64) -> Sample {
    let stats: Vec<KeyStats> = shared.subjects.iter().map(|s| s.limiter.stats()).collect();
    Sample {
        seconds: elapsed.as_secs_f64(),
        rss_kib: rss_kib(),
        // Relaxed: counters for the report.
        checks: shared.checks.load(Ordering::Relaxed),
        admitted: shared.admitted.load(Ordering::Relaxed),
        simulated_s: now as f64 / 1e9,
        keys_held: stats.iter().map(|s| s.keys).sum(),
        evicted: stats.iter().map(|s| s.evicted).sum(),
        redis_checks: shared.live.redis_checks.load(Ordering::Relaxed),
        redis_state: state_name(shared.live.redis_state.load(Ordering::Relaxed)),
    }
}

/// What the Redis part found.
#[derive(Default)]
struct RedisReport {
    server: String,
    checks: u64,
    decided: u64,
    admitted: u64,
    fallback_denied: u64,
    fallback_allowed: u64,
    timeouts: u64,
    errors: u64,
    restarts: u64,
    stops: u64,
    /// Checks Redis decided while the chaos thread had it marked stopped or killed
    /// (a check answered just before the signal lands can count).
    decided_in_outage: u64,
    /// Checks decided though sent and answered wholly while the server was confirmed
    /// frozen or dead: a decision no server made.
    decided_while_down: u64,
    /// From the restarted server answering `PING` to the first decided check.
    recoveries: Vec<Duration>,
    /// From the kill to the restarted server answering `PING` (loading its file).
    restart_times: Vec<Duration>,
    worst_over: i64,
    findings: Vec<String>,
    keys: usize,
}

impl RedisReport {
    fn failed(&self) -> bool {
        self.worst_over > 0 || self.fallback_allowed > 0 || self.decided_while_down > 0
    }
}

#[cfg(feature = "redis")]
mod redis_part {
    //! Fail-closed Redis token buckets against a server frozen and killed in turn.

    use super::{DOWN, Live, RedisReport, STOPPED, UP, quota};
    use crate::server::RedisServer;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
    use turnstile::redis::{CheckError, FailurePolicy, RedisTokenBucket};

    /// Capacity 10, one token per 5 ms: 200 a second per key, well below what one
    /// task asks of each of [`FAST_KEYS`] keys, so every key is held at its bound.
    const FAST: (u32, u64) = (10, 5_000_000);
    const FAST_KEYS: usize = 4;
    /// Capacity 5, one token per 10 s, for one key asked every round: drained when
    /// an outage begins, and refilled by at most one token across it.
    const SLOW: (u32, u64) = (5, 10_000_000_000);
    const TIMEOUT: Duration = Duration::from_millis(50);
    const STOP_FOR: Duration = Duration::from_secs(3);
    const DOWN_FOR: Duration = Duration::from_secs(2);
    /// How long a restarted server may take to load its append-only file.
    const RESTART_LIMIT: Duration = Duration::from_secs(60);

    fn unix_micros() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_micros() as u64
    }

    /// Sleeps until `at`, or until the run's `end` if that comes first; whether `at`
    /// came.
    fn sleep_until(at: Instant, end: Instant) -> bool {
        let until = at.min(end);
        if let Some(left) = until.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        at <= end
    }

    /// Waits until process `pid` is seen stopped (state `T` in `/proc/PID/stat`).
    fn wait_stopped(pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if state == Some('T') {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("redis-server {pid} was not seen stopped after SIGSTOP");
    }

    /// Runs for `duration` and reports, or `None` without `redis-server` on PATH. With
    /// `mutant`, each kill also deletes the server's files, so it comes back empty.
    pub fn run(duration: Duration, live: Arc<Live>, mutant: bool) -> Option<RedisReport> {
        if !RedisServer::available() {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("turnstile-soak-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        // Every write fsynced before its reply, so what Redis answered survives a
        // SIGKILL; the file rewritten from 1 MB on, so a restart loads the keys, not
        // the whole run's history.
        let server_args: Vec<String> = [
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--auto-aof-rewrite-min-size",
            "1mb",
            "--dir",
            &dir.to_string_lossy(),
        ]
        .map(String::from)
        .to_vec();
        let mut server = RedisServer::start_with_args(&server_args);
        let url = server.url();
        let version = std::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default();
        let started = Instant::now();
        let end = started + duration;
        // A cycle a minute in long runs; two in a short one.
        let cycle = if duration >= Duration::from_secs(240) {
            Duration::from_secs(60)
        } else {
            (duration / 2).max(Duration::from_secs(10))
        };
        let restarted_at = Arc::new(AtomicU64::new(0));
        let checker = {
            let live = Arc::clone(&live);
            let restarted_at = Arc::clone(&restarted_at);
            std::thread::spawn(move || check(url, end, started, &live, &restarted_at))
        };
        let (mut restarts, mut stops) = (0, 0);
        let mut restart_times = Vec::new();
        let mut at = started;
        loop {
            if !sleep_until(at + cycle.mul_f64(0.3), end) {
                break;
            }
            // The marked state is set before the signal and cleared after it, so the
            // marked stretch covers the outage; the confirmed one (an odd `outage`)
            // lies within the outage. SeqCst: the checker compares its readings of
            // `outage` around a check with these, across the signals.
            live.redis_state.store(STOPPED, Ordering::SeqCst);
            server.pause();
            wait_stopped(server.pid().expect("the server runs"));
            live.outage.fetch_add(1, Ordering::SeqCst);
            stops += 1;
            std::thread::sleep(STOP_FOR);
            live.outage.fetch_add(1, Ordering::SeqCst);
            server.resume();
            live.redis_state.store(UP, Ordering::SeqCst);
            if !sleep_until(at + cycle.mul_f64(0.7), end) {
                break;
            }
            live.redis_state.store(DOWN, Ordering::SeqCst);
            let killed = Instant::now();
            server.kill(); // returns once the process is reaped
            if mutant {
                // A server that lost what it answered: the slow key comes back full.
                std::fs::remove_dir_all(&dir).expect("the server's directory");
                std::fs::create_dir_all(&dir).expect("the server's directory");
            }
            live.outage.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(DOWN_FOR);
            live.outage.fetch_add(1, Ordering::SeqCst);
            server.restart_within(RESTART_LIMIT); // returns once the server answers PING
            restart_times.push(killed.elapsed());
            restarts += 1;
            // Relaxed: the checker only measures time from it.
            restarted_at.store(started.elapsed().as_nanos() as u64 + 1, Ordering::Relaxed);
            live.redis_state.store(UP, Ordering::SeqCst);
            at += cycle;
        }
        let mut report = checker.join().expect("the Redis checker did not panic");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
        report.server = version;
        report.restarts = restarts;
        report.stops = stops;
        report.restart_times = restart_times;
        Some(report)
    }

    /// One key's upper bound on Redis's grid: at most `level` tokens at grid index
    /// `mark` (a key never decided is full).
    struct Tracked {
        name: String,
        fast: bool,
        capacity: i64,
        interval_us: u64,
        level: i64,
        mark: Option<u64>,
    }

    impl Tracked {
        /// The most the key can hold at grid index `grid`.
        fn at(&self, grid: u64) -> i64 {
            match self.mark {
                None => self.capacity,
                // A wall clock set back refills nothing.
                Some(mark) => (self.level + grid.saturating_sub(mark) as i64).min(self.capacity),
            }
        }

        /// A decided check sent at `send` and answered at `recv` (Unix µs): Redis ran
        /// the script in between. Returns the over-admission (0 if none).
        fn decided(&mut self, allowed: bool, send: u64, recv: u64) -> i64 {
            let (sent, answered) = (send / self.interval_us, recv / self.interval_us);
            let mut level = self.at(sent);
            let mut over = 0;
            if allowed {
                // Decided with every token that can have come by the reply...
                over = (1 - self.at(answered)).max(0);
                // ...and carried on from the send, so none is counted twice. An
                // over-admission found is taken as given, so it is counted once.
                level += over - 1;
            }
            self.level = level;
            self.mark = Some(sent);
            over
        }
    }

    /// One task checking the keys in turn until `end`, each decision counted against
    /// the key's bound.
    fn check(
        url: String,
        end: Instant,
        started: Instant,
        live: &Live,
        restarted_at: &AtomicU64,
    ) -> RedisReport {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let limiter = |(capacity, nanos): (u32, u64), prefix: &str| {
                RedisTokenBucket::builder(quota((capacity, nanos)), FailurePolicy::Closed)
                    .prefix(format!("soak:{}:{prefix}:", std::process::id()))
                    .timeout(TIMEOUT)
                    .connect(url.clone())
                    .expect("a valid Redis URL and settings")
            };
            let (fast, slow) = (limiter(FAST, "fast"), limiter(SLOW, "slow"));
            let tracked = |name: String, fast: bool, (capacity, nanos): (u32, u64)| Tracked {
                name,
                fast,
                capacity: i64::from(capacity),
                interval_us: nanos / 1_000,
                level: i64::from(capacity),
                mark: None,
            };
            let mut keys: Vec<Tracked> = (0..FAST_KEYS)
                .map(|k| tracked(format!("key{k}"), true, FAST))
                .chain([tracked("slow".into(), false, SLOW)])
                .collect();
            let mut report = RedisReport {
                keys: keys.len(),
                ..RedisReport::default()
            };
            while Instant::now() < end {
                for key in &mut keys {
                    let marked_before = live.redis_state.load(Ordering::SeqCst);
                    let outage_before = live.outage.load(Ordering::SeqCst);
                    let send = unix_micros();
                    let limiter = if key.fast { &fast } else { &slow };
                    let outcome = limiter.acquire(&key.name, 1).await;
                    let recv = unix_micros();
                    let outage_after = live.outage.load(Ordering::SeqCst);
                    let marked_after = live.redis_state.load(Ordering::SeqCst);
                    report.checks += 1;
                    // Relaxed: a counter for the samples.
                    live.redis_checks.fetch_add(1, Ordering::Relaxed);
                    let Some(decision) = outcome.decision() else {
                        if outcome.is_allowed() {
                            report.fallback_allowed += 1;
                        } else {
                            report.fallback_denied += 1;
                        }
                        match outcome.error() {
                            Some(CheckError::Timeout(_)) => report.timeouts += 1,
                            _ => report.errors += 1,
                        }
                        continue;
                    };
                    report.decided += 1;
                    if marked_before != UP || marked_after != UP {
                        report.decided_in_outage += 1;
                    }
                    if outage_before == outage_after && outage_before % 2 == 1 {
                        report.decided_while_down += 1;
                        if report.findings.len() < 20 {
                            report.findings.push(format!(
                                "{}: decided at {send} µs (Unix) while the server was down",
                                key.name
                            ));
                        }
                    }
                    // Relaxed: a timestamp, nothing else guarded.
                    let up = restarted_at.swap(0, Ordering::Relaxed);
                    if up != 0 {
                        let since = started.elapsed().as_nanos() as u64 - (up - 1);
                        report.recoveries.push(Duration::from_nanos(since));
                    }
                    let allowed = decision.is_allowed();
                    report.admitted += u64::from(allowed);
                    let over = key.decided(allowed, send, recv);
                    if over > 0 {
                        report.worst_over = report.worst_over.max(over);
                        if report.findings.len() < 20 {
                            report.findings.push(format!(
                                "{}: admitted {over} over its bound at {send} µs (Unix)",
                                key.name
                            ));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            report
        })
    }
}

#[cfg(not(feature = "redis"))]
mod redis_part {
    //! Without the `redis` feature there is no Redis part.

    use super::{Live, RedisReport};
    use std::sync::Arc;
    use std::time::Duration;

    pub fn run(_duration: Duration, _live: Arc<Live>, _mutant: bool) -> Option<RedisReport> {
        eprintln!("soak: --redis needs `--features redis`");
        std::process::exit(2)
    }
}

/// The machine, for the report: CPU model, cores, memory.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<f64>()
                        .ok()
                })
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{cpu}, {cores} cores, {memory_gib:.1} GiB")
}

fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_default()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let args = args();
    // A worker that panics would leave the others at the barrier forever (std's
    // barrier has no poisoning): end the whole run instead, as a failure.
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report_panic(info);
        eprintln!("soak: FAILED: a thread panicked");
        std::process::exit(101);
    }));
    let clock = ManualClock::new();
    let subjects = subjects(&clock);
    let kinds = subjects.iter().map(|s| s.kind).collect();
    let live = Arc::new(Live::default());
    let started_at = utc_now();
    let rss_start = rss_kib();
    let sample_every = if args.duration >= Duration::from_secs(600) {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(1)
    };
    let started = Instant::now();
    let shared = Shared {
        subjects,
        clock,
        barrier: Barrier::new(WORKERS),
        inboxes: (0..WORKERS).map(|_| Mutex::new(Vec::new())).collect(),
        stop: AtomicBool::new(false),
        checks: AtomicU64::new(0),
        admitted: AtomicU64::new(0),
        churned: AtomicU64::new(0),
        between: Mutex::new(Between {
            ledger: Ledger::new(kinds),
            rng: SmallRng::seed_from_u64(0x5eed),
            phases: 0,
            configuration: 0,
            started,
            deadline: args.duration,
            next_sample: Duration::ZERO,
            sample_every,
            samples: Vec::new(),
        }),
        live: Arc::clone(&live),
        mutant: args.mutant,
    };
    let redis = args.redis.then(|| {
        let live = Arc::clone(&live);
        let duration = args.duration;
        let mutant = args.mutant;
        std::thread::spawn(move || redis_part::run(duration, live, mutant))
    });
    let counts: Vec<Counts> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|index| {
                let shared = &shared;
                scope.spawn(move || worker(shared, index))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    let elapsed = started.elapsed();
    let redis = redis.map(|r| r.join().expect("the Redis part panicked"));
    let mut totals = vec![[0u64; 3]; shared.subjects.len()];
    for count in &counts {
        for (total, c) in totals.iter_mut().zip(count) {
            for i in 0..3 {
                total[i] += c[i];
            }
        }
    }
    let between = shared.between.into_inner().expect("no worker panicked");
    let report = Report {
        args: &args,
        started_at,
        elapsed,
        rss_start,
        subjects: &shared.subjects,
        totals: &totals,
        between: &between,
        churned: shared.churned.load(Ordering::Relaxed),
        simulated_s: shared.clock.now() as f64 / 1e9,
        redis: redis.as_ref().map(|r| r.as_ref()),
        redis_requested: args.redis,
    };
    let (markdown, csv) = (report.markdown(), report.csv());
    print!("{markdown}");
    std::fs::create_dir_all(&args.out).expect("the output directory");
    std::fs::write(args.out.join("soak.md"), &markdown).expect("results/soak.md");
    std::fs::write(args.out.join("soak.csv"), csv).expect("results/soak.csv");
    if report.failed() {
        eprintln!("soak: FAILED (see the findings above)");
        std::process::exit(1);
    }
}

/// Everything the run found, for `results/`.
struct Report<'a> {
    args: &'a Args,
    started_at: String,
    elapsed: Duration,
    rss_start: u64,
    subjects: &'a [Subject],
    totals: &'a [[u64; 3]],
    between: &'a Between,
    churned: u64,
    simulated_s: f64,
    redis: Option<Option<&'a RedisReport>>,
    redis_requested: bool,
}

impl Report<'_> {
    fn worst(&self) -> i64 {
        let local = self.between.ledger.worst.iter().copied().max().unwrap_or(0);
        let redis = self.redis.flatten().map_or(0, |r| r.worst_over);
        local.max(redis)
    }

    fn failed(&self) -> bool {
        if self.args.mutant {
            // The mutant must be caught on every limiter.
            let redis_missed = self.redis.flatten().is_some_and(|r| r.worst_over == 0);
            return self.between.ledger.worst.contains(&0) || redis_missed;
        }
        let redis_missing = self.redis_requested && self.redis.flatten().is_none();
        self.worst() > 0
            || !self.memory_bounded()
            || self.redis.flatten().is_some_and(RedisReport::failed)
            || redis_missing
    }

    /// The peak resident memory of the run's two halves (KiB).
    fn halves(&self) -> (u64, u64) {
        let samples = &self.between.samples;
        let half = samples.len() / 2;
        let peak = |part: &[Sample]| part.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        (
            peak(&samples[..half.max(1).min(samples.len())]),
            peak(&samples[half..]),
        )
    }

    /// Whether memory stayed bounded: the second half's peak at most 1.25 times the
    /// first half's (the keys held follow the active set, so it should not grow).
    fn memory_bounded(&self) -> bool {
        let (first, second) = self.halves();
        second * 4 <= first * 5
    }

    fn markdown(&self) -> String {
        let ledger = &self.between.ledger;
        let samples = &self.between.samples;
        let checks: u64 = self.totals.iter().map(|t| t[0]).sum();
        let mut md = String::new();
        let command = format!(
            "cargo bench --bench soak{} -- {}",
            if self.redis_requested {
                " --features redis"
            } else {
                ""
            },
            self.args.given.join(" ")
        );
        let _ = writeln!(md, "# Soak run\n");
        let _ = writeln!(
            md,
            "Written by `benches/soak.rs` (what it checks and how: its module docs).\n"
        );
        let _ = writeln!(md, "- machine: {}", machine());
        let _ = writeln!(md, "- date: {}", self.started_at);
        let _ = writeln!(md, "- command: `{command}`");
        let _ = writeln!(
            md,
            "- duration: {:.1} s wall, {:.1} s on the limiters' manual clock, {} phases",
            self.elapsed.as_secs_f64(),
            self.simulated_s,
            self.between.phases
        );
        let _ = writeln!(
            md,
            "- in-process checks: {checks} ({:.0}/s over {WORKERS} threads, the tally's pauses included)",
            checks as f64 / self.elapsed.as_secs_f64()
        );
        let tracked: u64 = ledger.keys_touched.iter().sum();
        let _ = writeln!(
            md,
            "- keys: {tracked} tracked (key, limiter) pairs touched, {} churn keys (one request each, untracked)",
            self.churned
        );
        let _ = writeln!(
            md,
            "- reconfigurations: {} (keys below {RECONFIGURED} of the reconfigured limiter change quota each time)",
            self.between.configuration
        );
        let _ = writeln!(
            md,
            "- **max over-admission found: {}** (0 = every tracked key within its bound)\n",
            self.worst()
        );
        let _ = writeln!(md, "## Per limiter\n");
        let _ = writeln!(
            md,
            "| limiter | store | checks | admitted | refunded | tracked keys touched | max over-admission | phases over | keys held at end | forgotten | overflowed |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
        for (i, subject) in self.subjects.iter().enumerate() {
            let stats = subject.limiter.stats();
            let [c, a, r] = self.totals[i];
            let _ = writeln!(
                md,
                "| {} | {} | {c} | {a} | {r} | {} | {} | {} | {} | {} | {} |",
                subject.name,
                subject.store,
                ledger.keys_touched[i],
                ledger.worst[i],
                ledger.violations[i],
                stats.keys,
                stats.evicted,
                stats.overflowed
            );
        }
        if !ledger.findings.is_empty() {
            let _ = writeln!(md, "\n## Findings (first {})\n", ledger.findings.len());
            for f in &ledger.findings {
                let subject = &self.subjects[f.limiter];
                let _ = writeln!(
                    md,
                    "- {} ({}), key {}: at {} ns took {} and gave back {} tokens in one phase; the bound allowed {}",
                    subject.name, subject.store, f.key, f.at_ns, f.taken, f.given, f.allowed
                );
            }
        }
        md.push('\n');
        self.memory(&mut md, samples);
        self.redis_section(&mut md);
        md
    }

    fn memory(&self, md: &mut String, samples: &[Sample]) {
        let _ = writeln!(md, "## Resident memory\n");
        if samples.is_empty() {
            let _ = writeln!(md, "No samples.\n");
            return;
        }
        let peak = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let end = samples.last().map_or(0, |s| s.rss_kib);
        let (first, last) = self.halves();
        let _ = writeln!(
            md,
            "RSS at start (before any request) {:.1} MiB, peak {:.1} MiB, end {:.1} MiB. Max over the first half of the run {:.1} MiB, over the second half {:.1} MiB ({:+.1} %). The tally's own arrays (about 24 MiB) are written at start, so they are in every sample.\n",
            mib(self.rss_start),
            mib(peak),
            mib(end),
            mib(first),
            mib(last),
            (last as f64 / first.max(1) as f64 - 1.0) * 100.0
        );
        let _ = writeln!(
            md,
            "**Memory bounded: {}** (the second half's peak at most 1.25 times the first half's).\n",
            if self.memory_bounded() { "yes" } else { "NO" }
        );
        let _ = writeln!(
            md,
            "| time | RSS MiB | checks | keys held (all limiters) | forgotten so far | clock (s) | Redis |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        // About one row a minute in a long run, every row of a short one (at most 40).
        let every = (samples.len() / 40).max(1);
        for (i, s) in samples.iter().enumerate() {
            if i % every == 0 || i + 1 == samples.len() {
                let _ = writeln!(
                    md,
                    "| {:.0} s | {:.1} | {} | {} | {} | {:.1} | {} |",
                    s.seconds,
                    mib(s.rss_kib),
                    s.checks,
                    s.keys_held,
                    s.evicted,
                    s.simulated_s,
                    s.redis_state
                );
            }
        }
        md.push('\n');
    }

    fn redis_section(&self, md: &mut String) {
        let Some(redis) = self.redis else {
            return;
        };
        let _ = writeln!(md, "## Redis\n");
        let Some(r) = redis else {
            let _ = writeln!(md, "No `redis-server` on PATH: the Redis part did not run.");
            return;
        };
        let mut recoveries = r.recoveries.clone();
        recoveries.sort();
        let median = recoveries.get(recoveries.len() / 2).copied();
        let _ = writeln!(
            md,
            "`RedisTokenBucket`, `FailurePolicy::Closed`, timeout 50 ms: {} keys checked in turn by one task, four on capacity 10 with one token per 5 ms and one on capacity 5 with one token per 10 s (drained whenever an outage begins); {} with `--appendonly yes --appendfsync always`.\n",
            r.keys, r.server
        );
        let _ = writeln!(
            md,
            "- checks: {} ({:.0}/s), decided by Redis: {}, admitted: {}",
            r.checks,
            r.checks as f64 / self.elapsed.as_secs_f64(),
            r.decided,
            r.admitted
        );
        let _ = writeln!(
            md,
            "- restarts (SIGKILL, 2 s down, restart on the same port and directory): {}; stops (SIGSTOP for 3 s, then SIGCONT): {}",
            r.restarts, r.stops
        );
        let _ = writeln!(
            md,
            "- no decision: {} timeouts, {} errors; denied by the policy: {}; **admitted without Redis: {}** (fail closed: must be 0)",
            r.timeouts, r.errors, r.fallback_denied, r.fallback_allowed
        );
        let _ = writeln!(
            md,
            "- checks Redis decided while marked stopped or killed: {} (the marked stretch runs from before each signal to after the server is back, so it holds checks Redis answered just before a signal or just after a restart); **decided though sent and answered wholly while the server was seen stopped or reaped: {}** (must be 0)",
            r.decided_in_outage, r.decided_while_down
        );
        let mut restart_times = r.restart_times.clone();
        restart_times.sort();
        let _ = writeln!(
            md,
            "- kill to restarted server answering PING (2 s of it down on purpose, then loading the append-only file): median {}, slowest {}",
            restart_times
                .get(restart_times.len() / 2)
                .map_or("-".into(), |d| format!("{d:.1?}")),
            restart_times
                .last()
                .map_or("-".into(), |d| format!("{d:.1?}"))
        );
        let _ = writeln!(
            md,
            "- recovery, restarted server answering PING to the first decided check: median {}, range {} – {} ({} restarts)",
            median.map_or("-".into(), |d| format!("{d:.1?}")),
            recoveries
                .first()
                .map_or("-".into(), |d| format!("{d:.1?}")),
            recoveries.last().map_or("-".into(), |d| format!("{d:.1?}")),
            recoveries.len()
        );
        let _ = writeln!(
            md,
            "- **max over-admission: {}** (per key, against its capacity plus the grid points up to the check's reply, each counted once)",
            r.worst_over
        );
        for finding in &r.findings {
            let _ = writeln!(md, "  - {finding}");
        }
        md.push('\n');
    }

    fn csv(&self) -> String {
        let mut csv = String::from(
            "time_s,rss_mb,checks,admitted,clock_s,keys_held,evicted,redis_checks,redis_state\n",
        );
        for s in &self.between.samples {
            let _ = writeln!(
                csv,
                "{:.1},{:.2},{},{},{:.3},{},{},{},{}",
                s.seconds,
                mib(s.rss_kib),
                s.checks,
                s.admitted,
                s.simulated_s,
                s.keys_held,
                s.evicted,
                s.redis_checks,
                s.redis_state
            );
        }
        csv
    }
}
