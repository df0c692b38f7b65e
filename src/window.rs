//! Window arithmetic shared by the window algorithms.
//!
//! A window algorithm's window is `capacity × refill_every` nanoseconds long
//! (`Quota::per_minute(100)` is 100 per minute), and windows are aligned to the
//! limiter's epoch: window `i` covers `[i × window, (i + 1) × window)`. The product
//! can exceed the clock's whole range (`u64::MAX` ns, 584 years); every reading then
//! lies in window 0, which this type handles without overflow.

use crate::quota::Quota;
use std::num::NonZeroU64;

/// The length of a window, and which window a reading falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// The length when it fits the clock's range; `None` when it is longer than
    /// `u64::MAX` ns, so that no reading ever leaves window 0.
    nanos: Option<NonZeroU64>,
    /// The length, exactly.
    len: u128,
}

impl Window {
    /// The window of `quota`: its capacity times its refill interval.
    pub(crate) fn of(quota: &Quota) -> Self {
        let len = u128::from(quota.capacity()) * u128::from(quota.interval_nanos().get());
        Self {
            nanos: u64::try_from(len).ok().and_then(NonZeroU64::new),
            len,
        }
    }

    /// The index of the window that contains `now` (nanoseconds since the epoch).
    #[inline]
    pub(crate) fn index(&self, now: u64) -> u64 {
        match self.nanos {
            Some(window) => now / window,
            None => 0,
        }
    }

    /// When window `index` starts, in nanoseconds since the epoch (it can lie beyond
    /// the clock's range, hence `u128`).
    #[inline]
    pub(crate) fn start(&self, index: u64) -> u128 {
        u128::from(index) * self.len
    }

    /// The window's length in nanoseconds.
    #[inline]
    pub(crate) fn len(&self) -> u128 {
        self.len
    }

    /// The index of the last window a `u64` clock can reach.
    pub(crate) fn last_index(&self) -> u64 {
        self.index(u64::MAX)
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn windows_are_capacity_intervals_long_and_aligned_to_the_epoch() {
        let window = Window::of(&Quota::per_minute(100).unwrap());
        assert_eq!(window.len(), 60_000_000_000);
        assert_eq!(window.index(59_999_999_999), 0);
        assert_eq!(window.index(60_000_000_000), 1);
        assert_eq!(window.start(2), 120_000_000_000);
    }

    #[test]
    fn a_window_longer_than_the_clock_range_holds_every_reading() {
        let quota = Quota::new(4, Duration::from_nanos(u64::MAX / 2)).unwrap();
        let window = Window::of(&quota);
        assert_eq!(window.len(), 4 * u128::from(u64::MAX / 2));
        assert_eq!(window.index(u64::MAX), 0);
        assert_eq!(window.last_index(), 0);
        assert_eq!(window.start(1), window.len());
    }
}
