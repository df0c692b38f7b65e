//! Aggregate throughput under contention: every contender × key pattern × outcome mix
//! × thread count, side by side in one run. Each criterion iteration is one check on
//! every thread at once, so criterion's throughput is aggregate checks per second.

mod common;

use common::{
    ALGORITHMS, Contender, FLOORS, LIMITERS, Mix, Pattern, RECORDED, Visit, applies, prepopulate,
    run, thread_counts, with_algorithm, with_contender,
};
use criterion::{BenchmarkGroup, BenchmarkId, Throughput, measurement::WallTime};

/// Benchmarks one contender in one group at every thread count.
struct Bench<'a, 'g> {
    group: &'a mut BenchmarkGroup<'g, WallTime>,
    name: &'a str,
    pattern: Pattern,
    mix: Mix,
    keys: &'a [Vec<u64>],
}

impl Visit for Bench<'_, '_> {
    type Output = ();

    fn visit<T: Contender + 'static>(self, make: impl Fn() -> T + Send + Sync + 'static) {
        let Bench {
            group,
            name,
            pattern,
            mix,
            keys,
        } = self;
        // A hot key under the allowed mix could run dry in a long run, and churn grows
        // the map without bound: both get a fresh contender for every sample.
        let fresh_each_sample =
            pattern == Pattern::Churn || (pattern == Pattern::Hot && mix == Mix::Allowed);
        let shared = (!fresh_each_sample).then(|| {
            let contender = make();
            prepopulate(&contender, pattern);
            contender
        });
        for threads in thread_counts() {
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| match &shared {
                    Some(contender) => run(contender, pattern, keys, threads, iters),
                    None => {
                        let contender = make();
                        prepopulate(&contender, pattern);
                        run(&contender, pattern, keys, threads, iters)
                    }
                });
            });
        }
    }
}

fn main() {
    let mut criterion = common::criterion();
    let max_threads = thread_counts().into_iter().max().unwrap_or(1);
    for pattern in Pattern::ALL {
        let keys: Vec<Vec<u64>> = (0..max_threads).map(|t| pattern.keys(t)).collect();
        for mix in [Mix::Allowed, Mix::Denied] {
            if pattern == Pattern::Churn && mix == Mix::Denied {
                continue;
            }
            let mut group = criterion.benchmark_group(format!("{}-{}", pattern.name(), mix.name()));
            for name in LIMITERS.iter().chain(&FLOORS).chain(RECORDED) {
                if applies(name, pattern, mix) {
                    let bench = Bench {
                        group: &mut group,
                        name,
                        pattern,
                        mix,
                        keys: &keys,
                    };
                    with_contender(name, mix, pattern, bench);
                }
            }
            group.finish();
        }
    }
    // turnstile's algorithms against each other, on the uniform pattern.
    let keys: Vec<Vec<u64>> = (0..max_threads).map(|t| Pattern::Uniform.keys(t)).collect();
    for mix in [Mix::Allowed, Mix::Denied] {
        let mut group = criterion.benchmark_group(format!("algorithms-{}", mix.name()));
        for name in ALGORITHMS {
            let bench = Bench {
                group: &mut group,
                name,
                pattern: Pattern::Uniform,
                mix,
                keys: &keys,
            };
            with_algorithm(name, mix, bench);
        }
        group.finish();
    }
    criterion.final_summary();
}
