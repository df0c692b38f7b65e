//! The fixed window's state word and its pure step functions.
//!
//! As for the token bucket: the lock-free limiter applies
//! [`acquire`](WordAlgorithm::acquire) inside the shared compare-and-set loop, and the
//! property tests and loom models check it.

use crate::clock::nanos_to_duration;
use crate::quota::Quota;
use crate::settle::settle_by;
use crate::window::Window;
use crate::word::{MovableWord, WordAlgorithm};
use crate::{Decision, Settlement};
use std::time::Duration;

/// The layout of a fixed window's state word, fixed per quota.
///
/// ```text
///  63                          c   c-1                   0
/// +-----------------------------+-----------------------+
/// | window index                | count                 |
/// +-----------------------------+-----------------------+
/// ```
///
/// - *count* (the low `c` bits, `c = bits(2 × limit + 2)`): requests admitted in that
///   window, `0..=limit`, and up to `2 × limit` for a key in debt (a settle charged
///   it beyond the limit: [`Settlement`](crate::Settlement); the debt cap is one
///   limit). The field leaves its two highest values free, so no state is one of
///   the two words just below [`RELOCATED`](crate::word::RELOCATED) that the markers
///   are the relocated forms of.
///
///   A debt is repaid as the limit refills, once a window: the count past the limit
///   when the key's window ends is the next window's starting count (at most one
///   limit, so it is gone a window later).
/// - *window index* (the next `63 - c` bits): the window of the key's last admitted
///   request, counted since the limiter's epoch. The top bit is never set: it marks a
///   relocated word ([`crate::word`]).
///
/// Every [`Quota`] fits. For nearly all of them the index holds every window a `u64`
/// nanosecond clock can reach (`u64::MAX / window`), so nothing wraps in the clock's
/// 584 years. Only intervals of a few nanoseconds (where a window is hardly longer
/// than its count) leave the index fewer bits than that; readings are then taken no
/// further than the last window the index holds, at least 2⁶⁰ × the interval after
/// the epoch (36 years at 1 ns): exact until then, and after it the last window never
/// ends. Nothing wraps either way.
///
/// A word whose window has passed carries no information (a new window starts at
/// zero), so every new key starts as the constant word 0: window 0, count 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowRules {
    limit: u64,
    /// The most a key can owe, in requests: one limit.
    debt_cap: u64,
    window: Window,
    count_bits: u32,
    /// The last window a reading is taken to: the clock's last, or the last the index
    /// field holds (see the type's documentation).
    last_index: u64,
}

/// Number of bits needed to write `x` in binary.
const fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

impl FixedWindowRules {
    /// The layout for `quota`; every quota fits.
    pub fn new(quota: &Quota) -> Self {
        let limit = u64::from(quota.capacity());
        let window = Window::of(quota);
        let debt_cap = limit;
        let count_bits = bits(limit + debt_cap + 2);
        // `count_bits ≤ 34`, so the index keeps at least 29 bits below the top one.
        let widest_index = (1 << (u64::BITS - 1 - count_bits)) - 1;
        Self {
            limit,
            debt_cap,
            window,
            count_bits,
            last_index: window.last_index().min(widest_index),
        }
    }

    /// The word holding window `index` with `count` admitted.
    #[inline]
    pub const fn pack(&self, index: u64, count: u64) -> u64 {
        (index << self.count_bits) | count
    }

    /// The word's fields as `(window index, count)`.
    #[inline]
    pub const fn unpack(&self, word: u64) -> (u64, u64) {
        (word >> self.count_bits, word & ((1 << self.count_bits) - 1))
    }

    /// Window `index`, or the last the index field holds if it is later.
    #[inline(always)]
    fn clamp(&self, index: u64) -> u64 {
        index.min(self.last_index)
    }

    /// The key's window and count as seen at `now`: a later window starts empty, or,
    /// the window right after the key's, with the key's debt ([`carried`]); a reading
    /// older than the key's window (another core's clock slightly behind) counts as
    /// no time elapsed, so it sees the key's window.
    #[inline]
    pub fn at(&self, word: u64, now: u64) -> (u64, u64) {
        let (index, count) = self.unpack(word);
        // Clamped only past the key's window, off the common path of a reading in it
        // (the key's index is never past the last window the field holds).
        let current = self.window.index(now);
        if current > index {
            let current = self.clamp(current);
            if current > index {
                return (current, carried(count, self.limit, current - index));
            }
        }
        (index, count)
    }
}

