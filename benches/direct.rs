//! Direct (unkeyed) limiters side by side: turnstile's `DirectTokenBucket` and
//! `DirectGcra`, and governor's direct `RateLimiter` (a GCRA), every thread checking the one limit, allowed and
//! denied, at each thread count (`TURNSTILE_BENCH_THREADS`, default 1, 2, 4, 8).
//! Throughput is aggregate checks per second.
//!
//! Run: `cargo bench --bench direct`

mod common;

use common::{Contender, Pattern, run, thread_counts};
use criterion::{BenchmarkId, Throughput};
use governor::clock::DefaultClock;
use governor::state::{InMemoryState, NotKeyed};
use std::num::NonZeroU32;
use std::time::Duration;
use turnstile::{DirectGcra, DirectTokenBucket, Quota};

/// turnstile's direct token bucket; the key is ignored.
struct Turnstile(DirectTokenBucket);

impl Contender for Turnstile {
    #[inline]
    fn check(&self, _: u64) -> bool {
        self.0.try_acquire()
    }
}

/// turnstile's direct GCRA (governor's algorithm); the key is ignored.
struct TurnstileGcra(DirectGcra);

impl Contender for TurnstileGcra {
    #[inline]
    fn check(&self, _: u64) -> bool {
        self.0.try_acquire()
    }
}

/// governor's direct limiter; the key is ignored.
struct Governor(governor::RateLimiter<NotKeyed, InMemoryState, DefaultClock>);

impl Contender for Governor {
    #[inline]
    fn check(&self, _: u64) -> bool {
        self.0.check().is_ok()
    }
}

/// Allowed: the largest burst a 1 s interval holds, so no run drains it. Denied: one
/// an hour, taken before measuring.
fn quota(allowed: bool) -> (u32, Duration) {
    if allowed {
        (
            Quota::max_capacity(Duration::from_secs(1)),
            Duration::from_secs(1),
        )
    } else {
        (1, Duration::from_secs(3600))
    }
}

fn main() {
    let mut criterion = common::criterion();
    let keys: Vec<Vec<u64>> = (0..thread_counts().into_iter().max().unwrap_or(1))
        .map(|t| Pattern::Hot.keys(t))
        .collect();
    for allowed in [true, false] {
        let (capacity, every) = quota(allowed);
        let quota = Quota::new(capacity, every).expect("a valid quota");
        let ours = Turnstile(DirectTokenBucket::new(quota));
        let gcra = TurnstileGcra(DirectGcra::new(quota).expect("GCRA holds it"));
        let theirs = Governor(governor::RateLimiter::direct(
            governor::Quota::with_period(every)
                .expect("non-zero period")
                .allow_burst(NonZeroU32::new(capacity).expect("non-zero burst")),
        ));
        if !allowed {
            assert!(
                ours.check(0) && gcra.check(0) && theirs.check(0),
                "the one token, taken"
            );
        }
        let mix = if allowed { "allowed" } else { "denied" };
        let mut group = criterion.benchmark_group(format!("direct-{mix}"));
        for threads in thread_counts() {
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_function(BenchmarkId::new("turnstile", threads), |b| {
                b.iter_custom(|iters| run(&ours, Pattern::Hot, &keys, threads, iters))
            });
            group.bench_function(BenchmarkId::new("turnstile-gcra", threads), |b| {
                b.iter_custom(|iters| run(&gcra, Pattern::Hot, &keys, threads, iters))
            });
            group.bench_function(BenchmarkId::new("governor", threads), |b| {
                b.iter_custom(|iters| run(&theirs, Pattern::Hot, &keys, threads, iters))
            });
        }
        group.finish();
    }
}
