//! `Quota` and every algorithm's constructor on arbitrary numbers, then arbitrary
//! traffic on one key, on a clock that starts anywhere in its 584 years and also runs
//! backwards (a lagging clock).
//!
//! Checked, against plain statements of the documentation:
//! - `Quota::new` refuses exactly a zero capacity, an interval under 1 ns or over
//!   `u64::MAX` ns, and keeps what it accepts exactly; `per_second`, `per_minute` and
//!   `per_hour` round the interval up;
//! - each algorithm's constructor refuses (`QuotaError::Unsupported`) exactly the
//!   quotas its documentation says it cannot hold — GCRA when `capacity ×
//!   refill_every` exceeds 2^62 ns, the sliding window counter unless `2 ×
//!   bits(capacity) + max(1, bits(u64::MAX / window)) <= 63` — and accepts the rest;
//!   the keyed limiter and its direct twin decide every request alike;
//! - every decision is consistent (`remaining` at most the capacity, a denial's
//!   wait positive, a cost of 0 denied only with nothing left, a cost over the
//!   capacity refused as such) and a denial's
//!   `retry_after` is exact, as `Decision::Denied` promises for every algorithm: 1 ns
//!   before it the same request is still denied, at it it passes;
//! - every run of consecutive requests admits, net of refunds, at most its
//!   algorithm's bound over the span `[lo, hi]` of its readings (since the epoch):
//!   the token bucket `capacity` plus the grid points in `(lo, hi]`; GCRA `capacity
//!   + ⌊(hi − lo) / refill_every⌋`; the fixed window `capacity` per window touched;
//!   the sliding log `capacity` in any window of the times it records (a lagging
//!   reading is recorded as the key's newest); the sliding window counter its
//!   documented `limit + ⌊(d − 1) / refill_every⌋` in any span of `d <= window`
//!   nanoseconds (so `2 × limit − 1` per whole window), checked only on runs from
//!   which the clock never reads earlier than before, as documented. Refunds come
//!   only right after an admission, at its reading, so every algorithm credits them.
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

/// The five algorithms, as the input's `algorithm % 5` picks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algo {
    TokenBucket,
    Gcra,
    FixedWindow,
    SlidingWindowCounter,
    SlidingLog,
}

impl Algo {
    fn of(algorithm: u8) -> Self {
        match algorithm % 5 {
            0 => Algo::TokenBucket,
            1 => Algo::Gcra,
            2 => Algo::FixedWindow,
            3 => Algo::SlidingWindowCounter,
            _ => Algo::SlidingLog,
        }
    }
}

/// Number of bits needed to write `x` in binary.
fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// Whether the constructor must refuse the quota, as documented: GCRA when `capacity
/// × refill_every` exceeds 2^62 ns; the sliding window counter unless `2 ×
/// bits(capacity) + max(1, bits(u64::MAX / window)) <= 63`; the others never.
fn unsupported(algo: Algo, capacity: u32, nanos: u64) -> bool {
    let capacity = u64::from(capacity);
    match algo {
        Algo::Gcra => u128::from(capacity) * u128::from(nanos) > 1 << 62,
        Algo::SlidingWindowCounter => {
            2 * bits(capacity) + bits(u64::MAX / nanos / capacity).max(1) > 63
        }
        _ => false,
    }
}

