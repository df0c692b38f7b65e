//! Direct (unkeyed) limiters side by side: turnstile's `DirectTokenBucket` and
//! `DirectGcra`, and governor's direct `RateLimiter` (a GCRA), every thread checking the one limit, allowed and
//! denied, at each thread count (`TURNSTILE_BENCH_THREADS`, default 1, 2, 4, 8).
//! Throughput is aggregate checks per second.
//!
//! Run: `cargo bench --bench direct`

mod common;

use common::direct::{DIRECT, with_direct};
use common::{Contender, Mix, Pattern, Visit, run, thread_counts};
use criterion::{BenchmarkGroup, BenchmarkId, Throughput, measurement::WallTime};

/// Registers one contender's runs at every thread count in the group.
struct Register<'g, 'c> {
    group: &'g mut BenchmarkGroup<'c, WallTime>,
    name: &'static str,
    mix: Mix,
    keys: &'g [Vec<u64>],
}

impl Visit for Register<'_, '_> {
    type Output = ();

    fn visit<T: Contender + 'static>(self, make: impl Fn() -> T) {
        let contender = make();
        if self.mix == Mix::Denied {
            assert!(contender.check(0), "the one token, taken before measuring");
        }
        let label = self.name.trim_start_matches("direct-");
        for threads in thread_counts() {
            self.group.throughput(Throughput::Elements(threads as u64));
            self.group
                .bench_function(BenchmarkId::new(label, threads), |b| {
                    b.iter_custom(|iters| run(&contender, Pattern::Hot, self.keys, threads, iters))
                });
        }
    }
}

fn main() {
    let mut criterion = common::criterion();
    let keys: Vec<Vec<u64>> = (0..thread_counts().into_iter().max().unwrap_or(1))
        .map(|t| Pattern::Hot.keys(t))
        .collect();
    for mix in [Mix::Allowed, Mix::Denied] {
        let mut group = criterion.benchmark_group(format!("direct-{}", mix.name()));
        for name in DIRECT {
            let register = Register {
                group: &mut group,
                name,
                mix,
                keys: &keys,
            };
            with_direct(name, mix, register);
        }
        group.finish();
    }
}
