//! The direct (unkeyed) contenders, shared by `benches/direct.rs` (throughput) and
//! `benches/instructions.rs` (callgrind): turnstile's `DirectTokenBucket` and
//! `DirectGcra`, governor's direct `RateLimiter` (a GCRA), and the floor under all
//! three, one clock reading. Each ignores the key.

use super::{Contender, Mix, Visit};
use governor::clock::DefaultClock;
use governor::state::{InMemoryState, NotKeyed};
use std::num::NonZeroU32;
use std::time::Duration;
use turnstile::{Clock, QuantaClock};
use turnstile::{DirectGcra, DirectTokenBucket, Quota};

/// The direct contenders by name.
pub const DIRECT: [&str; 4] = [
    "direct-turnstile",
    "direct-turnstile-gcra",
    "direct-governor",
    "direct-floor-clock",
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

/// The floor under every direct limiter: one reading of the clock both libraries
/// read (quanta's TSC clock), and nothing else. Where a limiter runs at this speed,
/// the clock is all it waits for. Its answer alternates, so "denied" means nothing
/// here; it runs beside both mixes so that each table has it.
struct FloorClock(QuantaClock);

impl Contender for FloorClock {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.now() & 1 == key & 1
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
        "direct-turnstile" => {
            visitor.visit(move || Turnstile(DirectTokenBucket::new(quota).unwrap()))
        }
        "direct-turnstile-gcra" => visitor
            .visit(move || TurnstileGcra(DirectGcra::new(quota).expect("GCRA holds the quota"))),
        "direct-governor" => visitor.visit(move || {
            Governor(governor::RateLimiter::direct(
                governor::Quota::with_period(every)
                    .expect("non-zero period")
                    .allow_burst(NonZeroU32::new(capacity).expect("non-zero burst")),
            ))
        }),
        "direct-floor-clock" => visitor.visit(move || FloorClock(QuantaClock::new())),
        other => panic!("unknown direct contender {other}"),
    }
}
