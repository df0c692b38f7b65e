//! One contender's checks on one thread, shaped for callgrind: wall time on a shared
//! machine drifts, instruction counts do not. `results/instructions.sh` runs this
//! binary under `valgrind --tool=callgrind --toggle-collect=*measured*`, so only the
//! checks inside `measured` are counted, and divides by their number.
//!
//! Usage: `instructions NAME MIX CHECKS`, where NAME is a contender of the throughput
//! benchmark (turnstile, turnstile-recent, mutex-per-key, global-lock, governor, and
//! the floors floor-stack, floor-cas, floor-clock, floor-lookup) or one of turnstile's
//! algorithms (token-bucket, gcra, fixed-window, sliding-window, sliding-log); MIX is
//! allowed or denied. Keys are the uniform pattern (1,000 keys, all stored before
//! counting).

mod common;

use common::{Contender, Mix, Pattern, Visit, prepopulate, with_algorithm, with_contender};
use std::hint::black_box;
use std::process::ExitCode;

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

/// Builds the contender, stores its keys, then runs the counted checks.
struct Count {
    checks: u64,
}

impl Visit for Count {
    type Output = u64;

    fn visit<T: Contender + 'static>(self, make: impl Fn() -> T) -> u64 {
        let contender = make();
        prepopulate(&contender, Pattern::Uniform);
        let keys = Pattern::Uniform.keys(0);
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
                "usage: instructions NAME allowed|denied CHECKS (see results/instructions.sh)"
            );
            return ExitCode::SUCCESS;
        }
    };
    let mix = match mix {
        "allowed" => Mix::Allowed,
        "denied" => Mix::Denied,
        other => {
            eprintln!("unknown mix {other}: allowed or denied");
            return ExitCode::FAILURE;
        }
    };
    let Ok(checks) = checks.parse() else {
        eprintln!("CHECKS must be a whole number, got {checks}");
        return ExitCode::FAILURE;
    };
    let count = Count { checks };
    let admitted = match name {
        "token-bucket" | "gcra" | "fixed-window" | "sliding-window" | "sliding-log" => {
            with_algorithm(name, mix, count)
        }
        _ => with_contender(name, mix, Pattern::Uniform, count),
    };
    println!("{name} {}: {admitted} of {checks} admitted", mix.name());
    ExitCode::SUCCESS
}
