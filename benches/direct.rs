//! Direct (unkeyed) limiters side by side: turnstile's `DirectTokenBucket` and
//! `DirectGcra`, governor's direct `RateLimiter` (a GCRA), and their floor (one clock
//! reading, `direct-floor-clock`), every thread checking
//! the one limit, allowed and denied, at each thread count (`TURNSTILE_BENCH_THREADS`,
//! default 1, 2, 4, 8). Interleaved medians (as `benches/ratios.rs`): at each thread
//! count every contender under both mixes runs a short sample in turn, round after
//! round. Prints and writes `direct.csv`: aggregate checks per second, the median and
//! every round's.
//!
//! Run: `cargo bench --bench direct`

mod common;

use common::direct::{DIRECT, with_direct};
use common::{
    Contender, INTERLEAVED_HEADER, Mix, Pattern, Sampler, Visit, interleaved_rounds,
    interleaved_row, interleaving, out_dir, thread_counts,
};
use std::fmt::Write as _;

/// Builds a contender; under the denied mix, takes a limiter's one token first (the
/// clock floor has none to take).
struct Build(Mix, &'static str);

impl Visit for Build {
    type Output = Box<dyn Sampler>;

    fn visit<T: Contender + 'static>(
        self,
        make: impl Fn() -> T + Send + Sync + 'static,
    ) -> Box<dyn Sampler> {
        let contender = make();
        if self.0 == Mix::Denied && self.1 != "direct-floor-clock" {
            assert!(contender.check(0), "the one token, taken before measuring");
        }
        Box::new(contender)
    }
}

fn main() {
    let settings = interleaving();
    let threads = thread_counts();
    let keys: Vec<Vec<u64>> = (0..threads.iter().copied().max().unwrap_or(1))
        .map(|t| Pattern::Hot.keys(t))
        .collect();
    let entries: Vec<(Mix, &str, Box<dyn Sampler>)> = [Mix::Allowed, Mix::Denied]
        .into_iter()
        .flat_map(|mix| DIRECT.iter().map(move |&name| (mix, name)))
        .map(|(mix, name)| (mix, name, with_direct(name, mix, Build(mix, name))))
        .collect();
    let samplers: Vec<&dyn Sampler> = entries.iter().map(|(_, _, c)| c.as_ref()).collect();
    let mut csv = String::from(INTERLEAVED_HEADER);
    for &n in &threads {
        let rounds = interleaved_rounds(&samplers, Pattern::Hot, &keys, n, settings);
        for ((mix, name, _), rates) in entries.iter().zip(rounds) {
            let scenario = format!("direct-{}", mix.name());
            let row = interleaved_row(&scenario, name.trim_start_matches("direct-"), n, &rates);
            println!("{row}");
            writeln!(csv, "{row}").expect("write to string");
        }
    }
    let path = out_dir().join("direct.csv");
    std::fs::write(&path, csv).expect("write direct.csv");
    eprintln!("wrote {}", path.display());
}
