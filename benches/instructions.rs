//! One contender's checks on one thread, shaped for callgrind: wall time on a shared
//! machine drifts, instruction counts do not. `results/instructions.sh` runs this
//! binary under `valgrind --tool=callgrind --toggle-collect=*measured*`, so only the
//! checks inside `measured` are counted, and divides by their number.
//!
//! Usage: `instructions NAME MIX CHECKS`, where NAME is a contender of the throughput
//! benchmark (turnstile, turnstile-recent, mutex-per-key, global-lock, governor, and
//! the floors floor-stack, floor-cas, floor-clock, floor-lookup) or one of turnstile's
//! algorithms (token-bucket, gcra, fixed-window, sliding-window, sliding-log) or a
//! direct limiter (direct-turnstile, direct-turnstile-gcra, direct-governor) or `policy`
//! (a policy of two token-bucket checks) or `settle-ALGORITHM` (one settle of a
//! reservation per call, ALGORITHM one of the five above); MIX is
//! allowed, denied, churn, zipf-allowed or zipf-denied — for `settle-*`, `charge` (a
//! settle at one more than its estimate of 1), `acquire` (`acquire(key, 1)` on the
//! same limiter and keys, the check a settle is compared with) or `give-back` (at one
//! less than its
//! estimate of 2). Keys are the uniform pattern
//! (1,000 keys, all stored before counting), with churn a new key for every check,
//! with zipf-* the zipf pattern (1,000,000 keys, all stored before counting: run with
//! `--cache-sim=yes` to count its cache misses).

mod common;

use common::direct::with_direct;
use common::{Contender, Mix, Pattern, Visit, prepopulate, with_algorithm, with_contender};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{
    FixedWindow, Gcra, Quota, RateLimiter, SlidingLog, SlidingWindowCounter, TokenBucket,
};

/// The counted part: `checks` checks over the key sequence. Not inlined, so callgrind
/// can switch counting on at its entry and off at its exit.
#[inline(never)]
fn measured<T: Contender>(contender: &T, keys: &[u64], checks: u64) -> u64 {
    let mask = keys.len() - 1;
    let mut admitted = 0;
    for i in 0..checks as usize {
        admitted += u64::from(contender.check(black_box(keys[i & mask])));
    }
    admitted
}

/// The counted part under churn: `checks` checks, every one a key never seen before.
#[inline(never)]
fn measured_churn<T: Contender>(contender: &T, checks: u64) -> u64 {
    let base = Pattern::churn_base(0);
    (0..checks)
        .map(|i| u64::from(contender.check(black_box(base + i))))
        .sum()
}

/// A policy of two in-process token buckets (the request's key, and the key's
/// neighbour on another limiter): what one `Policy::acquire` costs, both checks
/// included. Allowed: the largest burst there is; denied: one token an hour.
struct TwoChecks(Policy<u64>);

impl TwoChecks {
    fn new(mix: Mix) -> Self {
        let quota = match mix {
            Mix::Allowed => Quota::new(u32::MAX, Duration::from_secs(1)),
            Mix::Denied => Quota::new(1, Duration::from_secs(3600)),
        }
        .expect("a valid quota");
        let limiter = || {
            Arc::new(
                TokenBucket::<u64>::builder(quota)
                    .expected_keys(1024)
                    .build()
                    .unwrap(),
            )
        };
        let policy = Policy::builder()
            .check(Check::new(
                "first",
                limiter(),
                Limit::steady(quota),
                |k: &u64| Some(*k),
            ))
            .check(Check::new(
                "second",
                limiter(),
                Limit::steady(quota),
                |k: &u64| Some(k ^ 1),
            ))
            .build()
            .expect("a valid policy");
        Self(policy)
    }
}

impl Contender for TwoChecks {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.acquire(&key).is_allowed()
    }
}

/// One settle per call on a keyed limiter: a reservation of `estimate` settled at
/// `actual`, on the uniform pattern's keys, each stored far from full and far from
/// empty (`settling!`'s quota, `TAKEN` taken) so that neither a charge nor a
/// give-back meets a bound.
/// With `acquire`, the same limiter and keys asked `acquire(key, 1)` instead: the
/// check a settle is compared with, counted around the call as the settles are.
struct Settling<L> {
    limiter: L,
    step: Step,
}

/// What each counted call does.
#[derive(Clone, Copy)]
enum Step {
    /// A settle at one more than its estimate of 1.
    Charge,
    /// A settle at one less than its estimate of 2.
    GiveBack,
    /// `acquire(key, 1)`.
    Acquire,
}

impl<L: RateLimiter<u64> + Send + Sync> Contender for Settling<L> {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let (estimate, actual) = match self.step {
            Step::Acquire => return self.limiter.acquire(&key, 1).is_allowed(),
            Step::Charge => (1, 2),
            Step::GiveBack => (2, 1),
        };
        let settled = self.limiter.settle(&key, estimate, actual);
        settled.charged + settled.refunded > 0
    }
}