impl WordAlgorithm for FixedWindowRules {
    const RESERVES_MOVED: bool = true;

    /// The word of every new key: window 0, nothing counted.
    #[inline]
    fn fresh(&self) -> u64 {
        0
    }

    /// The count past the limit in the reading's window.
    fn debt(&self, word: u64, now: u64) -> u32 {
        // At most the debt cap, one limit: a `u32`.
        self.at(word, now).1.saturating_sub(self.limit) as u32
    }

    /// One request for `cost` at `now`: the word to store and the decision.
    ///
    /// Allowed iff the count plus `cost` is at most the limit: a key in debt (counting
    /// past the limit) is denied even a cost of 0. Only an admitted request with a
    /// cost changes the word; a denial, a zero cost or a cost above the limit returns
    /// `word` itself, so callers write nothing.
    #[inline]
    fn acquire(&self, word: u64, now: u64, cost: u32) -> (u64, Decision) {
        let (index, count) = self.at(word, now);
        // A key in debt counts past the limit: nothing remains.
        let remaining = self.limit.saturating_sub(count);
        let cost = u64::from(cost);
        if cost > self.limit {
            let decision = Decision::ExceedsCapacity {
                remaining: remaining as u32,
                capacity: self.limit as u32,
            };
            return (word, decision);
        }
        if cost > remaining {
            let decision = Decision::Denied {
                remaining: remaining as u32,
                retry_after: wait(self, index, count, cost, now),
            };
            return (word, decision);
        }
        if cost == 0 {
            // Allowed unless the key owes (counts past the limit): it has less than
            // nothing, and waits for the first window back within the limit.
            let decision = if count > self.limit {
                Decision::Denied {
                    remaining: 0,
                    retry_after: wait(self, index, count, 0, now),
                }
            } else {
                Decision::Allowed {
                    remaining: remaining as u32,
                }
            };
            return (word, decision);
        }
        let decision = Decision::Allowed {
            remaining: (remaining - cost) as u32,
        };
        (self.pack(index, count + cost), decision)
    }

    /// Requests `word` can still admit at `now`, without taking any.
    #[inline]
    fn available(&self, word: u64, now: u64) -> u32 {
        self.limit.saturating_sub(self.at(word, now).1) as u32
    }

    /// `cost` admissions given back in the key's window as seen at `now` (at most what
    /// it counts, a debt repaid first): the word to store, and how many were given
    /// back. Admissions of a window that has passed are gone with it, so there is
    /// nothing left to give back but a debt carried into the reading's window.
    #[inline]
    fn give_back(&self, word: u64, now: u64, cost: u32) -> (u64, u32) {
        let (index, count) = self.at(word, now);
        let left = count.saturating_sub(u64::from(cost));
        if left == count {
            (word, 0)
        } else {
            // At most `cost`: a `u32`.
            (self.pack(index, left), (count - left) as u32)
        }
    }

    /// A settle gives nothing back: the word cannot tell which window counted the
    /// estimate (the reading's, or one already over), and giving it to a later window
    /// would admit more than the limit there. A settle above the estimate is a
    /// [`charge`](Self::charge). (A [`refund`](WordAlgorithm::refund) right after the
    /// take, a policy's, still gives back to the window being counted.)
    #[inline]
    fn settle(&self, word: u64, now: u64, estimate: u32, actual: u32) -> (u64, Settlement) {
        settle_by(
            estimate,
            actual,
            word,
            |_| (word, 0),
            |extra| self.charge(word, now, extra),
        )
    }

    /// `extra` admissions counted at `now` whatever the window has left, up to the
    /// limit and the debt cap: the word to store, and how many were counted.
    #[inline]
    fn charge(&self, word: u64, now: u64, extra: u32) -> (u64, u32) {
        let (index, count) = self.at(word, now);
        let room = (self.limit + self.debt_cap).saturating_sub(count);
        let charged = u64::from(extra).min(room);
        if charged == 0 {
            (word, 0)
        } else {
            // At most `2 × limit`, which the count field holds. At most `extra`.
            (self.pack(index, count + charged), charged as u32)
        }
    }

