//! Where limiters get the time: a [`Clock`] returns nanoseconds as a `u64`.
//!
//! Limiters take the clock as a generic parameter, so the call is monomorphised and
//! inlined — no `dyn` dispatch on the hot path. Each limiter reads its clock once at
//! creation and measures every later reading from there (its *epoch*).

use crate::Decision;
use crate::sync::{Arc, AtomicU64, Ordering, Unpoisoned};
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A source of time in nanoseconds since an origin of the clock's choosing.
///
/// Readings should not decrease, but limiters do not rely on it: a reading older than
/// what a key has already seen (clocks read on different cores may disagree
/// slightly) never admits more than the later reading would. The window algorithms
/// count it as no time elapsed; the token bucket and GCRA see the allowance still to
/// come by the later time as missing.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now(&self) -> u64;
}

/// The default clock: [`quanta`]'s TSC-based clock, falling back to the OS monotonic
/// clock where no usable TSC exists. What a reading costs: `results/ANALYSIS.md`,
/// "The clock".
#[derive(Clone, Debug)]
pub struct QuantaClock {
    clock: quanta::Clock,
    origin: u64,
}

impl QuantaClock {
    /// A clock whose origin is now. The first one made in a process calibrates the
    /// TSC against the OS clock, which can take a few milliseconds.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        // A raw reading scaled by one multiply and shift; readings before the origin
        // (another core's TSC slightly behind) come back as 0.
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// The cheapest real clock: quanta's *recent* time, one shared value refreshed by a
/// background upkeep thread, read with a single atomic load.
///
/// Readings lag real time by up to the refresh interval, so tokens arrive up to one
/// interval late — never early: this clock can only make a limiter stricter, and a
/// `retry_after` measured from a lagging reading is never shorter than the true wait.
/// Pick a refresh interval well below the quota's refill interval.
///
/// quanta runs at most one upkeep thread per process. The first `RecentClock` starts
/// it, with its refresh interval, and it runs for the rest of the process; if some
/// other code started it first, its interval applies.
#[derive(Clone, Debug)]
pub struct RecentClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

impl RecentClock {
    /// A clock refreshed every `refresh` (when this starts the upkeep thread).
    ///
    /// # Errors
    /// The OS refused to spawn the upkeep thread.
    pub fn new(refresh: Duration) -> io::Result<Self> {
        // The handle keeps the upkeep thread running; it lives for the process.
        static UPKEEP: Mutex<Option<quanta::Handle>> = Mutex::new(None);
        let mut upkeep = UPKEEP.lock().unpoisoned();
        if upkeep.is_none() {
            match quanta::Upkeep::new(refresh).start() {
                Ok(handle) => *upkeep = Some(handle),
                // Someone else keeps the recent time fresh: use theirs.
                Err(quanta::Error::UpkeepRunning) => {}
                Err(quanta::Error::FailedToSpawnUpkeepThread(e)) => return Err(e),
            }
        }
        let clock = quanta::Clock::new();
        let origin = clock.recent();
        Ok(Self { clock, origin })
    }
}

impl Clock for RecentClock {
    #[inline]
    fn now(&self) -> u64 {
        duration_to_nanos(self.clock.recent().duration_since(self.origin))
    }
}

/// The standard library's monotonic clock ([`Instant`]), for machines without a
/// usable TSC.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> u64 {
        duration_to_nanos(self.origin.elapsed())
    }
}

/// A clock that moves only when told to, for tests. Starts at zero; clones share
/// one time, so a test can keep a handle while a limiter owns another.
///
/// Times beyond `u64::MAX` nanoseconds (about 584 years) saturate at `u64::MAX`.
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward by `by`, saturating at `u64::MAX` nanoseconds.
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        // Relaxed: the clock's value guards no other memory; each reader only needs
        // some value from the word's modification order.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Sets the clock to `to` since its origin — backwards too, to model clock skew.
    pub fn set(&self, to: Duration) {
        // Relaxed: as in `advance`.
        self.nanos.store(duration_to_nanos(to), Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        // Relaxed: as in `advance`.
        self.nanos.load(Ordering::Relaxed)
    }
}

/// A limiter's clock and its epoch: the reading taken when the limiter was made.
/// Every limiter measures time from its epoch, so refill grids start there.
#[derive(Debug)]
pub(crate) struct Epoch<C> {
    clock: C,
    start: u64,
}

