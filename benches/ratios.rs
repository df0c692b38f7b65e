//! Interleaved medians for the targets: for each pattern and thread count, every
//! contender under both outcome mixes runs a short sample in turn, round after round,
//! and each one's median is kept, with every round's rate (the same round's rates of
//! two contenders are a pair). On a shared machine whose speed drifts, interleaving
//! exposes every contender to the same drift, so their ratios hold where back-to-back
//! runs (criterion's) can land in different weather. Writes `ratios.csv`.

mod common;

use common::{
    FreshEach, INTERLEAVED_HEADER, LIMITERS, Mix, Pattern, Sampler, Visit, applies, chosen,
    interleaved_rounds, interleaved_row, interleaving, named, out_dir, prepopulate, thread_counts,
    with_contender,
};
use std::fmt::Write as _;
use std::time::Instant;

/// Builds a contender, with its keys already stored (and drained, under the denied
/// mix); under churn, a maker that builds an empty one for every sample.
struct Build(Pattern);

impl Visit for Build {
    type Output = Box<dyn Sampler>;

    fn visit<T: common::Contender + 'static>(
        self,
        make: impl Fn() -> T + Send + Sync + 'static,
    ) -> Box<dyn Sampler> {
        if self.0 == Pattern::Churn {
            return Box::new(FreshEach::new(make));
        }
        let contender = make();
        prepopulate(&contender, self.0);
        Box::new(contender)
    }
}

fn main() {
    let settings = interleaving();
    // `turnstile-manual` (no sweeper thread, `manual_eviction()`: it keeps every key,
    // as the rivals do) where keys go idle long enough to be forgotten — zipf's long
    // tail, churn — so that what forgetting costs is measured in the same rounds;
    // elsewhere only when named in `TURNSTILE_BENCH_LIMITERS`.
    let manual_named = named("TURNSTILE_BENCH_LIMITERS", "turnstile-manual");
    let names: Vec<&str> = LIMITERS
        .iter()
        .copied()
        .chain([
            "floor-stack",
            "turnstile-manual",
            "turnstile-presized",
            "floor-insert",
        ])
        .collect();
    let mut csv = String::from(INTERLEAVED_HEADER);
    for pattern in Pattern::ALL {
        if !chosen("TURNSTILE_BENCH_PATTERNS", pattern.name()) {
            continue;
        }
        let most = thread_counts().into_iter().max().unwrap_or(1);
        let keys: Vec<Vec<u64>> = (0..most).map(|t| pattern.keys(t)).collect();
        // Both mixes in the same rounds, so "denied vs allowed" meets the same drift too
        // (churn, every key new, has only the allowed mix).
        let entries: Vec<(String, &str, Box<dyn Sampler>)> = [Mix::Allowed, Mix::Denied]
            .into_iter()
            .flat_map(|mix| names.iter().map(move |name| (mix, *name)))
            .filter(|&(mix, name)| applies(name, pattern, mix))
            .filter(|&(_, name)| {
                name != "turnstile-manual"
                    || manual_named
                    || matches!(pattern, Pattern::Zipf | Pattern::Churn)
            })
            .filter(|&(_, name)| {
                !matches!(name, "turnstile-presized" | "floor-insert")
                    || named("TURNSTILE_BENCH_LIMITERS", name)
            })
            .filter(|&(_, name)| chosen("TURNSTILE_BENCH_LIMITERS", name))
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
        for threads in thread_counts() {
            let started = Instant::now();
            // Churn grows a map from empty in every sample, which swings more: three
            // times the rounds (at least 21), and a multiple of the contenders, so each
            // goes first, after the last round's maps are freed, equally often
            // (`FreshEach`).
            let settings = match pattern {
                Pattern::Churn => (
                    settings.0.max(21).next_multiple_of(samplers.len().max(1)),
                    settings.1,
                ),
                _ => settings,
            };
            let rounds = interleaved_rounds(&samplers, pattern, &keys, threads, settings);
            for ((scenario, name, _), rates) in entries.iter().zip(rounds) {
                let row = interleaved_row(scenario, name, threads, &rates);
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
