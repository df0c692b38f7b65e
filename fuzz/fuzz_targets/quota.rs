//! `Quota` and every algorithm's constructor on arbitrary numbers, then arbitrary
//! traffic on one key, on a clock that starts anywhere in its 584 years and also runs
//! backwards (a lagging clock).
//!
//! Checked, against plain statements of the documentation:
//! - `Quota::new` refuses exactly a zero capacity, an interval under 1 ns or over
//!   `u64::MAX` ns, and keeps what it accepts exactly; `per_second`, `per_minute` and
//!   `per_hour` round the interval up;
//! - each algorithm's constructor accepts a quota or gives a clear error, never
//!   panics; the keyed limiter and its direct twin decide every request alike;
//! - every decision is consistent (`remaining` at most the capacity, a denial's
//!   wait positive, a cost over the capacity refused as such) and a denial's
//!   `retry_after` is exact: after that wait the same request passes;
//! - over the span of clock readings the requests saw, a key admits (net of refunds)
//!   at most `k × capacity + span / refill_every + 1` — `k = 1` for the token bucket,
//!   GCRA and the sliding log, `k = 2` for the windows, which may admit a window's
//!   worth on each side of a boundary. Time running backwards gives nothing.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use turnstile::{
    Clock, Decision, DirectFixedWindow, DirectGcra, DirectSlidingWindowCounter, DirectTokenBucket,
    FixedWindow, Gcra, ManualClock, Quota, QuotaError, RateLimiter, SlidingLog,
    SlidingWindowCounter, TokenBucket,
};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Constructor {
    New {
        capacity: u32,
        secs: u64,
        nanos: u32,
    },
    PerSecond(u32),
    PerMinute(u32),
    PerHour(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Acquire(u32),
    /// Forward by this many nanoseconds.
    Advance(u64),
    /// Forward by this many intervals.
    Intervals(u16),
    /// Backward by this many nanoseconds: a clock that lags.
    Back(u64),
    Peek,
    /// Give back up to this many of the tokens taken so far.
    Refund(u32),
}

#[derive(Arbitrary, Debug)]
struct Input {
    constructor: Constructor,
    algorithm: u8,
    start: u64,
    ops: Vec<Op>,
}

/// The quota `constructor` asks for, as documented, computed apart from `Quota`.
fn expected(constructor: Constructor) -> Result<(u32, u64), QuotaError> {
    let (capacity, nanos) = match constructor {
        Constructor::New {
            capacity,
            secs,
            nanos,
        } => (
            capacity,
            u128::from(secs) * 1_000_000_000 + u128::from(nanos % 1_000_000_000),
        ),
        Constructor::PerSecond(n) => (n, per(n, 1)),
        Constructor::PerMinute(n) => (n, per(n, 60)),
        Constructor::PerHour(n) => (n, per(n, 3600)),
    };
    if capacity == 0 {
        return Err(QuotaError::ZeroCapacity);
    }
    if nanos == 0 {
        return Err(QuotaError::ZeroInterval);
    }
    match u64::try_from(nanos) {
        Ok(nanos) => Ok((capacity, nanos)),
        Err(_) => Err(QuotaError::IntervalTooLong {
            refill_every: duration(constructor),
        }),
    }
}

/// `period` seconds over `n`, rounded up to the nanosecond (`n` may be 0: then
/// anything, the capacity check comes first).
fn per(n: u32, period: u128) -> u128 {
    (period * 1_000_000_000).div_ceil(u128::from(n.max(1)))
}

fn duration(constructor: Constructor) -> Duration {
    match constructor {
        Constructor::New { secs, nanos, .. } => Duration::new(secs, nanos % 1_000_000_000),
        _ => unreachable!("per_* intervals always fit"),
    }
}

fn quota(constructor: Constructor) -> Result<Quota, QuotaError> {
    match constructor {
        Constructor::New {
            capacity,
            secs,
            nanos,
        } => Quota::new(capacity, Duration::new(secs, nanos % 1_000_000_000)),
        Constructor::PerSecond(n) => Quota::per_second(n),
        Constructor::PerMinute(n) => Quota::per_minute(n),
        Constructor::PerHour(n) => Quota::per_hour(n),
    }
}

/// One key of a keyed limiter and the same algorithm's direct limiter.
trait Twins {
    fn acquire(&self, cost: u32) -> (Decision, Decision);
    fn peek(&self) -> (u32, u32);
    fn refund(&self, cost: u32);
}

struct Pair<K, D>(K, D);

macro_rules! twins {
    ($keyed:ty, $direct:ty) => {
        impl Twins for Pair<$keyed, $direct> {
            fn acquire(&self, cost: u32) -> (Decision, Decision) {
                (self.0.acquire(&7, cost), self.1.acquire(cost))
            }
            fn peek(&self) -> (u32, u32) {
                (self.0.peek(&7), self.1.peek())
            }
            fn refund(&self, cost: u32) {
                self.0.refund(&7, cost);
                self.1.refund(cost);
            }
        }
    };
}

twins!(TokenBucket<u64, ManualClock>, DirectTokenBucket<ManualClock>);
twins!(Gcra<u64, ManualClock>, DirectGcra<ManualClock>);
twins!(FixedWindow<u64, ManualClock>, DirectFixedWindow<ManualClock>);
twins!(
    SlidingWindowCounter<u64, ManualClock>,
    DirectSlidingWindowCounter<ManualClock>
);

/// The sliding log has no direct twin: its own answers twice.
impl Twins for SlidingLog<u64, ManualClock> {
    fn acquire(&self, cost: u32) -> (Decision, Decision) {
        let decision = RateLimiter::acquire(self, &7, cost);
        (decision, decision)
    }
    fn peek(&self) -> (u32, u32) {
        let left = RateLimiter::peek(self, &7);
        (left, left)
    }
    fn refund(&self, cost: u32) {
        RateLimiter::refund(self, &7, cost);
    }
}

/// The limiter `algorithm` picks, its bound's `k`, or the error its constructor gave.
fn limiter(
    algorithm: u8,
    quota: Quota,
    clock: &ManualClock,
) -> Result<(Box<dyn Twins>, u128), QuotaError> {
    let c = || clock.clone();
    Ok(match algorithm % 5 {
        0 => (
            Box::new(Pair(
                TokenBucket::with_clock(quota, c()),
                DirectTokenBucket::with_clock(quota, c()),
            )),
            1,
        ),
        1 => {
            let keyed = Gcra::with_clock(quota, c());
            let direct = DirectGcra::with_clock(quota, c());
            assert_eq!(keyed.is_ok(), direct.is_ok(), "the twins accept alike");
            (Box::new(Pair(keyed?, direct?)), 1)
        }
        2 => (
            Box::new(Pair(
                FixedWindow::with_clock(quota, c()),
                DirectFixedWindow::with_clock(quota, c()),
            )),
            2,
        ),
        3 => {
            let keyed = SlidingWindowCounter::with_clock(quota, c());
            let direct = DirectSlidingWindowCounter::with_clock(quota, c());
            assert_eq!(keyed.is_ok(), direct.is_ok(), "the twins accept alike");
            (Box::new(Pair(keyed?, direct?)), 2)
        }
        _ => (Box::new(SlidingLog::with_clock(quota, c())), 1),
    })
}

fn check_decision(decision: Decision, cost: u32, capacity: u32) {
    match decision {
        Decision::Allowed { remaining } => {
            assert!(cost <= capacity);
            assert!(remaining <= capacity - cost, "{decision:?} after {cost}");
        }
        Decision::Denied {
            remaining,
            retry_after,
        } => {
            assert!(cost <= capacity && cost > 0, "{decision:?} for {cost}");
            assert!(remaining < cost, "{decision:?}: it had enough for {cost}");
            assert!(retry_after > Duration::ZERO, "{decision:?}");
        }
        Decision::ExceedsCapacity {
            capacity: reported, ..
        } => {
            assert_eq!(reported, capacity);
            assert!(cost > capacity, "{decision:?} for {cost}");
        }
        Decision::Overflow { .. } => panic!("no key cap here: {decision:?}"),
    }
}

fuzz_target!(|input: Input| {
    let built = quota(input.constructor);
    let (capacity, nanos) = match (expected(input.constructor), built) {
        (Ok((capacity, nanos)), Ok(quota)) => {
            assert_eq!(quota.capacity(), capacity);
            assert_eq!(quota.refill_every(), Duration::from_nanos(nanos));
            (capacity, nanos)
        }
        (Err(expected), Err(error)) => {
            assert_eq!(expected, error);
            assert!(!error.to_string().is_empty());
            return;
        }
        (expected, built) => panic!("{:?}: {expected:?}, built {built:?}", input.constructor),
    };
    let quota = built.expect("accepted");
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(input.start));
    let (limiter, k) = match limiter(input.algorithm, quota, &clock) {
        Ok(limiter) => limiter,
        Err(error) => {
            assert!(matches!(error, QuotaError::Unsupported { .. }), "{error:?}");
            assert!(!error.to_string().is_empty());
            return;
        }
    };

    // Net tokens admitted, and the span of readings the requests saw.
    let mut net: u128 = 0;
    let mut span: Option<(u64, u64)> = None;
    for op in input.ops.iter().take(256) {
        match *op {
            Op::Acquire(cost) => {
                // Costs up to the capacity and a little over. The sliding log keeps one
                // timestamp per admitted request (8 bytes each, as documented), so its
                // costs stay under 2^16: 256 of them fit libFuzzer's 2 GB limit.
                let most = if input.algorithm % 5 == 4 {
                    capacity.min(1 << 16)
                } else {
                    capacity
                };
                let cost = cost % most.saturating_add(2).max(2);
                let now = clock.now();
                span = Some(span.map_or((now, now), |(lo, hi)| (lo.min(now), hi.max(now))));
                let (keyed, direct) = limiter.acquire(cost);
                assert_eq!(keyed, direct, "the twins decide alike at {now}");
                check_decision(keyed, cost, capacity);
                if keyed.is_allowed() {
                    net += u128::from(cost);
                }
                // After a denial's wait the same request passes.
                if let Decision::Denied { retry_after, .. } = keyed
                    // (unless the wait runs past the end of the clock, which stops
                    // there: a limiter made late in the clock's range reckons in
                    // its own 584 years from its epoch)
                    && u64::try_from(retry_after.as_nanos())
                        .ok()
                        .and_then(|wait| clock.now().checked_add(wait))
                        .is_some()
                {
                    clock.advance(retry_after);
                    let now = clock.now();
                    span = span.map(|(lo, hi)| (lo.min(now), hi.max(now)));
                    let (keyed, direct) = limiter.acquire(cost);
                    assert_eq!(keyed, direct, "the twins decide alike at {now}");
                    assert!(
                        keyed.is_allowed(),
                        "{cost} refused {retry_after:?} after a denial: {keyed:?}"
                    );
                    net += u128::from(cost);
                }
            }
            Op::Advance(by) => clock.advance(Duration::from_nanos(by)),
            Op::Intervals(n) => {
                clock.advance(Duration::from_nanos(nanos.saturating_mul(u64::from(n))))
            }
            Op::Back(by) => clock.set(Duration::from_nanos(clock.now().saturating_sub(by))),
            Op::Peek => {
                let (keyed, direct) = limiter.peek();
                assert_eq!(keyed, direct);
                assert!(keyed <= capacity);
            }
            Op::Refund(cost) => {
                let cost = cost.min(u32::try_from(net).unwrap_or(u32::MAX));
                limiter.refund(cost);
                net -= u128::from(cost);
            }
        }
        if let Some((lo, hi)) = span {
            let bound = k * u128::from(capacity) + u128::from(hi - lo) / u128::from(nanos) + 1;
            assert!(
                net <= bound,
                "{net} admitted over {} ns with {quota:?}: bound {bound}",
                hi - lo
            );
        }
    }
});