/// The limiter `algo` picks, or the error its constructor gave: every algorithm's
/// constructors return a `Result`, and the caller holds each refusal to `unsupported`
/// (so the token bucket, the fixed window and the sliding log are held to refusing
/// none).
fn limiter(algo: Algo, quota: Quota, clock: &ManualClock) -> Result<Box<dyn Twins>, QuotaError> {
    let c = || clock.clone();
    /// The keyed twin and the direct one, which accept alike.
    fn pair<K, D>(
        keyed: Result<K, QuotaError>,
        direct: Result<D, QuotaError>,
    ) -> Result<Pair<K, D>, QuotaError> {
        assert_eq!(keyed.is_ok(), direct.is_ok(), "the twins accept alike");
        Ok(Pair(keyed?, direct?))
    }
    Ok(match algo {
        Algo::TokenBucket => Box::new(pair(
            TokenBucket::with_clock(quota, c()),
            DirectTokenBucket::with_clock(quota, c()),
        )?),
        Algo::Gcra => Box::new(pair(
            Gcra::with_clock(quota, c()),
            DirectGcra::with_clock(quota, c()),
        )?),
        Algo::FixedWindow => Box::new(pair(
            FixedWindow::with_clock(quota, c()),
            DirectFixedWindow::with_clock(quota, c()),
        )?),
        Algo::SlidingWindowCounter => Box::new(pair(
            SlidingWindowCounter::with_clock(quota, c()),
            DirectSlidingWindowCounter::with_clock(quota, c()),
        )?),
        Algo::SlidingLog => Box::new(SlidingLog::with_clock(quota, c())?),
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
            assert!(cost <= capacity, "{decision:?} for {cost}");
            // A cost of 0 is denied only to a key that owes (here, a reading behind a
            // token bucket's last refill, or a GCRA's TAT more than a full refill
            // ahead of it, which cannot be told from a debt): nothing left.
            assert!(
                remaining < cost.max(1),
                "{decision:?}: it had enough for {cost}"
            );
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

/// One request as the bound sees it: when it was decided, and what it took net of
/// the refunds right after it.
#[derive(Clone, Copy, Debug)]
struct Record {
    /// The reading the limiter decided at, in nanoseconds since its epoch (a reading
    /// before the epoch counts as 0); for the sliding log, the time it records (a
    /// reading older than the key's newest admission counts as that one).
    at: u64,
    net: u64,
}

/// Each algorithm's documented bound on what one key admits over a run of requests
/// whose readings span `[lo, hi]` (nanoseconds since the epoch).
struct Bound {
    algo: Algo,
    capacity: u128,
    interval: u128,
    /// `capacity × interval`: the windows' length, and GCRA's full refill.
    window: u128,
}

impl Bound {
    fn new(algo: Algo, capacity: u32, nanos: u64) -> Self {
        Self {
            algo,
            capacity: u128::from(capacity),
            interval: u128::from(nanos),
            window: u128::from(capacity) * u128::from(nanos),
        }
    }

    /// The most the run may admit.
    fn most(&self, lo: u64, hi: u64) -> u128 {
        let (lo, hi, c, i, w) = (
            u128::from(lo),
            u128::from(hi),
            self.capacity,
            self.interval,
            self.window,
        );
        let max = u128::from(u64::MAX);
        match self.algo {
            // Tokens arrive at the grid points epoch + n × interval, up to the last
            // index a reading is taken to (`STATE_END − 1 − 2 × capacity`, room for a
            // debt of one capacity, for 1 and 2 ns): the bucket's capacity plus the
            // grid points in (lo, hi].
            Algo::TokenBucket => {
                let last = (max / i).min((1 << 63) - 3 - 2 * c);
                let index = |t: u128| (t / i).min(last);
                c + index(hi) - index(lo)
            }
            // Continuous refill, readings clamped to the limiter's end
            // (`STATE_END − 1 − (capacity + debt cap) × interval`, the debt cap one
            // capacity or the whole intervals that keep both refills within 2^62 ns):
            // capacity + ⌊(hi − lo) / interval⌋.
            Algo::Gcra => {
                let debt_cap = c.min(((1 << 62) - w.min(1 << 62)) / i);
                let end = (1 << 63) - 3 - w - debt_cap * i;
                c + (hi.min(end) - lo.min(end)) / i
            }
            // The limit in each window the run touches, windows aligned to the epoch
            // and clamped to the last one the index field holds (beside a count field
            // with room for a debt of one limit: `bits(2 × limit + 2)`).
            Algo::FixedWindow => {
                let count_bits = bits(2 * self.capacity as u64 + 2);
                let last = (max / w).min((1 << (63 - count_bits)) - 1);
                let index = |t: u128| (t / w).min(last);
                c * (index(hi) - index(lo) + 1)
            }
            // In any span of d ≤ window nanoseconds (here d = hi − lo + 1), at most
            // limit + ⌊(d − 1) / interval⌋: so 2 × limit − 1 in each whole window of a
            // longer run, and that for what is left.
            Algo::SlidingWindowCounter => {
                let d = hi - lo;
                (d / w) * (2 * c - 1) + c + (d % w) / i
            }
            // At most the limit in any window: the run, in recorded times, spans
            // ⌊(hi − lo) / window⌋ + 1 windows.
            Algo::SlidingLog => c * ((hi - lo) / w + 1),
        }
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
    let algo = Algo::of(input.algorithm);
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(input.start));
    let epoch = input.start;
    let refused = unsupported(algo, capacity, nanos);
    let limiter = match limiter(algo, quota, &clock) {
        Ok(limiter) => {
            assert!(
                !refused,
                "{algo:?} accepted {quota:?}, which it documents it refuses"
            );
            limiter
        }
        Err(error) => {
            assert!(
                refused,
                "{algo:?} refused {quota:?}, which it documents it holds: {error}"
            );
            assert!(matches!(error, QuotaError::Unsupported { .. }), "{error:?}");
            assert!(!error.to_string().is_empty());
            return;
        }
    };
    let bound = Bound::new(algo, capacity, nanos);

    let mut run = Run {
        algo,
        capacity,
        epoch,
        bound,
        quota,
        records: Vec::new(),
        newest: 0,
        latest: 0,
        monotone_from: 0,
        refundable: 0,
    };
    let request = |run: &mut Run, cost: u32| run.request(&*limiter, &clock, cost);

    for op in input.ops.iter().take(256) {
        match *op {
            Op::Acquire(cost) => {
                // Costs up to the capacity and a little over. The sliding log keeps one
                // timestamp per admitted request (8 bytes each, as documented), so its
                // costs stay under 2^16: 256 of them fit libFuzzer's 2 GB limit.
                let most = if algo == Algo::SlidingLog {
                    capacity.min(1 << 16)
                } else {
                    capacity
                };
                let cost = cost % most.saturating_add(2).max(2);
                let decision = request(&mut run, cost);
                // A denial's wait is exact: 1 ns earlier the same request is still
                // denied, after it it passes.
                if let Decision::Denied { retry_after, .. } = decision
                    // (`Duration::MAX` is never; and a wait that runs past the end of
                    // the clock, which stops there, is not checked: a limiter made
                    // late in the clock's range reckons in its own 584 years)
                    && let Some(ready) = u64::try_from(retry_after.as_nanos())
                        .ok()
                        .and_then(|wait| clock.now().checked_add(wait))
                {
                    clock.set(Duration::from_nanos(ready - 1));
                    let early = request(&mut run, cost);
                    assert!(
                        matches!(early, Decision::Denied { .. }),
                        "{cost} passed 1 ns before the {retry_after:?} a denial told: {early:?}"
                    );
                    clock.set(Duration::from_nanos(ready));
                    let after = request(&mut run, cost);
                    assert!(
                        after.is_allowed(),
                        "{cost} refused {retry_after:?} after a denial: {after:?}"
                    );
                }
            }
            Op::Advance(by) => {
                clock.advance(Duration::from_nanos(by));
                run.refundable = 0;
            }
            Op::Intervals(n) => {
                clock.advance(Duration::from_nanos(nanos.saturating_mul(u64::from(n))));
                run.refundable = 0;
            }
            Op::Back(by) => {
                clock.set(Duration::from_nanos(clock.now().saturating_sub(by)));
                run.refundable = 0;
            }
            Op::Peek => {
                let (keyed, direct) = limiter.peek();
                assert_eq!(keyed, direct);
                assert!(keyed <= capacity);
            }
            // Refunds only right after an admission, at its reading, and no more than
            // it took: then every algorithm credits all of it (a refund into a full
            // bucket or a past window credits nothing, which a bound counting it
            // would take as room).
            Op::Refund(cost) => {
                let cost = cost.min(run.refundable);
                limiter.refund(cost);
                run.refundable -= cost;
                if let Some(last) = run.records.last_mut() {
                    last.net -= u64::from(cost);
                }
            }
        }
    }
});

/// The requests sent so far, as the bound sees them.
struct Run {
    algo: Algo,
    capacity: u32,
    epoch: u64,
    bound: Bound,
    quota: Quota,
    /// Every request, in order.
    records: Vec<Record>,
    /// The sliding log's newest recorded time.
    newest: u64,
    /// The latest reading so far, since the epoch.
    latest: u64,
    /// The first request from which the clock never again read earlier than a
    /// reading before it: the sliding window counter's bound holds for a
    /// non-decreasing clock.
    monotone_from: usize,
    /// What the last request admitted and has not yet had back.
    refundable: u32,
}

impl Run {
    /// Sends one request; records it; checks its decision against the twin's and
    /// every run of requests ending with it against the bound.
    fn request(&mut self, limiter: &dyn Twins, clock: &ManualClock, cost: u32) -> Decision {
        let now = clock.now();
        let (keyed, direct) = limiter.acquire(cost);
        assert_eq!(keyed, direct, "the twins decide alike at {now}");
        check_decision(keyed, cost, self.capacity);
        let since = now.saturating_sub(self.epoch);
        let at = if self.algo == Algo::SlidingLog {
            since.max(self.newest)
        } else {
            since
        };
        if since < self.latest {
            self.monotone_from = self.records.len() + 1;
        }
        self.latest = self.latest.max(since);
        let net = if keyed.is_allowed() { cost } else { 0 };
        if net > 0 && self.algo == Algo::SlidingLog {
            self.newest = at;
        }
        self.records.push(Record {
            at,
            net: u64::from(net),
        });
        self.refundable = net;
        if net > 0 {
            self.check_runs();
        }
        keyed
    }

    /// Checks every run of requests ending with the last against the bound: its net
    /// admissions at most what the algorithm may admit over the span of its
    /// readings. (A run that ends earlier was checked when it ended: refunds only
    /// lower it since.)
    fn check_runs(&self) {
        let mut net: u128 = 0;
        let (mut lo, mut hi) = (u64::MAX, 0);
        for (start, record) in self.records.iter().enumerate().rev() {
            if self.algo == Algo::SlidingWindowCounter && start < self.monotone_from {
                break;
            }
            net += u128::from(record.net);
            lo = lo.min(record.at);
            hi = hi.max(record.at);
            let most = self.bound.most(lo, hi);
            assert!(
                net <= most,
                "{:?} {:?}: requests {start}..{} admitted {net} over [{lo}, {hi}] ns \
                 since the epoch, at most {most}",
                self.algo,
                self.quota,
                self.records.len()
            );
        }
    }
}
