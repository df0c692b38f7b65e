//! Interleaved medians for the targets: for each pattern and thread count, every
//! contender under both outcome mixes runs a short sample in turn, round after round,
//! and each one's median is kept. On a shared machine whose speed drifts, interleaving exposes every contender
//! to the same drift, so their ratios hold where back-to-back runs (criterion's) can
//! land in different weather. Writes `ratios.csv`.

mod common;

use common::{
    Contender, LIMITERS, Mix, Pattern, Visit, full_mode, out_dir, prepopulate, run, with_contender,
};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// A contender behind one dynamic call per sample; its hot loop is monomorphised.
trait Sampler: Sync {
    fn sample(&self, pattern: Pattern, keys: &[Vec<u64>], threads: usize, iters: u64) -> Duration;
}

impl<T: Contender> Sampler for T {
    fn sample(&self, pattern: Pattern, keys: &[Vec<u64>], threads: usize, iters: u64) -> Duration {
        run(self, pattern, keys, threads, iters)
    }
}

/// Builds a contender, with its keys already stored (and drained, under the denied mix).
struct Build(Pattern);

impl Visit for Build {
    type Output = Box<dyn Sampler>;

    fn visit<T: Contender + 'static>(self, make: impl Fn() -> T) -> Box<dyn Sampler> {
        let contender = make();
        prepopulate(&contender, self.0);
        Box::new(contender)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let (rounds, sample) = if full_mode() {
        (21, Duration::from_millis(100))
    } else {
        (7, Duration::from_millis(40))
    };
    let names: Vec<&str> = LIMITERS.iter().copied().chain(["floor-stack"]).collect();
    let mut csv = String::from("scenario,limiter,threads,median_ops_per_sec,rounds\n");
    for pattern in [Pattern::Hot, Pattern::Uniform] {
        let keys: Vec<Vec<u64>> = (0..4).map(|t| pattern.keys(t)).collect();
        // Both mixes in the same rounds, so "denied vs allowed" meets the same drift too.
        let entries: Vec<(String, &str, Box<dyn Sampler>)> = [Mix::Allowed, Mix::Denied]
            .into_iter()
            .flat_map(|mix| names.iter().map(move |name| (mix, *name)))
            .map(|(mix, name)| {
                let scenario = format!("{}-{}", pattern.name(), mix.name());
                (
                    scenario,
                    name,
                    with_contender(name, mix, pattern, Build(pattern)),
                )
            })
            .collect();
        for threads in [1, 2, 4] {
            // Calibrate: iterations per thread for about one sample's time.
            let probe = 100_000;
            let iters: Vec<u64> = entries
                .iter()
                .map(|(_, _, c)| {
                    let took = c.sample(pattern, &keys, threads, probe);
                    (probe as f64 * sample.as_secs_f64() / took.as_secs_f64()).max(1_000.0) as u64
                })
                .collect();
            let mut rates = vec![Vec::new(); entries.len()];
            let started = Instant::now();
            for round in 0..rounds {
                // Rotate who goes first, so no contender always follows the same one.
                for k in 0..entries.len() {
                    let i = (k + round) % entries.len();
                    let took = entries[i].2.sample(pattern, &keys, threads, iters[i]);
                    rates[i].push((threads as u64 * iters[i]) as f64 / took.as_secs_f64());
                }
            }
            for ((scenario, name, _), rates) in entries.iter().zip(rates) {
                let row = format!("{scenario},{name},{threads},{:.0},{rounds}", median(rates));
                println!("{row}");
                writeln!(csv, "{row}").expect("write to string");
            }
            eprintln!(
                "{}, {threads} threads: {:.1?}",
                pattern.name(),
                started.elapsed()
            );
        }
    }
    let path = out_dir().join("ratios.csv");
    std::fs::write(&path, csv).expect("write ratios.csv");
    eprintln!("wrote {}", path.display());
}