    /// From the start of the first window with nothing counted (the word's own, if
    /// its count is zero, else the next, or the one after if the count carries a debt
    /// into the next; if the index field reaches it): at every later reading the
    /// count is zero in that reading's window, as for a new key.
    fn forgettable_from(&self, word: u64) -> Option<u64> {
        let (index, count) = self.unpack(word);
        let first_empty = index + u64::from(count > 0) + u64::from(count > self.limit);
        // A window the field reaches starts within the clock's range.
        (first_empty <= self.last_index).then(|| self.window.start(first_empty) as u64)
    }
}

/// What a window `later` windows after one that counted `count` starts with: the
/// count past the limit, repaid at the limit a window (every window refills it). A
/// count of at most twice the limit (the debt cap) is gone two windows on. Without
/// debt, nothing.
#[inline(always)]
const fn carried(count: u64, limit: u64, later: u64) -> u64 {
    if count > limit && later == 1 {
        count - limit
    } else {
        0
    }
}

/// Exact time from `now` until a denied `cost` (at most the limit) fits: at the start
/// of the window after `index`, which starts with the key's debt, if any; if the debt
/// and the cost do not fit together, the window after that, which starts empty. Out
/// of line, to keep the admitting path short.
#[inline(never)]
fn wait(rules: &FixedWindowRules, index: u64, count: u64, cost: u64, now: u64) -> Duration {
    let later = if carried(count, rules.limit, 1) + cost <= rules.limit {
        1
    } else {
        2
    };
    if index + later > rules.last_index && rules.last_index < rules.window.last_index() {
        // A window past the last the index field holds never comes.
        return Duration::MAX;
    }
    // `index` is the reading's window or a later one, so the next starts after it.
    nanos_to_duration(rules.window.start(index + later) - u128::from(now))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use crate::word::STATE_END;

    use crate::word::strategies::{any_quota, readings};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    proptest! {
        /// `forgettable_from` is the start of the first window with nothing counted
        /// in it, when the index field reaches it. Counts in debt (up to twice the
        /// limit) included: what passes the limit counts in the next window too, and
        /// a word in debt is never forgettable.
        #[test]
        fn forgettable_from_is_the_start_of_the_first_empty_window(
            quota in any_quota(), index in any::<u64>(), count in any::<u64>(),
            random in any::<u64>(),
        ) {
            let rules = FixedWindowRules::new(&quota);
            let word = rules.pack(index % (rules.last_index + 1), count % (2 * rules.limit + 1));
            let from = rules.forgettable_from(word);
            for at in readings(from, random) {
                let (index, count) = rules.unpack(word);
                let current = rules.clamp(rules.window.index(at));
                let empty = (index == current && count == 0)
                    || (index < current && (count <= rules.limit || index + 1 < current));
                prop_assert_eq!(rules.forgettable(word, at), empty);
                prop_assert!(rules.debt(word, at) == 0 || !rules.forgettable(word, at));
            }
        }
    }

    fn rules(limit: u32, interval: Duration) -> FixedWindowRules {
        FixedWindowRules::new(&Quota::new(limit, interval).unwrap())
    }

    #[test]
    fn a_new_window_resets_the_count() {
        // 3 per 300 ms window.
        let l = rules(3, Duration::from_millis(100));
        let (word, d) = l.acquire(l.fresh(), 10 * MS, 3);
        assert_eq!(d, Decision::Allowed { remaining: 0 });
        assert_eq!(l.acquire(word, 299 * MS, 1).0, word);
        let (word, d) = l.acquire(word, 300 * MS, 1);
        assert_eq!(d, Decision::Allowed { remaining: 2 });
        assert_eq!(l.unpack(word), (1, 1));
    }

    #[test]
    fn a_denial_waits_exactly_until_the_next_window() {
        let l = rules(2, Duration::from_millis(100));
        let (word, _) = l.acquire(l.fresh(), 50 * MS, 2);
        let (same, d) = l.acquire(word, 120 * MS, 1);
        assert_eq!(same, word);
        assert_eq!(
            d,
            Decision::Denied {
                remaining: 0,
                retry_after: Duration::from_millis(80)
            }
        );
        assert!(!l.acquire(word, 200 * MS - 1, 1).1.is_allowed());
        assert!(l.acquire(word, 200 * MS, 1).1.is_allowed());
    }

    #[test]
    fn a_reading_older_than_the_keys_window_sees_that_window() {
        let l = rules(2, Duration::from_millis(100));
        let (word, _) = l.acquire(l.fresh(), 450 * MS, 2); // window 2
        // Another core reads 150 ms (window 0): no reset, and the wait runs from the
        // reading itself to the start of window 3.
        let (same, d) = l.acquire(word, 150 * MS, 1);
        assert_eq!(same, word);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(450)));
        assert_eq!(l.available(word, 150 * MS), 0);
    }

    #[test]
    fn zero_costs_and_costs_above_the_limit_change_nothing() {
        let l = rules(2, Duration::from_millis(100));
        let (word, _) = l.acquire(l.fresh(), 0, 1);
        assert_eq!(
            l.acquire(word, 500 * MS, 0),
            (word, Decision::Allowed { remaining: 2 })
        );
        assert_eq!(
            l.acquire(word, 0, 3),
            (
                word,
                Decision::ExceedsCapacity {
                    remaining: 1,
                    capacity: 2
                }
            )
        );
    }

    #[test]
    fn the_largest_window_index_and_count_fit_without_overlap() {
        for interval in [1, 2, 3, 4, 5, 7, 8, 1000, 1023, 1024, MS, 1 << 40, u64::MAX] {
            for limit in [1, 2, 1000, 1 << 20, u32::MAX / 2, u32::MAX - 1, u32::MAX] {
                let l = rules(limit, Duration::from_nanos(interval));
                let last = l.clamp(l.window.index(u64::MAX));
                // The deepest debt: twice the limit counted.
                let word = l.pack(last, l.limit + l.debt_cap);
                assert_eq!(l.unpack(word), (last, 2 * l.limit), "{interval} {limit}");
                assert!(word < STATE_END, "{interval} {limit}");
                // The clock's whole range unless the interval is a few nanoseconds,
                // and then 2⁶⁰ intervals at the least.
                if interval >= 16 {
                    assert_eq!(last, l.window.last_index(), "{interval} {limit}");
                } else if last < l.window.last_index() {
                    let end = l.window.start(last + 1);
                    assert!(
                        end >= (1u128 << 60) * u128::from(interval),
                        "{interval} {limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_window_the_index_cannot_reach_never_comes() {
        // u32::MAX per 4.29 s window at 1 ns: the index holds 2²⁹ windows (73 years
        // of them: 36 years and more), not the clock's 4.29 billion.
        let l = rules(u32::MAX, Duration::from_nanos(1));
        let last = l.clamp(l.window.index(u64::MAX));
        assert_eq!(last, (1 << 29) - 1);
        let end = u64::try_from(l.window.start(last + 1)).unwrap();
        let (word, d) = l.acquire(l.fresh(), end - 1, u32::MAX);
        assert!(d.is_allowed());
        // The next window would start at `end`; past the index it never does, and
        // a denial says so rather than promising a wait that would not pass.
        let (_, d) = l.acquire(word, end, 1);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
        let (_, d) = l.acquire(word, end - 1, 1);
        assert_eq!(d.retry_after(), Some(Duration::MAX));
        // A window before the last ends as any does.
        let (word, _) = l.acquire(l.fresh(), end - (1 << 33), u32::MAX);
        let (_, d) = l.acquire(word, end - (1 << 33), 1);
        assert!(d.retry_after() < Some(Duration::from_secs(5)), "{d:?}");
    }

    #[test]
    fn readings_at_the_end_of_the_clock_are_exact() {
        let l = rules(5, Duration::from_millis(1));
        let (word, d) = l.acquire(l.fresh(), u64::MAX, 5);
        assert!(d.is_allowed());
        let (_, d) = l.acquire(word, u64::MAX, 1);
        let next_window = (u128::from(u64::MAX) / 5_000_000 + 1) * 5_000_000;
        let wait = (next_window - u128::from(u64::MAX)) as u64;
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(wait)));
    }
}

impl MovableWord for FixedWindowRules {
    fn for_quota(quota: &Quota) -> Self {
        FixedWindowRules::new(quota)
    }

    /// The start of the key's window: an earlier reading sees that window.
    fn moment(&self, word: u64) -> u64 {
        // A window some reading fell in starts within the clock's range.
        u64::try_from(self.window.start(self.unpack(word).0)).unwrap_or(u64::MAX)
    }
}
