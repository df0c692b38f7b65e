//! The direct (unkeyed) contenders, shared by `benches/direct.rs` (throughput) and
//! `benches/instructions.rs` (callgrind): turnstile's `DirectTokenBucket` and
//! `DirectGcra`, and governor's direct `RateLimiter` (a GCRA). Each ignores the key.

use super::{Contender, Mix, Visit};
use governor::clock::DefaultClock;
use governor::state::{InMemoryState, NotKeyed};
use std::num::NonZeroU32;
use std::time::Duration;
use turnstile::{DirectGcra, DirectTokenBucket, Quota};

/// The direct contenders by name.
pub const DIRECT: [&str; 3] = [
    "direct-turnstile",
    "direct-turnstile-gcra",
    "direct-governor",
];

/// turnstile's direct token bucket.
struct Turnstile(DirectTokenBucket);

impl Contender for Turnstile {
    #[inline]
    fn check(&self, _: u64) -> bool {
        self.0.try_acquire()
    }
}

/// turnstile's direct GCRA (governor's algorithm).
struct TurnstileGcra(DirectGcra);

impl Contender for TurnstileGcra {
    #[inline]
    fn check(&self, _: u64) -> bool {
        self.0.try_acquire()
    }
}

/// governor's direct limiter.
struct Governor(governor::RateLimiter<NotKeyed, InMemoryState, DefaultClock>);

impl Contender for Governor {
    #[inline]
    fn check(&self, _: u64) -> bool {
        self.0.check().is_ok()
    }
}

/// Allowed: the largest burst there is (`u32::MAX`, one more a second), so no run
/// drains it. Denied: one an hour, which the caller takes before measuring.
fn quota(mix: Mix) -> (u32, Duration) {
    match mix {
        Mix::Allowed => (u32::MAX, Duration::from_secs(1)),
        Mix::Denied => (1, Duration::from_secs(3600)),
    }
}

/// Calls `visitor` with a maker for the direct contender called `name` (one of
/// [`DIRECT`]) under the quota of `mix`.
pub fn with_direct<V: Visit>(name: &str, mix: Mix, visitor: V) -> V::Output {
    let (capacity, every) = quota(mix);
    let quota = Quota::new(capacity, every).expect("a valid quota");
    match name {
        "direct-turnstile" => visitor.visit(move || Turnstile(DirectTokenBucket::new(quota))),
        "direct-turnstile-gcra" => visitor
            .visit(move || TurnstileGcra(DirectGcra::new(quota).expect("GCRA holds the quota"))),
        "direct-governor" => visitor.visit(move || {
            Governor(governor::RateLimiter::direct(
                governor::Quota::with_period(every)
                    .expect("non-zero period")
                    .allow_burst(NonZeroU32::new(capacity).expect("non-zero burst")),
            ))
        }),
        other => panic!("unknown direct contender {other}"),
    }
}
