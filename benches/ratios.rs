//! Interleaved medians for the targets: for each pattern and thread count, every
//! contender under both outcome mixes runs a short sample in turn, round after round,
//! and each one's median is kept. On a shared machine whose speed drifts, interleaving exposes every contender
//! to the same drift, so their ratios hold where back-to-back runs (criterion's) can
//! land in different weather. Writes `ratios.csv`.

mod common;

use common::{
    LIMITERS, Mix, Pattern, Sampler, Visit, interleaved_medians, interleaving, out_dir,
    prepopulate, with_contender,
};
use std::fmt::Write as _;
use std::time::Instant;

/// Builds a contender, with its keys already stored (and drained, under the denied mix).
struct Build(Pattern);

impl Visit for Build {
    type Output = Box<dyn Sampler>;

    fn visit<T: common::Contender + 'static>(self, make: impl Fn() -> T) -> Box<dyn Sampler> {
        let contender = make();
        prepopulate(&contender, self.0);
        Box::new(contender)
    }
}

fn main() {
    let settings = interleaving();
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
        let samplers: Vec<&dyn Sampler> = entries.iter().map(|(_, _, c)| c.as_ref()).collect();
        for threads in [1, 2, 4] {
            let started = Instant::now();
            let medians = interleaved_medians(&samplers, pattern, &keys, threads, settings);
            for ((scenario, name, _), median) in entries.iter().zip(medians) {
                let row = format!("{scenario},{name},{threads},{median:.0},{}", settings.0);
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