impl<C: Clock> Epoch<C> {
    /// Starts the epoch now.
    pub(crate) fn start(clock: C) -> Self {
        let start = clock.now();
        Self { clock, start }
    }

    /// Nanoseconds since the epoch; a reading from before it (skew) counts as 0.
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        self.clock.now().saturating_sub(self.start)
    }

    /// A reading for a decision: [`elapsed`](Self::elapsed), and how far before the
    /// epoch the clock read, which a denial's wait must add.
    #[inline]
    pub(crate) fn read(&self) -> Reading {
        let now = self.clock.now();
        Reading {
            since: now.saturating_sub(self.start),
            early: self.start.saturating_sub(now),
        }
    }
}

/// One reading of a limiter's clock, as a decision uses it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    /// Nanoseconds since the epoch; a reading from before it counts as 0.
    pub(crate) since: u64,
    /// Nanoseconds the reading lay before the epoch (0 from the epoch on).
    early: u64,
}

impl Reading {
    /// `decision` told on the clock that was read: a denial's wait counts from the
    /// time decided at, and a reading before the epoch (a clock set back, another
    /// core's clock behind the one that made the limiter) was decided at the epoch,
    /// so on that clock the wait is longer by the gap. Without it, waiting
    /// `retry_after` on a clock that lags the epoch would not be enough, against
    /// what [`Decision::Denied`] promises. Found by the `quota` fuzz target.
    #[inline(always)]
    pub(crate) fn tell(self, mut decision: Decision) -> Decision {
        if let Decision::Denied { retry_after, .. } = &mut decision
            && self.early > 0
        {
            *retry_after = retry_after.saturating_add(Duration::from_nanos(self.early));
        }
        decision
    }
}

/// Whole nanoseconds in `d`, saturating at `u64::MAX`.
pub(crate) fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `nanos` as a `Duration`, exactly; beyond `Duration::MAX` (over 5 * 10^11 years, a
/// wait no clock reading can reach) it saturates.
#[inline]
pub(crate) fn nanos_to_duration(nanos: u128) -> Duration {
    // Every wait under 584 years fits in a u64, whose division by a constant compiles
    // to a multiplication; a u128 division is a call into compiler-builtins, which
    // callgrind showed on every denial.
    if let Ok(nanos) = u64::try_from(nanos) {
        return Duration::from_nanos(nanos);
    }
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn nanos_become_durations_exactly_on_both_sides_of_u64() {
        let max = u128::from(u64::MAX);
        assert_eq!(nanos_to_duration(0), Duration::ZERO);
        assert_eq!(
            nanos_to_duration(1_500_000_001),
            Duration::new(1, 500_000_001)
        );
        assert_eq!(nanos_to_duration(max), Duration::from_nanos(u64::MAX));
        assert_eq!(
            nanos_to_duration(max + 1),
            Duration::new(18_446_744_073, 709_551_616)
        );
        assert_eq!(nanos_to_duration(Duration::MAX.as_nanos()), Duration::MAX);
        assert_eq!(nanos_to_duration(u128::MAX), Duration::MAX);
    }

    #[test]
    fn manual_clock_clones_share_one_time() {
        let clock = ManualClock::new();
        let handle = clock.clone();
        handle.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), 1_500_000_000);
        handle.set(Duration::from_millis(200));
        assert_eq!(clock.now(), 200_000_000);
    }

    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(u64::MAX - 5));
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), u64::MAX);
        clock.set(Duration::MAX);
        assert_eq!(clock.now(), u64::MAX);
    }

    #[test]
    fn real_clocks_move_forward() {
        let quanta = QuantaClock::new();
        let std = StdClock::new();
        let recent = RecentClock::new(Duration::from_millis(1)).unwrap();
        let (q0, s0, r0) = (quanta.now(), std.now(), recent.now());
        std::thread::sleep(Duration::from_millis(20));
        assert!(quanta.now() > q0);
        assert!(std.now() > s0);
        // The upkeep thread refreshes the recent time: eventually, however long a
        // loaded machine keeps it off a CPU (here up to about 10 s).
        let refreshed = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            recent.now() > r0
        });
        assert!(refreshed, "the upkeep thread refreshes the recent time");
    }
}