/// Counts `checks` calls of `step` on `limiter`, its keys stored first.
fn count_settles<L: RateLimiter<u64> + Send + Sync>(limiter: L, step: Step, checks: u64) -> u64 {
    for key in 0..Pattern::Uniform.key_space() as u64 {
        assert!(limiter.acquire(&key, TAKEN).is_allowed());
    }
    let contender = Settling { limiter, step };
    measured(&contender, &Pattern::Uniform.keys(0), checks)
}

/// What each key takes before its settles are counted: a give-back has that much to
/// give back on every key (10^7 checks over the 1,000 keys), well above what the
/// refill brings back in a run (60 tokens a second), and the sliding log's 1,000
/// keys hold 8 bytes for each (80 MB).
const TAKEN: u32 = 10_000;

/// The quota settles are counted under, and the builder setting every limiter gets:
/// one that every algorithm holds, the sliding window counter's word included, with
/// room for a debt (`2 × bits(2 × 2^16) + bits(u64::MAX / 2^40 ns) = 60 ≤ 63`): a
/// 2^16 capacity refilled every 2^24 ns (16.8 ms; a window of 18 minutes, which a
/// run stays within), so a charge has `2^16 − TAKEN` left and a debt cap of 2^16
/// beyond it (10^7 charges are 10,000 per key).
macro_rules! settling {
    ($limiter:ident) => {
        $limiter::<u64>::builder(
            Quota::new(1 << 16, Duration::from_nanos(1 << 24)).expect("a valid quota"),
        )
        .expected_keys(2048)
        .build()
        .expect("every algorithm holds this quota")
    };
}

/// Builds the contender, stores its keys, then runs the counted checks (with `churn`,
/// stores nothing: every check brings a new key).
struct Count {
    checks: u64,
    pattern: Pattern,
}

impl Visit for Count {
    type Output = u64;

    fn visit<T: Contender + 'static>(self, make: impl Fn() -> T + Send + Sync + 'static) -> u64 {
        let contender = make();
        if self.pattern == Pattern::Churn {
            return measured_churn(&contender, self.checks);
        }
        prepopulate(&contender, self.pattern);
        let keys = self.pattern.keys(0);
        measured(&contender, &keys, self.checks)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` (as CI's `--no-run` builds it, or a plain `cargo bench`) passes
    // `--bench`; with no contender named there is nothing to count.
    let [name, mix, checks] = match args.as_slice() {
        [name, mix, checks] => [name.as_str(), mix.as_str(), checks.as_str()],
        _ => {
            eprintln!(
                "usage: instructions NAME allowed|denied|churn|zipf-allowed|zipf-denied CHECKS (see results/instructions.sh)"
            );
            return ExitCode::SUCCESS;
        }
    };
    if let Some(algorithm) = name.strip_prefix("settle-") {
        let charge = match mix {
            "charge" => Step::Charge,
            "give-back" => Step::GiveBack,
            "acquire" => Step::Acquire,
            other => {
                eprintln!("unknown settle mix {other}: charge, give-back or acquire");
                return ExitCode::FAILURE;
            }
        };
        let Ok(checks) = checks.parse() else {
            eprintln!("CHECKS must be a whole number, got {checks}");
            return ExitCode::FAILURE;
        };
        let settled = match algorithm {
            "token-bucket" => count_settles(settling!(TokenBucket), charge, checks),
            "gcra" => count_settles(settling!(Gcra), charge, checks),
            "fixed-window" => count_settles(settling!(FixedWindow), charge, checks),
            "sliding-window" => count_settles(settling!(SlidingWindowCounter), charge, checks),
            "sliding-log" => count_settles(settling!(SlidingLog), charge, checks),
            other => {
                eprintln!("unknown algorithm {other}");
                return ExitCode::FAILURE;
            }
        };
        println!("{name} {mix}: {settled} of {checks} settled with a change");
        return ExitCode::SUCCESS;
    }
    let churn = mix == "churn";
    let zipf = mix.starts_with("zipf-");
    let mix = match mix {
        "allowed" | "churn" | "zipf-allowed" => Mix::Allowed,
        "denied" | "zipf-denied" => Mix::Denied,
        other => {
            eprintln!("unknown mix {other}: allowed, denied, churn, zipf-allowed or zipf-denied");
            return ExitCode::FAILURE;
        }
    };
    let Ok(checks) = checks.parse() else {
        eprintln!("CHECKS must be a whole number, got {checks}");
        return ExitCode::FAILURE;
    };
    let pattern = if churn {
        Pattern::Churn
    } else if zipf {
        Pattern::Zipf
    } else {
        Pattern::Uniform
    };
    let count = Count { checks, pattern };
    let admitted = match name {
        "token-bucket" | "gcra" | "fixed-window" | "sliding-window" | "sliding-log" => {
            with_algorithm(name, mix, count)
        }
        direct if direct.starts_with("direct-") => with_direct(direct, mix, count),
        "policy" => count.visit(move || TwoChecks::new(mix)),
        _ => with_contender(name, mix, pattern, count),
    };
    let mix = if churn { "churn" } else { mix.name() };
    println!("{name} {mix}: {admitted} of {checks} admitted");
    ExitCode::SUCCESS
}
